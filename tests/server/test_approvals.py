"""Approvals where the person is: a card waiting on a person is asked in the person's own client by elicitation
(server/approvals.py), recorded as the web's Pass / Send back would be, and left to the web page otherwise."""

from __future__ import annotations

import anyio
import pytest
from conftest import call
from mcp_types import ElicitResult

from hiveboard.board.models import NewTask

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


async def waiting_card(connect) -> int:
    """A card alice handed in that needs a person's approval (no review on this server): in needs_human. It is
    reserved for her, so no waiting person is offered it to claim on the way."""
    async with connect("alice") as alice:
        card = await call(alice, "create_task", title="Release 2.0", needs_approval=True, assignee="alice")
        claim = await call(alice, "claim_task", task_id=card["id"])
        done = await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="tagged")
    assert done["status"] == "needs_human"
    return card["id"]


def answering(*answers: ElicitResult):
    """An elicitation callback giving these answers in turn; `asked` keeps the forms it was shown."""
    queue = list(answers)

    async def callback(context, params):
        callback.asked.append(params)
        return queue.pop(0)

    callback.asked = []
    return callback


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28 (input_required) and the session protocol
async def test_a_person_passes_a_card_from_their_client_and_the_history_says_who(connect, board, mode):
    task_id = await waiting_card(connect)
    lee = answering(ElicitResult(action="accept", content={"decision": "pass", "note": "ship it"}))
    async with connect("lee", role="human", mode=mode, elicitation_callback=lee) as client:
        answer = await call(client, "wait_for_work", wait_seconds=5)
    form = lee.asked[0]
    assert f"task {task_id}" in form.message and "Release 2.0" in form.message
    assert f"/task/{task_id}" in form.message  # where else to decide it
    choices = form.requested_schema["properties"]["decision"]["oneOf"]
    assert [(c["const"], c["title"]) for c in choices] == [
        ("pass", "Pass (approve)"),
        ("send_back", "Send back"),
        ("cancel", "Cancel"),
    ]
    assert answer["asked"] == f"task {task_id}: pass recorded as lee; it is done"
    card = board.get(task_id)
    assert card.status == "done"
    decided = card.history[-1]
    assert (decided.actor, decided.from_status, decided.to_status) == ("lee", "needs_human", "done")
    assert decided.note == "ship it"


async def test_a_send_back_from_the_client_reaches_the_author_as_the_web_s_would(connect, board):
    task_id = await waiting_card(connect)
    lee = answering(ElicitResult(action="accept", content={"decision": "send_back", "note": "bump the version"}))
    async with connect("lee", role="lead", elicitation_callback=lee) as client:
        await call(client, "wait_for_work", wait_seconds=5)
    card = board.get(task_id)
    assert (card.status, card.reserved_for, card.history[-1].actor) == ("todo", "alice", "lee")
    inbox = board.messages.inbox("alice", unread_only=True, mark_read=False, limit=5)
    assert any("sent back to alice by lee" in (m.summary or "") + m.content for m in inbox.messages), inbox.messages


async def test_a_client_without_the_capability_is_not_asked_and_the_card_waits_on_the_web(connect, board):
    task_id = await waiting_card(connect)
    async with connect("lee", role="human") as client:  # no elicitation callback: no capability declared
        answer = await call(client, "wait_for_work", wait_seconds=5)
        again = await call(client, "wait_for_work", wait_seconds=0)
    assert answer["asked"] == f"task {task_id} waits for a person: decide it on the web board (/task/{task_id})"
    assert "asked" not in again  # told once, not at every wait
    assert board.summary(task_id).status == "needs_human"
    coder = answering()  # forms are for persons: an agent without an operator role is never asked
    async with connect("bob", role="coder", elicitation_callback=coder) as client:
        await call(client, "wait_for_work", wait_seconds=0)
    assert coder.asked == [] and board.summary(task_id).status == "needs_human"


@pytest.mark.parametrize(("action", "said"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_a_declined_form_leaves_the_card_waiting_and_is_not_asked_again(connect, board, action, said):
    task_id = await waiting_card(connect)
    version = board.summary(task_id).version
    lee = answering(ElicitResult(action=action))
    async with connect("lee", role="human", elicitation_callback=lee) as client:
        answer = await call(client, "wait_for_work", wait_seconds=5)
        assert answer["asked"] == f"task {task_id}: the form was {said}; it waits on the web board (/task/{task_id})"
        again = await call(client, "wait_for_work", wait_seconds=0)
    assert len(lee.asked) == 1 and "asked" not in again
    card = board.summary(task_id)
    assert (card.status, card.version) == ("needs_human", version)


async def test_an_answer_the_card_does_not_offer_is_not_recorded(connect, board):
    task_id = await waiting_card(connect)
    lee = answering(ElicitResult(action="accept", content={"decision": "done"}))
    async with connect("lee", role="human", elicitation_callback=lee) as client:
        answer = await call(client, "wait_for_work", wait_seconds=5)
    assert "not one it offers" in answer["asked"]
    assert board.summary(task_id).status == "needs_human"


def test_the_answers_a_card_offers_come_from_the_board(board):
    card = board.create("alice", NewTask(title="t"))
    assert board.decisions.form_answers(card.id) == []  # a card in todo waits on nobody


async def test_a_waiting_person_is_asked_as_soon_as_a_card_needs_them(connect, board):
    lee = answering(ElicitResult(action="accept", content={"decision": "pass"}))
    got = {}
    async with connect("lee", role="human", elicitation_callback=lee) as client:

        async def wait():
            got["answer"] = await call(client, "wait_for_work", wait_seconds=60)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()  # lee's wait is parked on the board's notifier
            assert "answer" not in got
            task_id = await waiting_card(connect)
    assert got["answer"]["asked"] == f"task {task_id}: pass recorded as lee; it is done"
    assert board.get(task_id).history[-1].actor == "lee"


async def test_a_waiting_person_wakes_when_a_held_card_comes_to_need_them(connect, board):
    """The card is claimed before the person starts waiting: nothing readies work on the way, and the move into
    needs_human alone must wake the wait."""
    lee = answering(ElicitResult(action="accept", content={"decision": "pass"}))
    got = {}
    async with connect("alice") as alice, connect("lee", role="human", elicitation_callback=lee) as client:
        card = await call(alice, "create_task", title="Release 2.1", needs_approval=True, assignee="alice")
        claim = await call(alice, "claim_task", task_id=card["id"])

        async def wait():
            got["answer"] = await call(client, "wait_for_work", wait_seconds=20)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            done = await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="tagged")
            assert done["status"] == "needs_human"
    assert got["answer"].get("asked") == f"task {card['id']}: pass recorded as lee; it is done"


async def test_a_form_left_unanswered_leaves_the_card_to_the_web(connect, board, monkeypatch):
    from hiveboard.server import approvals

    monkeypatch.setattr(approvals, "ASK_SECONDS", 0.2)
    task_id = await waiting_card(connect)

    async def away(context, params):  # the person never answers
        await anyio.sleep_forever()

    async with connect("lee", role="human", mode="legacy", elicitation_callback=away) as client:
        answer = await call(client, "wait_for_work", wait_seconds=5)
    assert (
        answer["asked"]
        == f"task {task_id}: the form was not answered in time; it waits on the web board (/task/{task_id})"
    )
    assert board.summary(task_id).status == "needs_human"
