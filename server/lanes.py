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
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from anyio.lowlevel import RunVar

Lane = Literal["read", "write"]
T = TypeVar("T")

_LANES: RunVar[dict[str, CapacityLimiter]] = RunVar("hiveboard_lanes")


def limiter(lane: Lane) -> CapacityLimiter:
    """The lane's limiter on the running event loop (each loop has its own)."""
    lanes = _LANES.get(None)
    if lanes is None:
        lanes = {}
        _LANES.set(lanes)
    if lane not in lanes:
        lanes[lane] = CapacityLimiter(1)
    return lanes[lane]


async def run(lane: Lane, fn: Callable[..., T], *args, **kwargs) -> T:
    """Call `fn` on a worker thread in its turn on `lane`."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=limiter(lane))
