"""Background work yields the CPU to requests.

The memory's indexing thread and the review worker's threads run in the serving process beside the
threads that answer tool calls. On Linux each thread has its own nice value, inherited by the threads
and processes it starts (critics' subprocesses included), so a background thread lowers its own
priority when it starts: on a busy machine the scheduler then runs request handling first. Elsewhere
this does nothing (a thread id is not a process id there).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("hiveboard")

BACKGROUND_NICE = 10


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
