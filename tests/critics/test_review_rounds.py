"""Review rounds bound the card, not one claim of it: once its rounds are used up, no way back to todo (update_task,
a release and another agent's claim, a lease running out, a person sending it back) starts the count again, so
its next failed round goes straight to a person; only its creator or a person grants more rounds, and the card's
history names who did."""

from __future__ import annotations

import pytest
from conftest import call, call_error
from fake_llm import critique, issue
from reviewing import NO_BUILTINS, hand_in, llm_critic, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

STUBBORN = critique(
    "FAIL", 3, "still wrong", issues=[issue("major", "bug", "app.py:3", "off by one", "add one to the bound")]
)


def stubborn(fake_llm) -> ReviewConfig:
    """One model critic that fails every round; two rounds before a person."""
    fake_llm.default["correctness"] = STUBBORN
    return ReviewConfig(
        critics={**NO_BUILTINS, "llm-correctness": llm_critic(fake_llm, "correctness")},
        task_types={"code": ["correctness"]},
        max_rounds=2,
    )


async def used_up(bob, alice) -> int:
    """bob's card, failed by alice twice: in needs_human with its two rounds used up. Returns its id."""
    card = await call(bob, "create_task", title="sum the first n numbers", task_type="code")
    await hand_in(alice, card["id"])
    assert (await verdict(alice, card["id"]))["rounds"][-1]["outcome"] == "in_progress"
    claim = await call(alice, "claim_task", task_id=card["id"])  # its holder's claim: the token back
    await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="tried again")
    trail = await verdict(alice, card["id"])
    assert [(r["round"], r["outcome"]) for r in trail["rounds"]] == [(1, "in_progress"), (2, "needs_human")]
    return card["id"]


async def back_to_todo(way: str, card: int, *, alice, bob, carol, lee, board) -> object:
    """The card from needs_human back in todo and claimed again, by `way`; returns who holds it now."""
    if way == "update_task":  # its holder moves it back itself
        await call(alice, "update_task", task_id=card, status="todo")
        await call(alice, "claim_task", task_id=card)
        return alice
    if way == "send_back":  # a person sends it back to its author, granting nothing
        board.decisions.decide("lee", card, "send_back", "try once more")
        await call(alice, "claim_task", task_id=card)
        return alice
    await call(bob, "update_task", task_id=card, status="todo")  # its creator puts it back
    claim = await call(alice, "claim_task", task_id=card)
    if way == "release":  # released, then another agent claims it
        await call(alice, "release_task", task_id=card, token=claim["token"])
    else:  # the lease runs out, then another agent claims it
        with board.store.write() as db:
            db.execute("UPDATE tasks SET lease_expires_at = 1 WHERE id = ?", [card])
        assert (await call(carol, "get_task", task_id=card))["status"] == "todo"
    await call(carol, "claim_task", task_id=card)
    return carol


@pytest.mark.parametrize("way", ["update_task", "release", "lease", "send_back"])
async def test_no_way_back_to_todo_resets_the_rounds(connect, reviewer, fake_llm, board, way):
    engine = reviewer(stubborn(fake_llm))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
        connect("lee", role="lead", review=engine) as lee,
    ):
        card = await used_up(bob, alice)
        holder = await back_to_todo(way, card, alice=alice, bob=bob, carol=carol, lee=lee, board=board)
        claim = await call(holder, "claim_task", task_id=card)
        await call(holder, "complete_task", task_id=card, token=claim["token"], output="third try")
        trail = await verdict(holder, card)
        # round 3 of the card, not round 1 of a new cycle, and its failure goes to a person at once
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]][-1] == (3, "needs_human")
        task = await call(holder, "get_task", task_id=card)
        assert task["status"] == "needs_human"
        assert "review rounds were used up" in task["blocked_reason"]
        said = (await call(holder, "get_messages", box="pool", task_id=card, intent="needs_human", full=True))[
            "messages"
        ]
        assert "update_task(rounds=N)" in said[-1]["content"]


async def test_only_the_creator_or_a_person_grants_more_rounds_and_the_history_names_who(
    connect, reviewer, fake_llm, board
):
    engine = reviewer(stubborn(fake_llm))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("carol", review=engine) as carol,
        connect("lee", role="lead", review=engine) as lee,
    ):
        card = await used_up(bob, alice)
        for who in (alice, carol):  # its author, a bystander
            error = await call_error(who, "update_task", task_id=card, rounds=5)
            assert "only task" in error and "creator (bob)" in error and "may grant it more review rounds" in error
        # its creator grants two more and puts it back in one call; the history names bob
        await call(bob, "update_task", task_id=card, rounds=2, status="todo", reason="the bound moved")
        history = (await call(alice, "get_task", task_id=card))["history"]
        granted = [h for h in history if h["action"] == "granted review rounds"]
        assert len(granted) == 1 and granted[0]["actor"] == "bob"
        assert "up to round 4" in granted[0]["note"] and "the bound moved" in granted[0]["note"]
        claim = await call(alice, "claim_task", task_id=card)
        await call(alice, "complete_task", task_id=card, token=claim["token"], output="third try")
        assert (await verdict(alice, card))["rounds"][-1]["outcome"] == "in_progress"  # round 3 of 4
        said = (await call(alice, "get_messages", box="pool", task_id=card, intent="critique", full=True))["messages"]
        assert "failed review round 3 of 4" in said[-1]["content"]
        await call(alice, "complete_task", task_id=card, token=claim["token"], output="fourth try")
        trail = await verdict(alice, card)
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]][-1] == (4, "needs_human")
        # a person's send-back may grant rounds too, recorded as theirs
        board.decisions.decide("lee", card, "send_back", "one last go", rounds=1)
        history = (await call(lee, "get_task", task_id=card))["history"]
        assert [h["actor"] for h in history if h["action"] == "granted review rounds"] == ["bob", "lee"]
        claim = await call(alice, "claim_task", task_id=card)
        await call(alice, "complete_task", task_id=card, token=claim["token"], output="fifth try")
        trail = await verdict(alice, card)
        assert [(r["round"], r["outcome"]) for r in trail["rounds"]][-1] == (5, "needs_human")
