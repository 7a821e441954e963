"""Background work yields the CPU to requests.

The memory's embeddings and the critics' subprocesses (analysers, tests in the sandbox) are the heavy
work a serving process does beside answering tool calls. On Linux each thread has its own nice value,
inherited by the threads and processes it starts, so that work runs on a thread that has lowered its
own priority first: on a busy machine the scheduler then runs request handling before it. Only the
heavy part is lowered, never a thread that takes the board's write lock: a descheduled low-priority
thread holding it would hold up every request behind it. Elsewhere this does nothing (a thread id is
not a process id there).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger("hiveboard")

BACKGROUND_NICE = 10
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
