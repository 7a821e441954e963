"""The git repositories cards are worked in: the registry `hiveboard repo add` writes.

A repository is registered by the operator under a name (what `create_task(repo=…)` names): where it is on
the server (`path`, its main worktree, and `git_dir`, the directory git keeps its objects and refs in), the
branch work is based on and merged into (`base`), the command that runs its tests in the sandbox
(`test_command`), and whether a passed card is merged by the queue (`auto`) or left for a person (`manual`).
Running git is not the board's: critics/git.py does it, inside the sandbox.

A base the queue merges into is the queue's: `repo_landings` records every commit hiveboard put there, the tip
found at registration, and each decision a person made when the base had moved outside the queue (adopted, or
reset to the recorded tip), with who. The latest row is where hiveboard left the base (`Repo.landed`); while the
base is found elsewhere (`Repo.moved_to`), merging into it stops (critics/merge.py).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from ._sqlite_utils import Database
from .db import Store, iso, now, rows
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
    landed: str | None = None  # where hiveboard left the base branch (None: not recorded yet)
    moved_to: str | None = None  # the tip found there instead: merging into the repository is stopped


class Landing(BaseModel):
    """One move of a base branch on the record: how (registered, merged, adopted, reset), to which commit, by whom."""

    sha: str
    how: str
    actor: str
    task_id: int | None = None
    note: str | None = None
    at: str


def check_repo_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"repository name {name[:60]!r} is not allowed; use 1-40 lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def _repo(row: dict) -> Repo:
    return Repo(**{**row, "created_at": iso(row["created_at"])})


LATEST = "SELECT sha FROM repo_landings WHERE repo = ? ORDER BY id DESC LIMIT 1"
REPOS = "SELECT r.*, (SELECT l.sha FROM repo_landings l WHERE l.repo = r.name ORDER BY l.id DESC LIMIT 1) AS landed "


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
        tip: str | None = None,
    ) -> Repo:
        """Register a repository; a name or path already registered is refused. `tip`: its base branch's commit
        now, the first the record holds (else the tip hiveboard first finds there)."""
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
            db.execute("DELETE FROM repo_landings WHERE repo = ?", [name])  # a name registered before
            if tip is not None:
                self.land(db, name, tip, "registered", actor)
        return self.get(name)

    def get(self, name: str) -> Repo:
        """The repository registered as `name`, or NotFound naming those that are."""
        found = list(self.store.db.query(REPOS + "FROM repos r WHERE r.name = ?", [name]))
        if not found:
            names = ", ".join(r.name for r in self.list()[:20]) or "none (hiveboard repo add PATH --name NAME)"
            raise NotFound(f"no repository named {name!r}; registered: {names}")
        return _repo(found[0])

    def list(self) -> list[Repo]:
        return [_repo(row) for row in self.store.db.query(REPOS + "FROM repos r ORDER BY r.name")]

    # ----------------------------------------------------------------- where hiveboard left the base

    def recorded(self, name: str, tip: str) -> str:
        """Where hiveboard left the repository's base branch; on first sight (nothing recorded yet), `tip`, the
        commit found there now, which is then recorded as the tip at registration."""
        with self.store.write() as db:
            found = db.execute(LATEST, [name]).fetchone()
            if found is not None:
                return found[0]
            self.land(db, name, tip, "registered", "hiveboard", note="the base's tip when hiveboard first looked")
            return tip

    @staticmethod
    def land(
        db: Database,
        name: str,
        sha: str,
        how: str,
        actor: str,
        task_id: int | None = None,
        note: str | None = None,
    ) -> None:
        """Record that the base branch of `name` is at `sha` now (inside the caller's transaction), and that
        merging into it may go on."""
        db.execute(
            "INSERT INTO repo_landings (repo, sha, how, actor, task_id, note, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [name, sha, how, actor, task_id, note, now()],
        )
        db.execute("UPDATE repos SET moved_to = NULL WHERE name = ?", [name])

    @staticmethod
    def moved(db: Database, name: str, tip: str) -> bool:
        """Record that the base of `name` was found at `tip`, not where hiveboard left it; True the first time
        that tip is found (the people are told once)."""
        return (
            db.execute(
                "UPDATE repos SET moved_to = ? WHERE name = ? AND (moved_to IS NULL OR moved_to != ?)",
                [tip, name, tip],
            ).rowcount
            == 1
        )

    def landings(self, name: str, limit: int = 50) -> list[Landing]:
        """The base's moves on the record, newest first."""
        found = rows(
            self.store.db,
            "SELECT sha, how, actor, task_id, note, created_at FROM repo_landings WHERE repo = ? ORDER BY id DESC "
            "LIMIT ?",
            [name, limit],
        )
        return [Landing(**{k: v for k, v in r.items() if k != "created_at"}, at=iso(r["created_at"])) for r in found]

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
            db.execute("DELETE FROM repo_landings WHERE repo = ?", [name])
        return repo
