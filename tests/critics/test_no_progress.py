"""Rounds that stop when they stop helping (issue 51): a FAIL round that resolved none of the round before's
blocking findings sends the card to a person at once ("no progress in round N") instead of spending the rounds
left; the brief says which findings are repeated. A finding is the same by its lens, category and place without
the line, not by its words."""

from __future__ import annotations

import pytest
from conftest import call, needs_sandbox
from fake_llm import critique, issue
from reviewing import NO_BUILTINS, hand_in, llm_critic, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def config(fake_llm) -> ReviewConfig:
    return ReviewConfig(
        critics={**NO_BUILTINS, "llm-correctness": llm_critic(fake_llm, "correctness")},
        task_types={"code": ["correctness"]},
        max_rounds=5,
    )


async def again(alice, card: int, output: str) -> dict:
    claim = await call(alice, "claim_task", task_id=card)
    await call(alice, "complete_task", task_id=card, token=claim["token"], output=output)
    return await verdict(alice, card)


async def test_a_round_that_resolves_nothing_goes_to_a_person_at_once(connect, reviewer, fake_llm):
    # the same finding each round, moved down a line and reworded, as a model rephrases it
    fake_llm.script(
        "correctness",
        critique("FAIL", 3, "wrong", issues=[issue("major", "Off-by-one", "app.py:3", "loop stops early", "fix")]),
        critique("FAIL", 3, "still", issues=[issue("major", "off-by-one", "app.py:5", "the bound is one short", "+1")]),
    )
    engine = reviewer(config(fake_llm))
    async with connect("bob") as bob, connect("alice", review=engine) as alice:
        card = (await call(bob, "create_task", title="sum the first n numbers"))["id"]
        await hand_in(alice, card, output="first try")
        assert (await verdict(alice, card))["rounds"][-1]["outcome"] == "in_progress"
        trail = await again(alice, card, "second try, same bug")
        # round 2 of 5: the three rounds left are not spent on the same finding
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]] == [(1, "in_progress"), (2, "needs_human")]
        task = await call(bob, "get_task", task_id=card)
        assert task["status"] == "needs_human" and "no progress in round 2" in task["blocked_reason"]
        assert "(repeated: raised in round 1 too)" in trail["rounds"][-1]["synthesis"]["brief"]
        assert "repeated" not in trail["rounds"][0]["synthesis"]["brief"]


async def test_a_round_that_resolves_a_finding_goes_on(connect, reviewer, fake_llm):
    fake_llm.script(
        "correctness",
        critique(
            "FAIL",
            3,
            "wrong",
            issues=[
                issue("major", "off-by-one", "app.py:3", "loop stops early", "fix"),
                issue("major", "sql-injection", "db.py:9", "query built from input", "bind it"),
            ],
        ),
        # the injection is fixed; a new finding is no reason to stop either
        critique("FAIL", 4, "better", issues=[issue("major", "off-by-one", "app.py:4", "loop stops early", "fix")]),
    )
    engine = reviewer(config(fake_llm))
    async with connect("bob") as bob, connect("alice", review=engine) as alice:
        card = (await call(bob, "create_task", title="sum the first n numbers"))["id"]
        await hand_in(alice, card, output="first try")
        await verdict(alice, card)
        trail = await again(alice, card, "second try")
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]] == [(1, "in_progress"), (2, "in_progress")]
        brief = trail["rounds"][-1]["synthesis"]["brief"]
        assert "(repeated: raised in round 1 too)" in brief  # the one still open is marked


STEPS = '''def steps(n):
    """How many Collatz steps take n to 1."""
    count, start = 0, n
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        count += 1
    return count + (start > {bound})
'''
HIDDEN = {
    "files": [
        {
            "name": "test_steps_spec.py",
            "content": "from steps import steps\n\n\ndef test_27():\n    assert steps(27) == 111\n\n\n"
            "def test_97():\n    assert steps(97) == 118\n",
        }
    ],
    "hidden": True,
}


@needs_sandbox
async def test_hidden_findings_are_compared_sealed(connect, reviewer):
    """Fixing one of two failing hidden tests reads the same as fixing none: the hidden tests' findings are one per
    critic in the comparison, so whether a round stops says nothing of which hidden tests passed."""
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        seen = []
        for second in (10, 50):  # round 2 fixes neither (27 and 97 still off), or 27 only
            card = (await call(carol, "create_task", title="count Collatz steps", acceptance_tests=HIDDEN))["id"]
            artifacts = [{"name": "steps.py", "kind": "code", "content": STEPS.format(bound=10)}]
            await hand_in(alice, card, artifacts=artifacts)
            assert (await verdict(alice, card))["rounds"][-1]["outcome"] == "in_progress"
            claim = await call(alice, "claim_task", task_id=card)
            await call(
                alice,
                "complete_task",
                task_id=card,
                token=claim["token"],
                output="again",
                artifacts=[{"name": "steps.py", "kind": "code", "content": STEPS.format(bound=second)}],
            )
            last = (await verdict(alice, card))["rounds"][-1]
            task = await call(alice, "get_task", task_id=card)
            seen.append((last["outcome"], task["blocked_reason"].replace(f"task {card}", "task N")))
        assert seen[0] == seen[1] and seen[0][0] == "needs_human" and "no progress in round 2" in seen[0][1]
