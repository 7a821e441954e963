"""A person's decision on a card that waits for one (needs_human): pass it, send it back, or reassign it.

The web board's buttons end here; the move itself is a row of the state machine (board/machine.py) that
only an operator role may make.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from . import cards
from ._sqlite_utils import Database
from .commits import Commits
from .db import Store, now, rows
from .errors import Conflict, IllegalTransition, InvalidInput
from .limits import Limits, check_text
from .machine import Machine
from .merges import Merges
from .models import TaskSummary
from .review_models import Approval
from .reviews import Reviews


class Answer(BaseModel):
    """One answer a person may give a card that waits on them: what `Decisions.decide` is called with."""

    decision: str = Field(description="what decide() takes: pass, send_back, ...")
    title: str = Field(description="the words a person picks it by (the web page's button)")
    needs_note: bool = Field(description="a note saying what to change or why must come with it")


# The answers a card in needs_human offers, in the web page's order. Reassigning names an agent, which the web's
# form lists; a form in a person's client offers the two that need nothing more than a note.
WAITING_ANSWERS = (
    Answer(decision="pass", title="Pass", needs_note=False),
    Answer(decision="send_back", title="Send back", needs_note=True),
)


class Decisions:
    """A person's decisions, logged as the human lens of the review that asked for them."""

    def __init__(self, store: Store, machine: Machine, reviews: Reviews, merges: Merges, limits: Limits):
        self.store = store
        self.machine = machine
        self.reviews = reviews
        self.merges = merges
        self.limits = limits

    def answers(self, task_id: int) -> list[Answer]:
        """What a person may answer this card in their own client (an elicitation form offers exactly these):
        a card waiting on a person offers pass and send back; any other card offers nothing."""
        with self.store.read() as db:
            row = cards.row(db, task_id)
        return list(WAITING_ANSWERS) if row["status"] == "needs_human" else []

    def waiting(self, limit: int = 20) -> list[TaskSummary]:
        """The cards waiting on a person, oldest change first (the first asked is the one waiting longest)."""
        with self.store.read() as db:
            found = rows(
                db, "SELECT * FROM tasks WHERE status = 'needs_human' ORDER BY updated_at, id LIMIT ?", [limit]
            )
            return [cards.summarize(db, row) for row in found]

    def approval(self, task_id: int) -> Approval:
        """What passing this card would approve (its latest hand-in, named), for the person to confirm; a
        card that waits on no person is refused as `decide` refuses it."""
        with self.store.read() as db:
            row = cards.row(db, task_id)
            _waiting(row)
            return self._approval(db, row)

    def _approval(self, db: Database, row: dict) -> Approval:
        """`approval` of the card `row`, inside a transaction."""
        found = self.reviews.hand_ins_of(db, row, 1)
        if not found:  # nothing handed in: the claim that brought it here names what a pass approves
            return Approval(task_id=row["id"], key=f"claim-{row['fencing_token']}", handed_in=False)
        latest = found[0]
        commit = Commits.of_review(db, latest.review_id) if latest.review_id is not None else None
        return Approval(
            task_id=row["id"],
            key=latest.key,
            review_id=latest.review_id,
            round=latest.round,
            handed_in=True,
            files=[f.path for f in commit.files] if commit is not None else [a.name for a in latest.artifacts],
            commit=commit.sha if commit is not None else None,
        )

    def decide(
        self,
        actor: str,
        task_id: int,
        decision: str,
        note: str = "",
        assign_to: str | None = None,
        confirm: str | None = None,
        rounds: int = 0,
    ) -> TaskSummary:
        """A person (operator role) decides a card waiting in needs_human: `pass` it to done (or, when its work is
        a commit its repository merges by the queue, back to review into the merge queue), `send_back`
        to its author (todo, reserved for them, the note as the brief), or `reassign` it to another agent.
        The author hears it in their inbox; the decision is logged as the human lens of the card's last
        review when that review sent it here (e.g. human approval required). `confirm`: the key of the
        `approval` the person confirmed; a pass is refused when the card's latest work is no longer that.
        `rounds`: more review rounds granted with a send-back or a reassignment (without them the card's next
        failed round comes straight back to a person: rounds bound the card)."""
        if decision not in ("pass", "send_back", "reassign"):
            raise InvalidInput(f"decision {decision!r} is not one of pass, send_back, reassign")
        note = note.strip()
        check_text(note, self.limits.note, "note")
        if decision != "pass" and not note:
            raise InvalidInput(f"{decision.replace('_', ' ')} needs a note saying what to change or why")
        if not 0 <= rounds <= 20 or (rounds and decision == "pass"):
            raise InvalidInput("rounds: 0 to 20 more review rounds, with a send-back or a reassignment only")
        target = (
            self.machine.agents.registered(assign_to, "reassign needs assign_to naming a registered agent")
            if decision == "reassign"
            else None
        )
        ts = now()
        with self.store.write() as db:
            row = cards.row(db, task_id)
            _waiting(row)
            if decision == "pass" and confirm is not None:
                now_approves = self._approval(db, row)
                if confirm != now_approves.key:
                    raise Conflict(
                        f"task {task_id} moved on since this pass was confirmed: its latest work is now "
                        f"{now_approves.text}; reload the card and confirm again"
                    )
            author = row["assignee"] or row["created_by"]
            reserve = author if decision == "send_back" else target
            merging = self.merges.approved(db, row) if decision == "pass" else None
            head = {
                "pass": f"task {task_id} passed by {actor}"
                + (f"; its commit goes to the merge queue of {merging.repo}" if merging else ""),
                "send_back": f"task {task_id} sent back to {author} by {actor}",
                "reassign": f"task {task_id} reassigned to {target} by {actor}",
            }[decision]
            intent = {"pass": "approval", "send_back": "critique", "reassign": "status_update"}[decision]
            # first, while the author still holds the card: the thread (author, creator, subscribers) hears it
            self.machine.messages.event(db, actor, intent, task_id, head + (f": {note}" if note else ""), note)
            if rounds:
                row = self.reviews.grant_rounds(db, row, actor, rounds, note, ts)
            if merging is not None:
                row = self.merges.enqueue(db, row, merging, "decide", actor, ts, note or None)
            elif decision == "pass":
                row = self.machine.move(db, row, "done", "decide", actor, ts=ts, note=note or None)
            else:
                row = self.machine.move(
                    db, row, "todo", "decide", actor, ts=ts, reason=note, note=note, sets={"reserved_for": reserve}
                )
                if target and target != author:
                    self.machine.messages.event(
                        db,
                        actor,
                        "task_assignment",
                        task_id,
                        f"task {task_id} is yours: {row['title']}",
                        note,
                        recipient=target,
                    )
            self.reviews.record_person(db, task_id, actor, "PASS" if decision == "pass" else "FAIL", head, note, ts)
            return cards.summarize(db, row)


def _waiting(row: dict) -> None:
    """Only a card waiting on a person has anything to decide."""
    if row["status"] != "needs_human":
        raise IllegalTransition(
            f"task {row['id']} is {row['status']}, not needs_human: there is nothing to decide; reload the card"
        )
