"""Synchronous board code run on an event loop, its database round trips awaited there (PostgreSQL).

The board is written as plain functions that call the database and wait for the answer. On SQLite a statement is
a function call, so the server runs a call's board work on the event loop's own thread (server/lanes.py). On a
database server each statement waits for a round trip; run on a worker thread, a call gave up the interpreter at
every statement and had to win it back from the event loop, which with several clients is busy reading and
answering the others' requests (the same hand-overs that made SQLite's calls twice as slow on threads).

`run` calls a function in a greenlet on the event loop's thread. When the driver would block on the connection's
socket (board/postgres.py's connection class asks `yields()` in its `wait`), the greenlet hands the wait to the
event loop (`wait_for`), which serves other requests meanwhile and switches back once the socket is ready. The
board's code stays synchronous; no statement of it changes.

Rules for what runs here, as for SQLite's calls on the loop: board work only (no embedding, no git), and
nothing that blocks the thread except a round trip to the database. Bridged calls share the loop's thread, so a
wait for something another call gives back must go to the loop: the store's in-process write mutex is not taken
(the database's own lock keeps writers apart, waited for on the loop), a connection of the pool is waited for
with `pause`, and no threading lock may be held across a database call (another call on the thread waiting for
it would block the loop, and the holder would never resume). State kept per thread for a call (its connection,
the events of its transaction) is kept per greenlet here (`Local`)."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import copy_context
from typing import Any, TypeVar

try:
    from greenlet import getcurrent, greenlet
except ModuleNotFoundError:  # the `postgres` extra; without it no call is bridged: SQLite's never are, and a
    # postgresql:// target is refused in one sentence before any is (board/db.py's dialect_for, board/optional.py)
    greenlet = object

    def getcurrent() -> None:
        return None


T = TypeVar("T")


class _Bridged(greenlet):
    """A greenlet whose blocking waits go to the event loop that drives it (except while `blocking`)."""

    blocking = False


class _Wait:
    """What a bridged greenlet hands its driver: an awaitable to await on its behalf."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable) -> None:
        self.awaitable = awaitable


def bridged() -> bool:
    """Whether the running code is a bridged call (its state is its own: `Local`)."""
    return type(getcurrent()) is _Bridged


def yields() -> bool:
    """Whether the running code's waits go to the event loop now: a bridged call, outside `blocking`."""
    current = getcurrent()
    return type(current) is _Bridged and not current.blocking


@contextmanager
def blocking() -> Iterator[None]:
    """In a bridged call, wait for the database in place (holding up the event loop) until the block ends: for
    a transaction holding the board's write lock, which every writer waits for. Awaited, each of its round
    trips would end only once the event loop came back round to it, after the other requests' work queued
    meanwhile (about a millisecond a round trip with eight clients), and the lock would be held that much
    longer; in place, a round trip is the database's own time. Elsewhere it changes nothing."""
    current = getcurrent()
    if type(current) is not _Bridged or current.blocking:
        yield
        return
    current.blocking = True
    try:
        yield
    finally:
        current.blocking = False


def wait_for(awaitable: Awaitable[T]) -> T:
    """From a bridged call: suspend it until the event loop has awaited `awaitable`; its result (or its error,
    raised here)."""
    current = getcurrent()
    if type(current) is not _Bridged:
        raise RuntimeError("wait_for outside a bridged call")
    return current.parent.switch(_Wait(awaitable))


def pause(seconds: float) -> None:
    """From a bridged call, even while `blocking`: let the event loop run for `seconds` (a wait for something that
    another call, maybe one on this thread, gives back)."""
    wait_for(asyncio.sleep(seconds))


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn` on the event loop's thread, awaiting what it waits for; its result. It runs in a copy of the
    caller's context (its context variables); an error it raises is raised here. The caller should not be
    cancelled mid-way (shield it): the call then runs on to its end, as on a worker thread."""
    child = _Bridged(lambda: fn(*args, **kwargs))
    child.gr_context = copy_context()
    step = child.switch()
    while isinstance(step, _Wait):
        try:
            answer = await step.awaitable
        except BaseException as exc:  # noqa: BLE001 - raised inside the call, at its wait
            step = child.throw(exc)
        else:
            step = child.switch(answer)
    return step


class Tries:
    """Whether to try something that may not work out (a round trip waited for in place, a write lock that may be
    held) while most of the last `window` tries did; once most of them failed, one in `window` is still tried, to
    notice when tries work out again."""

    def __init__(self, window: int = 16) -> None:
        self.window = window
        self._failed: deque[bool] = deque(maxlen=window)
        self._passed = 0

    def tried(self) -> bool:
        """Whether this one is tried."""
        if 2 * sum(self._failed) <= len(self._failed):
            return True
        self._passed += 1
        if self._passed >= self.window:
            self._passed = 0
            return True
        return False

    def note(self, failed: bool) -> None:
        """How a try went."""
        self._failed.append(failed)


class Local:
    """`threading.local`, except that each bridged call (a greenlet) has its own attributes, apart from its
    thread's and from other bridged calls'."""

    def __init__(self) -> None:
        object.__setattr__(self, "_thread", threading.local())

    def _space(self) -> Any:
        current = getcurrent()
        if type(current) is not _Bridged:
            return self._thread
        spaces = current.__dict__.setdefault("hiveboard_locals", {})
        space = spaces.get(id(self))
        if space is None:
            space = spaces[id(self)] = _Space(self)
        return space

    def __getattr__(self, name: str) -> Any:
        return getattr(self._space(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._space(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._space(), name)


class _Space:
    """One bridged call's attributes of a `Local` (it keeps that Local alive while the call does)."""

    def __init__(self, owner: Local) -> None:
        self.__dict__["_owner"] = owner
