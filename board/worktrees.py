"""The git worktrees agents were given at claim: which card, which agent, where, on which branch.

A row is live (`removed_at` null) while its worktree is on disk. A card keeps its holder's worktree while
the holder still has it: in progress, blocked, in review, or waiting on a person. Once the card is done,
back in todo (released, its lease ran out) or held by another agent, the worktree is an orphan and is
removed (server/worktrees.py runs git; here is only what the board records). Retiring a row is one guarded
statement that checks the card in the same breath, so a claim that commits first keeps its worktree.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from . import scopes
from .db import Store, iso, now, rows
from .errors import OverQuota
from .quotas import MB

KEPT = ("in_progress", "blocked", "review", "needs_human")  # a card in these keeps its holder's worktree
# the card no longer keeps the row's worktree: it is gone, ended, back in todo, or another agent's
ORPHAN = (
    f"NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = worktrees.task_id AND t.assignee = worktrees.agent "
    f"AND t.status IN ({', '.join(repr(s) for s in KEPT)}))"
)


class Worktree(BaseModel):
    id: int
    task_id: int
    agent: str
    repo: str
    path: str
    branch: str
    base_sha: str
    created_at: str
    removed_at: str | None = None


def _worktree(row: dict) -> Worktree:
    return Worktree(**{**row, "created_at": iso(row["created_at"]), "removed_at": iso(row["removed_at"])})


def live_worktree(db, task_id: int, agent: str) -> Worktree | None:
    """The worktree `agent` has for the card now, if any, read on `db` (inside the caller's transaction)."""
    found = rows(
        db,
        "SELECT * FROM worktrees WHERE task_id = ? AND agent = ? AND removed_at IS NULL ORDER BY id DESC LIMIT 1",
        [task_id, agent],
    )
    return _worktree(found[0]) if found else None


class Worktrees:
    def __init__(self, store: Store):
        self.store = store

    def live(self, task_id: int, agent: str) -> Worktree | None:
        """The worktree `agent` has for the card now, if any."""
        return live_worktree(self.store.db, task_id, agent)

    def last(self, task_id: int, agent: str) -> Worktree | None:
        """The newest worktree hiveboard ever gave `agent` for the card, live or removed (its branch is theirs)."""
        found = rows(
            self.store.db,
            "SELECT * FROM worktrees WHERE task_id = ? AND agent = ? ORDER BY id DESC LIMIT 1",
            [task_id, agent],
        )
        return _worktree(found[0]) if found else None

    def check_room(self, agent: str, repo: str, per_agent: int, per_repository: int) -> None:
        """Refuse a new worktree (OverQuota, before git makes it; the claim then says nothing was claimed) when the agent or the repository has as many live
        ones as the board allows (0: no cap): each is a full checkout on the host's disk."""
        mine, theirs = self.store.db.execute(
            "SELECT count(*) FILTER (WHERE agent = ?), count(*) FILTER (WHERE repo = ?) FROM worktrees "
            "WHERE removed_at IS NULL",
            [agent, repo],
        ).fetchone()
        if per_agent and mine >= per_agent:
            raise OverQuota(
                f"you have {mine} live worktrees, the most one agent may (HIVEBOARD_QUOTAS__WORKTREES_PER_AGENT="
                f"{per_agent}): finish or release a card you hold, or claim without worktree=true"
            )
        if per_repository and theirs >= per_repository:
            raise OverQuota(
                f"repository {repo!r} has {theirs} live worktrees, the most it may "
                f"(HIVEBOARD_QUOTAS__WORKTREES_PER_REPOSITORY={per_repository}): claim without worktree=true, or later"
            )

    def check_disk(
        self,
        agent: str,
        repo: str,
        adding: int,
        size: Callable[[Worktree], int],
        mb_per_agent: float,
        mb_per_repository: float,
    ) -> None:
        """Refuse a new worktree of `adding` bytes (OverQuota, before git makes it) when it would take the agent's
        live worktrees, or the repository's, past their share of the host's disk in MB (0: no cap). `size`: the
        bytes of a live worktree's checkout (its commit's tracked files, as git would write them)."""
        found = [
            _worktree(r)
            for r in rows(
                self.store.db,
                "SELECT * FROM worktrees WHERE removed_at IS NULL AND (agent = ? OR repo = ?)",
                [agent, repo],
            )
        ]
        mine = sum(size(w) for w in found if w.agent == agent)
        theirs = sum(size(w) for w in found if w.repo == repo)
        new = adding / MB
        if mb_per_agent and (mine + adding) / MB > mb_per_agent:
            raise OverQuota(
                f"a worktree of {repo!r} takes {new:,.1f} MB and your live worktrees {mine / MB:,.1f} MB, more than "
                f"one agent may hold (HIVEBOARD_QUOTAS__WORKTREE_MB_PER_AGENT={mb_per_agent:g}): finish or release a "
                "card you hold, or claim without worktree=true"
            )
        if mb_per_repository and (theirs + adding) / MB > mb_per_repository:
            raise OverQuota(
                f"a worktree of {repo!r} takes {new:,.1f} MB and its live worktrees {theirs / MB:,.1f} MB, more than "
                f"one repository may hold (HIVEBOARD_QUOTAS__WORKTREE_MB_PER_REPOSITORY={mb_per_repository:g}): "
                "claim without worktree=true, or later"
            )

    def record(self, task_id: int, agent: str, repo: str, path: str, branch: str, base_sha: str) -> Worktree:
        """A worktree was made for `agent` on the card."""
        with self.store.write(scopes.agent(agent), scopes.repository(repo)) as db:
            found = rows(
                db,
                "INSERT INTO worktrees (task_id, agent, repo, path, branch, base_sha, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *",
                [task_id, agent, repo, path, branch, base_sha, now()],
            )
        return _worktree(found[0])

    def orphans(self, limit: int = 100) -> list[Worktree]:
        """Live worktrees whose card no longer keeps them, oldest first."""
        found = rows(
            self.store.db,
            f"SELECT * FROM worktrees WHERE removed_at IS NULL AND {ORPHAN} ORDER BY id LIMIT ?",
            [limit],
        )
        return [_worktree(r) for r in found]

    def retire(self, worktree_id: int) -> bool:
        """Mark an orphan removed, if it still is one (a claim that committed meanwhile keeps it): True when this
        call retired it, and its worktree is then the caller's to delete."""
        with self.store.write() as db:
            found = rows(
                db,
                f"UPDATE worktrees SET removed_at = ? WHERE id = ? AND removed_at IS NULL AND {ORPHAN} RETURNING id",
                [now(), worktree_id],
            )
        return bool(found)

    def gone(self, worktree_id: int) -> None:
        """A live worktree's directory is no longer there (deleted by hand): the row says so."""
        with self.store.write() as db:
            db.execute("UPDATE worktrees SET removed_at = ? WHERE id = ? AND removed_at IS NULL", [now(), worktree_id])

    def live_in(self, repo: str) -> list[Worktree]:
        """Every live worktree of a repository."""
        found = rows(self.store.db, "SELECT * FROM worktrees WHERE repo = ? AND removed_at IS NULL", [repo])
        return [_worktree(r) for r in found]
