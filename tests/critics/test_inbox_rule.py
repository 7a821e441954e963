"""An inbox holds what its agent has to act on: the walkthrough of a creator whose nine cards are worked and
reviewed by another agent. Routine board events stay in the pool (and reach subscribers)."""

from __future__ import annotations

import pytest
from conftest import call
from reviewing import verdict

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

CLEAN = 'def double(x):\n    """Twice x."""\n    return 2 * x\n'
BROKEN = 'def double(x):\n    """Twice x."""\n    return x + x + 1\n'
TEST = "from calc import double\n\n\ndef test_double():\n    assert double(2) == 4\n"
ROUTINE = {"task_claim", "output.complete", "review.started", "status_update"}


async def work(bob, task_id: int, source: str) -> dict:
    claim = await call(bob, "claim_task", task_id=task_id)
    await call(
        bob,
        "complete_task",
        task_id=task_id,
        token=claim["token"],
        output="double() written",
        artifacts=[{"name": "calc.py", "kind": "code", "content": source}],
    )
    return await verdict(bob, task_id)


@pytest.mark.slow  # twelve review rounds, most in the sandbox
async def test_a_creators_inbox_holds_only_what_it_must_act_on(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        tests = {"files": [{"name": "test_calc.py", "content": TEST}]}
        cards = [
            (await call(alice, "create_task", title=f"double {n}", acceptance_tests=tests))["id"] for n in range(8)
        ]
        cards.append((await call(alice, "create_task", title="double, approved", needs_approval=True))["id"])
        for n, task_id in enumerate(cards[:8]):
            if n % 3 == 0:  # a third fail first and come back with a brief
                assert (await work(bob, task_id, BROKEN))["rounds"][-1]["verdict"] == "FAIL"
            assert (await work(bob, task_id, CLEAN))["rounds"][-1]["verdict"] == "PASS"
        waiting = await work(bob, cards[8], CLEAN)
        assert waiting["status"] == "needs_human"  # passed, and waits for a person's approval

        inbox = (await call(alice, "get_messages", unread_only=False, limit=100))["messages"]
        assert [m["intent"] for m in inbox] == ["needs_human"], inbox  # her card that needs a person, nothing else
        assert inbox[0]["task_id"] == cards[8]
        theirs = (await call(bob, "get_messages", unread_only=False, limit=100))["messages"]
        verdicts = sorted(m["intent"] for m in theirs)
        assert verdicts == sorted(["critique"] * 3 + ["approval"] * 8 + ["needs_human"]), verdicts
        assert not ROUTINE & {m["intent"] for m in inbox + theirs}

        pool = (await call(alice, "get_messages", box="pool", limit=100))["messages"]
        assert ROUTINE - {"status_update"} <= {m["intent"] for m in pool}  # the board's log is whole

        await call(alice, "subscribe", kind="intent", value="task_claim")  # who wants them follows them
        claimed = (await call(alice, "create_task", title="one more"))["id"]
        await call(bob, "claim_task", task_id=claimed)
        unread = (await call(alice, "get_messages"))["messages"]
        assert [m["intent"] for m in unread] == ["needs_human", "task_claim"]
