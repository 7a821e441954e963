"""A person's answer to a card that waits for one (needs_human): pass it, send it back, reassign it, clarify it
and return it, or cancel it.

ANSWERS is the one list of them, and `offered` says which a card offers (a card an agent flagged has no work to
pass or send back; board/flags.py): the web board's buttons and any other way a person is asked (elicitation)
read them here and end in `Decisions.decide`. Each move is a row of the state machine (board/machine.py) that only
an operator role may make.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import cards
from ._sqlite_utils import Database
from .canaries import Canaries
from .commits import Commits
from .db import Store, now, rows
from .errors import Conflict, IllegalTransition, InvalidInput
from .flags import SPEC_LESSONS, Flag, Flags
from .knowledge import Knowledge
from .limits import Limits, check_text
from .machine import Machine
from .merges import Merges
from .models import TaskSummary
from .review_models import Approval
from .reviews import Reviews


@dataclass(frozen=True)
class Answer:
    """One answer a person may give a card that waits for them."""

    name: str  # what `decide` takes
    label: str  # its button
    does: str  # what it does, in a sentence
    note: bool  # whether it needs the person's note


ANSWERS: dict[str, Answer] = {
    a.name: a
    for a in (
        Answer("pass", "Pass (approve)", "approve it: the card moves to Done", False),
        Answer(
            "send_back",
            "Send back",
            "back to To do, kept for its author, your note as the brief; its next hand-in is reviewed again",
            True,
        ),
        Answer("reassign", "Reassign", "back to To do, kept for the agent you choose", True),
        Answer(
            "clarify",
            "Clarify and return",
            "your note is added to its description and it goes back to To do for the next agent",
            True,
        ),
        Answer("cancel", "Cancel", "the card ends undone (Cancelled)", True),
    )
}
FLAGGED = ("clarify", "reassign", "cancel")  # a flagged card has no work to pass or send back
WAITING = ("pass", "send_back", "reassign", "cancel")
CONFIRMED = ("clarify", "cancel")  # answers that agree the card could not be done as written


def offered(flag: Flag | None, canary: bool = False) -> list[Answer]:
    """The answers a card waiting for a person offers: a flagged card's, or any other's. A canary is never passed:
    work that passed it gamed its tests, and must not land (board/canaries.py)."""
    names = FLAGGED if flag is not None else WAITING
    return [ANSWERS[name] for name in names if not (canary and name == "pass")]


class Decisions:
    """A person's decisions, logged as the human lens of the review that asked for them."""

    def __init__(
        self,
        store: Store,
        machine: Machine,
        reviews: Reviews,
        merges: Merges,
        limits: Limits,
        flags: Flags,
        canaries: Canaries,
        knowledge: Knowledge,
    ):
        self.store = store
        self.machine = machine
        self.reviews = reviews
        self.merges = merges
        self.limits = limits
        self.flags = flags
        self.canaries = canaries
        self.knowledge = knowledge

    def answers(self, task_id: int) -> tuple[Flag | None, list[Answer]]:
        """The card's open flag (None when no agent flagged it) and the answers it offers a person."""
        with self.store.read() as db:
            row = cards.row(db, task_id)
            _waiting(row)
            flag = self.flags.open_flag(db, task_id)
            return flag, offered(flag, self.canaries.is_canary(db, task_id))

    def form_answers(self, task_id: int) -> list[Answer]:
        """What a person may answer this card in their own client (an elicitation form offers exactly these): the
        card's answers that need nothing more than a note (reassigning names an agent, which the web's form lists);
        a card that waits on no person offers nothing."""
        with self.store.read() as db:
            row = cards.row(db, task_id)
            if row["status"] != "needs_human":
                return []
            flag = self.flags.open_flag(db, task_id)
            found = offered(flag, self.canaries.is_canary(db, task_id))
        return [a for a in found if a.name != "reassign"]

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
        to its author (todo, reserved for them, the note as the brief), `reassign` it to another agent, `clarify`
        it (the note added to its description, back to todo for any agent) or `cancel` it (ANSWERS, `offered`).
        The author hears it in their inbox; the decision is logged as the human lens of the card's last
        review when that review sent it here (e.g. human approval required). `confirm`: the key of the
        `approval` the person confirmed; a pass is refused when the card's latest work is no longer that.
        `rounds`: more review rounds granted with a send-back or a reassignment (without them the card's next
        failed round comes straight back to a person: rounds bound the card)."""
        if decision not in ANSWERS:
            raise InvalidInput(f"decision {decision!r} is not one of {', '.join(ANSWERS)}")
        note = note.strip()
        check_text(note, self.limits.note, "note")
        if ANSWERS[decision].note and not note:
            raise InvalidInput(f"{decision.replace('_', ' ')} needs a note saying what to change or why")
        if not 0 <= rounds <= 20 or (rounds and decision not in ("send_back", "reassign")):
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
            flag = self.flags.open_flag(db, task_id)
            offers = offered(flag, bool(row["canary"]))
            if ANSWERS[decision] not in offers:
                raise InvalidInput(
                    f"task {task_id} does not offer {decision}: it offers {', '.join(a.name for a in offers)}; "
                    "reload the card"
                )
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
                "clarify": f"task {task_id} clarified by {actor} and back in todo",
                "cancel": f"task {task_id} cancelled by {actor}",
            }[decision]
            intent = {
                "pass": "approval",
                "send_back": "critique",
                "reassign": "status_update",
                "clarify": "status_update",
                "cancel": "status_update",
            }[decision]
            # first, while the author still holds the card: the thread (author, creator, subscribers) hears it
            self.machine.messages.event(db, actor, intent, task_id, head + (f": {note}" if note else ""), note)
            if rounds:
                row = self.reviews.grant_rounds(db, row, actor, rounds, note, ts)
            if merging is not None:
                row = self.merges.enqueue(db, row, merging, "decide", actor, ts, note or None)
            elif decision == "pass":
                row = self.machine.move(db, row, "done", "decide", actor, ts=ts, note=note or None)
            elif decision == "cancel":
                row = self.machine.move(db, row, "cancelled", "decide", actor, ts=ts, reason=note, note=note)
            elif decision == "clarify":  # the next claimer reads the answer in the card's own description
                description = (
                    row["description"] + "\n\n" if row["description"] else ""
                ) + f"Clarified by {actor}: {note}"
                row = self.machine.move(
                    db,
                    row,
                    "todo",
                    "decide",
                    actor,
                    ts=ts,
                    reason=note,
                    note=note,
                    action="clarified by a person",
                    sets={"reserved_for": None, "description": description[: self.limits.description]},
                )
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
            if flag is not None:
                self.flags.answer(db, flag, decision, actor, note, ts)
                if decision in CONFIRMED and not self.canaries.is_canary(db, task_id):
                    self._spec_lesson(db, row, flag, actor, note)
            return cards.summarize(db, row)

    def _spec_lesson(self, db: Database, row: dict, flag: Flag, person: str, note: str) -> None:
        """A flag a person confirmed: the card's spec was wrong. A lesson for whoever writes cards (their task type
        is SPEC_LESSONS), not for the agents that work this card's type, vouched for by the person."""
        self.knowledge.add(
            db,
            kind="lesson",
            text=f'Problem: the card "{row["title"]}" was {flag.kind.replace("_", " ")}: {flag.reason}\nFix: {note}',
            created_by=person,
            task_type=SPEC_LESSONS,
            task_id=row["id"],
            title=f"card spec: {flag.kind.replace('_', ' ')}",
            tags=["spec", flag.kind],
            source=f"flag:{flag.id}",
            trust="reviewed",
        )


def _waiting(row: dict) -> None:
    """Only a card waiting on a person has anything to decide."""
    if row["status"] != "needs_human":
        raise IllegalTransition(
            f"task {row['id']} is {row['status']}, not needs_human: there is nothing to decide; reload the card"
        )
