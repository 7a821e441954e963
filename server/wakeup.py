"""Waking agents that wait for messages, in this process and across processes.

In this process: the store calls `on_commit` after a write transaction that delivered messages
commits, with the message ids and the agents whose inbox changed; their waiters wake at once.

Across processes sharing the SQLite file: while a server runs, a watcher reads
`PRAGMA data_version` (a counter in SQLite's shared memory that changes when another connection
commits) every `poll_interval` seconds. When it moved, one indexed query finds the inbox rows
written since the last look, and the agents they belong to are woken — so a message published
through another process reaches a waiting agent within about one poll interval (20 ms by default).
The waiting call itself never polls its inbox.

Every wake-up also goes to `on_agents` callbacks (the server turns them into MCP resource-updated
notifications for `hiveboard://inbox/<agent>`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager

log = logging.getLogger("hiveboard")


class Wakeup:
    def __init__(self, db_path: str, poll_interval: float = 0.02):
        self.db_path = db_path
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._seq: dict[str, int] = {}
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._delivered_here: set[int] = set()  # message ids already announced by on_commit
        self._watcher: asyncio.Task | None = None
        self._watching = 0
        self._conn_lock = threading.Lock()
        self.on_agents: list[Callable[[set[str]], None]] = []

    # ------------------------------------------------------------------ any thread

    def notify(self, agents: Iterable[str]) -> None:
        """Wake the waiters of these agents and tell the on_agents callbacks."""
        names = set(agents)
        if not names:
            return
        with self._lock:
            for name in names:
                self._seq[name] = self._seq.get(name, 0) + 1
            targets = [w for name in names for w in self._waiters.get(name, ())]
        for loop, event in targets:
            loop.call_soon_threadsafe(event.set)
        for callback in list(self.on_agents):
            callback(names)

    def on_commit(self, events: list) -> None:
        """Store listener: ("inbox", message_id, agents) events from this process's own writes."""
        agents: set[str] = set()
        with self._lock:
            for kind, message_id, who in events:
                if kind == "inbox":
                    self._delivered_here.add(message_id)
                    agents |= who
        self.notify(agents)

    def mark(self, agent: str) -> int:
        """A snapshot to pass to wait(): take it before checking the inbox, so no wake-up is missed."""
        with self._lock:
            return self._seq.get(agent, 0)

    # ------------------------------------------------------------------ event loop

    async def wait(self, agent: str, mark: int, timeout: float) -> bool:
        """Wait until the agent is notified after `mark` was taken, or the timeout passes."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if self._seq.get(agent, 0) != mark:
                return True
            self._waiters.setdefault(agent, set()).add(entry)
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

    @asynccontextmanager
    async def watching(self):
        """Run the cross-process watcher while at least one server using this store is up."""
        self._watching += 1
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        try:
            yield
        finally:
            self._watching -= 1
            if self._watching == 0 and self._watcher is not None:
                self._watcher.cancel()
                try:
                    await self._watcher
                except (asyncio.CancelledError, Exception):
                    pass
                self._watcher = None

    async def _watch(self) -> None:
        conn = await asyncio.to_thread(sqlite3.connect, self.db_path, check_same_thread=False)
        try:
            version, last_id = await asyncio.to_thread(self._baseline, conn)
            backlog = False
            while True:
                await asyncio.sleep(0 if backlog else self.poll_interval)
                try:  # the database work runs off the event loop: a busy file must not stall every session
                    version, last_id, backlog, agents = await asyncio.to_thread(
                        self._changes, conn, version, last_id, backlog)
                except sqlite3.Error:
                    log.exception("cross-process wake-up check failed; retrying")
                    await asyncio.sleep(1)
                    continue
                self.notify(agents)
        finally:
            with self._conn_lock:  # a cancelled check may still be running on its thread
                conn.close()

    def _baseline(self, conn: sqlite3.Connection) -> tuple[int, int]:
        with self._conn_lock:
            return (conn.execute("PRAGMA data_version").fetchone()[0],
                    conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])

    def _changes(self, conn: sqlite3.Connection, version: int, last_id: int,
                 force: bool = False) -> tuple[int, int, bool, set[str]]:
        """If another connection committed: the agents with inbox rows newer than last_id."""
        with self._conn_lock:
            current = conn.execute("PRAGMA data_version").fetchone()[0]
            if current == version and not force:
                return version, last_id, False, set()
            ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT 1000",
                                              [last_id])]
            if not ids:
                return current, last_id, False, set()
            rows = conn.execute("SELECT message_id, agent FROM inbox WHERE message_id BETWEEN ? AND ?",
                                [ids[0], ids[-1]]).fetchall()
        with self._lock:
            agents = {agent for message_id, agent in rows if message_id not in self._delivered_here}
            self._delivered_here = {i for i in self._delivered_here if i > ids[-1]}
        return current, ids[-1], len(ids) == 1000, agents


_by_store: dict[int, tuple[object, Wakeup]] = {}
_by_store_lock = threading.Lock()


def wakeup_for(store) -> Wakeup:
    """The one Wakeup of a store in this process (several servers may share a store, as in tests)."""
    with _by_store_lock:
        entry = _by_store.get(id(store))
        if entry is None or entry[0] is not store:
            wakeup = Wakeup(store.path)
            store.listeners.append(wakeup.on_commit)
            entry = _by_store[id(store)] = (store, wakeup)
        return entry[1]
