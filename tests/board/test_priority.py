"""Background threads lower their own priority (Linux), and only their own."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from hiveboard.board.priority import BACKGROUND_NICE, at_low_priority, lower_this_thread

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@linux_only
def test_a_background_thread_lowers_itself_and_what_it_starts_but_not_the_caller():
    seen = {}

    def background():
        seen["lowered"] = lower_this_thread()
        seen["own"] = nice(threading.get_native_id())
        child = threading.Thread(target=lambda: seen.setdefault("child", nice(threading.get_native_id())))
        child.start()
        child.join()

    before = nice(threading.get_native_id())
    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen["lowered"] is True
    assert seen["own"] == seen["child"] == min(19, before + BACKGROUND_NICE)
    assert nice(threading.get_native_id()) == before


@linux_only
def test_work_handed_to_low_priority_runs_there_with_what_it_starts_and_the_caller_stays():
    before = nice(threading.get_native_id())
    lowered = min(19, before + BACKGROUND_NICE)
    assert at_low_priority(lambda: nice(threading.get_native_id())) == lowered
    child = at_low_priority(
        subprocess.Popen, [sys.executable, "-c", "import os; print(os.nice(0))"], stdout=subprocess.PIPE, text=True
    )
    assert int(child.communicate()[0]) == lowered  # read here, at the caller's own priority
    assert nice(threading.get_native_id()) == before


def test_work_at_low_priority_hands_back_its_result_and_its_error():
    assert at_low_priority(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
    with pytest.raises(ZeroDivisionError):
        at_low_priority(lambda: 1 / 0)


def test_a_quiet_moment_is_one_without_requests_in_service_and_a_waiting_request_does_not_count():
    from hiveboard.board.priority import Foreground

    fg = Foreground()
    assert fg.wait_quiet(gap=0, limit=0)
    with fg.serving():
        assert not fg.wait_quiet(gap=0, limit=0)
        with fg.serving():  # the same request entering twice (a tool inside its HTTP request) counts once
            pass
        with fg.waiting():  # a call that only waits for a message is not work to keep out of the way of
            assert fg.wait_quiet(gap=0, limit=0)
        assert not fg.wait_quiet(gap=0, limit=0)
    assert fg.wait_quiet(gap=0, limit=0)
    with fg.waiting():  # outside a request: nothing to take away
        assert fg.wait_quiet(gap=0, limit=0)


def test_background_work_waits_for_the_end_of_a_request_and_at_most_its_limit_in_a_row():
    from hiveboard.board.priority import Foreground, QuietWait

    fg = Foreground()
    quiet = QuietWait(gap=0, limit=30, foreground=fg)
    entered, leave = threading.Event(), threading.Event()

    def request():
        with fg.serving():
            entered.set()
            leave.wait(30)

    caller = threading.Thread(target=request)
    caller.start()
    entered.wait(30)
    waited = []
    worker = threading.Thread(target=lambda: waited.append(quiet.wait()))
    worker.start()
    worker.join(0.3)
    assert worker.is_alive() and not waited  # held back while the request is in service
    leave.set()
    worker.join(30)
    caller.join(30)
    assert waited == [True]

    # a wait that ran out: the next ones go on at once, until a quiet moment (or a reset) starts a new count
    class Busy(Foreground):
        def __init__(self):
            super().__init__()
            self.limits, self.quiet = [], False

        def wait_quiet(self, gap, limit):
            self.limits.append(limit)
            return self.quiet

    busy = Busy()
    work = QuietWait(gap=0, limit=5, foreground=busy)
    assert work.wait() is False
    work._since -= 5  # as if that wait had taken its 5 s
    assert work.wait() is False and work.wait() is False
    assert busy.limits[0] > 4 and busy.limits[1:] == [0.0, 0.0]
    busy.quiet = True
    assert work.wait() is True
    assert work.wait() is True and busy.limits[-1] > 4  # after a quiet moment, a whole wait again
    busy.quiet = False
    work.wait()
    work.reset()
    work.wait()
    assert busy.limits[-1] > 4
