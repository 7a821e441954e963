"""Background threads lower their own priority (Linux), and only their own."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from hiveboard.board.priority import BACKGROUND_NICE, lower_this_thread

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
