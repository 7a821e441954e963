"""The card state machine: every move a card can make, who may make it, what must hold first, and the
one function that performs a move.

Creation, claims, releases, completions, update_task's status changes, the lease sweep, review verdicts
and a person's decisions are all rows of TRANSITIONS, performed by `Machine.move` (or `Machine.create`
for a card's first row): the guarded UPDATE, the version bump, the history row and the event. A rule
such as "who may take a card out of needs_human" is therefore written once, here. Edits that do not
move a card (a note, a new title, a contest's result) go through `Machine.edit`, which cannot change
`status`.

What else happens when a card moves is registered, not written into `move`: `when_leaving(status, hook)`
runs before the write (reviews cancel their jobs when a card leaves review by another path),
`when_entering(status, hook)` after it (the shared memory keeps a card's output once it is done). The
board wires them in one place (Board.__init__).

Who may:
- anyone    any registered agent
- holder    the agent holding the claim, with its current fencing token
- steward   the card's holder, its creator, or an agent with an operator role (board/agents.py)
- system    the lease sweep, and the budget check of recorded token usage (board/usage.py); no tool can ask
            for either
- review    the review worker's verdict (no tool can ask for it), including a job it gives up on
- person    an agent with an operator role (human/lead): a person's decision on the web board, or taking a
            card out of a review that cannot finish

A card leaves review only by its verdict or by a person: its author pushing it to needs_human, or a
bystander cancelling someone else's review, would skip the critics. The referee of competing attempts
moves no card: an attempt reaches done by passing its own review (and a person's approval when it needs
one) or by a person, never because another attempt was compared with it (board/contests.py).

Guards (checked after who):
- ready     every dependency is done
- reserved  the card is not reserved for another agent
- one_attempt  an agent takes at most one attempt of competing attempts
- reason    a reason is given (kept as the card's blocked_reason)

Who may change a card's fields (update_task, not a move) is Board.update's: its brief (title,
description, labels, acceptance criteria, needs_approval) only its creator or an operator, its acceptance
criteria and tests not at all once it has been claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from . import cards, scopes
from ._sqlite_utils import Database
from .agents import OPERATOR_ROLES, Agents
from .db import Store, for_update, iso, now, placeholders, rows, rows_many
from .dialect import grown
from .errors import Conflict, Forbidden, IllegalTransition, InvalidInput, NotYourClaim, StaleToken
from .events import TaskChanged
from .messages import Messages

Who = Literal["anyone", "holder", "steward", "system", "review", "person"]
Via = Literal[
    "create_task",
    "claim_task",
    "release_task",
    "update_task",
    "complete_task",
    "flag_task",
    "lease",
    "review",
    "decide",
    "budget",
]
NEW = None  # the source of a card's first row: it did not exist


@dataclass(frozen=True)
class Transition:
    source: str | None
    target: str
    via: Via
    who: Who
    action: str  # the history row's action
    guards: tuple[str, ...] = ()


TRANSITIONS: tuple[Transition, ...] = (
    Transition(NEW, "todo", "create_task", "anyone", "created"),
    Transition("todo", "in_progress", "claim_task", "anyone", "claimed", ("reserved", "ready", "one_attempt")),
    Transition("in_progress", "in_progress", "claim_task", "holder", "renewed"),  # re-claim hands the token back
    Transition("in_progress", "in_progress", "update_task", "holder", "renewed"),
    Transition("in_progress", "todo", "release_task", "holder", "released"),
    Transition("blocked", "todo", "release_task", "holder", "released"),
    Transition("in_progress", "review", "complete_task", "holder", "completed"),
    Transition("in_progress", "done", "complete_task", "holder", "completed"),
    # no review runs, and the card needs a person's approval: it waits for one
    Transition("in_progress", "needs_human", "complete_task", "holder", "completed", ("reason",)),
    Transition("in_progress", "blocked", "update_task", "holder", "blocked", ("reason",)),
    Transition("in_progress", "needs_human", "update_task", "holder", "escalated", ("reason",)),
    # the honest way out of a card that cannot be done as written (board/flags.py): a person answers, no round is used
    Transition("in_progress", "needs_human", "flag_task", "holder", "flagged", ("reason",)),
    Transition("blocked", "needs_human", "flag_task", "holder", "flagged", ("reason",)),
    Transition("blocked", "in_progress", "update_task", "holder", "resumed"),
    Transition("todo", "blocked", "update_task", "steward", "blocked", ("reason",)),
    Transition("blocked", "todo", "update_task", "steward", "unblocked"),
    Transition("needs_human", "todo", "update_task", "steward", "unblocked"),
    # a review that cannot finish (no worker runs): a person takes it, and the job's verdict no longer moves it
    Transition("review", "needs_human", "update_task", "person", "escalated", ("reason",)),
    Transition("in_progress", "todo", "lease", "system", "expired"),
    # its agents' recorded tokens reached the card's budget, and budget_action = "needs_human": a person decides
    Transition("in_progress", "needs_human", "budget", "system", "over budget", ("reason",)),
    Transition("blocked", "needs_human", "budget", "system", "over budget", ("reason",)),
    Transition("review", "done", "review", "review", "reviewed"),
    Transition("review", "in_progress", "review", "review", "reviewed"),
    Transition("review", "needs_human", "review", "review", "reviewed"),
    # a person decides a card that waits on a human: pass it, send it back, or hand it to another agent
    Transition("needs_human", "done", "decide", "person", "passed by a person"),
    # a person approves a card whose work is a commit its repository merges by the queue (board/merges.py): it
    # waits in review for the merge, which moves it on as a verdict would
    Transition("needs_human", "review", "decide", "person", "passed by a person, to the merge queue"),
    Transition("needs_human", "todo", "decide", "person", "sent back by a person", ("reason",)),
    # a person's answer to a card that should not be done (a flag confirmed, a canary caught): it ends undone
    Transition("needs_human", "cancelled", "decide", "person", "cancelled by a person", ("reason",)),
)

_BY_KEY = {(t.source, t.target, t.via): t for t in TRANSITIONS}

# what the refusals say the caller was doing
DOING: dict[str, str] = {
    "claim_task": "renew the claim on",
    "release_task": "release",
    "update_task": "update",
    "complete_task": "complete",
    "flag_task": "flag",
    "lease": "expire",
    "review": "review",
    "decide": "decide",
    "budget": "hold over budget",
}

DOER = {"lease": "lease sweep", "budget": "budget check"}  # who makes the system's moves

# hooks: leaving(db, row, target, via, actor, ts) before the write; entering(db, new_row) after it
Leaving = Callable[[Database, dict, str, Via, str, float], None]
Entering = Callable[[Database, dict, str], None]  # the card as moved, and the status it came from


def _history(
    task_id: int, actor: str, action: str, from_status: str | None, to_status: str | None, note: str | None, at: float
) -> tuple[str, list]:
    """The statement that writes a card's history row, and its parameters."""
    return (
        "INSERT INTO task_history (task_id, at, actor, action, from_status, to_status, note) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [task_id, at, actor, action, from_status, to_status, note],
    )


def find(source: str | None, target: str, via: Via) -> Transition | None:
    return _BY_KEY.get((source, target, via))


def targets(source: str, via: Via) -> list[str]:
    """Where `via` can take a card that is in `source`."""
    return [t.target for t in TRANSITIONS if t.source == source and t.via == via and t.target != source]


def illegal(row: dict, target: str, via: Via) -> str:
    """Why `via` cannot move this card to `target`, and where it can go instead."""
    allowed = targets(row["status"], via)
    return (
        f"{via} cannot move task {row['id']} from {row['status']} to {target}; from {row['status']} it can go to "
        f"{', '.join(allowed) or 'nothing'}"
    )


# the cards whose lease ran out by a time (the lease sweep's probe inside a write). In lease order: only the lease
# index gives it, which PostgreSQL's planner then takes even while its statistics say no card is held (else it may
# walk the held cards on the index of their status alone, every write)
EXPIRED = "SELECT id FROM tasks WHERE status = 'in_progress' AND lease_expires_at < ? ORDER BY lease_expires_at"
ANY_EXPIRED = (  # a read's probe
    "SELECT 1 FROM tasks WHERE status = 'in_progress' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT 1"
)


class Machine:
    """Performs the rows of TRANSITIONS on one store, inside the caller's write transaction."""

    def __init__(self, store: Store, agents: Agents, messages: Messages, lease_seconds: int):
        self.store = store
        self.agents = agents
        self.messages = messages
        self.lease_seconds = lease_seconds
        self._leaving: dict[str, list[Leaving]] = {}
        self._entering: dict[str, list[Entering]] = {}

    # ----------------------------------------------------------------- registration

    def when_leaving(self, status: str, hook: Leaving) -> None:
        """Run `hook` inside the transaction, before a card in `status` moves elsewhere."""
        self._leaving.setdefault(status, []).append(hook)

    def when_entering(self, status: str, hook: Entering) -> None:
        """Run `hook` inside the transaction, after a card moved into `status` from elsewhere."""
        self._entering.setdefault(status, []).append(hook)

    # ----------------------------------------------------------------- performing a row

    def create(
        self, db: Database, actor: str, values: dict, note: str | Callable[[int], str] | None, ts: float
    ) -> dict:
        """A card's first row (the table's create_task row): the INSERT, its history row and its event.
        `note` may be a function of the new card's id. Returns the new row."""
        rule = find(NEW, "todo", "create_task")
        columns = {**values, "status": rule.target, "created_by": actor, "created_at": ts, "updated_at": ts}
        new = rows(
            db,
            f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({placeholders(columns)}) RETURNING *",
            list(columns.values()),
        )[0]
        note = note(new["id"]) if callable(note) else note
        db.execute(*_history(new["id"], actor, rule.action, rule.source, rule.target, note, ts))
        self.store.emit(TaskChanged(new["id"], rule.target, new["version"]))
        if grown(new["id"]):
            self.store.dialect.analyze(db, "tasks")
        return new

    def move(
        self,
        db: Database,
        row: dict,
        target: str,
        via: Via,
        actor: str,
        *,
        token: int | None = None,
        reason: str | None = None,
        note: str | None = None,
        sets: dict | None = None,
        ts: float | None = None,
        action: str | None = None,
        deps: list[dict] | None = None,
    ) -> dict:
        """Make one transition: who may and the guards are checked, the leaving hooks run, the row is
        written, the entering hooks run. Returns the new row. `deps`: the card's dependency rows
        (cards.DEPENDENCIES), when the caller read them in this transaction."""
        rule = find(row["status"], target, via)
        if rule is None:
            raise IllegalTransition(illegal(row, target, via))
        self._authorize(rule, row, actor, token)
        for guard in rule.guards:
            self._guard(guard, db, row, actor, target, reason, deps)
        ts = now() if ts is None else ts
        moving = row["status"] != target
        if moving:
            for hook in self._leaving.get(row["status"], ()):
                hook(db, row, target, via, actor, ts)
        implied: dict = {"status": target}
        if target == "in_progress":
            implied.update(lease_expires_at=ts + self.lease_seconds, blocked_reason=None)
        elif target == "todo":
            implied.update(assignee=None, lease_expires_at=None, blocked_reason=None)
        elif target in ("blocked", "needs_human"):
            implied.update(blocked_reason=reason, lease_expires_at=None)
        else:
            implied.update(lease_expires_at=None)
        new = self._write(db, row, actor, action or rule.action, {**implied, **(sets or {})}, note, ts)
        if moving:
            for hook in self._entering.get(target, ()):
                hook(db, new, row["status"])
        return new

    def edit(self, db: Database, row: dict, actor: str, action: str, sets: dict, note: str | None, ts: float) -> dict:
        """Change a card's fields without moving it (a note, an edit, a contest's result)."""
        if "status" in sets:
            raise ValueError("a card's status changes only by a move of the state machine (Machine.move)")
        return self._write(db, row, actor, action, sets, note, ts)

    def _write(self, db: Database, row: dict, actor: str, action: str, sets: dict, note: str | None, ts: float) -> dict:
        """The one write of a card's state: a guarded UPDATE (only the version the caller checked), the
        version bump, the history row (with it: one round trip on a database server) and the event."""
        sets = {**sets, "updated_at": ts}
        assignments = ", ".join(f"{column} = ?" for column in sets)
        found, _ = rows_many(
            db,
            [
                (
                    f"UPDATE tasks SET {assignments}, version = version + 1 WHERE id = ? AND version = ? RETURNING *",
                    [*sets.values(), row["id"], row["version"]],
                ),
                _history(row["id"], actor, action, row["status"], sets.get("status", row["status"]), note, ts),
            ],
        )
        if not found:  # the card was read unlocked (for_update) and changed meanwhile: refuse rather than guess
            raise Conflict(f"task {row['id']} changed meanwhile; call get_task and retry")
        new = found[0]
        self.store.emit(TaskChanged(row["id"], new["status"], new["version"]))
        return new

    # ----------------------------------------------------------------- who may, and guards

    def operator(self, actor: str) -> bool:
        """Whether the agent has a role only the operator grants (a person, or a lead)."""
        agent = self.agents.get(actor, missing_ok=True)
        return agent is not None and agent.role in OPERATOR_ROLES

    def _authorize(self, rule: Transition, row: dict, actor: str, token: int | None) -> None:
        if rule.who == "holder":
            self.holder_check(row, actor, token, DOING[rule.via])
        elif rule.who == "steward" and actor not in (row["assignee"], row["created_by"]):
            if not self.operator(actor):
                raise Forbidden(
                    f"task {row['id']} is {row['status']} ({row['blocked_reason'] or 'no reason given'}); only its "
                    f"holder ({row['assignee'] or 'none'}), its creator ({row['created_by']}) or an agent with the "
                    f"role {' or '.join(OPERATOR_ROLES)} may move it to {rule.target}; ask one of them, or send "
                    "them a message with publish_message"
                )
        elif rule.who == "person":
            if not self.operator(actor):
                raise Forbidden(
                    f"only a person (an agent with the role {' or '.join(OPERATOR_ROLES)}) may move task "
                    f"{row['id']} from {rule.source} to {rule.target}; ask the operator, e.g. with "
                    "publish_message"
                )
        elif rule.who in ("system", "review") and actor != rule.who:
            raise Forbidden(
                f"only the {DOER.get(rule.via, 'review')} moves task {row['id']} from {rule.source} to {rule.target}"
            )

    def _guard(
        self, guard: str, db: Database, row: dict, actor: str, target: str, reason: str | None, deps: list[dict] | None
    ) -> None:
        task_id = row["id"]
        if guard == "reason" and not reason:
            raise InvalidInput(f"moving task {task_id} to {target} needs reason= saying what it waits on")
        if guard == "reserved" and row["reserved_for"] not in (None, actor):
            raise Forbidden(f"task {task_id} is reserved for {row['reserved_for']}; claim another card")
        if guard == "one_attempt" and row["contest"] is not None:
            other = db.execute(
                "SELECT id FROM tasks WHERE contest = ? AND id != ? AND assignee = ?",
                [row["contest"], task_id, actor],
            ).fetchone()
            if other:
                raise Forbidden(
                    f"task {task_id} is an attempt of contest {row['contest']} and you made attempt "
                    f"{other[0]}; competing attempts need different agents: claim another card"
                )
        if guard == "ready":
            needs = cards.dependencies(db, [task_id])[task_id] if deps is None else cards.needs_of(deps)
            waiting = [d for d, status in needs if status != "done"]
            if waiting:
                raise Conflict(
                    f"task {task_id} waits on tasks {waiting} that are not done yet; claim one of "
                    "those, or call claim_task without task_id for a ready card"
                )

    @staticmethod
    def holder_check(row: dict, actor: str, token: int | None, doing: str) -> None:
        """Refuse anyone but the current claim holder with its current fencing token."""
        task_id = row["id"]
        if row["status"] not in ("in_progress", "blocked") or row["assignee"] is None:
            if row["status"] == "todo" and token is not None and token == row["fencing_token"] > 0:
                raise StaleToken(
                    f"your claim on task {task_id} ended (lease expired or released) and the card "
                    f"is back in todo; call claim_task with task_id={task_id} to take it again"
                )
            raise IllegalTransition(
                f"cannot {doing} task {task_id}: it is {row['status']}, not claimed"
                + ("; claim it first with claim_task" if row["status"] == "todo" else "")
            )
        if row["assignee"] != actor:
            raise NotYourClaim(
                f"task {task_id} is claimed by {row['assignee']}, not by you ({actor}); "
                "only the claim holder can do that — pick another card with claim_task"
            )
        if token is None:
            raise InvalidInput(
                f"to {doing} task {task_id} pass token= the fencing token claim_task gave you "
                "(call claim_task with this task_id again to get it back)"
            )
        if token != row["fencing_token"]:
            raise StaleToken(
                f"token {token} for task {task_id} is stale (the current claim has token "
                f"{row['fencing_token']}); your earlier claim ended, so this is refused"
            )

    # ----------------------------------------------------------------- the lease sweep

    def sweep(self, db: Database, ts: float) -> list[int]:
        """Inside a write: move every card whose lease ran out back to todo (the table's lease row)."""
        return self._return_expired(
            db, ts, [r[0] for r in db.execute(for_update(db, EXPIRED, skip=True), [ts]).fetchall()]
        )

    def swept(self, db: Database, ts: float, statements: list[tuple[str, list]]) -> list[list[dict]]:
        """Inside a write: the lease sweep, then each of `statements`' rows as the board is after it. The
        statements go with the sweep's probe (one round trip on a database server) and are read again
        only when a lease had run out."""
        expired, *got = rows_many(db, [(for_update(db, EXPIRED, skip=True), [ts]), *statements])
        if not expired:
            return got
        self._return_expired(db, ts, [r["id"] for r in expired])
        return rows_many(db, statements)

    def swept_card(self, db: Database, ts: float, task_id: int, *also: tuple[str, list]) -> tuple:
        """Inside a write: the lease sweep, then the card's row (NotFound if there is none), its dependency rows
        and the rows of each of `also`, read together (`swept`)."""
        found, deps, *more = self.swept(
            db, ts, [(for_update(db, cards.ROW), [task_id]), (cards.DEPENDENCIES.format("?"), [task_id]), *also]
        )
        if not found:
            raise cards.missing(task_id)
        return found[0], deps, *more

    def _return_expired(self, db: Database, ts: float, expired: list[int]) -> list[int]:
        for task_id in expired:
            row = cards.row(db, task_id)
            self.messages.event(
                db,
                "system",
                "status_update",
                task_id,
                f"task {task_id} is back in todo: the lease of {row['assignee']} ran out",
                row=row,
            )
            self.move(
                db,
                row,
                "todo",
                "lease",
                "system",
                ts=ts,
                note=f"lease of {row['assignee']} ran out at {iso(row['lease_expires_at'])}",
            )
        return expired

    def sweep_expired(self) -> list[int]:
        """Before a read: return cards whose lease ran out to todo, if the board can be written at once (a
        cheap read when none ran out). A read never waits for a writer: every write sweeps first."""
        ts = now()
        return self._sweep_now(ts) if self._expired(self.store.db, ts) else []

    @contextmanager
    def reading(self) -> Iterator[Database]:
        """A consistent read of the board as it is once expired leases went back to todo (sweep_expired):
        the probe for them is the read's first statement, so a read that finds none costs nothing more."""
        ts = now()
        with self.store.read() as db:
            if not self._expired(db, ts):
                yield db
                return
        self._sweep_now(ts)
        with self.store.read() as db:
            yield db

    def read_many(self, statements: list[tuple[str, list]]) -> list[list[dict]]:
        """Reads that need none of each other's answers, in one snapshot of the board as it is once expired
        leases went back to todo: with the probe for them, one round trip on a database server (read again
        after the sweep when one ran out)."""
        ts = now()
        expired, *got = self.store.read_many([(ANY_EXPIRED, [ts]), *statements])
        if not expired:
            return got
        self._sweep_now(ts)
        return self.store.read_many(statements)

    @staticmethod
    def _expired(db: Database, ts: float) -> bool:
        return db.execute(ANY_EXPIRED, [ts]).fetchone() is not None

    def _sweep_now(self, ts: float) -> list[int]:
        with self.store.try_write(scopes.SWEEP) as db:
            return [] if db is None else self.sweep(db, ts)

    @contextmanager
    def holding(
        self, actor: str, task_id: int, token: int, doing: str, running: bool = False
    ) -> Iterator[tuple[Database, dict, float, list[tuple[int, str]]]]:
        """A write transaction on a card the caller holds with its current token: yields (db, row, now, its
        dependencies with their status), read together."""
        ts = now()
        with self.store.write(scopes.agent(actor)) as db:
            row, deps = self.swept_card(db, ts, task_id)
            self.holder_check(row, actor, token, doing)
            if running and row["status"] != "in_progress":
                raise IllegalTransition(
                    f"task {task_id} is {row['status']}; resume it with update_task "
                    f"status='in_progress' before you {doing.split()[0]} it"
                )
            yield db, row, ts, cards.needs_of(deps)
