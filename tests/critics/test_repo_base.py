"""Issue 47: only reviewed code lands. The merge is the tree that was tested (the card's checks, hidden tests
included, run again on the merge of the change into the base's current tip), and the base moves only through the
queue (a hook refuses other moves from agents' worktrees; a move made behind its back stops merging until a person
adopts or resets). Through MCP and the CLI, with real git repositories, real bubblewrap and real pytest."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from conftest import call, needs_sandbox, run_cli
from git_repos import CALC, card_on, git, make_repo, needs_git, register, settled, work_on
from reviewing import NO_BUILTINS, llm_critic

from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.engine import ReviewEngine
from hiveboard.critics.merge import MergeQueue

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_git, needs_sandbox]

TESTS_ONLY = ReviewConfig(
    critics={k: v for k, v in NO_BUILTINS.items() if k != "acceptance"}, task_types={"code": ["tests"]}
)
# main moved on with a regression the repository's own tests do not see: add no longer takes floats
REGRESSION = CALC.replace("return a + b", "return int(a) + int(b)")
WITH_SUB = CALC + "\n\ndef sub(a, b):\n    return a - b\n"
SPEC = "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n\n\ndef test_floats():\n    assert add(0.5, 0.25) == 0.75\n"
CRITERION = "$ python -c 'import calc; assert calc.sub(5, 3) == 2 and calc.add(0.5, 0.25) == 0.75'"
FIXED = CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """The sum of a and b."""\n')


def agent_git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """git as an agent runs it in its worktree, with whatever hooks the repository has."""
    return subprocess.run(
        ["git", "-c", "user.name=agent", "-c", "user.email=agent@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("check", ["hidden tests", "$ criterion"])
async def test_a_right_change_on_an_old_ancestor_is_not_landed_when_its_merge_with_the_moved_base_fails_the_cards_checks(
    connect, reviewer, board, tmp_path, check
):
    repo = make_repo(tmp_path / "calc")
    old = git(repo, "rev-parse", "main")
    (repo / "calc.py").write_text(REGRESSION)
    git(repo, "commit", "-qam", "int add")
    register(board, repo)
    moved = git(repo, "rev-parse", "main")
    engine = reviewer(TESTS_ONLY)
    fields = (
        {"acceptance_tests": {"files": [{"name": "test_spec.py", "content": SPEC}], "hidden": True}}
        if check == "hidden tests"
        else {"acceptance_criteria": [CRITERION]}
    )
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "add sub; add keeps taking floats", **fields)
        # right on its own tree (branched from before the regression): the review passes it
        sha = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": WITH_SUB}, base=old)
        await call(alice, "complete_task", task_id=task_id, token=token, output="added sub", ref="hb/alice/1")
        card = await settled(alice, task_id)
        review = await call(alice, "get_review", task_id=task_id, full=True)
        briefs = await call(alice, "get_messages", box="pool", task_id=task_id, intent="critique", full=True)
    assert review["rounds"][-1]["verdict"] == "PASS"
    # merged into the moved main, it fails the card's checks: the base never holds a tree they did not pass on
    assert card["status"] == "in_progress" and card["history"][-1]["action"] == "merge result failed its tests"
    assert git(repo, "rev-parse", "main") == moved
    assert subprocess.run(["git", "merge-base", "--is-ancestor", sha, "main"], cwd=repo).returncode == 1
    brief = briefs["messages"][-1]["content"]
    assert "main did not move" in brief
    if check == "hidden tests":  # as opaque as in the review: the test's id and an exception type, no values
        assert "test_spec.py::test_floats" in brief and "AssertionError" in brief
        assert "0.75" not in brief and "0.5" not in brief and "test_sub" not in brief
    else:
        assert "calc.add(0.5, 0.25)" in brief


async def test_a_merge_result_that_cannot_be_tested_is_not_made_even_when_unverified_work_may_pass(
    connect, reviewer, board, tmp_path, fake_llm
):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    # a model critic reads the diff without the sandbox, so the review has a critique and passes the commit
    critics = {**TESTS_ONLY.critics, "llm-correctness": llm_critic(fake_llm, "correctness")}
    engine = reviewer(
        TESTS_ONLY.model_copy(
            update={
                "critics": critics,
                "task_types": {"code": ["tests", "correctness"]},
                "execute": "off",
                "unverified": "pass",
            }
        )
    )
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "document add")
        work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": FIXED})
        await call(alice, "complete_task", task_id=task_id, token=token, output="documented", ref="hb/alice/1")
        card = await settled(alice, task_id)
    assert card["status"] == "needs_human" and card["history"][-1]["action"] == "merge blocked"
    assert "is not made because its checks could not run on the merge result" in card["blocked_reason"]
    assert git(repo, "rev-parse", "main") == start


@pytest.mark.parametrize("behind", ["hooks turned off", "ref file written", "deleted with hooks off"])
async def test_the_base_moves_only_through_the_queue_a_move_behind_the_hook_stops_merging_until_a_person_decides(
    connect, reviewer, board, tmp_path, node_env, store_target, behind
):
    repo = make_repo(tmp_path / "calc")
    env = {**node_env, "HIVEBOARD_DB": store_target}
    home = str(tmp_path / "home")
    added = run_cli(
        "--home", home, "repo", "add", str(repo), "--name", "calc", "--test", "python -m pytest -q", env=env
    )
    assert added.returncode == 0, added.stderr
    start = git(repo, "rev-parse", "main")
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice, connect("lee", role="human", review=engine) as lee:
        await call(lee, "whoami")  # a person, registered
        task_id, token = await card_on(alice, board, "document add")
        worktree = tmp_path / "wt-alice"
        sha = work_on(repo, "hb/alice/1", worktree, {"calc.py": FIXED})

        # from the agent's worktree, git refuses to move or delete main
        for args in (["update-ref", "refs/heads/main", "HEAD"], ["update-ref", "-d", "refs/heads/main"]):
            refused = agent_git(worktree, *args)
            assert refused.returncode != 0 and "moves only through hiveboard's merge queue" in refused.stderr
        assert git(repo, "rev-parse", "main") == start

        # behind the hook's back
        hooks_off = [worktree, "-c", "core.hooksPath=/dev/null", "update-ref"]
        if behind == "hooks turned off":
            assert agent_git(*hooks_off, "refs/heads/main", sha).returncode == 0
        elif behind == "ref file written":  # the hook taken out first; hiveboard puts it back when it next looks
            (repo / ".git" / "hooks" / "reference-transaction").unlink()
            (repo / ".git" / "refs" / "heads" / "main").write_text(sha + "\n")
        else:
            assert agent_git(*hooks_off, "-d", "refs/heads/main").returncode == 0
        deleted = behind == "deleted with hooks off"
        assert agent_git(repo, "rev-parse", "--verify", "-q", "main").stdout.strip() == ("" if deleted else sha)

        # the card is reviewed against where the queue left main, and its merge is stopped, naming the commit
        await call(alice, "complete_task", task_id=task_id, token=token, output="documented", ref="hb/alice/1")
        card = await settled(alice, task_id)
        assert card["status"] == "needs_human" and card["history"][-1]["action"] == "merge blocked"
        reason = card["blocked_reason"]
        said = "was deleted outside hiveboard's merge queue" if deleted else f"merge queue, from {start[:12]}"
        named = "hiveboard repo reset calc" if deleted else sha[:12]
        assert said in reason and named in reason and "uncommitted" not in reason, reason
        told = await call(lee, "get_messages", intent="needs_human", full=True)
        assert any(said in m["content"] and named in m["content"] for m in told["messages"])

        assert "moves only through" in (repo / ".git" / "hooks" / "reference-transaction").read_text()
        listed = run_cli("--home", home, "repo", "list", env=env)
        assert f"moved to {'(deleted)' if deleted else sha[:12]}: merging stopped" in listed.stdout, listed.stdout

        # a person decides, through the CLI; the record says who
        decision = "adopt" if behind == "hooks turned off" else "reset"
        if deleted:  # nothing to adopt
            assert run_cli("--home", home, "repo", "adopt", "calc", env=env).returncode == 2
        decided = run_cli("--home", home, "repo", decision, "calc", "--by", "lee", env=env)
        assert decided.returncode == 0, decided.stderr
        assert git(repo, "rev-parse", "main") == (sha if decision == "adopt" else start)
        log = run_cli("--home", home, "repo", "log", "calc", env=env)
        assert log.returncode == 0 and f"{'adopted' if decision == 'adopt' else 'reset'}\t" in log.stdout
        assert "\tlee\t" in log.stdout
        await anyio.to_thread.run_sync(board.decisions.decide, "lee", task_id, "pass")
        card = await settled(alice, task_id)
    assert card["status"] == "done", card["history"][-3:]
    assert subprocess.run(["git", "merge-base", "--is-ancestor", sha, "main"], cwd=repo).returncode == 0
    landed = [(x.how, x.sha) for x in board.repos.landings("calc")]
    assert landed[-1] == ("registered", start) and landed[0][1] == git(repo, "rev-parse", "main")
    # unregistered, the base is nobody's to guard: the hook goes with it
    removed = run_cli("--home", home, "repo", "remove", "calc", env=env)
    assert removed.returncode == 0 and "hook taken out" in removed.stdout, removed.stderr
    assert not (repo / ".git" / "hooks" / "reference-transaction").exists()


async def test_a_base_that_moves_through_the_queue_after_the_merge_was_tested_is_merged_and_tested_again(
    connect, board, tmp_path
):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    config = TESTS_ONLY.model_copy(update={"agent_deadline": 0})
    engine = ReviewEngine(board, config)
    spec = {"files": [{"name": "test_spec.py", "content": SPEC}], "hidden": True}
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "add sub; add keeps taking floats", acceptance_tests=spec)
        sha = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": WITH_SUB})
        await call(alice, "complete_task", task_id=task_id, token=token, output="added sub", ref="hb/alice/1")
        job = await anyio.to_thread.run_sync(board.reviews.claim_job, "reviewer", 30)
        await anyio.to_thread.run_sync(engine.run, job, "reviewer")  # passes: the commit waits in the queue
        tested: list[str] = []

        class Raced(MergeQueue):
            def _passed_in_review(self, m):
                if not tested:  # meanwhile another card's merge lands on main, with the regression in it
                    (repo / "calc.py").write_text(REGRESSION)
                    git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-qam", "int add")
                    with board.store.write() as db:
                        board.repos.land(db, "calc", git(repo, "rev-parse", "main"), "merged", "another worker")
                tested.append("reviewed tree")
                return super()._passed_in_review(m)

            def _tested(self, m, worker, job, tree, repository):
                tested.append("merge result")
                return super()._tested(m, worker, job, tree, repository)

        queue = Raced(board, config, engine.git, engine.merge_queue().tests)
        merge = await anyio.to_thread.run_sync(board.merges.claim, "node-1", config.worker_lease)
        await anyio.to_thread.run_sync(queue.merge, merge, "node-1")
        card = await call(alice, "get_task", task_id=task_id, history=50)
    # the first result was the reviewed tree itself; the base moved before it landed, so the new merge result was
    # tested, failed the hidden tests, and nothing landed
    assert tested == ["reviewed tree", "merge result"]
    assert card["status"] == "in_progress" and card["history"][-1]["action"] == "merge result failed its tests"
    assert git(repo, "rev-parse", "main") != start
    assert subprocess.run(["git", "merge-base", "--is-ancestor", sha, "main"], cwd=repo).returncode == 1
