"""The one worker shape: an event it wants wakes it long before its poll, a failing step does not end it,
and stop() ends every thread."""

from __future__ import annotations

import logging
import threading

from hiveboard.board.events import MemoryAdded, Notifier
from hiveboard.board.worker import Worker

WAIT = 30


class Counting(Worker):
    """Steps once per wake-up; its first step fails."""

    def __init__(self, notifier: Notifier, threads: int = 1):
        super().__init__(
            notifier,
            name="test-worker-{n}",
            poll_seconds=3600,
            log=logging.getLogger("hiveboard.test"),
            failure="the step failed",
            threads=threads,
        )
        self.steps = 0
        self.stepped = threading.Condition()

    def heard(self, events) -> bool:
        return any(isinstance(event, MemoryAdded) for event in events)

    def step(self, n: int) -> bool:
        with self.stepped:
            self.steps += 1
            self.stepped.notify_all()
            if self.steps == 1:
                raise RuntimeError("the first step fails")
        return False

    def until(self, steps: int) -> bool:
        with self.stepped:
            return self.stepped.wait_for(lambda: self.steps >= steps, WAIT)


def test_a_wanted_event_wakes_a_worker_and_stop_ends_it(tmp_path, caplog):
    notifier = Notifier(str(tmp_path / "board.db"))
    worker = Counting(notifier, threads=2).start()
    try:
        assert worker.until(2), "the threads did not take their first step"
        notifier.publish([(1, MemoryAdded(item_id=1))])
        assert worker.until(3), "a wanted event did not wake the worker before its poll"
        assert worker.steps <= 4  # one wake-up reaches each sleeping thread at most once
    finally:
        worker.stop()
    assert [t.name for t in worker._threads] == ["test-worker-0", "test-worker-1"]
    assert not any(t.is_alive() for t in worker._threads)
    assert "the step failed" in caplog.text  # logged by then: the failing thread has ended
