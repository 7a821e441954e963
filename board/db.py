"""The store: one connection per thread, write transactions, and the events they commit.

Sync MCP tools run on worker threads and several server processes may share one database, so every
write goes through `Store.write(*scopes)`, which takes its locks up front (its dialect says which: SQLite's one
write lock, board/dialect.py; on PostgreSQL those of the scopes, board/postgres.py). Events emitted inside it reach
the notifier once it has committed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from ._sqlite_utils import Database
from .dialect import Dialect, SQLite, as_dicts
from .errors import Unavailable, WouldWait
from .events import Event, Notifier, encode, prune_from
from .optional import POSTGRES, need


def now() -> float:
    return time.time()


_second: tuple[int, str] = (0, "1970-01-01T00:00:00")  # the last whole second `iso` formatted, and its text


@lru_cache(maxsize=4096)
def _second_text(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def iso(ts: float | None) -> str | None:
    """Epoch seconds to an ISO 8601 UTC string (what agents read), to the millisecond: what
    `datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")` gives, without a datetime (an answer
    carries dozens; most share their second with the one before, and items read again keep theirs)."""
    global _second
    if ts is None:
        return None
    if ts < 0:  # before 1970 (a date an agent gave): rare enough for the datetime's own way
        return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    frac, whole = math.modf(ts)
    micro = round(frac * 1e6)  # as datetime rounds: half to even, to the microsecond, then cut to the millisecond
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    second, last = int(whole), _second
    if last[0] != second:
        last = _second = (second, _second_text(second))
    return f"{last[1]}.{micro // 1000:03d}Z"


def placeholders(values) -> str:
    """One `?` per value, comma-separated: what `IN (…)` or `VALUES (…)` takes for a list of parameters."""
    return ",".join("?" * len(values))


def for_update(db: Database, sql: str, skip: bool = False) -> str:
    """A SELECT of rows a write reads to change them, locking them until it ends on a database server, where writes
    run together (board/postgres.py); `skip`: passing over rows another write holds (the next item of a queue). As it
    is on SQLite, whose one writer is alone, and outside a write."""
    return sql + getattr(db, "skip_locked" if skip else "lock_rows", "")


def rows(db: Database, sql: str, params: list | tuple = ()) -> list[dict]:
    """A statement's rows as dicts (a SELECT, or a write with RETURNING), all fetched.

    sqlite-utils' Database.query wraps each statement in a savepoint (two more statements) so that it
    can refuse one that returns no rows; the board's statements on its hot paths always return rows."""
    return as_dicts(db.conn.execute(sql, params))


def rows_many(db: Database, statements: list[tuple[str, list | tuple]]) -> list[list[dict]]:
    """Several statements' rows, each as `rows` gives them: statements that need none of each other's
    answers, which a database server gets in one round trip (PostgreSQL's pipeline)."""
    together = getattr(db, "rows_many", None)
    if together is not None and statements:  # none: what was deferred waits for the next statement
        return together(statements)
    return [rows(db, sql, params) for sql, params in statements]


log = logging.getLogger("hiveboard")
_borrowed = threading.local()  # the pooled stores whose connection this thread holds


DEFAULT_POOL = 24  # a database server's connections per Store unless told (the server's own: --db-pool, 24)
_NEW = object()  # `Store._take`: a place in the pool for a new connection


_FREE = contextlib.nullcontext()  # `Store._mutex` on a database server
_here = threading.local()  # this thread runs a call that must not wait for the write lock (`not_waiting`)


@contextmanager
def not_waiting() -> Iterator[None]:
    """Run a call that must not wait for SQLite's write lock (on an event loop's own thread): its first write
    transaction raises `WouldWait` instead of waiting when another thread or process holds the lock,
    before anything was written, so the whole call can be run again where it may wait. A write after that
    first one waits as usual (the call has written: running it again would write twice)."""
    _here.active, _here.wrote = True, False
    try:
        yield
    finally:
        _here.active = False


def release_connections() -> None:
    """Hand back every pooled connection this thread holds (see Store's `pool`): a worker thread calls it
    when it finishes a call, so that threads waiting for their next call hold none."""
    for store in getattr(_borrowed, "stores", ()):
        store.release()
    _borrowed.stores = set()


def is_url(target: str) -> bool:
    """Whether a --db target is a URL (scheme://…) rather than a file path."""
    return "://" in target and target.split("://", 1)[0].replace("+", "").isalpha()


def redact(target: str) -> str:
    """A target as messages and logs may show it: a URL without its password."""
    return re.sub(r"^([a-z][a-z0-9+.-]*://[^:/@]+):[^@/]*@", r"\1:***@", target, flags=re.I)


def dialect_for(target: str) -> Dialect:
    """The dialect of a store target: a `postgresql://` URL, or a SQLite file path. Any other URL is refused."""
    if not is_url(target):
        return SQLite()
    scheme = target.split("://", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        need("psycopg", POSTGRES)  # the `postgres` extra: refused here in one sentence, before board/postgres.py
        from .postgres import PostgreSQL

        return PostgreSQL()
    raise ValueError(f"the database {scheme}://… is not supported: give a SQLite file path or a postgresql:// URL")


class Store:
    """One database shared by threads, processes and (on PostgreSQL) nodes: a SQLite file or a
    `postgresql://` URL (board/dialect.py, board/postgres.py).

    read_only: an existing database opened to read only (a read-only data directory), creating no file and
    writing nothing: no migration (`pending` names those it lacks), no statistics, and `try_write` never
    begins; `write` is refused.

    pool: at most this many connections at once (a database server's are few and shared by every node);
    a thread keeps its connection until it hands it back (`release_connections()` when it finishes a
    call, or when it ends), the next thread takes a handed-back one before opening another, and a thread
    that finds all in use waits up to `pool_wait` seconds, then gets `Unavailable` (one sentence). None: on
    SQLite a connection per thread, as many as threads; on a database server DEFAULT_POOL."""

    def __init__(self, path: str | Path, read_only: bool = False, pool: int | None = None, pool_wait: float = 5.0):
        self.path = str(path)
        self.read_only = read_only
        self.dialect = dialect_for(self.path)
        self.target = self.dialect.read_only_target(self.path) if read_only else self.path
        if self.dialect.name == "sqlite" and self.path != ":memory:" and not read_only:
            Path(self.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # only its owner may read the board (agents' token hashes, direct messages); SQLite gives its
            # -wal and -shm files the database file's permissions
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        self._local = threading.local()  # a thread's connection and its transaction's events
        self.notifier = Notifier(self.target, self.dialect)
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._all_lock = threading.Lock()
        if pool is None and not self.dialect.embedded:
            pool = DEFAULT_POOL
        self.pool, self.pool_wait = pool, pool_wait
        self._pooling = bool(pool)
        self._opened = 0  # connections of the pool in existence (in threads' hands or idle)
        # a connection was handed back, or a place freed; reentrant: a connection dropped by the garbage
        # collector hands itself back on whatever thread that runs, which may be inside the pool already
        self._returned = threading.Condition(threading.RLock())
        self._idle: list = []  # connections handed back by threads that ended, for the next thread
        self._line: deque[object] = deque()  # who waits for a connection, first come first
        self._write_lock = threading.RLock()
        self.pending: list[str] = []
        try:
            if read_only:
                self.pending = self._unapplied()
            else:
                with self.write() as db:
                    self.dialect.migrate(db)
                self.optimize()
        except BaseException:
            self.close()  # a damaged file: leave no connection (nor its -wal and -shm files) behind
            raise

    def _unapplied(self) -> list[str]:
        """The migrations this database lacks, found by applying them in a transaction that is rolled back."""
        db = self.db
        db.execute("BEGIN")
        try:
            return self.dialect.migrate(db)
        except self.dialect.Error as exc:
            if not str(exc).startswith("attempt to write"):  # only a read-only file refuses a migration's write
                raise
            return ["(unknown: the file cannot be written)"]
        finally:
            db.execute("ROLLBACK")

    def _connect(self) -> _Connection:
        if not self._pooling:
            holder = _Connection(self.dialect.connect(self.target))
        else:
            holder = _Connection(self._pooled(), self._hand_back)
        with self._all_lock:
            self._all.add(holder)
        return holder

    def _pooled(self):
        """A handed-back connection, or a new one within the pool's size; waits up to pool_wait for either, in
        turn: while anyone waits, the first to have asked is served first."""
        ticket = object()
        with self._returned:
            got = None if self._line else self._take()  # others wait already: after them
            if got is None:
                self._line.append(ticket)
        if got is None:
            deadline = time.monotonic() + self.pool_wait
            try:
                while True:
                    with self._returned:
                        if self._line[0] is ticket and (got := self._take()) is not None:
                            break
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise Unavailable(
                                f"all {self.pool} database connections of this node are in use (waited "
                                f"{self.pool_wait:g} s); nothing was written; retry in a moment",
                                "connection pool exhausted",
                            )
                        self._returned.wait(left)
            finally:
                with self._returned:
                    self._line.remove(ticket)
                    self._returned.notify_all()  # the next in line may be a thread
        if got is not _NEW:
            return got
        try:
            return self.dialect.connect(self.target)
        except BaseException:
            self._freed()
            raise

    def _take(self):
        """Under `_returned`: a sound handed-back connection, else `_NEW` (a place for a new one, counted), else
        None (all in use)."""
        while self._idle:
            db = self._idle.pop()
            if self.dialect.alive(db):
                return db
            _close(db)
            self._opened -= 1
        if self._opened < self.pool:
            self._opened += 1
            return _NEW
        return None

    def _freed(self) -> None:
        with self._returned:
            self._opened -= 1
            self._returned.notify_all()

    def _hand_back(self, db) -> None:
        """A thread's connection when it is done with it: kept for the next thread if it is sound and idle."""
        try:
            sound = self.dialect.alive(db) and not self.dialect.in_transaction(db)
        except Exception:
            sound = False
        with self._returned:
            if sound and self._pooling:
                self._idle.append(db)
                self._returned.notify_all()
                return
        _close(db)
        if self._pooling:
            self._freed()

    @property
    def db(self) -> Database:
        """This thread's connection (autocommit; use write() for changes)."""
        holder = getattr(self._local, "conn", None)
        if holder is not None and not self.dialect.alive(holder.db):
            holder.close()  # the server went away since: this thread's next statement gets a new connection
            holder = self._local.conn = None
        if holder is None:
            holder = self._local.conn = self._connect()
            if self._pooling:
                stores = getattr(_borrowed, "stores", None)
                if stores is None:
                    stores = _borrowed.stores = set()
                stores.add(self)
        return holder.db

    def release(self) -> None:
        """Hand this thread's connection back to the pool unless it is inside a transaction."""
        holder = getattr(self._local, "conn", None)
        if not self._pooling or holder is None or holder.db is None or self.dialect.in_transaction(holder.db):
            return
        self._local.conn = None
        holder.close()  # kept for the next thread that needs one (_hand_back)

    def optimize(self) -> None:
        """Refresh the query planner's statistics; run at open and as data grows."""
        self.dialect.optimize(self.db)

    def analyze(self, table: str) -> None:
        """Refresh the planner's statistics of one table (`Dialect.analyze`) outside the caller's transactions: on a
        database server on a connection of its own, on SQLite in a write of its own (its statistics are a table).
        Never fails: the statistics only guide the planner."""
        try:
            if not self.dialect.analyze_apart(self.target, table):
                with self.write() as db:
                    self.dialect.analyze(db, table)
        except Exception:  # autovacuum, or the next doubling, takes them
            log.warning("could not refresh the planner's statistics of %s", table, exc_info=True)

    @contextmanager
    def write(self, *scopes: str) -> Iterator[Database]:
        """A write transaction; rolled back on any error. `scopes`: what its checks span beyond the rows it reads to
        change (board/postgres.py: on PostgreSQL its locks; none, the whole board); SQLite has one writer anyway.

        Events emitted inside it reach the notifier once it has committed.
        """
        if self.read_only:
            raise PermissionError(f"{self.path} was opened read-only")
        if getattr(_here, "active", False) and not _here.wrote:  # a call that must not wait (`not_waiting`)
            with self.try_write(*scopes) as db:
                if db is None:
                    raise WouldWait
                _here.wrote = True
                yield db
            return
        # Threads of this process queue on a mutex (an immediate hand-over) on SQLite; only other processes meet
        # its busy handler, which sleeps in growing steps while it waits
        db = self.db
        with self._mutex():
            self.dialect.begin_write(db, scopes)
            yield from self._transaction(db)
        self._publish()

    @contextmanager
    def try_write(self, *scopes: str) -> Iterator[Database | None]:
        """A write transaction (`write`) if its locks can be taken at once, else None: another thread or process is
        writing. For upkeep a reader may do but need not wait for, since every writer does it first anyway (the
        lease sweep)."""
        if self.read_only:
            yield None
            return
        lock = self._mutex()
        if lock is not _FREE and not lock.acquire(blocking=False):
            yield None
            return
        try:
            db = self.db
            if not self.dialect.try_begin_write(db, scopes):
                yield None
                return
            yield from self._transaction(db)
        finally:
            if lock is not _FREE:
                lock.release()
        self._publish()

    def _mutex(self):
        """SQLite's in-process write mutex; on a database server none (its locks are the database's)."""
        return self._write_lock if self.dialect.embedded else _FREE

    def _transaction(self, db: Database) -> Iterator[Database]:
        """The body of a write transaction begun: committed, or rolled back on any error."""
        # whether the notifier hears this transaction's commit from the database (a pushing dialect's listener): then
        # it publishes the events, in commit order among every node's, and they are not published here
        self._local.heard = self.notifier.hears_own
        self._local.pending, self._local.written = [], []
        self._local.noted = {}
        try:
            yield db
            self._local.noted = {}
            events = self._local.pending
            origin = self.origin
            rows = [(event.kind, encode(event, origin)) for event in events]
            written = [(i, event.kind, encode(event, origin)) for i, event in self._local.written]
            ids = self.dialect.commit(db, rows, written)
            self._local.pending = list(zip(ids, events))
            if self._local.written:  # events whose rows statements of the transaction wrote: in the order of their ids
                self._local.pending = sorted([*self._local.pending, *self._local.written], key=lambda pair: pair[0])
        except BaseException:
            self._local.pending, self._local.noted = [], {}
            try:
                if self.dialect.in_transaction(db):  # a failed COMMIT must not leave the locks held
                    db.execute("ROLLBACK")
            except Exception:  # the connection is gone too: it is dropped, and the first error stands
                self._discard()
            raise
        if (upto := prune_from(ids)) is not None:  # after the commit, on its own: it never fails the write
            try:
                db.execute("DELETE FROM events WHERE id <= ?", [upto])
            except Exception:  # the next thousandth event prunes them
                log.warning("could not prune old events", exc_info=True)

    def _discard(self) -> None:
        """Close this thread's connection for good (its next statement opens another)."""
        holder, self._local.conn = getattr(self._local, "conn", None), None
        if holder is not None and holder.db is not None:
            _close(holder.db)  # closed, it is not handed back to the pool (which frees its place)
            holder.close()

    def _publish(self) -> None:
        events, self._local.pending = self._local.pending, []
        if not self._local.heard:
            self.notifier.publish(events)

    @property
    def origin(self) -> str:
        """What the current write transaction's events' rows name as their origin (`encode`): this process's
        notifier's when it publishes them itself at commit (and its watcher skips them), else none."""
        return "" if getattr(self._local, "heard", False) else self.notifier.origin

    def emit_written(self, db: Database, sql: str, params: list, event: Callable[[dict], tuple[int, Event]]) -> None:
        """In a write transaction, a statement that writes an event's row itself (the row's data must be what `encode`
        gives, with `origin`) and returns one row, from which `event` makes (the event row's id, the event). The
        notifier hears of the event once the transaction commits, in the order of its id among the transaction's
        events."""
        self._local.written.append(event(rows(db, sql, params)[0]))

    def note(self, key: Hashable, value) -> None:
        """In a write transaction, something it wrote that a later step of it would otherwise read back (a round trip
        on a database server); `noted` gives it until the transaction ends."""
        self._local.noted[key] = value

    def noted(self, key: Hashable):
        """What the current write transaction `note`d under `key`, else None."""
        return getattr(self._local, "noted", {}).get(key)

    def emit(self, event: Event) -> None:
        """Record an event in the current write transaction: its row is written with the commit (one
        statement for all of a transaction's events), the notifier hears of it once that commits (other
        processes through the `events` table), and never if it rolls back."""
        self._local.pending.append(event)

    def in_transaction(self) -> bool:
        """Whether this thread's connection is inside a transaction (its own writes are visible only to it)."""
        return self.dialect.in_transaction(self.db)

    @contextmanager
    def read(self) -> Iterator[Database]:
        """A consistent snapshot for several reads."""
        db = self.db
        self.dialect.begin_read(db)
        try:
            yield db
        finally:
            db.execute("END")  # COMMIT, as a read says it (nothing it did can have been lost)

    def read_many(self, statements: list[tuple[str, list | tuple]]) -> list[list[dict]]:
        """Reads that need none of each other's answers, in one snapshot: each one's rows as dicts (on a
        database server, one round trip with the transaction's beginning and end)."""
        return self.dialect.read_many(self.db, statements)

    def open_connections(self) -> int:
        """How many connections this store holds open (one per live thread that used it)."""
        with self._all_lock:
            return len(self._all)

    def close(self) -> None:
        self._pooling = False  # from now on a connection handed back is closed
        with self._all_lock:
            holders, self._all = list(self._all), weakref.WeakSet()
        with self._returned:
            idle, self._idle = self._idle, []
        for holder in holders:
            holder.close()
        for db in idle:
            _close(db)
        self._local = threading.local()


def _close(db: Database) -> None:
    try:
        db.conn.close()
    except Exception:  # at exit or from a finalizer: the connection is going away either way
        pass


class _Connection:
    """A thread's connection; closed (or handed back to its store's pool) when the thread ends (worker
    threads retire when idle)."""

    __slots__ = ("db", "_done", "__weakref__")

    def __init__(self, db: Database, done=_close):
        self.db, self._done = db, done

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            try:
                self._done(db)
            except Exception:  # at exit or from a finalizer
                pass

    __del__ = close
