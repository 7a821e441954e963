"""The git repositories cards are worked in: the registry `hiveboard repo add` writes.

A repository is registered by the operator under a name (what `create_task(repo=…)` names): where it is on
the server (`path`, its main worktree, and `git_dir`, the directory git keeps its objects and refs in), the
branch work is based on and merged into (`base`), the command that runs its tests in the sandbox
(`test_command`), and whether a passed card is merged by the queue (`auto`) or left for a person (`manual`).
Running git is not the board's: critics/git.py does it, inside the sandbox.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from .db import Store, iso, now
from .errors import Conflict, InvalidInput, NotFound

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")
MERGE_MODES = ("auto", "manual")


class Repo(BaseModel):
    name: str
    path: str
    git_dir: str
    base: str
    test_command: str | None = None
    merge_mode: str = "auto"
    created_by: str
    created_at: str


def check_repo_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"repository name {name[:60]!r} is not allowed; use 1-40 lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def _repo(row: dict) -> Repo:
    return Repo(**{**row, "created_at": iso(row["created_at"])})


class Repos:
    def __init__(self, store: Store):
        self.store = store

    def add(
        self,
        name: str,
        path: str,
        git_dir: str,
        base: str,
        test_command: str | None,
        merge_mode: str,
        actor: str,
    ) -> Repo:
        """Register a repository; a name or path already registered is refused."""
        check_repo_name(name)
        if merge_mode not in MERGE_MODES:
            raise InvalidInput(f"merge mode {merge_mode!r} is not one of {', '.join(MERGE_MODES)}")
        with self.store.write() as db:
            taken = db.execute("SELECT name FROM repos WHERE name = ? OR path = ?", [name, path]).fetchone()
            if taken:
                raise Conflict(
                    f"repository {taken[0]!r} is already registered (name or path {path}); "
                    f"`hiveboard repo remove {taken[0]}` first to register it again"
                )
            db.execute(
                "INSERT INTO repos (name, path, git_dir, base, test_command, merge_mode, created_by, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [name, path, git_dir, base, test_command, merge_mode, actor, now()],
            )
        return self.get(name)

    def get(self, name: str) -> Repo:
        """The repository registered as `name`, or NotFound naming those that are."""
        rows = list(self.store.db.query("SELECT * FROM repos WHERE name = ?", [name]))
        if not rows:
            names = ", ".join(r.name for r in self.list()[:20]) or "none (hiveboard repo add PATH --name NAME)"
            raise NotFound(f"no repository named {name!r}; registered: {names}")
        return _repo(rows[0])

    def list(self) -> list[Repo]:
        return [_repo(row) for row in self.store.db.query("SELECT * FROM repos ORDER BY name")]

    def remove(self, name: str) -> Repo:
        """Unregister a repository (its files and branches stay); refused while an unfinished card names it."""
        repo = self.get(name)
        with self.store.write() as db:
            busy = db.execute(
                "SELECT id FROM tasks WHERE repo = ? AND status NOT IN ('done') ORDER BY id LIMIT 5", [name]
            ).fetchall()
            if busy:
                ids = ", ".join(f"#{r[0]}" for r in busy)
                raise Conflict(f"repository {name!r} is named by unfinished cards ({ids}); finish or edit them first")
            db.execute("DELETE FROM repos WHERE name = ?", [name])
        return repo
