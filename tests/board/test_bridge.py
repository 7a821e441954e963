"""Synchronous board code on the event loop (board/bridge.py): a call's waits go to the loop, which serves others
meanwhile; its context, errors and per-call state are its own; on PostgreSQL each bridged call has its own
connection, and a write waiting for another's lock waits on the loop without blocking it."""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar

import anyio
import pytest

from hiveboard.board import bridge
from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board
from hiveboard.server import lanes

pytestmark = pytest.mark.anyio

who: ContextVar[str] = ContextVar("who", default="nobody")


async def ticking(ticks: list[float], stop: anyio.Event) -> None:
    """A coroutine that notes the time every 5 ms: gaps show when the event loop was blocked."""
    while not stop.is_set():
        ticks.append(time.perf_counter())
        await anyio.sleep(0.005)


def longest_gap(ticks: list[float]) -> float:
    return max((b - a for a, b in zip(ticks, ticks[1:])), default=0.0)


async def test_a_bridged_call_waits_on_the_loop_which_serves_others_meanwhile():
    ticks: list[float] = []
    stop = anyio.Event()

    def board_work(n: int) -> str:
        assert bridge.bridged()
        for _ in range(n):
            bridge.wait_for(anyio.sleep(0.02))  # as a round trip to a database server is waited for
        return f"{who.get()} waited {n} times"

    who.set("alice")
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticking, ticks, stop)
        answer = await bridge.run(board_work, 10)
        stop.set()
    assert answer == "alice waited 10 times"  # the caller's context variables, its arguments, its result
    assert len(ticks) >= 20  # the loop went on ticking through the 0.2 s of waits
    assert longest_gap(ticks) < 0.1
    assert not bridge.bridged()  # outside a bridged call


async def test_errors_raise_at_the_caller_and_at_the_wait_and_context_changes_stay_inside():
    class Refused(Exception):
        pass

    def failing() -> None:
        who.set("changed inside")
        raise Refused("nothing was written")

    who.set("outside")
    with pytest.raises(Refused, match="nothing was written"):
        await bridge.run(failing)
    assert who.get() == "outside"

    async def fails_later() -> None:
        await anyio.sleep(0)
        raise Refused("the wait failed")

    def catches() -> str:
        try:
            bridge.wait_for(fails_later())
        except Refused as exc:  # raised where the call waited, which may handle it
            return f"handled: {exc}"
        return "not raised"

    assert await bridge.run(catches) == "handled: the wait failed"
    with pytest.raises(RuntimeError, match="outside a bridged call"):
        bridge.wait_for(anyio.Event())


async def test_each_bridged_call_has_its_own_local_state_apart_from_its_threads():
    local = bridge.Local()
    local.name = "the loop's thread"
    seen: dict[str, list[str]] = {}

    def call(name: str) -> None:
        assert getattr(local, "name", None) is None  # a new call starts with nothing
        local.name = name
        for _ in range(3):
            bridge.wait_for(anyio.sleep(0.01))  # the other call runs meanwhile and sets its own
            seen.setdefault(name, []).append(local.name)

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(bridge.run, call, name)
    assert seen == {"a": ["a"] * 3, "b": ["b"] * 3, "c": ["c"] * 3}
    assert local.name == "the loop's thread"
    other: list[str | None] = []
    t = threading.Thread(target=lambda: other.append(getattr(local, "name", None)))
    t.start()
    t.join()
    assert other == [None]  # and apart from other threads', as threading.local


async def test_a_cancelled_caller_does_not_cut_a_begun_call_short():
    done: list[str] = []

    def work() -> None:
        bridge.wait_for(anyio.sleep(0.1))
        done.append("finished")

    with anyio.move_on_after(0.02):
        await lanes.on_loop(work)
    assert done == ["finished"]  # as on a worker thread, which runs on to its end


@pytest.mark.backends("postgresql")
async def test_on_postgresql_bridged_calls_have_their_own_connections_and_wait_on_the_loop(store_target):
    board = Board(Store(store_target, pool=4), lease_seconds=300)
    try:
        first = board.create("lead", NewTask(title="one", task_type="code")).id
        ticks: list[float] = []
        stop = anyio.Event()
        order: list[str] = []

        def slow_read() -> None:
            board.store.db.execute("SELECT pg_sleep(0.3)").fetchone()  # a long round trip
            order.append("slow read")

        def quick_read() -> None:
            assert board.get(first).title == "one"
            order.append("quick read")

        def holding_write() -> None:
            with board.store.write() as db:  # holds the board's write lock for 0.3 s
                db.execute("SELECT pg_sleep(0.3)").fetchone()
            order.append("held write")

        def waiting_write() -> None:
            board.create("lead", NewTask(title="two", task_type="code"))  # waits for that lock
            order.append("waiting write")

        async def after(delay: float, fn) -> None:
            await anyio.sleep(delay)
            await lanes.on_loop(fn)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticking, ticks, stop)
            async with anyio.create_task_group() as calls:
                calls.start_soon(lanes.on_loop, slow_read)
                calls.start_soon(after, 0.05, quick_read)
                calls.start_soon(after, 0.05, holding_write)
                calls.start_soon(after, 0.1, waiting_write)
            stop.set()
        took = time.perf_counter() - started
        # the quick read did not wait for the slow one, nor the loop for either; the second write waited for
        # the first's lock on the loop, on a connection of its own
        assert order.index("quick read") < order.index("slow read")
        assert order.index("held write") < order.index("waiting write")
        assert took < 0.9, took  # one after the other would take at least 0.6 s of sleeps plus the rest
        assert longest_gap(ticks) < 0.1, longest_gap(ticks)
        assert sorted(t.title for t in board.list().tasks) == ["one", "two"]
        assert board.store._opened <= 4  # every call handed its connection back to the pool
        idle = len(board.store._idle)
        assert idle >= 2  # at least two calls were in flight at once, each with its own connection
    finally:
        board.store.close()


def test_round_trips_go_straight_to_the_loop_while_most_outlast_the_budget_one_in_a_window_still_tried():
    from hiveboard.board.postgres import InPlace

    policy = InPlace(budget=0.001, window=8)
    assert all(policy.tried() for _ in range(3))  # nothing outlasted yet: in place
    for _ in range(8):
        policy.note(True)  # the database answers slowly (far away, or busy)
    tried = [policy.tried() for _ in range(16)]
    assert tried == ([False] * 7 + [True]) * 2  # to the loop, a probe in place once a window
    for _ in range(5):
        policy.note(False)  # it answers quickly again: five of the last eight within the budget
    assert all(policy.tried() for _ in range(3))


@pytest.mark.backends("postgresql")
async def test_on_postgresql_a_round_trip_is_waited_for_in_place_only_up_to_the_budget(store_target, monkeypatch):
    """A bridged call first waits for its round trip in place: a quick one ends there, one that outlasts the
    budget is waited for on the loop, which goes on serving others; the loop is held up for the budget at most."""
    from hiveboard.board import postgres

    policy = postgres.InPlace(budget=0.02, window=1000)
    monkeypatch.setattr(postgres, "IN_PLACE", policy)
    board = Board(Store(store_target), lease_seconds=300)
    try:
        first = board.create("lead", NewTask(title="one", task_type="code")).id
        ticks: list[float] = []
        stop = anyio.Event()

        def quick_reads() -> None:
            for _ in range(20):
                assert board.get(first).title == "one"

        def slow_read() -> None:
            board.store.db.execute("SELECT pg_sleep(0.3)").fetchone()

        await lanes.on_loop(quick_reads)
        quick = list(policy._failed)
        assert quick and quick.count(False) > len(quick) / 2  # answered within 20 ms, in place
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticking, ticks, stop)
            await lanes.on_loop(slow_read)
            stop.set()
        assert policy._failed[-1]  # the slow one outlasted the budget and went on on the loop
        assert len(ticks) >= 20 and longest_gap(ticks) < 0.1, longest_gap(ticks)
    finally:
        board.store.close()


@pytest.mark.backends("postgresql")
async def test_on_postgresql_a_bridged_call_waits_for_a_pooled_connection_on_the_loop(store_target):
    """A node of one connection: while one bridged call holds it, another that needs one (here in the lease sweep's
    `try_write`, which waits for the database in place once it has its connection) waits for it on the event
    loop; blocking the loop's thread for it would never let the holder finish and hand it back."""
    board = Board(Store(store_target, pool=1, pool_wait=20), lease_seconds=300)
    try:
        first = board.create("lead", NewTask(title="one", task_type="code")).id
        board.store.release()  # this thread's connection, back to the pool of one
        order: list[str] = []

        def holder() -> None:
            board.store.db.execute("SELECT pg_sleep(0.3)").fetchone()
            order.append("holder")

        def writer() -> None:
            with board.store.try_write() as db:
                assert db is not None
                db.execute("UPDATE tasks SET title = 'one, edited' WHERE id = ?", [first])
            order.append("writer")

        async def later(fn) -> None:
            await anyio.sleep(0.05)
            await lanes.on_loop(fn)

        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lanes.on_loop, holder)
                tg.start_soon(later, writer)
        assert order == ["holder", "writer"]
        assert board.get(first).title == "one, edited"
        assert board.store._opened == 1
    finally:
        board.store.close()


@pytest.mark.backends("postgresql")
def test_on_postgresql_a_write_that_must_not_wait_tries_the_lock_with_its_first_reads(store_target, monkeypatch):
    """A write of a call that must not wait (`not_waiting`) tries the write lock in the round trip of its first
    statements when they only read (a round trip fewer than a try of its own); when they write, the try goes
    alone first. Found held, the lock refuses the write (`WouldWait`) before anything was written, even when the
    body ignores the refusal; found free, the write is made."""
    import psycopg

    from hiveboard.board.db import WouldWait, not_waiting
    from hiveboard.board.postgres import TRYING, WRITE_LOCK, PgDatabase

    store = Store(store_target)
    with psycopg.connect(store_target, autocommit=True) as setup:
        setup.execute("CREATE TABLE lazy_try (x integer)")
    trips: list[list[str]] = []
    real = PgDatabase._pipelined

    def recorded(self, statements):
        trips.append([sql for sql, _ in statements])
        return real(self, statements)

    monkeypatch.setattr(PgDatabase, "_pipelined", recorded)

    def write(x: int, reads_first: bool, ignore_refusal: bool = False) -> None:
        with not_waiting(), store.write() as db:
            if not reads_first:
                store.dialect.send(db, "INSERT INTO lazy_try (x) VALUES (?)", [x])
            try:
                db.execute("SELECT count(*) FROM lazy_try").fetchone()
            except WouldWait:
                if not ignore_refusal:
                    raise
            if reads_first:
                store.dialect.send(db, "INSERT INTO lazy_try (x) VALUES (?)", [x])

    def written() -> list[int]:
        return [r[0] for r in store.db.execute("SELECT x FROM lazy_try ORDER BY x").fetchall()]

    write(1, reads_first=True)
    assert trips[0][:2] == ["BEGIN", trips[0][1]] and trips[0][1].startswith(TRYING)
    assert trips[0][2].startswith("SELECT count(*)")  # the try travelled with the read: one round trip
    trips.clear()
    write(2, reads_first=False)
    assert len(trips[0]) == 2 and trips[0][1].startswith(TRYING)  # the try alone first: the write goes after it
    assert [sql.split()[0] for sql in trips[1]] == ["INSERT", "SELECT"]
    assert written() == [1, 2]

    other = psycopg.connect(store_target, autocommit=True)  # another node holds the lock
    try:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", [WRITE_LOCK])
        trips.clear()
        for reads_first, ignore in [(True, False), (False, False), (True, True)]:
            with pytest.raises(WouldWait):
                write(3, reads_first, ignore)
        assert not any(sql.startswith("INSERT") for trip in trips for sql in trip)  # never sent
        assert written() == [1, 2]
    finally:
        other.execute("ROLLBACK")
        other.close()
    write(4, reads_first=True)  # the connection is sound after the refusals
    assert written() == [1, 2, 4]
    store.close()
