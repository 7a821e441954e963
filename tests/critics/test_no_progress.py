"""Rounds that stop when they stop helping (issue 51): a FAIL round that resolved none of the round before's
blocking findings sends the card to a person at once ("no progress in round N") instead of spending the rounds
left; the brief says which findings are repeated. A finding is the same by its lens, category and place without
the line, not by its words."""

from __future__ import annotations

import pytest
from conftest import call
from fake_llm import critique, issue
from reviewing import NO_BUILTINS, hand_in, llm_critic, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def config(fake_llm) -> ReviewConfig:
    return ReviewConfig(
        critics={**NO_BUILTINS, "llm-correctness": llm_critic(fake_llm, "correctness")},
        task_types={"code": ["correctness"]},
        max_rounds=5,
    )


async def again(alice, card: int, output: str) -> dict:
    claim = await call(alice, "claim_task", task_id=card)
    await call(alice, "complete_task", task_id=card, token=claim["token"], output=output)
    return await verdict(alice, card)


async def test_a_round_that_resolves_nothing_goes_to_a_person_at_once(connect, reviewer, fake_llm):
    # the same finding each round, moved down a line and reworded, as a model rephrases it
    fake_llm.script(
        "correctness",
        critique("FAIL", 3, "wrong", issues=[issue("major", "Off-by-one", "app.py:3", "loop stops early", "fix")]),
        critique("FAIL", 3, "still", issues=[issue("major", "off-by-one", "app.py:5", "the bound is one short", "+1")]),
    )
    engine = reviewer(config(fake_llm))
    async with connect("bob") as bob, connect("alice", review=engine) as alice:
        card = (await call(bob, "create_task", title="sum the first n numbers"))["id"]
        await hand_in(alice, card, output="first try")
        assert (await verdict(alice, card))["rounds"][-1]["outcome"] == "in_progress"
        trail = await again(alice, card, "second try, same bug")
        # round 2 of 5: the three rounds left are not spent on the same finding
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]] == [(1, "in_progress"), (2, "needs_human")]
        task = await call(bob, "get_task", task_id=card)
        assert task["status"] == "needs_human" and "no progress in round 2" in task["blocked_reason"]
        assert "(repeated: raised in round 1 too)" in trail["rounds"][-1]["synthesis"]["brief"]
        assert "repeated" not in trail["rounds"][0]["synthesis"]["brief"]


async def test_a_round_that_resolves_a_finding_goes_on(connect, reviewer, fake_llm):
    fake_llm.script(
        "correctness",
        critique(
            "FAIL",
            3,
            "wrong",
            issues=[
                issue("major", "off-by-one", "app.py:3", "loop stops early", "fix"),
                issue("major", "sql-injection", "db.py:9", "query built from input", "bind it"),
            ],
        ),
        # the injection is fixed; a new finding is no reason to stop either
        critique("FAIL", 4, "better", issues=[issue("major", "off-by-one", "app.py:4", "loop stops early", "fix")]),
    )
    engine = reviewer(config(fake_llm))
    async with connect("bob") as bob, connect("alice", review=engine) as alice:
        card = (await call(bob, "create_task", title="sum the first n numbers"))["id"]
        await hand_in(alice, card, output="first try")
        await verdict(alice, card)
        trail = await again(alice, card, "second try")
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]] == [(1, "in_progress"), (2, "in_progress")]
        brief = trail["rounds"][-1]["synthesis"]["brief"]
        assert "(repeated: raised in round 1 too)" in brief  # the one still open is marked
