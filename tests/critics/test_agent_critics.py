"""Agent critics: a review request goes to the `critic` role; agents submit critiques through MCP."""

from __future__ import annotations

import pytest
from conftest import START_TIMEOUT, call, call_error
from reviewing import NO_BUILTINS, critic, hand_in, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


async def requested(critic_client) -> int:
    """Wait for the review request (sent once the round's lenses are open); its review id."""
    request = (await call(critic_client, "get_messages", intent="review.request", wait_seconds=START_TIMEOUT))[
        "messages"
    ]
    assert request, "no review request arrived"
    return int(request[0]["summary"].split()[1].rstrip(":"))


def agents_config(deadline: float, *lenses: str) -> ReviewConfig:
    return ReviewConfig(critics=NO_BUILTINS, task_types={"code": list(lenses)}, agent_deadline=deadline)


async def test_an_agent_critic_takes_a_lens_through_the_pool_and_its_issues_count(connect, reviewer):
    engine = reviewer(agents_config(60, "correctness", "clarity"))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", role="critic", review=engine) as bob,
        connect("carol", review=engine) as carol,
        connect("dave", role="critic", review=engine) as dave,
    ):
        card = await hand_in(alice, title="parse dates", output="wrote parse_date")
        request = (await call(bob, "get_messages", intent="review.request", wait_seconds=START_TIMEOUT, full=True))[
            "messages"
        ]
        assert request and request[0]["sender"] == "review"
        meta = request[0]["metadata"]  # machine-readable: no need to parse the prose
        assert (
            meta["task_id"] == card["id"]
            and meta["round"] == 1
            and sorted(meta["lenses"]) == ["clarity", "correctness"]
        )
        assert not (await call(carol, "get_messages", intent="review.request"))["messages"]  # not a critic
        trail = await call(bob, "get_review", task_id=card["id"], full=True)
        review_id = trail["rounds"][0]["review_id"]
        assert (
            trail["rounds"][0]["open_lenses"] == ["clarity", "correctness"]
            and f"review_id={review_id}" in request[0]["content"]
        )

        # only critics the operator named may critique, and a lens must be open
        for outsider in (alice, carol):
            assert "only agents the operator gave the critic role" in await call_error(
                outsider,
                "submit_critique",
                review_id=review_id,
                lens="correctness",
                verdict="PASS",
                score=9,
                summary="great",
            )
        assert "open lenses: clarity, correctness" in await call_error(
            bob, "submit_critique", review_id=review_id, lens="poetry", verdict="PASS", score=9, summary="x"
        )
        record = await call(
            bob,
            "submit_critique",
            review_id=review_id,
            lens="correctness",
            verdict="FAIL",
            score=4,
            summary="misses time zones",
            issues=[
                {
                    "severity": "major",
                    "category": "timezone",
                    "location": "dates.py:12",
                    "description": "naive datetimes are compared with aware ones",
                    "suggestion": "parse with tzinfo=UTC",
                }
            ],
        )
        assert record["submitted_by"] == "bob" and record["issues"][0]["ref"] == "r1:agent:correctness#1"
        assert "already reviewed by bob" in await call_error(
            dave, "submit_critique", review_id=review_id, lens="correctness", verdict="PASS", score=9, summary="ok"
        )
        await call(
            dave, "submit_critique", review_id=review_id, lens="clarity", verdict="PASS", score=9, summary="clear"
        )  # the last open lens: the review goes on at once

        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL" and round1["synthesis"]["decisive"] == ["agent:correctness"]
        brief = (await call(alice, "get_messages", intent="critique", full=True))["messages"][0]["content"]
        assert "naive datetimes" in brief
        assert "is finished, not taking critiques" in await call_error(
            bob, "submit_critique", review_id=review_id, lens="correctness", verdict="PASS", score=9, summary="late"
        )
        # the request was withdrawn from the critics' inboxes when the review moved on; the pool keeps it
        assert not (await call(dave, "get_messages", intent="review.request", unread_only=False))["messages"]
        assert (await call(dave, "get_messages", box="pool", intent="review.request"))["messages"]


async def test_lenses_no_agent_takes_are_recorded_as_missed_at_the_deadline(connect, reviewer):
    engine = reviewer(agents_config(3.0, "correctness", "clarity"))
    async with connect("alice", review=engine) as alice, connect("bob", role="critic", review=engine) as bob:
        card = await hand_in(alice)
        review_id = await requested(bob)
        await call(
            bob, "submit_critique", review_id=review_id, lens="clarity", verdict="PASS", score=8, summary="reads well"
        )
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        missed = critic(round1, "agent:correctness")
        assert missed["status"] == "missed" and "before the deadline" in missed["error"]
        assert round1["synthesis"]["lenses_ran"] == ["clarity"]
        assert round1["synthesis"]["lenses_failed"] == ["correctness"]
        assert round1["outcome"] == "done"
        error = await call_error(
            bob, "submit_critique", review_id=review_id, lens="correctness", verdict="PASS", score=8, summary="too late"
        )
        assert "finished" in error and "get_review" in error


async def test_without_critic_agents_nobody_is_asked_and_nothing_waits(connect, reviewer):
    engine = reviewer(agents_config(600, "correctness"))
    async with connect("alice", review=engine) as alice:
        card = await hand_in(alice)
        round1 = (await verdict(alice, card["id"], timeout=120))["rounds"][0]  # well before the 600 s deadline
        assert round1["critiques"] == [] and round1.get("agent_deadline") is None


async def test_a_running_rounds_critiques_stay_sealed_and_agents_judge_only_their_own_issues(connect, reviewer, board):
    engine = reviewer(agents_config(60, "correctness", "clarity"))
    async with connect("alice", review=engine) as alice, connect("bob", role="critic", review=engine) as bob:
        card = await hand_in(alice)
        review_id = await requested(bob)
        await call(
            bob,
            "submit_critique",
            review_id=review_id,
            lens="correctness",
            verdict="FAIL",
            score=3,
            summary="broken",
            issues=[{"severity": "major", "category": "bug", "description": "off by one"}],
        )
        running = (await call(alice, "get_review", task_id=card["id"], full=True))["rounds"][0]
        sealed = critic(running, "agent:correctness")
        assert sealed["status"] == "ok" and sealed["issues"] == [] and sealed.get("verdict") is None
        await call(bob, "submit_critique", review_id=review_id, lens="clarity", verdict="PASS", score=9, summary="ok")
        assert (await verdict(alice, card["id"]))["rounds"][0]["outcome"] == "in_progress"

        await hand_in(alice, card["id"], output="fixed the off-by-one")
        review_id = await requested(bob)  # round 2's request: its lenses are open
        assert review_id == (await call(bob, "get_review", task_id=card["id"], full=True))["rounds"][1]["review_id"]
        await call(bob, "submit_critique", review_id=review_id, lens="clarity", verdict="PASS", score=9, summary="ok")
        record = await call(
            bob,
            "submit_critique",
            review_id=review_id,
            lens="correctness",
            verdict="PASS",
            score=9,
            summary="fixed",
            resolutions=[
                {"ref": "r1:agent:correctness#1", "status": "resolved"},
                {"ref": "r1:bandit#1", "status": "resolved"},
                {"ref": "made-up", "status": "resolved"},
            ],
        )
        assert [r["ref"] for r in record["resolutions"]] == ["r1:agent:correctness#1"]
        assert (await verdict(alice, card["id"]))["rounds"][1]["outcome"] == "done"
        stats = await call(alice, "board_stats")
        assert (stats["issues_followed_up"], stats["critique_success_rate"]) == (1, 1.0)


async def test_critics_are_named_by_the_operator_and_never_review_their_own_cards(connect, reviewer, board):
    engine = reviewer(agents_config(60, "correctness"))
    async with connect(None) as anyone:
        assert "granted by the operator" in await call_error(anyone, "whoami", name="sneaky", role="critic")
        assert "reserved" in await call_error(anyone, "whoami", name="review")
    async with (
        connect("erin", role="critic", review=engine) as erin,
        connect("bob", role="critic", review=engine) as bob,
    ):
        card = await hand_in(erin, title="erin's own card")
        request = (await call(bob, "get_messages", intent="review.request", wait_seconds=10))["messages"]
        review_id = request[0]["metadata"]["review_id"]
        assert "which you did" in await call_error(
            erin,
            "submit_critique",
            review_id=review_id,
            lens="correctness",
            verdict="PASS",
            score=10,
            summary="mine is perfect",
        )
        await call(
            bob, "submit_critique", review_id=review_id, lens="correctness", verdict="PASS", score=8, summary="fine"
        )
        assert (await verdict(erin, card["id"]))["rounds"][0]["verdict"] == "PASS"


async def test_an_idle_critic_is_not_asked_and_nothing_waits_for_it(connect, reviewer, board):
    engine = reviewer(agents_config(600, "correctness"))
    async with connect("alice", review=engine) as alice, connect("idle", role="critic", review=engine):
        with board.store.write() as db:  # time passes: the critic's last call is long ago
            db.execute("UPDATE agents SET last_seen_at = last_seen_at - 3600 WHERE name = 'idle'")
        card = await hand_in(alice)
        round1 = (await verdict(alice, card["id"], timeout=60))["rounds"][0]  # not the 600 s agent deadline
    assert round1["open_lenses"] == [] and not [c for c in round1["critiques"] if c["backend"] == "agent"]
