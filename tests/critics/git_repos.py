"""Helpers for tests of work handed in as commits: real git repositories made by the test with plain git (the
test's own repository is not hostile), registered on the board, and cards that name them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from conftest import START_TIMEOUT, call

from hiveboard.board.tasks import Board
from hiveboard.critics.git import Git

WHY_NOT = Git.for_machine().why_not()
needs_git = pytest.mark.skipif(WHY_NOT is not None, reason=f"git cannot run here as hiveboard runs it: {WHY_NOT}")

CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    """Plain git, as the test (or an agent in its worktree) runs it."""
    out = subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        env=env,
    )
    assert out.returncode == 0, f"git {' '.join(args)}: {out.stderr}"
    return out.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on `main` with a module and its tests (python -m pytest -q passes)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    write(path, files or {"calc.py": CALC, "tests/test_calc.py": TESTS})
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "the start")
    return path


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def register(board: Board, repo: Path, name: str = "calc", merge: str = "auto", test: str | None = None) -> None:
    board.repos.add(name, str(repo), str(repo / ".git"), "main", test or "python -m pytest -q", merge, "lead")


def work_on(
    repo: Path, branch: str, where: Path, files: dict[str, str], message: str = "work", base: str = "main"
) -> str:
    """An agent's worktree on its own branch from `base` with `files` committed; the commit id."""
    if not where.exists():
        git(repo, "worktree", "add", "-q", "-b", branch, str(where), base)
    write(where, files)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", message)
    return git(where, "rev-parse", "HEAD")


def on_repo(board: Board, task_id: int, repo: str = "calc") -> None:
    """The card names the repository (create_task(repo=) is another part of the work; the column is set here)."""
    with board.store.write() as db:
        db.execute("UPDATE tasks SET repo = ? WHERE id = ?", [repo, task_id])


async def card_on(client, board: Board, title: str, repo: str = "calc", **fields) -> tuple[int, int]:
    """A card on the repository, claimed by the client's agent: (task id, token)."""
    task_id = (await call(client, "create_task", title=title, **fields))["id"]
    on_repo(board, task_id, repo)
    claim = await call(client, "claim_task", task_id=task_id)
    return task_id, claim["token"]


async def settled(client, task_id: int, timeout: float = START_TIMEOUT) -> dict:
    """The card once it has left review (its verdict, and its merge when it has one, are in)."""
    with anyio.fail_after(timeout):
        while True:
            task = await call(client, "get_task", task_id=task_id, history=50)
            if task["status"] != "review":
                return task
            await anyio.sleep(0.1)
