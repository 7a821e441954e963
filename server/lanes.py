"""Where the MCP surface's board work runs: two lanes, of one call each on SQLite, of several on a database server.

On SQLite, where a statement is a function call, sync tools and the board reads of async tools run in a lane on the
event loop's own thread (`run`), unless a write would wait for the write lock. Given a thread per call, agents
completing cards at once were threads taking turns with the GIL: the one holding SQLite's write lock gave the GIL up
at every statement and waited behind the others' Python each time, so the lock was held longer and every writer
queued longer. A lane is a capacity limiter: calls wait their turn on the event loop instead of as threads, and at
most one tool call that writes and one that reads run at a time; SQLite takes one writer at a time anyway. On a
database server (PostgreSQL) a call's statements wait for round trips, and writes to different rows run together
(board/postgres.py): a lane there takes several calls at once (SERVER_WIDTH), each on a worker thread.

- `write`: a tool that is not read-only, and anything that may write (reading the inbox marks it read).
- `read`: read-only tools and lookups. A read never waits behind a write, even one that waits for
  another process's write lock: the upkeep a read may do on the way (returning expired leases, noting
  that an agent was seen) is skipped while someone writes (`Store.try_write`).

Work that is slow for other reasons than the board (embedding a query or a lesson, loading the
memory) stays off the lanes, on anyio's default pool, so it never holds up the board.

A lane takes its callers in turn, not first come first served: calls wait in a queue per caller (the
agent's token, its MCP session, or the process), and the lane goes round the callers with a call
waiting, one call each. An agent that floods a lane with calls queues behind itself; any other agent
waits for at most one of its calls.

Most of an HTTP call's work is not in a lane: reading and checking the request, and encoding and
writing the answer (4/5 of a get_task(full=true)'s CPU, measured with py-spy). So the HTTP entry also
gives each agent token one request in service at a time (`Turns`, taken in cli.BearerAuth): an agent
that sends eight calls at once has one served and seven waiting, unread, and everyone else shares the
interpreter with one of its calls, not eight. A call that waits (get_messages, get_review or
query_memory with wait_seconds) steps aside for the wait (`stepped_aside`), so the same agent's other
calls are not held up by it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from functools import partial
from typing import Literal, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from hiveboard.board.db import WouldWait, not_waiting, release_connections
from hiveboard.board.priority import FOREGROUND

Lane = Literal["read", "write"]
T = TypeVar("T")

# who the running tool call is for (set where a call enters the server: StrictServer.call_tool)
caller: ContextVar[Hashable] = ContextVar("hiveboard_caller", default=None)
# the board of the running tool call is on an embedded database (SQLite: a statement is a function call), so its
# lane work runs on the event loop's thread (`run`); set where a call enters the server, as `caller` is
embedded: ContextVar[bool] = ContextVar("hiveboard_embedded", default=False)
# a call that runs on after its request has ended (an MCP task: server/task_ext.py): it holds no turn of the HTTP
# entry, so it neither steps aside from one nor takes one back (which would take another request's, or keep one
# that no entry gives back)
detached: ContextVar[bool] = ContextVar("hiveboard_detached", default=False)


async def _wait_in_line(
    waiting: dict[Hashable, deque[anyio.Event]],
    who: Hashable,
    handed: Callable[[], None],
    emptied: Callable[[], None] = lambda: None,
) -> None:
    """Wait in `who`'s line of `waiting` until the turn is handed to this call (its event set). Cancelled
    while waiting, the call leaves the line (`emptied` once the line is empty); cancelled just as the turn
    was handed to it, it hands the turn on (`handed`)."""
    turn = anyio.Event()
    waiting.setdefault(who, deque()).append(turn)
    try:
        await turn.wait()
    except BaseException:
        if turn.is_set():
            handed()
        else:
            queue = waiting[who]  # still in it: only a set event leaves the line
            queue.remove(turn)
            if not queue:
                del waiting[who]
                emptied()
        raise


class FairLane:
    """A lane of `width` calls at a time (one by default), handed round the callers with calls waiting
    (round-robin)."""

    def __init__(self, width: int = 1) -> None:
        self.width = width
        self._running = 0
        self._waiting: dict[Hashable, deque[anyio.Event]] = {}  # in turn order: the next caller first

    async def acquire(self, who: Hashable) -> None:
        if self._running < self.width:
            self._running += 1
            return
        await _wait_in_line(self._waiting, who, handed=self.release)

    def release(self) -> None:
        if not self._waiting:
            self._running -= 1
            return
        who = next(iter(self._waiting))
        queue = self._waiting.pop(who)
        turn = queue.popleft()
        if queue:
            self._waiting[who] = queue  # its next call waits for every other caller's turn first
        turn.set()  # the place passes to that call, still taken

    @property
    def busy(self) -> bool:
        return self._running >= self.width

    def waiting(self) -> int:
        """How many calls wait for the lane."""
        return sum(len(q) for q in self._waiting.values())


class Turns:
    """One request of each caller in service at a time; its other requests wait in order of arrival.

    A caller with requests waiting (a backlog) lets the others' requests finish before its next one
    starts ("yields"), for at most `yield_for` seconds, and callers that yield take turns, longest
    yielding first: whoever arrives during a flood shares the interpreter with the rest of one of the
    flood's requests, not with the next ones too."""

    def __init__(self, yield_for: float = 0.02) -> None:
        self.yield_for = yield_for
        self._serving: set[Hashable] = set()  # callers with a request in service, or a turn kept while they yield
        self._waiting: dict[Hashable, deque[anyio.Event]] = {}
        self._yielding: dict[Hashable, asyncio.TimerHandle] = {}  # oldest first
        self._deferred: list[anyio.Event] = []

    async def acquire(self, who: Hashable) -> None:
        if who not in self._serving:
            self._serving.add(who)
            return
        await _wait_in_line(self._waiting, who, handed=lambda: self.release(who), emptied=lambda: self._line_gone(who))

    def _line_gone(self, who: Hashable) -> None:
        """The caller's last waiting request went away (its client did): a turn it kept while yielding has no
        request left to serve."""
        if who in self._yielding:
            self._stop_yielding(who)
            self._serving.discard(who)
            self._wake()

    def release(self, who: Hashable) -> None:
        """A request of `who` is done: its next one, or its turn, goes on."""
        self._others_done()
        if not self._waiting.get(who):
            self._serving.discard(who)
        elif any(c != who for c in self._serving):  # someone else is served or yields: wait for them
            self._yielding[who] = asyncio.get_running_loop().call_later(self.yield_for, self._hand_on, who)
        else:
            self._hand_on(who)
        self._wake()

    def _wake(self) -> None:
        """When nobody is served but callers yield, the longest yielding goes on."""
        if self._yielding and all(c in self._yielding for c in self._serving):
            self._hand_on(next(iter(self._yielding)))

    def _hand_on(self, who: Hashable) -> None:
        """The caller's next request is served in its turn."""
        self._stop_yielding(who)
        queue = self._waiting.get(who)
        if queue:
            queue.popleft().set()
            if not queue:
                del self._waiting[who]

    def _stop_yielding(self, who: Hashable) -> None:
        timer = self._yielding.pop(who, None)
        if timer is not None:
            timer.cancel()

    async def defer(self, who: Hashable) -> None:
        """A request of a caller with a backlog, about to start its work, first lets the others' requests
        in service finish (for at most `yield_for` seconds)."""
        if not self._waiting.get(who) or not any(c != who and c not in self._yielding for c in self._serving):
            return
        done = anyio.Event()
        self._deferred.append(done)
        with anyio.move_on_after(self.yield_for):
            await done.wait()

    def _others_done(self) -> None:
        if self._deferred:
            for event in self._deferred:
                event.set()
            self._deferred.clear()

    def holds(self, who: Hashable) -> bool:
        """Whether `who` has a request in service."""
        return who in self._serving and who not in self._yielding

    def waiting(self, who: Hashable) -> int:
        return len(self._waiting.get(who, ()))


_TURNS: RunVar[Turns] = RunVar("hiveboard_turns")


def turns() -> Turns:
    """The HTTP entry's turns on the running event loop."""
    gate = _TURNS.get(None)
    if gate is None:
        gate = Turns()
        _TURNS.set(gate)
    return gate


@asynccontextmanager
async def turn(who: Hashable | None) -> AsyncIterator[None]:
    """Serve a request in its caller's turn (None: a caller that is not told apart, served at once)."""
    if who is None:
        yield
        return
    gate = turns()
    await gate.acquire(who)
    try:
        yield
    finally:
        gate.release(who)


@asynccontextmanager
async def stepped_aside() -> AsyncIterator[None]:
    """Let the caller's next request be served while this call waits, then take a turn again."""
    who = caller.get()
    gate = turns()
    with FOREGROUND.waiting():  # nor does it keep background work waiting for a quiet moment
        if who is None or detached.get() or not gate.holds(who):  # not served in turns (stdio, in-process, a task)
            yield
            return
        gate.release(who)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):  # the entry gives back one turn when the request ends
                await gate.acquire(who)


# calls a lane takes at once on a database server: their round trips overlap, and writes to different rows do not
# wait for each other (board/postgres.py); with the lookups, within the store's connection pool (board/db.py
# DEFAULT_POOL). A read is a round trip or two; a write holds its connection for several
SERVER_WIDTH: dict[Lane, int] = {"read": 4, "write": 12}

_LANES: RunVar[dict[str, FairLane]] = RunVar("hiveboard_lanes")


def lane_of(lane: Lane, width: int = 1) -> FairLane:
    """The lane on the running event loop (each loop has its own; `width` when it is made)."""
    lanes = _LANES.get(None)
    if lanes is None:
        lanes = {}
        _LANES.set(lanes)
    if lane not in lanes:
        lanes[lane] = FairLane(width)
    return lanes[lane]


async def run(lane: Lane, fn: Callable[..., T], *args, board_only: bool = True, **kwargs) -> T:
    """Call `fn` in its caller's turn on `lane`: on the event loop's own thread, or on a worker thread.

    `fn` does board work only (what is slow for other reasons stays off the lanes: `off_loop`). On an embedded
    database (`embedded`) it runs on the event loop's thread, sparing the hand-over to a worker thread and back:
    two thread switches, and a worker that gives up the GIL at every SQLite statement and must win it back from
    the loop each time, unless the write lock is held: then, with nothing written, on a worker thread where it may
    wait (`not_waiting`). On a database server, on a worker thread, SERVER_WIDTH calls of a lane at once.
    `board_only=False`: a call whose work includes something else (git), always on a worker thread."""
    here = board_only and embedded.get()
    fair = lane_of(lane, 1 if embedded.get() else SERVER_WIDTH[lane])
    who = caller.get()
    if who is not None and not detached.get():
        await turns().defer(who)
    await fair.acquire(who)
    try:
        if here:
            try:
                with not_waiting():
                    return fn(*args, **kwargs)
            except WouldWait:
                pass
        return await off_loop(fn, *args, **kwargs)
    finally:
        fair.release()


def _handing_back(fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn`, then the database connections it took back to their pool."""
    try:
        return fn(*args, **kwargs)
    finally:
        release_connections()


LOOKUPS = 4  # board reads on worker threads at once outside the lanes (`lookup`)
_LOOKUPS: RunVar[anyio.CapacityLimiter] = RunVar("hiveboard_lookups")


async def lookup(fn: Callable[..., T], *args) -> T:
    """A board read outside the lanes, before a call has its turn (the HTTP entry's token check), on a worker
    thread, at most LOOKUPS at once (on a database server each holds a connection of the pool while it runs)."""
    limiter = _LOOKUPS.get(None)
    if limiter is None:
        limiter = anyio.CapacityLimiter(LOOKUPS)
        _LOOKUPS.set(limiter)
    async with limiter:
        return await off_loop(fn, *args)


async def off_loop(fn: Callable[..., T], *args, **kwargs) -> T:
    """Call `fn` on a worker thread (no lane), which hands back its database connection when it is done:
    worker threads outnumber a database server's connections (board/db.py, Store's pool)."""
    return await anyio.to_thread.run_sync(partial(_handing_back, fn, *args, **kwargs))
