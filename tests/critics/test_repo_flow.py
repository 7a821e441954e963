"""Issue 23 end to end, as two agents would live it: cards on a registered repository, each claimed with a
worktree of its own, work committed there, handed in as a commit, reviewed with the repository's own tests,
merged by the queue or sent back, and no worktree left once the cards end. Through MCP, with real git
repositories, real bubblewrap and a real `python -m pytest -q`."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from conftest import call, call_error, needs_sandbox
from git_repos import CALC, git, make_repo, needs_git, register, settled, write
from reviewing import NO_BUILTINS

from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.git import Git
from hiveboard.server.worktrees import WorktreeManager

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_git, needs_sandbox]

TESTS_ONLY = ReviewConfig(
    critics={k: v for k, v in NO_BUILTINS.items() if k != "acceptance"}, task_types={"code": ["tests"]}
)
BUGGY = CALC.replace("a + b", "a - b")
FIXED = CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """The sum of a and b."""\n')
CLASHING = CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """Add two numbers."""\n')


def commit(worktree: Path, files: dict[str, str], message: str) -> str:
    """What the agent does in its worktree: edit, commit; the commit id."""
    write(worktree, files)
    git(worktree, "commit", "-qam", message)
    return git(worktree, "rev-parse", "HEAD")


def live_worktrees(repo: Path) -> list[str]:
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line.split(" ", 1)[1] for line in listed if line.startswith("worktree ")][1:]  # the main one first


async def test_two_agents_in_worktrees_a_buggy_commit_fails_the_fix_merges_a_clash_goes_back_no_worktree_stays(
    connect, reviewer, board, tmp_path
):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        one = (await call(alice, "create_task", title="document add", repo="calc"))["id"]
        two = (await call(bob, "create_task", title="describe add", repo="calc"))["id"]
        mine = await call(alice, "claim_task", task_id=one, worktree=True)
        his = await call(bob, "claim_task", task_id=two, worktree=True)
        wa, wb = Path(mine["worktree"]), Path(his["worktree"])
        assert mine["branch"] == f"hb/alice/{one}" and his["branch"] == f"hb/bob/{two}"
        assert git(wa, "rev-parse", "HEAD") == start == git(wb, "rev-parse", "HEAD")

        # alice's first commit breaks add: the repository's own tests fail it, and main does not move
        commit(wa, {"calc.py": BUGGY}, "document add")
        await call(alice, "complete_task", task_id=one, token=mine["token"], output="done", ref=mine["branch"])
        card = await settled(alice, one)
        assert card["status"] == "in_progress" and card["assignee"] == "alice"
        assert git(repo, "rev-parse", "main") == start and wa.exists()  # a FAIL keeps the worktree

        # uncommitted work is refused before anything is written: commit first
        write(wa, {"calc.py": FIXED})
        said = await call_error(
            alice, "complete_task", task_id=one, token=mine["token"], output="done", ref=mine["branch"]
        )
        assert "commit" in said and (await call(alice, "get_task", task_id=one))["status"] == "in_progress"
        git(wa, "commit", "-qam", "fix add")
        fixed = git(wa, "rev-parse", "HEAD")
        await call(alice, "complete_task", task_id=one, token=mine["token"], output="done", ref=mine["branch"])
        card = await settled(alice, one)
        assert card["status"] == "done", card["history"][-3:]
        assert git(repo, "merge-base", "--is-ancestor", fixed, "main") == "" and (repo / "calc.py").read_text() == FIXED

        # bob branched from the start and changed the same lines: his review passes, the merge sends it back
        commit(wb, {"calc.py": CLASHING}, "describe add")
        merged = git(repo, "rev-parse", "main")
        await call(bob, "complete_task", task_id=two, token=his["token"], output="done", ref=his["branch"])
        card = await settled(bob, two)
        assert card["status"] == "in_progress" and card["history"][-1]["action"] == "merge conflict"
        briefs = await call(bob, "get_messages", box="pool", task_id=two, intent="critique", full=True)
        assert "calc.py" in briefs["messages"][-1]["content"]
        assert git(repo, "rev-parse", "main") == merged and wb.exists()
        await call(bob, "release_task", task_id=two, token=his["token"], reason="will redo it on the new main")

    # both cards ended (done; back to todo): the sweep that `hiveboard serve` runs leaves no worktree
    manager = WorktreeManager(board, Git.for_machine([Path(board.store.path)] if "://" not in board.store.path else []))
    await anyio.to_thread.run_sync(manager.sweep)
    assert not wa.exists() and not wb.exists() and live_worktrees(repo) == []
    assert git(repo, "branch", "--list", his["branch"]) != ""  # bob's unmerged branch stays for him
