"""An agent's honest way out: flagging a card it cannot do as written, so that a person answers instead of the
agent submitting until the review rounds run out.

A flag moves the card to needs_human (the state machine's flag_task row) with the agent's reason as the card's
reason; no review round is used and no verdict is recorded, so it counts against nobody. The card's thread (its
creator first of all) hears it. A person's answer (board/decisions.py) closes the flag; a flag the person confirms
(the card clarified or cancelled) becomes a lesson for whoever writes cards, not for the agents that work them.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel

from . import cards
from ._sqlite_utils import Database
from .db import Store, rows
from .errors import InvalidInput
from .limits import Limits, check_text
from .machine import Machine
from .models import TaskSummary

FlagKind = Literal["contradictory_spec", "impossible", "needs_information", "out_of_scope"]
KINDS: tuple[str, ...] = get_args(FlagKind)
SPEC_LESSONS = "card-spec"  # the task type of lessons for the side that writes cards (their creators, people)


class Flag(BaseModel):
    """One flag of a card, as a person deciding it reads it."""

    id: int
    task_id: int
    agent: str
    kind: str
    reason: str
    at: float
    answer: str | None = None
    answered_by: str | None = None
    note: str | None = None


class Flags:
    def __init__(self, store: Store, machine: Machine, limits: Limits):
        self.store = store
        self.machine = machine
        self.limits = limits

    def flag(self, actor: str, task_id: int, token: int, kind: str, reason: str) -> TaskSummary:
        """The holder says the card cannot be done as written: it waits for a person with the reason."""
        reason = reason.strip()
        if not reason:
            raise InvalidInput(
                "reason is blank: say what makes the card impossible to do as written; nothing was flagged"
            )
        check_text(reason, self.limits.note, "reason")
        with self.machine.holding(actor, task_id, token, "flag") as (db, row, ts, needs):
            db.execute(
                "INSERT INTO flags (task_id, agent, kind, reason, fencing_token, at) VALUES (?, ?, ?, ?, ?, ?)",
                [task_id, actor, kind, reason, token, ts],
            )
            said = f"flagged by {actor} as {kind.replace('_', ' ')}: {reason}"
            # to the thread first, while the holder still holds it: its creator, the holder, the subscribers
            self.machine.messages.event(
                db, actor, "needs_human", task_id, f"task {task_id} {said}"[:200], reason, row=row
            )
            moved = self.machine.move(
                db, row, "needs_human", "flag_task", actor, token=token, reason=said, note=reason, ts=ts
            )
            return cards.summarize(db, moved, needs)

    @staticmethod
    def open_flag(db: Database, task_id: int) -> Flag | None:
        """The card's unanswered flag, if the card waits on a person because of one."""
        found = rows(
            db,
            "SELECT id, task_id, agent, kind, reason, at, answer, answered_by, note FROM flags "
            "WHERE task_id = ? AND answer IS NULL ORDER BY id DESC LIMIT 1",
            [task_id],
        )
        return Flag(**found[0]) if found else None

    def of_card(self, task_id: int) -> Flag | None:
        with self.store.read() as db:
            return self.open_flag(db, task_id)

    @staticmethod
    def answer(db: Database, flag: Flag, answer: str, person: str, note: str, ts: float) -> None:
        db.execute(
            "UPDATE flags SET answer = ?, answered_by = ?, answered_at = ?, note = ? WHERE id = ?",
            [answer, person, ts, note, flag.id],
        )
