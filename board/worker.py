"""The one shape of a background worker: daemon threads that take one step of work at a time.

A worker steps again at once while its steps say there may be more. Otherwise it sleeps until a
commit publishes events it cares about (`heard`), someone calls `wake()`, or `poll_seconds` pass: the
poll is the fallback for work that no event of this process announces (another process's writes
while no watcher runs, a lease that ran out). `stop()` ends the loops and waits for them.

A subclass gives its step and the events that wake it; how long it sleeps, how many threads it runs
and how it treats a failed step are the constructor's parameters, so differences stay visible there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Self

from .db import release_connections
from .events import Event, Notifier


class Worker:
    def __init__(
        self,
        notifier: Notifier,
        *,
        name: str,
        poll_seconds: float,
        log: logging.Logger,
        failure: str,
        threads: int = 1,
        settle_seconds: float = 0.0,
        error_pause: float | None = None,
        join_timeout: float = 10.0,
    ):
        """`name`: the threads' name, `{n}` in it numbered per thread. `failure`: logged with the traceback
        when a step raises. `settle_seconds`: once woken, wait until the events stop coming for this long,
        so a burst gives one step. `error_pause`: after a failed step, wait this long and step again
        (None: sleep as after a step that found nothing). `join_timeout`: how long `stop()` waits for each
        thread."""
        self.notifier = notifier
        self.thread_name = name
        self.poll_seconds = poll_seconds
        self.log = log
        self.failure = failure
        self.threads = threads
        self.settle_seconds = settle_seconds
        self.error_pause = error_pause
        self.join_timeout = join_timeout
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------- what a subclass gives

    def step(self, n: int) -> bool:
        """One piece of work on thread `n`; True when there may be more right away (step again at once)."""
        raise NotImplementedError

    def heard(self, events: list[Event]) -> bool:
        """Whether these committed events may have brought work. Runs on the committing thread: keep it
        short, never raise."""
        return False

    # ----------------------------------------------------------------- running

    def wake(self) -> None:
        """Step soon, even if no event said so (any thread)."""
        self._wake.set()

    def start(self) -> Self:
        self.notifier.subscribe(self._on_commit)
        for n in range(self.threads):
            thread = threading.Thread(target=self._run, args=(n,), name=self.thread_name.format(n=n), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """End the loops and wait up to `timeout` (default `join_timeout`) for each thread; a step under way
        finishes first. A stopped worker does not start again."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=self.join_timeout if timeout is None else timeout)
        # still subscribed while a last step finishes: what it waits on may need to hear events
        self.notifier.unsubscribe(self._on_commit)

    def _on_commit(self, events: list[Event]) -> None:
        if self.heard(events):
            self._wake.set()

    def _run(self, n: int) -> None:
        while not self._stop.is_set():
            try:
                more = self.step(n)
            except Exception:  # keep the thread alive: the next step may well succeed
                self.log.exception(self.failure)
                if self.error_pause is not None:
                    self._stop.wait(self.error_pause)
                    continue
                more = False
            if not more:
                release_connections()  # a worker asleep holds no database connection (a pool's are few)
                self._sleep()

    def _sleep(self) -> None:
        # stop() sets _stop before _wake, and a thread clears _wake only while _stop is unset: so a wake-up
        # that stop() gave is never cleared by another thread before this one sees it
        if self._stop.is_set():
            return
        self._wake.wait(self.poll_seconds)
        if self._stop.is_set():
            return
        if not self.settle_seconds:
            self._wake.clear()
            return
        while self._wake.is_set() and not self._stop.is_set():
            self._wake.clear()
            self._stop.wait(self.settle_seconds)


@contextmanager
def keep_leased(renew: Callable[[], bool], every: float, what: str, log: logging.Logger) -> Iterator[None]:
    """Call `renew` every `every` seconds on a thread of its own while the block runs (a job's or a merge's lease);
    it stops once `renew` says the lease is lost."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                if not renew():
                    log.warning("%s: lease lost to another worker", what)
                    return
            except Exception:
                log.exception("%s: lease renewal failed", what)

    thread = threading.Thread(target=beat, name=f"{what}-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
