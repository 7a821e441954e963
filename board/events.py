"""Typed commit events and the one notifier that every waiter uses.

A write transaction emits events (`Store.emit`): each is a small dataclass, stored in the `events`
table inside the same transaction and handed to this process's notifier once the transaction has
committed — so an event exists exactly when its change does.

Waiters name a topic (built by `Topic`: an agent's inbox, a card's review, a card, the whole board) and
wait on it: `get_messages` and `get_review` on the event loop (`mark` then `wait`); the background
workers (board/worker.py), the MCP resource subscriptions and the web board hear the typed events
through `subscribe` callbacks. Nobody re-reads a table to find out whether something changed.

Other processes sharing the database: while a server runs, one watcher per process hears of their commits. On
SQLite it reads the dialect's commit counter (data_version, which moves when another connection commits) every
`poll_interval`; when it moved, it reads the `events` rows written since its last look (a single writer numbers them
in commit order) and publishes them here; events this process wrote itself were published at commit and are
skipped. On PostgreSQL it listens (board/postgres.py Listener): every commit's events arrive in commit order, this
process's own included, and are published from there (`hears_own`), so that each is published once and in the
order the database committed them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .errors import Unavailable

if TYPE_CHECKING:
    from .dialect import Dialect

log = logging.getLogger("hiveboard")

PUSH_WAIT = 0.5  # seconds a pushing watcher blocks before it checks whether it was cancelled
KEEP_EVENTS = 20_000  # rows kept in the events table: a watcher further behind than this wakes everyone


def prune_from(ids: list[int]) -> int | None:
    """After the events `ids` (ascending) are committed: the id up to which older rows go, about every
    thousandth event (when one of them is a multiple of 1000), else None."""
    return ids[-1] - KEEP_EVENTS if any(i % 1000 == 0 for i in ids) else None


class Topic:
    """The names of what a waiter can wait on. Publishers (the events below) and waiters both build them
    here: a name spelled two ways would leave its waiters asleep, with no error anywhere. (An event's `kind`
    is what the events table stores, not a topic, though the two may share a word.)"""

    BOARD = "board"  # any card
    WORK = "work"  # a card that may have made work ready: one now in todo, or one done (its dependants)
    PEOPLE = "people"  # a card that now waits on a person (needs_human): what a person's wait_for_work asks about
    MESSAGES = "messages"  # any inbox
    REVIEWS = "reviews"  # any review
    MEMORY = "memory"  # an item added (or a lesson merged)
    MEMORY_INDEXED = "memory.indexed"  # items embedded and searchable by meaning

    @staticmethod
    def task(task_id: int) -> str:
        """One card."""
        return f"task:{task_id}"

    @staticmethod
    def inbox(agent: str) -> str:
        """One agent's inbox."""
        return f"inbox:{agent}"

    @staticmethod
    def review(task_id: int) -> str:
        """The reviews of one card (keyed by the card, which is what get_review waits on)."""
        return f"review:{task_id}"


# a card moving to (or edited in) these may give a waiting agent work; a lease renewed or a note added never does,
# and the agents waiting for work (wait_for_work, by the thousand as MCP tasks) sleep through those
READYING = ("todo", "done")


@dataclass(frozen=True)
class TaskChanged:
    """A card was created, moved or edited; `version`: the card's after it (each change bumps it, in commit order)."""

    task_id: int
    status: str
    version: int = 0  # 0: written by an older hiveboard, which did not say
    kind = "task"

    def topics(self) -> tuple[str, ...]:
        if self.status in READYING:
            return (Topic.task(self.task_id), Topic.BOARD, Topic.WORK)
        if self.status == "needs_human":
            return (Topic.task(self.task_id), Topic.BOARD, Topic.PEOPLE)
        return (Topic.task(self.task_id), Topic.BOARD)


@dataclass(frozen=True)
class InboxChanged:
    """A message landed in these agents' inboxes."""

    message_id: int
    agents: frozenset[str]
    kind = "inbox"

    def topics(self) -> tuple[str, ...]:
        return (*(Topic.inbox(agent) for agent in sorted(self.agents)), Topic.MESSAGES)


@dataclass(frozen=True)
class ReviewChanged:
    """A review was queued, a critique came in, or a verdict was reached."""

    review_id: int
    task_id: int
    kind = "review"

    def topics(self) -> tuple[str, ...]:
        return (Topic.review(self.task_id), Topic.REVIEWS)


@dataclass(frozen=True)
class MemoryAdded:
    """A memory item was added, or a near-duplicate lesson was merged into one (it counts toward digests)."""

    item_id: int
    kind = "memory"

    def topics(self) -> tuple[str, ...]:
        return (Topic.MEMORY,)


@dataclass(frozen=True)
class MemoryIndexed:
    """Items were embedded and indexed (searches waiting for fresh items wake up)."""

    count: int
    kind = "memory.indexed"

    def topics(self) -> tuple[str, ...]:
        return (Topic.MEMORY_INDEXED,)


Event = TaskChanged | InboxChanged | ReviewChanged | MemoryAdded | MemoryIndexed
KINDS: dict[str, type] = {
    cls.kind: cls for cls in (TaskChanged, InboxChanged, ReviewChanged, MemoryAdded, MemoryIndexed)
}


def encode(event: Event, origin: str = "") -> str:
    """An event as its row's JSON, with the notifier that published it (`_o`): the watchers of other
    notifiers publish it, its own does not."""
    # field by field: dataclasses.asdict deep-copies every value first, which cost more than the JSON
    values = {f.name: getattr(event, f.name) for f in fields(event)}
    return json.dumps({**{k: sorted(v) if isinstance(v, frozenset) else v for k, v in values.items()}, "_o": origin})


def encoded_sql(fields: list[tuple[str, str]]) -> str:
    """An SQL expression that writes an event row's data as `encode` does (json.dumps' separators, the origin last):
    from (field name, an SQL expression of its JSON text) pairs and the origin as the expression's one parameter,
    for a statement that writes an event's row itself (Store.emit_written). A watcher knows its own process's rows by
    how they end (`Notifier._changes`): PostgreSQL's json_build_object writes `"_o" : "…"`, which it would not know."""
    values = " || ', ' || ".join(f"'\"{name}\": ' || {expr}" for name, expr in fields)
    return f"'{{' || {values} || ', \"_o\": ' || to_json(?::text)::text || '}}'"


def decode(kind: str, data: str) -> Event | None:
    cls = KINDS.get(kind)
    if cls is None:  # written by a newer version of hiveboard; its waiters are not here
        return None
    values = json.loads(data)
    values.pop("_o", None)
    for f in fields(cls):
        if f.type in ("frozenset[str]", frozenset):
            values[f.name] = frozenset(values[f.name])
    return cls(**values)


class Notifier:
    """Wakes the waiters of a store's events, in this process and (while watching) from others."""

    def __init__(self, db_path: str, dialect: Dialect | None = None, poll_interval: float = 0.02):
        """`dialect`: how the cross-process watcher reads the database (board/dialect.py); a notifier that
        only publishes within this process needs none."""
        self.db_path = db_path
        self.dialect = dialect
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._seq: dict[str, int] = {}
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._callbacks: list[Callable[[list[Event]], None]] = []
        self.origin = secrets.token_hex(8)  # in the rows of the events published here (encode)
        self._mine = f'"_o": "{self.origin}"}}'  # how such a row's data ends
        self._watcher: asyncio.Task | None = None
        self._ready: asyncio.Future | None = None  # set once the watcher has read its baseline
        self._watching = 0
        self._conn_lock = threading.Lock()
        # the watcher hears this process's own commits (a pushing dialect, listening now): they are published there
        self.hears_own = False

    # ------------------------------------------------------------------ any thread

    def subscribe(self, callback: Callable[[list[Event]], None]) -> None:
        """Call `callback(events)` after each commit that emitted events (on the committing thread, or
        the watcher's): keep it short and never raise."""
        self._callbacks.append(callback)

    def unsubscribe(self, callback: Callable[[list[Event]], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def publish(self, events: list[tuple[int, Event]]) -> None:
        """Wake the waiters of these events' topics and run the callbacks."""
        if not events:
            return
        topics = {topic for _, event in events for topic in event.topics()}
        with self._lock:
            self._bump(topics)
            targets = [w for topic in topics for w in self._waiters.get(topic, ())]
        self._wake(targets)
        typed = [event for _, event in events]
        for callback in list(self._callbacks):
            try:
                callback(typed)
            except Exception:  # the change is committed; a failed wake-up must not turn it into an error
                log.exception("event callback failed")

    def wake_everyone(self) -> None:
        """Something changed that could not be told in detail (a watcher fell behind)."""
        with self._lock:
            self._bump(set(self._waiters))
            targets = [w for waiters in self._waiters.values() for w in waiters]
        self._wake(targets)

    def _bump(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self._seq[topic] = self._seq.get(topic, 0) + 1

    @staticmethod
    def _wake(targets) -> None:
        for loop, event in targets:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that waiter's loop has closed
                pass

    def waiting(self) -> set[str]:
        """The topics someone is waiting on right now (tests and benchmarks use it as a readiness signal)."""
        with self._lock:
            return set(self._waiters)

    def mark(self, topic: str) -> int:
        """A snapshot to pass to wait(): take it before checking the state, so no change is missed."""
        with self._lock:
            return self._seq.get(topic, 0)

    # ------------------------------------------------------------------ event loop

    async def wait(self, topic: str, mark: int, timeout: float) -> bool:
        """Wait until an event of `topic` is published after `mark` was taken, or the timeout passes."""
        return await self.wait_any({topic: mark}, timeout)

    async def wait_any(self, marks: dict[str, int], timeout: float) -> bool:
        """Wait until an event of any topic in `marks` is published after its mark was taken (mark()), or the
        timeout passes."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if any(self._seq.get(topic, 0) != mark for topic, mark in marks.items()):
                return True
            for topic in marks:
                self._waiters.setdefault(topic, set()).add(entry)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                for topic in marks:
                    waiters = self._waiters.get(topic)
                    if waiters is not None:
                        waiters.discard(entry)
                        if not waiters:
                            del self._waiters[topic]

    @asynccontextmanager
    async def watching(self):
        """Run the cross-process watcher while at least one server using this store is up."""
        self._watching += 1
        if self._watcher is None or self._watcher.done():
            self._ready = asyncio.get_running_loop().create_future()
            self._watcher = asyncio.get_running_loop().create_task(self._watch(self._ready))
        try:
            # from here on no commit of another process is missed: the baseline is read before we go on
            await asyncio.shield(self._ready)
            yield
        finally:
            self._watching -= 1
            if self._watching == 0 and self._watcher is not None:
                # forget it before awaiting its end: a server entering meanwhile starts a watcher of its own
                # instead of joining (and waiting on) the one being cancelled
                watcher, self._watcher, self._ready = self._watcher, None, None
                watcher.cancel()
                try:
                    await watcher
                except asyncio.CancelledError:
                    pass

    async def _watch(self, ready: asyncio.Future) -> None:
        conn = None
        pushes = self.dialect.pushes
        try:
            conn = await asyncio.to_thread(self.dialect.watch_connect, self.db_path)
            version, last_id = (0, 0) if pushes else await asyncio.to_thread(self._baseline, conn)
        except BaseException as exc:  # the servers waiting in watching() hear why
            if conn is not None:
                with self._conn_lock:
                    conn.close()
            if isinstance(exc, asyncio.CancelledError):
                ready.cancel()
            else:
                ready.set_exception(exc)
            raise
        self.hears_own = pushes
        ready.set_result(None)
        try:
            backlog = False
            while True:
                try:  # the database work runs off the event loop: a busy database must not stall every session
                    if pushes:  # blocks until commits are heard, or the timeout
                        events, gap = await asyncio.to_thread(self._heard, conn), False
                    else:
                        await asyncio.sleep(0 if backlog else self.poll_interval)
                        version, last_id, backlog, events, gap = await asyncio.to_thread(
                            self._changes, conn, version, last_id, backlog
                        )
                # Unavailable: the events query lost its connection (the dialect's own words for it)
                except (self.dialect.Error, Unavailable):
                    log.exception("cross-process wake-up check failed; reconnecting")
                    self.hears_own = False  # meanwhile this process publishes its own commits itself
                    conn = await self._reconnect(conn)
                    self.hears_own = pushes
                    backlog = True  # what was committed meanwhile is read once connected again
                    self.wake_everyone()
                    continue
                if gap:
                    self.wake_everyone()
                self.publish(events)
        finally:
            self.hears_own = False
            with self._conn_lock:  # a cancelled check may still be running on its thread
                conn.close()

    async def _reconnect(self, conn):
        """A new watcher connection, retried every second until the database answers again (a listener reads back
        what was committed while it was away: board/postgres.py)."""
        with self._conn_lock:
            try:
                conn.close()
            except Exception:  # a connection that broke may fail to close; it is dropped either way
                pass
        while True:
            await asyncio.sleep(1)
            try:
                return await asyncio.to_thread(self.dialect.watch_connect, self.db_path, conn)
            except self.dialect.Error:
                log.warning("the database is still unavailable to the wake-up watcher; retrying")

    def _heard(self, listener) -> list[tuple[int, Event]]:
        """The events a listening connection hears within PUSH_WAIT, but those this process published itself."""
        with self._conn_lock:
            rows = listener.events(PUSH_WAIT)
        mine = self._mine
        return [(i, e) for i, kind, data in rows if not data.endswith(mine) and (e := decode(kind, data)) is not None]

    def _baseline(self, conn) -> tuple[int, int]:
        with self._conn_lock:
            return (
                self.dialect.commit_counter(conn),
                conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0],
            )

    def _changes(
        self, conn, version: int, last_id: int, force: bool = False
    ) -> tuple[int, int, bool, list[tuple[int, Event]], bool]:
        """If another connection committed: the events written since last_id by other processes."""
        with self._conn_lock:
            current = self.dialect.commit_counter(conn)
            if current == version and not force:
                return version, last_id, False, [], False
            rows = conn.execute(
                "SELECT id, kind, data FROM events WHERE id > ? ORDER BY id LIMIT 1000", [last_id]
            ).fetchall()
        if not rows:
            return current, last_id, False, [], False
        gap = rows[0][0] > last_id + 1  # the rows in between were pruned before we read them
        mine = self._mine  # published by the committing thread here, maybe after this read (a NOTIFY is quick)
        events = [(i, e) for i, kind, data in rows if not data.endswith(mine) and (e := decode(kind, data)) is not None]
        return current, rows[-1][0], len(rows) == 1000, events, gap
