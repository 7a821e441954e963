"""Competing attempts (the PRD's debate): create_task(attempts=N) makes N cards for different agents; each
is reviewed; once all have ended a referee keeps the best — by the review results, or by a model that
sees the two best side by side, asked twice with the order swapped. Only an attempt that passed its review
can win, and the referee moves no card: an attempt that did not pass stays with a person."""

from __future__ import annotations

import re

import anyio
import pytest
from conftest import call, call_error
from fake_llm import critique, issue
from reviewing import NO_BUILTINS, llm_critic, verdict

from hiveboard.critics.config import Endpoint, HumanApproval, ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def contest_config(fake, referee: bool = False) -> ReviewConfig:
    return ReviewConfig(
        critics={**NO_BUILTINS, "llm-correctness": llm_critic(fake, "correctness")},
        task_types={"code": ["correctness"]},
        referee=Endpoint(model="referee", base_url=fake.url, api_key_env=None) if referee else None,
    )


async def attempt(client, task_id: int, output: str) -> dict:
    claim = await call(client, "claim_task", task_id=task_id)
    assert claim["claimed"], claim
    await call(client, "complete_task", task_id=task_id, token=claim["token"], output=output)
    return await verdict(client, task_id)


async def run_contest(connect, engine) -> tuple[int, int, dict, dict]:
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
    ):
        first = await call(alice, "create_task", title="parse ISO dates", attempts=2)
        a, b = first["id"], first["id"] + 1
        assert first["contest"] == a and first["title"] == "parse ISO dates (attempt 1 of 2)"
        await attempt(bob, a, "bob's version: datetime.fromisoformat")
        assert "you made attempt" in await call_error(bob, "claim_task", task_id=b)  # one attempt per agent
        await attempt(carol, b, "carol's version: a hand-written parser")
        # the referee runs after the last verdict: its decision reaches the card's creator
        told = await call(alice, "get_messages", intent="contest.decided", wait_seconds=60)
        assert told["messages"], "the contest was not decided"
        cards = [await call(alice, "get_task", task_id=t) for t in (a, b)]
        pool = await call(alice, "get_messages", box="pool", intent="contest.decided", limit=10)
    return a, b, {c["id"]: c for c in cards}, pool


async def test_the_results_decide_when_there_is_no_referee_model(connect, reviewer, fake_llm):
    fake_llm.script("correctness", critique("PASS", 9, "solid"), critique("PASS", 7, "works"))
    a, b, cards, pool = await run_contest(connect, reviewer(contest_config(fake_llm)))
    assert cards[a]["contest_result"].startswith("won: decided by the review results")
    assert cards[b]["contest_result"].startswith(f"lost to task {a}")
    assert "score 9" in cards[b]["contest_result"] and "score 7" in cards[b]["contest_result"]
    assert {m["task_id"] for m in pool["messages"]} == {a, b}  # each attempt's people are told


def prefer_carol(request: dict) -> dict:
    text = request["messages"][-1]["content"]
    first = re.search(r"## Attempt A\n(.*?)\n\n## Attempt B", text, re.S).group(1)
    return {"winner": "A" if "carol" in first else "B", "reason": "handles time zones"}


async def test_a_referee_model_that_agrees_with_itself_when_swapped_decides(connect, reviewer, fake_llm):
    fake_llm.script("correctness", critique("PASS", 9, "solid"), critique("PASS", 7, "works"))
    fake_llm.script("referee", prefer_carol, prefer_carol)
    a, b, cards, _ = await run_contest(connect, reviewer(contest_config(fake_llm, referee=True)))
    assert cards[b]["contest_result"].startswith("won: decided by the referee model, the same with the order swapped")
    assert cards[a]["contest_result"].startswith(f"lost to task {b}")
    asked = [r["body"]["messages"][-1]["content"] for r in fake_llm.calls("referee")]
    assert (
        len(asked) == 2
        and asked[0].index("bob's version") < asked[0].index("carol's version")
        and asked[1].index("carol's version") < asked[1].index("bob's version")
    )  # the same two, order swapped


async def test_a_referee_model_that_contradicts_itself_is_overruled_by_the_results(connect, reviewer, fake_llm):
    fake_llm.script("correctness", critique("PASS", 9, "solid"), critique("PASS", 7, "works"))
    fake_llm.script("referee", {"winner": "A", "reason": "first is best"}, {"winner": "A", "reason": "first is best"})
    a, b, cards, _ = await run_contest(connect, reviewer(contest_config(fake_llm, referee=True)))
    assert cards[a]["contest_result"].startswith(
        "won: decided by the review results: the referee model's two answers disagreed"
    )


async def test_an_attempt_sent_to_a_human_by_hand_still_lets_the_contest_end(connect, reviewer, fake_llm):
    fake_llm.script("correctness", critique("PASS", 8, "fine"))
    engine = reviewer(contest_config(fake_llm))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
        connect("lee", role="lead", review=engine) as lee,
    ):
        first = await call(alice, "create_task", title="parse ISO dates", attempts=2)
        a, b = first["id"], first["id"] + 1
        await attempt(bob, a, "bob's version")
        fake_llm.delay["*"] = 600  # carol's review will not finish by itself
        claim = await call(carol, "claim_task", task_id=b)
        await call(carol, "complete_task", task_id=b, token=claim["token"], output="carol's version")
        await call(lee, "update_task", task_id=b, status="needs_human", reason="a person takes it")
        told = await call(alice, "get_messages", intent="contest.decided", wait_seconds=60)
        assert told["messages"], "the contest was not decided"
        cards = {t: await call(alice, "get_task", task_id=t) for t in (a, b)}
    assert cards[a]["contest_result"].startswith("won") and cards[b]["contest_result"].startswith(f"lost to task {a}")
    assert cards[b]["status"] == "needs_human"  # never reviewed: it stays with the person, the referee closes nothing


async def test_attempts_escalated_without_any_work_have_no_winner_and_stay_with_a_person(connect, reviewer, fake_llm):
    engine = reviewer(contest_config(fake_llm))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
    ):
        first = await call(alice, "create_task", title="parse ISO dates", attempts=2)
        a, b = first["id"], first["id"] + 1
        for client, task_id in ((bob, a), (carol, b)):  # nothing handed in, nothing reviewed
            claim = await call(client, "claim_task", task_id=task_id)
            await call(
                client, "update_task", task_id=task_id, token=claim["token"], status="needs_human", reason="unsure"
            )
        told = await call(alice, "get_messages", intent="contest.decided", wait_seconds=60)
        assert told["messages"], "the contest was not decided"
        cards = {t: await call(alice, "get_task", task_id=t) for t in (a, b)}
    for card in cards.values():
        assert card["status"] == "needs_human", card  # the referee closes nothing: a person decides each
        assert card["contest_result"].startswith("no winner: no attempt passed review"), card["contest_result"]
    assert not fake_llm.calls()


async def test_the_one_attempt_that_passed_wins_and_the_other_stays_with_a_person(connect, reviewer, fake_llm):
    fake_llm.script(
        "correctness",
        critique("PASS", 8, "fine"),
        critique("FAIL", 3, "wrong", issues=[issue("major", "bug", "dates.py:3", "off by one")]),
    )
    engine = reviewer(contest_config(fake_llm))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
    ):
        first = await call(alice, "create_task", title="parse ISO dates", attempts=2)
        a, b = first["id"], first["id"] + 1
        assert (await attempt(bob, a, "bob's version"))["rounds"][-1]["outcome"] == "done"
        claim = await call(carol, "claim_task", task_id=b)
        await call(carol, "complete_task", task_id=b, token=claim["token"], output="carol's version")
        assert (await verdict(carol, b))["rounds"][-1]["outcome"] == "in_progress"
        await call(carol, "update_task", task_id=b, token=claim["token"], status="needs_human", reason="stuck")
        told = await call(alice, "get_messages", intent="contest.decided", wait_seconds=60)
        assert told["messages"], "the contest was not decided"
        cards = {t: await call(alice, "get_task", task_id=t) for t in (a, b)}
    assert cards[a]["status"] == "done" and cards[a]["contest_result"].startswith("won: decided by the review results")
    assert cards[b]["status"] == "needs_human" and cards[b]["contest_result"].startswith(f"lost to task {a}")


async def test_an_attempt_awaiting_a_persons_approval_holds_the_contest_until_they_decide(
    connect, reviewer, fake_llm, board
):
    config = contest_config(fake_llm).model_copy(update={"human_approval": HumanApproval(labels=["release"])})
    engine = reviewer(config)
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
    ):
        first = await call(alice, "create_task", title="ship 1.0", attempts=2, labels=["release"])
        a, b = first["id"], first["id"] + 1
        assert (await attempt(bob, a, "bob's version"))["rounds"][-1]["outcome"] == "needs_human"  # approval
        claim = await call(carol, "claim_task", task_id=b)
        await call(carol, "update_task", task_id=b, token=claim["token"], status="needs_human", reason="stuck")
        # every attempt has ended, but a person has yet to approve the one that passed: no decision yet
        assert await anyio.to_thread.run_sync(engine.decide_contest, a) is False
        assert not (await call(alice, "get_task", task_id=a)).get("contest_result")
        board.agents.ensure("lee", "human")
        await anyio.to_thread.run_sync(lambda: board.decisions.decide("lee", a, "pass", "approved"))
        told = await call(alice, "get_messages", intent="contest.decided", wait_seconds=60)
        assert told["messages"], "the contest was not decided"
        cards = {t: await call(alice, "get_task", task_id=t) for t in (a, b)}
    assert cards[a]["status"] == "done" and cards[a]["contest_result"].startswith("won")
    assert cards[b]["status"] == "needs_human" and cards[b]["contest_result"].startswith(f"lost to task {a}")
