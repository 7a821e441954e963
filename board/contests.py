"""Competing attempts: one card asked of several agents, each attempt its own card, one winner.

The referee (critics/engine.py) compares attempts that passed their reviews; this module keeps its
decision. No card moves here: an attempt reaches done only by passing its own review (board/machine.py).
"""

from __future__ import annotations

from .db import Store, now
from .errors import IllegalTransition
from .machine import Machine
from .reviews import Reviews


class Contests:
    """The attempts of a contest and the referee's decision on them."""

    def __init__(self, store: Store, machine: Machine):
        self.store = store
        self.machine = machine

    def attempts(self, contest_id: int) -> list[dict]:
        """The attempt cards of a contest, oldest first."""
        return list(self.store.db.query("SELECT * FROM tasks WHERE contest = ? ORDER BY id", [contest_id]))

    def decide(self, contest_id: int, winner: int | None, result: str, ts: float | None = None) -> bool:
        """Record the referee's decision on every attempt and tell each attempt's people. The winner must be an
        attempt that passed its review; None: no attempt passed, and each waits for a person. No card moves:
        an attempt that did not pass stays with a person rather than reach done. False if the contest was
        decided already (another worker got there first), or is not over: an attempt is still being worked on
        or reviewed, or waits for a person's approval."""
        ts = now() if ts is None else ts
        with self.store.write() as db:
            attempts = list(db.query("SELECT * FROM tasks WHERE contest = ? ORDER BY id", [contest_id]))
            if (
                not attempts
                or any(r["contest_result"] for r in attempts)
                or any(r["status"] not in ("done", "needs_human") for r in attempts)
            ):
                return False
            states = {r["id"]: Reviews.state(db, r) for r in attempts}
            if "awaiting approval" in states.values():
                return False
            if winner is not None and states.get(winner) != "passed":
                raise IllegalTransition(
                    f"task {winner} did not pass its review, so it cannot win contest "
                    f"{contest_id}; name an attempt that passed, or none to leave every attempt "
                    "to a person"
                )
            for row in attempts:
                if winner is None:
                    verdict, head = "no winner", f"contest {contest_id}: no attempt passed review"
                else:
                    verdict = "won" if row["id"] == winner else f"lost to task {winner}"
                    head = f"contest {contest_id}: task {winner} won; task {row['id']} {verdict}"
                if row["status"] == "needs_human":
                    head += f"; task {row['id']} waits for a person (pass, send back or reassign)"
                self.machine.edit(
                    db,
                    row,
                    "review",
                    "contest decided",
                    {"contest_result": f"{verdict}: {result}"},
                    f"contest {contest_id}: {verdict}",
                    ts,
                )
                self.machine.messages.event(db, "review", "contest.decided", row["id"], head, result)
            return True
