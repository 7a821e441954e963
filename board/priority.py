"""Background work yields the CPU to requests.

The memory's embeddings and the critics' subprocesses (analysers, tests in the sandbox) are the heavy
work a serving process does beside answering tool calls. On Linux each thread has its own nice value,
inherited by the threads and processes it starts, so that work runs on a thread that has lowered its
own priority first: on a busy machine the scheduler then runs request handling before it. Only the
heavy part is lowered, never a thread that takes the board's write lock: a descheduled low-priority
thread holding it would hold up every request behind it. Elsewhere this does nothing (a thread id is
not a process id there).

Some background work cannot be lowered: a call into Chroma holds the interpreter for its whole length (an
upsert of a batch into a large memory, during which no request moves). That work waits for a
quiet moment instead, when no request is in service (`FOREGROUND`), for a bounded time.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

log = logging.getLogger("hiveboard")

BACKGROUND_NICE = 10
# where the idle class is missing: the lowest nice value (`idle_process`)
IDLE_NICE = 19
T = TypeVar("T")


def lower_this_thread(nice: int = BACKGROUND_NICE) -> bool:
    """Raise the calling thread's nice value by `nice` (Linux only); True if it did."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        return True
    except OSError as exc:  # e.g. a sandbox without the syscall: run at normal priority
        log.debug("could not lower the priority of thread %s: %s", threading.current_thread().name, exc)
        return False


def idle_process(nice: int = IDLE_NICE) -> bool:
    """Put the calling process in Linux's idle scheduling class (SCHED_IDLE), else lower it by `nice`: for work
    that can wait for spare CPU (the offline model indexing new items, memory/embed_process.py). Nice 10 was not
    enough there: with eight agents calling, the embedder still held a core that the scheduler did not count as
    free when a request's thread woke, and every call was slower while the pool filled (bench/README.md);
    a core running only idle-class work counts as free. True if the class was set."""
    try:
        os.nice(nice)
    except (OSError, AttributeError):  # Windows has no nice values
        pass
    if not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return True
    except OSError as exc:  # a container or sandbox that refuses it: the nice value stands
        log.debug("could not enter the idle scheduling class: %s", exc)
        return False


_in_service: ContextVar[bool] = ContextVar("hiveboard_in_service", default=False)


class Foreground:
    """The requests in service in this process, for background work that waits for a moment without any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serving = 0
        self._quiet_since = time.monotonic()
        self._quiet = threading.Event()
        self._quiet.set()

    def _add(self, n: int) -> None:
        with self._lock:
            self._serving += n
            if self._serving:
                self._quiet.clear()
            else:
                self._quiet_since = time.monotonic()
                self._quiet.set()

    @contextmanager
    def serving(self) -> Iterator[None]:
        """A request in service for the length of the block (nested blocks count once)."""
        if _in_service.get():
            yield
            return
        token = _in_service.set(True)
        self._add(1)
        try:
            yield
        finally:
            self._add(-1)
            _in_service.reset(token)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A request in service that only waits (for a message, a review) for the length of the block: not
        counted meanwhile. Outside `serving`, nothing."""
        if not _in_service.get():
            yield
            return
        token = _in_service.set(False)
        self._add(-1)
        try:
            yield
        finally:
            self._add(1)
            _in_service.reset(token)

    def wait_quiet(self, gap: float, limit: float) -> bool:
        """Wait until no request has been in service for `gap` seconds, for at most `limit` seconds; whether it
        got that quiet."""
        deadline = time.monotonic() + limit
        while True:
            with self._lock:
                serving, since = self._serving, self._quiet_since
            now = time.monotonic()
            if not serving and now - since >= gap:
                return True
            if now >= deadline:
                return False
            if serving:
                self._quiet.wait(deadline - now)
            else:
                time.sleep(min(since + gap, deadline) - now)


FOREGROUND = Foreground()  # this process's requests: the server marks them (server/boundary.py, server/lanes.py)


class QuietWait:
    """Background work's wait for a quiet moment (`Foreground.wait_quiet`), at most `limit` seconds in a row: once
    a wait has run out, the next ones go on at once until a quiet moment comes or `reset`. Under a steady load,
    work then runs about once every `limit` seconds, all of it together, instead of in the middle of each burst."""

    def __init__(self, gap: float, limit: float, foreground: Foreground = FOREGROUND) -> None:
        self.gap, self.limit, self.foreground = gap, limit, foreground
        self._since: float | None = None  # when the waits without a quiet moment began

    def wait(self) -> bool:
        """Whether it got quiet."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if self.foreground.wait_quiet(self.gap, max(0.0, self._since + self.limit - now)):
            self._since = None
            return True
        return False

    def reset(self) -> None:
        """The work is done for now: its next wait may be a whole one."""
        self._since = None


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def at_low_priority(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) on one of this process's low-priority threads: its result, or its exception.
    A process it starts keeps the low priority; the caller's thread keeps its own. The threads live as
    long as the process: a child started with a parent-death signal (bwrap --die-with-parent) is killed
    when the thread that started it ends."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=4, thread_name_prefix="hiveboard-low-priority", initializer=lower_this_thread
            )
    return _pool.submit(fn, *args, **kwargs).result()
