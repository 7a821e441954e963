"""The board's work runs in two lanes (server/lanes.py): reads are answered while a write waits for the
database, and writes take their turn one at a time."""

from __future__ import annotations

import sqlite3
import threading
from functools import partial

import anyio
import pytest
from conftest import call, until

from hiveboard.board.db import WouldWait, not_waiting
from hiveboard.board.models import NewTask
from hiveboard.server import lanes

pytestmark = pytest.mark.anyio


async def test_reads_are_answered_while_a_write_waits_for_another_process(connect, board):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="Write the parser", task_type="code")
        claim = await call(alice, "claim_task", task_id=card["id"])
        lapsed = await call(alice, "create_task", title="Write the docs", task_type="docs")
        await call(bob, "claim_task", task_id=lapsed["id"])
        with board.store.write() as db:  # bob's lease ran out: a read would return the card to todo
            db.execute("UPDATE tasks SET lease_expires_at = 1 WHERE id = ?", [lapsed["id"]])
        other = sqlite3.connect(board.store.path, isolation_level=None)  # as another process would hold it
        other.execute("BEGIN IMMEDIATE")
        done: dict[str, dict] = {}

        async def complete() -> None:
            done["complete"] = await call(
                alice, "complete_task", task_id=card["id"], token=claim["token"], output="parser written"
            )

        async def publish() -> None:
            done["publish"] = await call(bob, "publish_message", intent="status_update", content="tests next")

        writes = lanes.lane_of("write")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(complete)
                await until(lambda: writes.busy, 60, "the completion to take the write lane")
                tg.start_soon(publish)
                await until(lambda: writes.waiting() == 1, 60, "the message to queue behind it")

                # the read lane is free, and a read does not wait to return bob's card: the next write does
                seen = await call(bob, "get_task", task_id=card["id"])
                board_view = await call(bob, "get_board")
                in_progress = next(c for c in board_view["columns"] if c["status"] == "in_progress")
                assert seen["status"] == "in_progress" and in_progress["count"] == 2
                assert (await call(bob, "get_task", task_id=lapsed["id"]))["status"] == "in_progress"
                assert (await call(bob, "board_stats"))["reviews"] == 0
                assert done == {}  # both writes still wait for the other connection's lock

                other.execute("ROLLBACK")
        finally:
            if other.in_transaction:
                other.execute("ROLLBACK")
            other.close()
        assert done["complete"]["status"] == "done"
        assert done["publish"]["id"] > 0
        assert (await call(bob, "get_task", task_id=lapsed["id"]))["status"] == "todo"


def write_args(tool: str, task_id: int) -> dict:
    """The arguments of the write these tests make: a claim of the card, or an edit of its title."""
    return {"task_id": task_id} if tool == "claim_task" else {"task_id": task_id, "title": "Parse it"}


def assert_written_once(board, task_id: int, tool: str, answer: dict) -> None:
    """The claim or the edit answered as made, and its card's history holds it once."""
    history = [h.action for h in board.get(task_id, history=10).history]
    if tool == "claim_task":
        assert answer["claimed"] and answer["token"] == 1
        assert history.count("claimed") == 1
    else:
        assert answer["title"] == "Parse it" and history.count("edited") == 1


@pytest.mark.parametrize("tool", ["claim_task", "update_task"])
@pytest.mark.parametrize("holder", ["thread", "process"])
async def test_a_write_that_must_wait_for_the_lock_waits_off_the_event_loop_and_writes_once(
    connect, board, holder, tool
):
    """On SQLite the board's work runs on the event loop's thread (lanes.run), which must never wait:
    with the write lock held by another thread of the server or another process, a claim (an async tool) or an
    edit (a sync one) goes to a worker thread with nothing written, reads are answered meanwhile, and once the
    lock is free it is written once."""
    assert board.store.dialect.embedded
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="Write the parser")
        held, free = threading.Event(), threading.Event()

        def hold() -> None:
            if holder == "thread":
                with board.store.write():
                    held.set()
                    free.wait(60)
                return
            other = sqlite3.connect(board.store.path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            held.set()
            free.wait(60)
            other.execute("ROLLBACK")
            other.close()

        holding = threading.Thread(target=hold)
        holding.start()
        done: dict[str, dict] = {}
        args = write_args(tool, card["id"])

        async def write() -> None:
            done["alice"] = await call(alice, tool, **args)

        try:
            await anyio.to_thread.run_sync(held.wait, 60)
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await until(lambda: lanes.lane_of("write").busy, 60, "the write to take the write lane")
                await anyio.sleep(0.2)
                seen = await call(bob, "get_task", task_id=card["id"])  # the event loop is not blocked
                assert (seen["status"], seen["title"], done) == ("todo", "Write the parser", {})
                free.set()
        finally:
            free.set()
            holding.join(60)
    assert_written_once(board, card["id"], tool, done["alice"])


def test_a_call_that_must_not_wait_writes_once_then_waits_like_any_other(board):
    """`not_waiting`: the first write raises WouldWait while the lock is held, with nothing written; once the
    call has written, a later write of it waits for the lock (running the call again would write twice)."""
    held, free = threading.Event(), threading.Event()

    def hold() -> None:
        with board.store.write():
            held.set()
            free.wait(60)

    def holding() -> threading.Thread:
        held.clear(), free.clear()
        thread = threading.Thread(target=hold)
        thread.start()
        held.wait(60)
        return thread

    with not_waiting():
        thread = holding()
        with pytest.raises(WouldWait):
            board.create("lead", NewTask(title="refused"))
        free.set(), thread.join(60)
        board.create("lead", NewTask(title="first"))  # the lock is free: written at once
        thread = holding()
        threading.Timer(0.3, free.set).start()
        board.create("lead", NewTask(title="second"))  # waits for the other thread, then writes
    thread.join(60)
    assert [t.title for t in board.list().tasks] == ["first", "second"]


async def test_turns_serve_one_request_per_caller_and_a_backlog_yields_to_others():
    gate = lanes.Turns(yield_for=60)  # long: only the others finishing hands a yielding caller on here
    started: list[str] = []
    done = {name: anyio.Event() for name in ("a1", "a2", "a3", "b1")}

    async def request(who: str, name: str) -> None:
        await gate.acquire(who)
        started.append(name)
        try:
            await done[name].wait()
        finally:
            gate.release(who)

    async with anyio.create_task_group() as tg:
        for name in ("a1", "a2", "a3"):
            tg.start_soon(request, "a", name)
        await until(lambda: gate.waiting("a") == 2, 10, "a's next two requests to wait")
        tg.start_soon(request, "b", "b1")
        await until(lambda: started == ["a1", "b1"], 10, "b served beside a, at once")
        done["a1"].set()  # a has a backlog and b is served: a's next request waits for b
        await anyio.sleep(0.05)
        assert started == ["a1", "b1"] and not gate.holds("a") and gate.holds("b")
        done["b1"].set()
        await until(lambda: started == ["a1", "b1", "a2"], 10, "a's next request once b is done")
        done["a2"].set()
        await until(lambda: started[-1] == "a3", 10, "a's last request (nobody else to yield to)")
        done["a3"].set()
    assert not gate.holds("a") and not gate.holds("b")


async def test_turns_a_cancelled_waiting_request_gives_its_kept_turn_back():
    gate = lanes.Turns(yield_for=60)
    await gate.acquire("a")
    await gate.acquire("b")
    with anyio.move_on_after(0.1):  # a's second request waits, then its client goes away
        async with anyio.create_task_group() as tg:
            tg.start_soon(gate.acquire, "a")
            await until(lambda: gate.waiting("a") == 1, 10, "a's request to wait")
            gate.release("a")  # a yields to b, keeping its turn for the waiting request
            await anyio.sleep(60)
    assert gate.waiting("a") == 0 and not gate.holds("a")
    gate.release("b")
    await gate.acquire("a")  # a's turn came back: served at once
    assert gate.holds("a")


async def test_a_call_that_outlives_its_request_neither_gives_nor_takes_a_turn():
    """An MCP task's wait runs after its request ended (server/task_ext.py): stepping aside while another request
    of the same agent is served must leave that request's turn alone, and leave no turn held afterwards."""
    gate = lanes.turns()
    stepped, request_done = anyio.Event(), anyio.Event()

    async def task_wait():
        lanes.caller.set("dev")
        lanes.detached.set(True)
        async with lanes.stepped_aside():
            assert gate.holds("dev")  # the request in service still has its turn
            stepped.set()
            await request_done.wait()

    async with anyio.create_task_group() as tg:
        async with lanes.turn("dev"):  # a request of dev, in service
            tg.start_soon(task_wait)
            await stepped.wait()
            assert gate.holds("dev")
        request_done.set()
    assert not gate.holds("dev") and gate.waiting("dev") == 0  # no turn left held by nobody


def _advisory_waiters(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]


def _row_waiters(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()[0]


@pytest.mark.backends("postgresql")
@pytest.mark.parametrize("tool", ["claim_task", "update_task"])
async def test_on_postgresql_a_write_waits_for_another_nodes_board_lock_off_the_event_loop_and_writes_once(
    connect, board, tool
):
    """On PostgreSQL a call's board work runs on a worker thread (server/lanes.py): with the board lock held alone by
    another node (as a migration or a restore holds it), a claim (an async tool) or an edit (a sync one) waits for
    it there, while the event loop goes on answering reads and ticking; once the lock is free the write is made
    once."""
    import psycopg

    from hiveboard.board.scopes import BOARD_LOCK

    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="Write the parser")
        other = psycopg.connect(board.store.path, autocommit=True)  # another node
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [BOARD_LOCK])
        done: dict[str, dict] = {}
        args = write_args(tool, card["id"])
        ticks: list[float] = []
        stop = anyio.Event()

        async def tick() -> None:
            while not stop.is_set():
                ticks.append(anyio.current_time())
                await anyio.sleep(0.005)

        async def write() -> None:
            done["alice"] = await call(alice, tool, **args)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                tg.start_soon(write)
                await until(lambda: _advisory_waiters(board.store.path) > 0, 60, "the write to wait for the lock")
                await anyio.sleep(0.3)
                async with anyio.create_task_group() as reads:  # answered while the write waits
                    for _ in range(3):
                        reads.start_soon(partial(call, bob, "get_task", task_id=card["id"]))
                seen = await call(bob, "get_task", task_id=card["id"])
                assert (seen["status"], seen["title"], done) == ("todo", "Write the parser", {})
                other.execute("ROLLBACK")
                await until(lambda: "alice" in done, 60, "the write once the lock is free")
                stop.set()
        finally:
            other.close()
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        assert max(gaps) < 0.25, max(gaps)  # the event loop was never blocked on the lock
        again = await call(alice, "get_task", task_id=card["id"])
        assert again["title"] == ("Parse it" if tool == "update_task" else "Write the parser")
    assert_written_once(board, card["id"], tool, done["alice"])


@pytest.mark.backends("postgresql")
async def test_on_postgresql_writes_to_other_cards_go_on_while_another_node_holds_a_cards_row(connect, board):
    """Row-level concurrency (board/postgres.py): another node holds one card's row (its transaction read it FOR
    UPDATE and has not committed). Claims, edits and messages about other cards go through meanwhile; an edit of the
    held card waits for the row, not for the board, and is written once when the row is free."""
    import psycopg

    async with connect("alice") as alice, connect("bob") as bob:
        held = await call(alice, "create_task", title="Held elsewhere")
        free = [await call(alice, "create_task", title=f"Free {n}") for n in range(3)]
        claimed = await call(alice, "claim_task", task_id=held["id"])
        other = psycopg.connect(board.store.path, autocommit=True)  # another node, mid-transaction on the card
        other.execute("BEGIN")
        other.execute("SELECT id FROM tasks WHERE id = %s FOR UPDATE", [held["id"]])
        done: dict[str, dict] = {}

        async def edit_held() -> None:
            done["held"] = await call(
                alice, "update_task", task_id=held["id"], token=claimed["token"], title="Parse it"
            )

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(edit_held)
                await until(lambda: _row_waiters(board.store.path) > 0, 60, "the edit to wait for the card's row")
                for card in free:  # meanwhile, other cards: each answered while the held card's edit waits
                    got = await call(bob, "claim_task", task_id=card["id"])
                    assert got["claimed"] is True
                    await call(bob, "update_task", task_id=card["id"], token=got["token"], note="on it")
                await call(bob, "publish_message", intent="note", content="working", recipient="alice")
                assert done == {}
                other.execute("ROLLBACK")
                await until(lambda: "held" in done, 60, "the edit once the row is free")
        finally:
            other.close()
        again = await call(alice, "get_task", task_id=held["id"])
        assert again["title"] == "Parse it"
    assert_written_once(board, held["id"], "update_task", done["held"])
