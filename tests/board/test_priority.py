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
