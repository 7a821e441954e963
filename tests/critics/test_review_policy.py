"""The review a change gets is read from what it touches, not from the card's self-chosen type (issue 47): code
gets the code lenses and the code approval rule on a `docs` card or an invented type, and "no critic could
review" is no pass for a commit or for code. Through MCP, with the offline critics, real git and the sandbox."""

from __future__ import annotations

import pytest
from conftest import call, needs_sandbox
from git_repos import CALC, card_on, git, make_repo, needs_git, register, settled, work_on
from reviewing import critic, hand_in, verdict

from hiveboard.critics.config import HumanApproval, ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_sandbox]

CODE_NEEDS_APPROVAL = ReviewConfig(human_approval=HumanApproval(task_types=["code"]))
CODE_LENSES = {"security", "integrity", "correctness", "performance", "tests", "style"}
DOCUMENTED = CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """The sum of a and b."""\n')
EVAL = "import os\n\n\ndef run():\n    return eval(input())\n"


@needs_git
async def test_a_commit_of_code_on_the_agents_own_docs_card_gets_the_code_review_and_waits_for_approval(
    connect, reviewer, board, tmp_path
):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    engine = reviewer(CODE_NEEDS_APPROVAL)
    async with connect("alice", review=engine) as alice:
        # alice makes the card herself and picks the cheapest type; the commit changes the code all the same
        task_id, token = await card_on(alice, board, "tidy the docs", task_type="docs")
        work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": DOCUMENTED})
        await call(alice, "complete_task", task_id=task_id, token=token, output="documented add", ref="hb/alice/1")
        round1 = (await verdict(alice, task_id))["rounds"][-1]
        synthesis = round1["synthesis"]
        assert CODE_LENSES <= set(synthesis["lenses_ran"]) | set(synthesis["lenses_uncovered"])
        assert {"security", "integrity", "correctness"} <= set(synthesis["lenses_ran"])
        assert critic(round1, "bandit")["status"] == "ok" and critic(round1, "acceptance")["status"] == "ok"
        card = await settled(alice, task_id)
        assert card["status"] == "needs_human", card["history"][-3:]
        assert "needs a person's approval (it changes code (calc.py))" in card["blocked_reason"]
        assert git(repo, "rev-parse", "main") == start  # nothing merged without the person


@needs_git
async def test_a_commit_no_critic_can_review_goes_to_a_person_not_to_the_merge(connect, reviewer, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    engine = reviewer()
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "write the readme", task_type="docs")
        work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"README.md": "# calc\n\nAdds and multiplies.\n"})
        await call(alice, "complete_task", task_id=task_id, token=token, output="wrote it", ref="hb/alice/1")
        round1 = (await verdict(alice, task_id))["rounds"][-1]
        assert round1["synthesis"]["lenses_ran"] == [] and round1["verdict"] == "FAIL"
        card = await settled(alice, task_id)
        assert card["status"] == "needs_human"
        assert "no critic could review this work, a commit of repository calc" in card["blocked_reason"]
        assert git(repo, "rev-parse", "main") == start


async def test_python_under_a_misleading_name_on_an_invented_type_gets_the_security_review(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as alice:
        card = await hand_in(
            alice, task_type="chore", artifacts=[{"name": "helper.txt", "kind": "text", "content": EVAL}]
        )
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL" and round1["outcome"] == "in_progress"
        found = [i for i in critic(round1, "bandit")["issues"] if i["rule"] == "B307"]
        assert found and found[0]["location"].startswith("helper.txt:")


async def test_code_no_critic_can_read_is_not_passed_without_review(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as alice:
        script = {"name": "cleanup", "kind": "code", "content": '#!/bin/sh\nrm -rf "$HOME/cache"\n'}
        card = await hand_in(alice, task_type="misc", artifacts=[script])
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["synthesis"]["lenses_ran"] == [] and round1["outcome"] == "needs_human"
        task = await call(alice, "get_task", task_id=card["id"])
        assert task["status"] == "needs_human"
        assert "no critic could review this work, code (cleanup)" in task["blocked_reason"]
        assert (await call(alice, "get_messages", intent="approval"))["messages"] == []


async def test_code_artifacts_on_a_docs_card_wait_for_the_approval_code_needs(connect, reviewer):
    engine = reviewer(CODE_NEEDS_APPROVAL)
    clean = 'def total(xs):\n    """The sum of xs."""\n    return sum(xs)\n'
    async with connect("alice", review=engine) as alice:
        card = await hand_in(alice, task_type="docs", artifacts=[{"name": "totals.py", "content": clean}])
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "PASS" and round1["outcome"] == "needs_human"
        assert "security" in round1["synthesis"]["lenses_ran"]
        task = await call(alice, "get_task", task_id=card["id"])
        assert "needs a person's approval (it changes code (totals.py))" in task["blocked_reason"]


async def test_docs_with_python_examples_stay_docs(connect, reviewer):
    engine = reviewer(CODE_NEEDS_APPROVAL)
    guide = "# Guide\n\nCall it like this:\n\n```python\nimport calc\n\ncalc.add(2, 3)\n```\n"
    async with connect("alice", review=engine) as alice:
        card = await hand_in(
            alice, task_type="docs", artifacts=[{"name": "guide.md", "kind": "text", "content": guide}]
        )
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["outcome"] == "done" and round1["synthesis"]["lenses_uncovered"] == ["accuracy", "clarity"]
