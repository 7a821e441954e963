"""An agent's honest way out (issue 51): flag_task moves a card it cannot do as written to a person, with its
reason shown first, no review round used and nothing held against it; the card's creator is told. A person's
answers (clarify and return, cancel, reassign) are one list in the board, which the web board renders."""

from __future__ import annotations

import json

import pytest
from conftest import call, call_error

from hiveboard.board.errors import InvalidInput
from hiveboard.server.web.app import card_page
from hiveboard.server.web.pages import Viewer

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

REASON = "the criteria ask for a sorted result and also for the input order kept; both cannot hold"


async def flagged_card(carol, alice, title: str = "sort the rows") -> int:
    card = await call(
        carol,
        "create_task",
        title=title,
        acceptance_criteria=["rows come back sorted by name", "rows come back in the order given"],
    )
    claim = await call(alice, "claim_task", task_id=card["id"])
    assert "flag_task" in claim["message"]  # the claim answer tells the agent the way out exists
    flagged = await call(
        alice, "flag_task", task_id=card["id"], token=claim["token"], reason=REASON, kind="contradictory_spec"
    )
    assert flagged["status"] == "needs_human"
    return card["id"]


async def test_a_flagged_card_waits_for_a_person_with_the_reason_no_round_spent_creator_told(connect, board):
    async with connect("carol") as carol, connect("alice") as alice, connect("lee", role="lead") as lee:
        card = await flagged_card(carol, alice)
        task = await call(alice, "get_task", task_id=card)
        assert task["status"] == "needs_human" and REASON in task["blocked_reason"]
        assert "contradictory spec" in task["blocked_reason"]
        assert task["history"][-1]["action"] == "flagged"
        # no review round was used, and the agent's record holds no failure
        assert (await call(alice, "get_review", task_id=card, full=True))["rounds"] == []
        stats = await call(lee, "board_stats")
        mine = next(a for a in stats["honesty"] if a["agent"] == "alice")
        assert (mine["flags"], mine["fails"], mine["passes"], mine["canaries_seen"]) == (1, 0, 0, 0)
        assert stats["reviews"] == 0
        # the creator is told, with the reason
        inbox = await call(carol, "get_messages", full=True)
        told = [m for m in inbox["messages"] if m["task_id"] == card and m["intent"] == "needs_human"]
        assert told and REASON in told[0]["content"], inbox
        # only the holder, with its token, may flag
        await call(carol, "update_task", task_id=card, status="todo")
        claim = await call(alice, "claim_task", task_id=card)
        said = await call_error(carol, "flag_task", task_id=card, token=claim["token"], reason="no", kind="impossible")
        assert "claimed by alice" in said
        said = await call_error(alice, "flag_task", task_id=card, token=claim["token"], reason="x", kind="bored")
        assert "kind" in said
        # a person sees the reason first, then the answers a flagged card offers (no work to pass)
        await call(alice, "flag_task", task_id=card, token=claim["token"], reason=REASON, kind="contradictory_spec")
        page = card_page(board, card, Viewer("lee", "csrf", False))
        assert page.index("Why it waits") < page.index(REASON) < page.index('value="clarify"')
        assert 'value="cancel"' in page and 'value="reassign"' in page and 'value="pass"' not in page


async def test_a_person_answers_a_flag_each_way(connect, board):
    async with (
        connect("carol") as carol,
        connect("alice") as alice,
        connect("bob") as bob,
        connect("lee", role="lead") as lee,
    ):
        clarified = await flagged_card(carol, alice, "sort the rows, clarified")
        cancelled = await flagged_card(carol, alice, "sort the rows, cancelled")
        reassigned = await flagged_card(carol, alice, "sort the rows, reassigned")
        with pytest.raises(InvalidInput, match="does not offer pass"):
            board.decisions.decide("lee", clarified, "pass")
        # clarify: the person's note is added to the card for whoever claims it next, and it is back in todo
        board.decisions.decide("lee", clarified, "clarify", "keep the input order; ignore the sorting criterion")
        task = await call(bob, "get_task", task_id=clarified)
        assert task["status"] == "todo" and task.get("reserved_for") is None
        assert task["description"].endswith("Clarified by lee: keep the input order; ignore the sorting criterion")
        assert (await call(bob, "claim_task", task_id=clarified))["claimed"]
        # cancel: the card ends undone
        board.decisions.decide("lee", cancelled, "cancel", "the spec is wrong; a new card follows")
        assert (await call(alice, "get_task", task_id=cancelled))["status"] == "cancelled"
        assert "cancelled" in json.dumps(await call(lee, "get_board"))
        # reassign: back to todo, kept for the agent the person chose
        board.decisions.decide("lee", reassigned, "reassign", "bob knows this table", assign_to="bob")
        task = await call(alice, "get_task", task_id=reassigned)
        assert (task["status"], task["reserved_for"]) == ("todo", "bob")
        # the two flags the person confirmed are lessons for whoever writes cards, vouched for by the person
        spec = [i for i in board.knowledge.page(0, 1000) if i.kind == "lesson"]
        assert sorted(i.task_id for i in spec) == sorted([clarified, cancelled])
        assert {(i.task_type, i.created_by, i.trust) for i in spec} == {("card-spec", "lee", "reviewed")}
        assert REASON in spec[0].text
        # not handed to the agents who work cards of the flagged card's type
        card = await call(carol, "create_task", title="sort the rows by name", task_type="code")
        claim = await call(bob, "claim_task", task_id=card["id"])
        assert not [h for h in claim["lessons"] if h["kind"] == "lesson"]
