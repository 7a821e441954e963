"""The card state machine: every move any path makes (tools, the lease sweep, review verdicts) is a
row of board/machine.py, and each one bumps the version and writes exactly one history row."""

from __future__ import annotations

import anyio
import pytest
from conftest import call, call_error
from mcp import Client

from hiveboard.board.db import rows
from hiveboard.board.errors import Forbidden, IllegalTransition, InvalidInput
from hiveboard.board.machine import TRANSITIONS
from hiveboard.board.models import Artifact, NewTask
from hiveboard.board.review_models import Synthesis
from hiveboard.board.tasks import Board
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def review(board: Board, outcome: str, verdict: str) -> None:
    job = board.reviews.claim_job("worker", 30)
    board.reviews.begin(job, "worker", [], [], None)
    board.reviews.finish(job, "worker", Synthesis(verdict=verdict, score=5, brief="fix it"), outcome, verdict, [])


async def test_every_move_is_a_row_of_the_table_with_one_version_and_one_history_row(board):
    try:
        server = build_server(board, Identity(board.agents, "memory", agent="alice"), wants_review=lambda t: True)
        async with Client(server) as alice:
            a = (await call(alice, "create_task", title="a"))["id"]
            b = (await call(alice, "create_task", title="b"))["id"]
            token = (await call(alice, "claim_task", task_id=a))["token"]
            await call(alice, "update_task", task_id=a, token=token, status="blocked", reason="waits on b")
            await call(alice, "update_task", task_id=a, token=token, status="in_progress")
            await call(alice, "update_task", task_id=a, token=token, note="half way")
            await call(alice, "update_task", task_id=a, token=token, title="a, renamed")
            await call(alice, "update_task", task_id=a, token=token)  # renew
            await call(alice, "claim_task", task_id=a)  # claimed again by its holder
            await call(alice, "release_task", task_id=a, token=token, reason="later")
            await call(alice, "update_task", task_id=a, status="blocked", reason="parked")
            await call(alice, "update_task", task_id=a, status="todo")
            token = (await call(alice, "claim_task", task_id=a))["token"]
            await call(alice, "complete_task", task_id=a, token=token, output="v1")
            await anyio.to_thread.run_sync(review, board, "in_progress", "FAIL")
            await call(alice, "complete_task", task_id=a, token=token, output="v2")
            await anyio.to_thread.run_sync(review, board, "needs_human", "FAIL")
            await call(alice, "update_task", task_id=a, status="todo")
            token = (await call(alice, "claim_task", task_id=a))["token"]
            await call(alice, "complete_task", task_id=a, token=token, output="v3")
            await anyio.to_thread.run_sync(review, board, "done", "PASS")
            await call(alice, "claim_task", task_id=b)
            with board.store.write() as db:  # time passes: b's lease runs out
                db.execute("UPDATE tasks SET lease_expires_at = lease_expires_at - 301 WHERE id = ?", [b])
            assert (await call(alice, "get_task", task_id=b))["status"] == "todo"
            token = (await call(alice, "claim_task", task_id=b))["token"]
            await call(alice, "update_task", task_id=b, token=token, status="needs_human", reason="unclear")
            assert "only todo cards" in await call_error(alice, "claim_task", task_id=b)  # nothing written
        rules = {(t.source, t.target, t.action) for t in TRANSITIONS}
        db = board.store.db
        for task_id, version in db.execute("SELECT id, version FROM tasks").fetchall():
            history = db.execute(
                "SELECT action, from_status, to_status FROM task_history WHERE task_id = ? ORDER BY id", [task_id]
            ).fetchall()
            assert len(history) == version, (task_id, history)
            for action, source, target in history:
                if action.startswith("reviewed round"):
                    action = "reviewed"
                assert (source, target, action) in rules or (action in ("edited", "progress") and source == target), (
                    task_id,
                    action,
                    source,
                    target,
                )
        moves = {(s, t) for s, t in db.execute("SELECT from_status, to_status FROM task_history").fetchall()}
        assert {
            ("review", "in_progress"),
            ("review", "needs_human"),
            ("review", "done"),
            ("needs_human", "todo"),
            ("in_progress", "todo"),
            ("blocked", "todo"),
            ("todo", "blocked"),
        } <= moves
    finally:
        board.store.close()


def test_the_table_has_no_move_only_a_person_or_the_system_should_make_open_to_anyone():
    anyone = {(t.source, t.target) for t in TRANSITIONS if t.who == "anyone"}
    assert anyone == {(None, "todo"), ("todo", "in_progress")}  # creating a card, and claiming one
    for t in TRANSITIONS:
        if t.source == "review":  # leaving review any other way skips the critics
            assert t.who in ("review", "person"), t
        if t.target == "done":  # passing review, a person, or the holder when no review is asked for; no referee
            assert (t.via, t.who) in {("review", "review"), ("decide", "person"), ("complete_task", "holder")}, t
        if t.source in ("blocked", "needs_human") and t.target == "todo":
            assert t.who in ("holder", "steward", "person")
        if t.target in ("blocked", "needs_human") and t.via == "update_task":
            assert "reason" in t.guards


def test_only_a_person_decides_a_needs_human_card(board):
    try:
        board.agents.new_token("lee", role="human")
        board.agents.new_token("bob", role="coder")
        card = board.create("bob", NewTask(title="stuck"))
        claim = board.claim("bob", card.id)
        board.update("bob", card.id, token=claim.token, status="needs_human", reason="which way?")
        with pytest.raises(Forbidden, match="only a person"):
            board.decisions.decide("bob", card.id, "pass")  # its own holder and creator, but not a person
        with pytest.raises(InvalidInput, match="needs a note"):
            board.decisions.decide("lee", card.id, "send_back")
        assert board.decisions.decide("lee", card.id, "pass", "fine").status == "done"
        last = board.get(card.id).history[-1]
        assert (last.actor, last.action, last.from_status, last.to_status) == (
            "lee",
            "passed by a person",
            "needs_human",
            "done",
        )
    finally:
        board.store.close()


def test_the_referee_cannot_crown_an_attempt_that_did_not_pass_its_review(board):
    try:
        first = board.create("alice", NewTask(title="parse dates", attempts=2))
        attempts = [first.id, first.id + 1]
        notes = [board.get(t).history[0].note for t in attempts]
        assert notes == [f"attempt {n} of 2 of contest {first.id}" for n in (1, 2)]
        for agent, task_id in zip(("bob", "carol"), attempts):  # each escalates without handing anything in
            claim = board.claim(agent, task_id)
            board.update(agent, task_id, token=claim.token, status="needs_human", reason="unsure")
        assert [board.reviews.review_state(t) for t in attempts] == ["not passed", "not passed"]
        versions = [board.summary(t).version for t in attempts]
        with pytest.raises(IllegalTransition, match=f"task {first.id} did not pass its review"):
            board.contests.decide(first.id, first.id, "picked anyway")
        assert [board.summary(t).version for t in attempts] == versions  # nothing written
        assert board.contests.decide(first.id, None, "no attempt passed review") is True
        for task_id in attempts:
            card = board.summary(task_id)
            assert card.status == "needs_human" and card.contest_result == "no winner: no attempt passed review"
    finally:
        board.store.close()


def test_an_edit_cannot_move_a_card_only_the_machine_can(board):
    try:
        card = board.create("bob", NewTask(title="a"))
        with board.store.write() as db:
            row = db.execute("SELECT * FROM tasks WHERE id = ?", [card.id]).fetchone()
            row = dict(zip([d[0] for d in db.execute("SELECT * FROM tasks").description], row, strict=True))
            with pytest.raises(ValueError, match="only by a move"):
                board.machine.edit(db, row, "bob", "edited", {"status": "done"}, None, 0.0)
        assert board.get(card.id).status == "todo"
    finally:
        board.store.close()


def test_a_card_done_without_review_joins_the_memory_with_the_artifacts_it_was_completed_with(board):
    """The output a card adds to the shared memory as it moves to done carries excerpts of the artifacts its
    completion wrote (in the same transaction: on PostgreSQL they are not read back), and only those."""
    card = board.create("lead", NewTask(title="parse the dates"))
    claim = board.claim("dev", task_id=card.id)
    board.complete(
        "dev",
        card.id,
        claim.token,
        output="dates parse in UTC now",
        summary="UTC dates",
        artifacts=[
            Artifact(name="dates.py", kind="code", content="def parse(text):\n    return iso(text)"),
            Artifact(name="notes.md", kind="text", content="x" * 3000),
        ],
        to_status="done",
    )
    (row,) = rows(board.store.db, "SELECT text FROM memory_items WHERE source = ?", [f"task:{card.id}"])
    text = row["text"]
    assert text.startswith("UTC dates\ndates parse in UTC now\n--- dates.py (code)\ndef parse(text):")
    assert "--- notes.md (text)\n" + "x" * 2000 in text and "x" * 2001 not in text


async def test_the_counts_per_column_follow_every_move_of_a_card(board):
    """get_board's column counts and list_tasks' totals are read from the dialect's counts per status (on SQLite kept
    by triggers in task_counts, not by counting every card): after each kind of move, and a card removed, they are
    what a count of the cards gives."""

    def counted() -> dict[str, int]:
        db = board.store.db
        return {s: n for s, n in db.execute("SELECT status, count(*) FROM tasks GROUP BY status").fetchall()}

    async def agrees(client) -> None:
        view = await call(client, "get_board", top=0)  # first: it returns the cards whose lease ran out
        real = counted()
        kept = board.store.db.execute(
            f"SELECT status, n FROM ({board.store.dialect.status_counts}) AS c WHERE n <> 0"
        ).fetchall()
        assert dict(kept) == real  # what the triggers keep
        assert {c["status"]: c["count"] for c in view["columns"] if c["count"]} == real
        assert view["total"] == sum(real.values())
        assert (await call(client, "list_tasks"))["total"] == sum(real.values())
        for status in ("todo", "in_progress", "blocked", "done"):
            assert (await call(client, "list_tasks", status=status))["total"] == real.get(status, 0), status

    try:
        server = build_server(board, Identity(board.agents, "memory", agent="alice"), wants_review=lambda t: False)
        async with Client(server) as alice:
            await agrees(alice)  # an empty board
            ids = [(await call(alice, "create_task", title=f"card {n}"))["id"] for n in range(5)]
            await agrees(alice)
            tokens = {i: (await call(alice, "claim_task", task_id=i))["token"] for i in ids[:3]}
            await agrees(alice)
            await call(alice, "update_task", task_id=ids[0], token=tokens[ids[0]], status="blocked", reason="waits")
            await call(alice, "release_task", task_id=ids[1], token=tokens[ids[1]], reason="later")
            await agrees(alice)
            await call(alice, "complete_task", task_id=ids[2], token=tokens[ids[2]], output="done")
            await call(alice, "update_task", task_id=ids[1], title="renamed, not moved")
            await agrees(alice)
            assert board.claim("bob", ids[3]).claimed
            await agrees(alice)
            with board.store.write() as db:  # time passes: the claim's lease runs out, the sweep returns the card
                db.execute("UPDATE tasks SET lease_expires_at = lease_expires_at - 301 WHERE id = ?", [ids[3]])
            await agrees(alice)
            with board.store.write() as db:  # a card removed (the board has no tool for it; the counts follow)
                db.execute("DELETE FROM task_history WHERE task_id = ?", [ids[4]])
                db.execute("DELETE FROM tasks WHERE id = ?", [ids[4]])
            await agrees(alice)
    finally:
        board.store.close()
