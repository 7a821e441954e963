"""The card state machine: every move a card can make, who may make it, and what must hold first.

One table, read by one function (`Board.move`), which does the guarded UPDATE, the version bump, the
history row and the event. Claims, releases, completions, update_task's status changes, the lease
sweep and review verdicts all go through it, so a rule such as "who may take a card out of
needs_human" is written once, here.

Who may:
- anyone    any registered agent
- holder    the agent holding the claim, with its current fencing token
- steward   the card's holder, its creator, or an agent with an operator role (board/agents.py)
- system    the lease sweep (no tool can ask for it)
- review    the review worker's verdict (no tool can ask for it), including a job it gives up on
- person    an agent with an operator role (human/lead): a person's decision on the web board, or taking a
            card out of a review that cannot finish

A card leaves review only by its verdict or by a person: its author pushing it to needs_human, or a
bystander cancelling someone else's review, would skip the critics. The referee of competing attempts
moves no card: an attempt reaches done by passing its own review (and a person's approval when it needs
one) or by a person, never because another attempt was compared with it (Board.decide_contest).

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

from dataclasses import dataclass
from typing import Literal

Who = Literal["anyone", "holder", "steward", "system", "review", "person"]
Via = Literal["claim_task", "release_task", "update_task", "complete_task", "lease", "review", "decide"]


@dataclass(frozen=True)
class Transition:
    source: str
    target: str
    via: Via
    who: Who
    action: str  # the history row's action
    guards: tuple[str, ...] = ()


TRANSITIONS: tuple[Transition, ...] = (
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
    Transition("blocked", "in_progress", "update_task", "holder", "resumed"),
    Transition("todo", "blocked", "update_task", "steward", "blocked", ("reason",)),
    Transition("blocked", "todo", "update_task", "steward", "unblocked"),
    Transition("needs_human", "todo", "update_task", "steward", "unblocked"),
    # a review that cannot finish (no worker runs): a person takes it, and the job's verdict no longer moves it
    Transition("review", "needs_human", "update_task", "person", "escalated", ("reason",)),
    Transition("in_progress", "todo", "lease", "system", "expired"),
    Transition("review", "done", "review", "review", "reviewed"),
    Transition("review", "in_progress", "review", "review", "reviewed"),
    Transition("review", "needs_human", "review", "review", "reviewed"),
    # a person decides a card that waits on a human: pass it, send it back, or hand it to another agent
    Transition("needs_human", "done", "decide", "person", "passed by a person"),
    Transition("needs_human", "todo", "decide", "person", "sent back by a person", ("reason",)),
)

_BY_KEY = {(t.source, t.target, t.via): t for t in TRANSITIONS}


def find(source: str, target: str, via: Via) -> Transition | None:
    return _BY_KEY.get((source, target, via))


def targets(source: str, via: Via) -> list[str]:
    """Where `via` can take a card that is in `source`."""
    return [t.target for t in TRANSITIONS if t.source == source and t.via == via and t.target != source]
