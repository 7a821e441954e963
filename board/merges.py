"""The merge queue: a passed commit is merged into its repository's base branch, one merge at a time per
repository. critics/merge.py runs git and the tests; this module keeps the queue and moves the card.

How the state machine says it, with the least new machinery: while its commit waits in the queue or is merged,
the card stays in `review` (its history says "in the merge queue"), and the merge's result moves it as a review
verdict does, by the review's own rows: to done once the base branch holds the commit; back to its holder when
the merge conflicts or the merge result's tests fail (to a human at the last round); to a human when the base
cannot be advanced where it is checked out. The one new row is a person's approval of a card whose commit is to
be merged: needs_human → review, into the queue. A card that leaves review by another path (a person takes it)
takes its merge out of the queue.

A merge is leased like a review job: a worker that dies mid-merge stops renewing and another takes the merge
over; the base only moves by a compare-and-swap, and a commit the base already holds is not merged again, so
each commit is merged once. The commit a worker is about to put on the base is written on the merge first
(`landing`), so a worker that moved the base and died before saying so is told from one that found the base moved
by something else.

The base is the queue's: every commit it lands is recorded (board/repos.py, `repo_landings`) in the transaction
that ends the merge. A base found anywhere else stops merging into its repository (`base_moved`: the people on
the board are told which commits arrived unreviewed, once per tip) until a person adopts those commits as
reviewed or resets the base to the recorded tip (`decide_base`, `hiveboard repo adopt|reset`).
"""

from __future__ import annotations

from pydantic import BaseModel

from . import cards
from ._sqlite_utils import Database
from .commits import Commits
from .db import Store, now, rows
from .machine import Machine, Via
from .models import Commit
from .repos import LATEST, Repos

LIVE = ("queued", "running")
# a merge's outcome -> (the card's history action, the message's intent)
ENDS = {
    "merged": ("merged", "approval"),
    "conflict": ("merge conflict", "critique"),
    "failed": ("merge result failed its tests", "critique"),
    "blocked": ("merge blocked", "needs_human"),
}


class Merge(BaseModel):
    """A merge a worker holds: the card, its repository and commit, and what the merge's outcome needs."""

    id: int
    task_id: int
    repo: str
    sha: str
    attempts: int
    title: str
    holder: str | None  # the card's author, who gets it back when the merge fails
    round: int  # the review round that passed it (the round bound applies to a merge that fails)
    round_limit: int | None = None  # more rounds its creator or a person granted (Reviews.grant_rounds)
    ref: str  # the branch or commit id handed in
    review_id: int | None = None  # that round: its checks run again on the merge result
    pending: str | None = None  # the commit an earlier worker of this merge was about to put on the base


class Merges:
    """The merge queue of every repository."""

    def __init__(self, store: Store, machine: Machine, repos: Repos, commits: Commits):
        self.store = store
        self.machine = machine
        self.repos = repos
        self.commits = commits

    # ----------------------------------------------------------------- into the queue

    def to_merge(self, db: Database, review_id: int) -> Commit | None:
        """The commit a passed review round is to be merged as: None when its work was not a commit, or its
        repository leaves merging to a person (merge_mode manual)."""
        commit = self.commits.of_review(db, review_id)
        if commit is None:
            return None
        mode = db.execute("SELECT merge_mode FROM repos WHERE name = ?", [commit.repo]).fetchone()
        return commit if mode is not None and mode[0] == "auto" else None

    def approved(self, db: Database, row: dict) -> Commit | None:
        """The commit a person's approval of this needs_human card is to merge: its last review round's, when the
        card came here from review (its verdict or its merge sent it) and that round is the current claim's."""
        came = db.execute(
            "SELECT from_status FROM task_history WHERE task_id = ? AND to_status = 'needs_human' ORDER BY id DESC "
            "LIMIT 1",
            [row["id"]],
        ).fetchone()
        last = db.execute(
            "SELECT id, fencing_token FROM reviews WHERE task_id = ? AND status = 'finished' ORDER BY id DESC LIMIT 1",
            [row["id"]],
        ).fetchone()
        if came is None or came[0] != "review" or last is None or last[1] != row["fencing_token"]:
            return None
        return self.to_merge(db, last[0])

    def enqueue(
        self,
        db: Database,
        row: dict,
        commit: Commit,
        via: Via,
        actor: str,
        ts: float,
        note: str | None,
        sets: dict | None = None,
    ) -> dict:
        """Queue the card's commit (inside the caller's transaction); the card stays in, or goes back to, review.
        Returns its new row."""
        db.execute(
            "UPDATE merges SET status = 'cancelled', finished_at = ?, leased_until = NULL WHERE task_id = ? AND "
            "status IN ('queued', 'running')",
            [ts, row["id"]],
        )
        db.execute(
            "INSERT INTO merges (task_id, repo, sha, status, created_at) VALUES (?, ?, ?, 'queued', ?)",
            [row["id"], commit.repo, commit.sha, ts],
        )
        queue = f"in the merge queue of {commit.repo}"
        if row["status"] == "review":  # its review passed it
            return self.machine.edit(db, row, actor, queue, sets or {}, note, ts)
        # a person approved it (the move's own action says so)
        return self.machine.move(db, row, "review", via, actor, ts=ts, note="; ".join(x for x in (note, queue) if x))

    def left_review(self, db: Database, row: dict, target: str, via: Via, actor: str, ts: float) -> None:
        """A card left review by another path than a verdict or its merge (a person took it): its merge leaves the
        queue, and a worker merging it can no longer move it."""
        if via != "review":
            db.execute(
                "UPDATE merges SET status = 'cancelled', finished_at = ?, leased_until = NULL, note = ? WHERE "
                "task_id = ? AND status IN ('queued', 'running')",
                [ts, f"the card left review ({row['status']} → {target} by {actor})", row["id"]],
            )

    # ----------------------------------------------------------------- the worker's side

    def claim(self, worker: str, lease_seconds: float) -> Merge | None:
        """Take the oldest queued merge (or one whose worker stopped renewing its lease) of a repository that no
        other worker is merging into now."""
        ts = now()
        if (
            self.store.db.execute("SELECT 1 FROM merges WHERE status IN ('queued', 'running') LIMIT 1").fetchone()
            is None
        ):
            return None  # nothing to take: no write transaction for an idle queue
        with self.store.write() as db:
            found = rows(
                db,
                "UPDATE merges SET status = 'running', worker = ?, leased_until = ?, attempts = attempts + 1 WHERE "
                "id = (SELECT m.id FROM merges m WHERE (m.status = 'queued' OR (m.status = 'running' AND "
                "m.leased_until < ?)) AND NOT EXISTS (SELECT 1 FROM merges o WHERE o.repo = m.repo AND o.id != m.id "
                "AND o.status = 'running' AND o.leased_until >= ?) ORDER BY m.id LIMIT 1) RETURNING *",
                [worker, ts + lease_seconds, ts, ts],
            )
            if not found:
                return None
            merge = found[0]
            card = cards.row(db, merge["task_id"])
            last = db.execute(
                "SELECT round, id FROM reviews WHERE task_id = ? AND status = 'finished' ORDER BY id DESC LIMIT 1",
                [merge["task_id"]],
            ).fetchone()
            ref = db.execute(
                "SELECT ref FROM task_refs WHERE task_id = ? AND sha = ? ORDER BY id DESC LIMIT 1",
                [merge["task_id"], merge["sha"]],
            ).fetchone()
            return Merge(
                id=merge["id"],
                task_id=merge["task_id"],
                repo=merge["repo"],
                sha=merge["sha"],
                attempts=merge["attempts"],
                title=card["title"],
                holder=card["assignee"],
                round=last[0] if last else 1,
                round_limit=card["round_limit"],
                ref=ref[0] if ref else merge["sha"],
                review_id=last[1] if last else None,
                pending=merge["merged_sha"],
            )

    def heartbeat(self, merge_id: int, worker: str, lease_seconds: float) -> bool:
        """Extend the worker's lease on its merge; False when it no longer holds it."""
        with self.store.write() as db:
            return self._renew(db, merge_id, worker, now() + lease_seconds)

    def landing(self, merge_id: int, worker: str, sha: str) -> bool:
        """Write on the merge the commit its worker is about to put on the base (before the base moves); False when
        the worker no longer holds the merge (cancelled, or taken over), and then the base must not move."""
        with self.store.write() as db:
            return (
                db.execute(
                    "UPDATE merges SET merged_sha = ? WHERE id = ? AND worker = ? AND status = 'running'",
                    [sha, merge_id, worker],
                ).rowcount
                == 1
            )

    def held(self, merge_id: int, worker: str) -> bool:
        """Whether the worker still holds the merge (not cancelled, not taken over)."""
        return self._held(self.store.db, merge_id, worker)

    @staticmethod
    def _renew(db: Database, merge_id: int, worker: str, until: float) -> bool:
        return (
            db.execute(
                "UPDATE merges SET leased_until = ? WHERE id = ? AND worker = ? AND status = 'running'",
                [until, merge_id, worker],
            ).rowcount
            == 1
        )

    @staticmethod
    def _held(db: Database, merge_id: int, worker: str) -> bool:
        return (
            db.execute(
                "SELECT 1 FROM merges WHERE id = ? AND worker = ? AND status = 'running'", [merge_id, worker]
            ).fetchone()
            is not None
        )

    def finish(
        self,
        merge: Merge,
        worker: str,
        status: str,
        outcome: str,
        message: str,
        note: str,
        merged_sha: str | None = None,
        reason_chars: int = 2000,
    ) -> bool:
        """Record how the merge ended (`status`: merged, conflict, failed, blocked) and move the card to
        `outcome` (done, in_progress, needs_human) with `message` to its thread; False if the worker no longer
        held the merge. A merge that put `merged_sha` on the base records it as where the base now is."""
        ts = now()
        action, intent = ENDS[status]
        with self.store.write() as db:
            # the base holds it whoever holds the merge now (a person may have taken the card meanwhile)
            if merged_sha is not None and (db.execute(LATEST, [merge.repo]).fetchone() or [None])[0] != merged_sha:
                self.repos.land(db, merge.repo, merged_sha, "merged", f"merge queue ({worker})", merge.task_id, note)
            if not self._held(db, merge.id, worker):
                return False
            row = cards.row(db, merge.task_id)
            if row["status"] == "review":  # a card that left review took its merge out of the queue (left_review)
                self.machine.move(
                    db,
                    row,
                    outcome,
                    "review",
                    "review",
                    ts=ts,
                    action=action,
                    note=note,
                    reason=message[:reason_chars] if outcome == "needs_human" else None,
                    sets={"assignee": row["assignee"]} if outcome == "in_progress" else None,
                )
                intent = intent if outcome != "needs_human" else "needs_human"
                self.machine.messages.event(db, "review", intent, merge.task_id, message.split("\n", 1)[0], message)
            db.execute(
                "UPDATE merges SET status = ?, merged_sha = ?, note = ?, finished_at = ?, leased_until = NULL "
                "WHERE id = ?",
                [status, merged_sha, note[:2000], ts, merge.id],
            )
            return True

    # ----------------------------------------------------------------- the base is the queue's

    def made(self, repo: str, sha: str) -> bool:
        """Whether `sha` is a merge result the queue tested and was putting on the base of `repo` (its worker may
        not have recorded it yet, or have stopped before it could)."""
        found = self.store.db.execute("SELECT 1 FROM merges WHERE repo = ? AND merged_sha = ? LIMIT 1", [repo, sha])
        return found.fetchone() is not None

    def base_moved(self, repo: str, tip: str, summary: str, content: str, task_id: int | None = None) -> None:
        """The base of `repo` was found at `tip`, not where hiveboard left it: merging into it stops, and the first
        time that tip is found the people on the board (roles human and lead, and the pool) are told."""
        with self.store.write() as db:
            if not self.repos.moved(db, repo, tip):
                return
            self._tell_people(db, "needs_human", summary, content, task_id)

    def decide_base(self, repo: str, how: str, sha: str, actor: str, note: str) -> None:
        """A person's decision on a base that moved outside the queue (`how`: adopted, or reset to the recorded
        tip): recorded as where the base is now, merging into it goes on, and the board is told who decided."""
        with self.store.write() as db:
            self.repos.land(db, repo, sha, how, actor, note=note)
            self._tell_people(db, "info", note.split("\n", 1)[0], note)

    def _tell_people(self, db: Database, intent: str, summary: str, content: str, task_id: int | None = None) -> None:
        self.machine.messages.event(db, "hiveboard", intent, task_id, summary, content)
        people = [r[0] for r in db.execute("SELECT name FROM agents WHERE role IN ('human', 'lead') ORDER BY name")]
        for person in people:
            self.machine.messages.event(db, "hiveboard", intent, task_id, summary, content, recipient=person)

    @staticmethod
    def waiting(db: Database, task_id: int) -> dict | None:
        """The card's merge still in the queue (queued, or running), if any: what a passed card waits for."""
        found = rows(
            db,
            "SELECT repo, sha, status FROM merges WHERE task_id = ? AND status IN ('queued', 'running') "
            "ORDER BY id DESC LIMIT 1",
            [task_id],
        )
        return found[0] if found else None

    def of_task(self, task_id: int) -> list[dict]:
        """The card's merges, oldest first (status, sha, merged_sha, note): what the web page and tests read."""
        with self.store.read() as db:
            return rows(db, "SELECT * FROM merges WHERE task_id = ? ORDER BY id", [task_id])
