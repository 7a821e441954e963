"""Review jobs are taken fairly: an agent whose reviews are slow (tests that sleep, timeouts) delays its own
reviews first, never another agent's. Two review workers; bob's ordinary review is timed quiet, then while
alice's three slow cards are queued ahead of it, in the same run."""

from __future__ import annotations

import time

import pytest
from conftest import START_TIMEOUT, call, needs_sandbox

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

SLOW = 6  # seconds each of alice's cards' tests sleep
SLEEPY = f"import time\n\n\ndef test_takes_its_time():\n    time.sleep({SLOW})\n"
QUICK = "def test_adds():\n    assert 1 + 1 == 2\n"


async def hand_in(client, title: str, tests: str) -> int:
    card = await call(
        client,
        "create_task",
        title=title,
        task_type="code",
        acceptance_tests={"files": [{"name": "test_accept.py", "content": tests}]},
    )
    claim = await call(client, "claim_task", task_id=card["id"])
    work = [{"name": "calc.py", "kind": "code", "content": "def add(a, b):\n    return a + b\n"}]
    done = await call(
        client, "complete_task", task_id=card["id"], token=claim["token"], output="add written", artifacts=work
    )
    assert done["status"] == "review", done
    return card["id"]


async def reviewed(client, task_id: int) -> dict:
    trail = await call(client, "get_review", task_id=task_id, wait_seconds=START_TIMEOUT, full=True)
    assert trail["rounds"] and trail["rounds"][-1]["status"] == "finished", trail
    return trail["rounds"][-1]


@needs_sandbox
async def test_an_agents_slow_reviews_delay_its_own_not_anothers(connect, reviewer):
    engine = reviewer()  # two worker threads
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        started = time.monotonic()
        await reviewed(bob, await hand_in(bob, "quiet review", QUICK))
        quiet = time.monotonic() - started

        slow = [await hand_in(alice, f"slow {n}", SLEEPY) for n in range(3)]  # queued first, all three
        started = time.monotonic()
        await reviewed(bob, await hand_in(bob, "review behind a slow backlog", QUICK))
        loud = time.monotonic() - started
        # first come first served would put bob behind two of alice's cards: at least SLOW seconds more
        assert loud < 2 * quiet + SLOW / 2, f"bob's review took {loud:.1f} s behind alice's, {quiet:.1f} s quiet"
        for task_id in slow:  # the flooding agent's own work still completes
            got = await reviewed(alice, task_id)
            assert got["synthesis"]["verdict"] == "PASS", got
