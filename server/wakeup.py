"""Waking agents that wait for messages, in this process and across processes.

In this process: the store calls `on_commit` after a write transaction that delivered messages
commits, with the set of agents whose inbox changed; their waiters wake at once.

Across processes sharing the SQLite file: while anyone waits, a watcher reads
`PRAGMA data_version` (a counter in SQLite's shared memory that changes when another connection
commits) every `poll_interval` seconds and wakes every waiter of this process, which re-checks its
inbox with one indexed query. So a message published through another process is seen within
about one poll interval (20 ms by default) — the wait itself never polls the inbox.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterable


class Wakeup:
    def __init__(self, db_path: str, poll_interval: float = 0.02):
        self.db_path = db_path
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._seq: dict[str, int] = {}
        self._global = 0
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._watcher: asyncio.Task | None = None
        self._watch_wanted: asyncio.Event | None = None
        self.on_agents: list[Callable[[set[str]], None]] = []
        self.store_ref = None

    # called from any thread
    def notify(self, agents: Iterable[str] | None) -> None:
        """Wake the waiters of these agents (None: every waiter in this process)."""
        with self._lock:
            if agents is None:
                self._global += 1
                targets = [w for ws in self._waiters.values() for w in ws]
                names: set[str] = set(self._waiters)
            else:
                names = set(agents)
                for name in names:
                    self._seq[name] = self._seq.get(name, 0) + 1
                targets = [w for name in names for w in self._waiters.get(name, ())]
        for loop, event in targets:
            loop.call_soon_threadsafe(event.set)
        if agents is not None:
            for callback in self.on_agents:
                callback(names)

    def on_commit(self, events: list) -> None:
        """Store listener: events are ("inbox", frozenset of agents) tuples."""
        agents: set[str] = set()
        for kind, who in events:
            if kind == "inbox":
                agents |= who
        if agents:
            self.notify(agents)

    def mark(self, agent: str) -> tuple[int, int]:
        """A snapshot to pass to wait(): taken before checking the inbox, so no wake-up is missed."""
        with self._lock:
            return self._seq.get(agent, 0), self._global

    async def wait(self, agent: str, mark: tuple[int, int], timeout: float) -> bool:
        """Wait until the agent is notified after `mark` was taken, or the timeout passes."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        entry = (loop, event)
        with self._lock:
            if (self._seq.get(agent, 0), self._global) != mark:
                return True
            self._waiters.setdefault(agent, set()).add(entry)
        self._ensure_watcher()
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            with self._lock:
                waiters = self._waiters.get(agent)
                if waiters is not None:
                    waiters.discard(entry)
                    if not waiters:
                        del self._waiters[agent]

    # the cross-process watcher
    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        conn = sqlite3.connect(self.db_path, check_same_thread=False)
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            # A commit that landed between a waiter's inbox check and this baseline would go unseen:
            # wake everyone once so they re-check against it.
            self.notify(None)
            while True:
                with self._lock:
                    if not self._waiters:
                        return  # restarted by the next waiter
                await asyncio.sleep(self.poll_interval)
                current = conn.execute("PRAGMA data_version").fetchone()[0]
                if current != version:
                    version = current
                    self.notify(None)
        finally:
            conn.close()


_by_store: dict[int, Wakeup] = {}
_by_store_lock = threading.Lock()


def wakeup_for(store) -> Wakeup:
    """The one Wakeup of a store in this process (several servers may share a store in tests)."""
    with _by_store_lock:
        wakeup = _by_store.get(id(store))
        if wakeup is None or wakeup.store_ref is not store:
            wakeup = Wakeup(store.path)
            wakeup.store_ref = store
            store.listeners.append(wakeup.on_commit)
            _by_store[id(store)] = wakeup
        return wakeup
