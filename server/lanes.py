"""Where the MCP surface's board work runs: two lanes of one worker thread each.

Sync tools and the board reads of async tools run on worker threads. Given a thread per call, eight
agents completing cards at once were eight threads taking turns with the GIL: the one holding the
board's write lock gave the GIL up at every SQLite statement and waited behind the others' Python each
time, so the lock was held longer and every writer queued longer. A lane is a capacity limiter of
one: calls wait their turn on the event loop instead of as threads, and at most one tool call that
writes and one that reads run at a time. SQLite takes one writer at a time anyway.

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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Literal, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from hiveboard.board.db import release_connections

Lane = Literal["read", "write"]
T = TypeVar("T")

# who the running tool call is for (set where a call enters the server: StrictServer.call_tool)
caller: ContextVar[Hashable] = ContextVar("hiveboard_caller", default=None)


class FairLane:
    """A lane of one call at a time, handed round the callers with calls waiting (round-robin)."""

    def __init__(self) -> None:
        self._busy = False
        self._waiting: dict[Hashable, deque[anyio.Event]] = {}  # in turn order: the next caller first

    async def acquire(self, who: Hashable) -> None:
        if not self._busy:
            self._busy = True
            return
        turn = anyio.Event()
        self._waiting.setdefault(who, deque()).append(turn)
        try:
            await turn.wait()
        except BaseException:
            if turn.is_set():  # the lane was handed to this call as it was cancelled: hand it on
                self.release()
            else:
                queue = self._waiting.get(who)
                if queue is not None:
                    queue.remove(turn)
                    if not queue:
                        del self._waiting[who]
            raise

    def release(self) -> None:
        if not self._waiting:
            self._busy = False
            return
        who = next(iter(self._waiting))
        queue = self._waiting.pop(who)
        turn = queue.popleft()
        if queue:
            self._waiting[who] = queue  # its next call waits for every other caller's turn first
        turn.set()  # the lane passes to that call, still busy

    @property
    def busy(self) -> bool:
        return self._busy

    def waiting(self) -> int:
        """How many calls wait for the lane."""
        return sum(len(q) for q in self._waiting.values())


_LANES: RunVar[dict[str, FairLane]] = RunVar("hiveboard_lanes")


def lane_of(lane: Lane) -> FairLane:
    """The lane on the running event loop (each loop has its own)."""
    lanes = _LANES.get(None)
    if lanes is None:
        lanes = {}
        _LANES.set(lanes)
    if lane not in lanes:
        lanes[lane] = FairLane()
    return lanes[lane]


async def run(lane: Lane, fn: Callable[..., T], *args, **kwargs) -> T:
    """Call `fn` on a worker thread in its caller's turn on `lane`."""
    fair = lane_of(lane)
    await fair.acquire(caller.get())
    try:
        return await off_loop(fn, *args, **kwargs)
    finally:
        fair.release()


async def off_loop(fn: Callable[..., T], *args, **kwargs) -> T:
    """Call `fn` on a worker thread (no lane), which hands back its database connection when it is done:
    worker threads outnumber a database server's connections (board/db.py, Store's pool)."""

    def call() -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            release_connections()

    return await anyio.to_thread.run_sync(call)
