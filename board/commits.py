"""Work handed in as a commit (complete_task ref=): one `task_refs` row per round, written with the card's move to
review in one transaction.

What the row holds was established outside the board, through git in the sandbox (critics/commits.py): the
commit the ref named, its merge base with the repository's base branch, the files it changed and its diff,
bounded. A review round finds its commit by the card, the claim's fencing token and the moment both were
written (`of_review`); a card shows the current claim's latest (cards.py, which reads the rows).
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from . import cards
from ._sqlite_utils import Database
from .db import Store, rows
from .errors import InvalidInput
from .machine import Machine
from .models import Commit
from .repos import Repo, Repos
from .worktrees import live_worktree

BOTH = (
    "send ref= or artifacts=, not both: a commit is reviewed as it is in the repository; commit the files and send "
    "ref= alone; nothing was handed in"
)
# the review of a round and its commit were written by one complete_task, at one moment
OF_REVIEW = (
    "SELECT t.* FROM task_refs t JOIN reviews r ON r.task_id = t.task_id AND r.fencing_token = t.fencing_token "
    "AND r.created_at = t.created_at WHERE r.id = ? ORDER BY t.id DESC LIMIT 1"
)


class Target(BaseModel):
    """Where the holder of a card hands in a commit: the card's repository, the worktree it was given (if one is
    live), and the number of the pin the commit gets (refs/hiveboard/cards/<id>/<n>)."""

    task_id: int
    repo: Repo
    worktree: str | None = None
    pin: int


class Commits:
    """The commits cards were handed in as."""

    def __init__(self, store: Store, machine: Machine, repos: Repos):
        self.store = store
        self.machine = machine
        self.repos = repos

    def target(self, actor: str, task_id: int, token: int) -> Target:
        """The repository a card the caller holds is worked in, or why a commit cannot be handed in for it."""
        with self.machine.reading() as db:
            row = cards.row(db, task_id)
            self.machine.holder_check(row, actor, token, "complete")
            if not row["repo"]:
                raise InvalidInput(
                    f"task {task_id} names no repository, so ref= has nothing to name a commit of; hand in with "
                    "artifacts= instead, or ask its creator for a card with repo="
                )
            worktree = live_worktree(db, task_id, actor)
            handed = db.execute("SELECT count(*) FROM task_refs WHERE task_id = ?", [task_id]).fetchone()[0]
        return Target(
            task_id=task_id, repo=self.repos.get(row["repo"]), worktree=worktree and worktree.path, pin=handed + 1
        )

    def add(self, db: Database, row: dict, token: int, commit: Commit, ts: float) -> None:
        """Record the round's commit, inside complete's transaction (at `ts`, the moment its review is queued)."""
        if row["repo"] != commit.repo:  # the card was read before git ran; its repository cannot change, but check
            raise InvalidInput(
                f"task {row['id']} is worked in repository {row['repo']!r}, not {commit.repo!r}; call complete_task again"
            )
        db.execute(
            "INSERT INTO task_refs (task_id, fencing_token, repo, ref, sha, base_sha, files, diff, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                row["id"],
                token,
                commit.repo,
                commit.ref,
                commit.sha,
                commit.base_sha,
                json.dumps([f.model_dump(exclude_none=True) for f in commit.files]),
                commit.diff,
                ts,
            ],
        )

    @staticmethod
    def of_review(db: Database, review_id: int) -> Commit | None:
        """The commit a review round reviews; None when that round's work was handed in as artifacts."""
        found = rows(db, OF_REVIEW, [review_id])
        return cards.commit_of(found[0]) if found else None

    def rounds(self, task_id: int) -> list[Commit]:
        """Every commit the card was handed in as, oldest first (the web page shows a round beside the one before)."""
        with self.store.read() as db:
            return [
                cards.commit_of(r) for r in rows(db, "SELECT * FROM task_refs WHERE task_id = ? ORDER BY id", [task_id])
            ]
