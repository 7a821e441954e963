"""PostgreSQL as the board's store: the second `Dialect`, for several hiveboard nodes on one database.

The board's queries are written once with `?` placeholders in the SQL both databases share; a
connection here translates them to psycopg's `%s` (and a literal `%` to `%%`) and caches the result.
What has no common form is here, as in board/dialect.py for SQLite:

- the write lock: a transaction-scoped advisory lock taken at BEGIN, so writers queue across nodes
  exactly as SQLite's BEGIN IMMEDIATE makes them queue across processes, and read-check-write stays
  atomic everywhere (claims, leases and fencing keep their guarded UPDATEs on top);
- consistent reads: REPEATABLE READ for a read that spans several statements;
- JSON columns (stored as text, read through jsonb);
- keyword search: a weighted tsvector over title, text and code words, GIN-indexed, its words those FTS5's
  'porter unicode61' makes (text search configuration `hiveboard`), ranked by ts_rank times each word's
  IDF, as FTS5's bm25 weighs them;
- wake-ups across nodes: every committed event is also a NOTIFY; the watcher LISTENs on a dedicated
  connection (reconnecting after a failure) instead of polling;
- the schema (board/pg_migrations.py), applied under a session advisory lock so nodes that start
  together migrate once.

psycopg is imported here only, and this module only when a `postgresql://` target is used
(board/db.py dialect_for).
"""

from __future__ import annotations

import re
import select
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import psycopg
from psycopg import waiting
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus, PipelineStatus, TransactionStatus
from psycopg.waiting import READY_R, READY_W, WAIT_R, WAIT_RW, WAIT_W

from . import bridge
from .dialect import Dialect, events_insert, events_parts
from .errors import Conflict, Unavailable, WouldWait, first_line
from .hook_view import WRITE_LOCK  # "HIVE": the advisory lock every write transaction holds (the hook's too)
from .pg_migrations import apply_migrations

MIGRATE_LOCK = 0x48495646  # held while the schema is brought up to date
CHANNEL = "hiveboard_events"
GATHER = 0.01  # seconds: a node reads another node's events at most once in this long (wait_for_commit)
_TOKEN = re.compile(r"'(?:[^']|'')*'|\?|%|[^'?%]+", re.S)


@lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """`?` placeholders to `%s` outside string literals, and `%` to `%%` (psycopg reads both)."""
    out = []
    for token in _TOKEN.findall(sql):
        if token == "?":
            out.append("%s")
        elif token == "%":
            out.append("%%")
        elif token.startswith("'"):
            out.append(token.replace("%", "%%"))
        else:
            out.append(token)
    return "".join(out)


# how a transaction's opening statements begin (begin_write, begin_read): deferred, with nothing after them,
# they never need to reach the server
LOCKING = "SELECT pg_advisory_xact_lock("
TRYING = "SELECT pg_try_advisory_xact_lock("  # a write that must not wait: tried with its first reads (Dialect)
OPENING = ("BEGIN", LOCKING, TRYING)
# what makes a statement that opens with SELECT more than a read: it must not run before the lock is known held
NOT_A_READ = re.compile(r"\bFOR (NO KEY )?(UPDATE|SHARE)\b|\bFOR KEY SHARE\b|pg_notify|nextval|setval|advisory", re.I)


def _reads_only(statements: list[tuple[str, tuple]]) -> bool:
    return all(_reads(sql) for sql, _ in statements)


@lru_cache(maxsize=1024)
def _reads(sql: str) -> bool:
    """Whether a statement only reads (the board's are a few hundred texts: each is looked at once)."""
    return sql.startswith("SELECT") and not NOT_A_READ.search(sql)


_NUMBERED = re.compile(r"%%|%s")
PREPARED_AT_MOST = 1024  # statements a connection keeps prepared (the board's are a few hundred texts)
_PREPARABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


@lru_cache(maxsize=4096)
def _numbered(translated: str) -> bytes:
    """A statement in translate()'s form with PostgreSQL's own `$1, $2 …` placeholders (and `%%` back to `%`)."""
    count = 0

    def place(match: re.Match) -> str:
        nonlocal count
        if match.group() == "%%":
            return "%"
        count += 1
        return f"${count}"

    return _NUMBERED.sub(place, translated).encode()


class _Result:
    """One statement's answer, read in full: the part of a psycopg cursor the board uses (`fetchone`, `fetchall`,
    `fetchmany`, iteration, `close`, `rowcount`, `description`, `pgresult`)."""

    __slots__ = ("pgresult", "_rows", "_at")

    def __init__(self, pgresult, rows: list[tuple]) -> None:
        self.pgresult, self._rows, self._at = pgresult, rows, 0

    def fetchone(self) -> tuple | None:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchmany(self, size: int) -> list[tuple]:
        rows = self._rows[self._at : self._at + size]
        self._at += len(rows)
        return rows

    def fetchall(self) -> list[tuple]:
        rows = self._rows[self._at :]
        self._at = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        self._rows, self._at = [], 0

    @property
    def rowcount(self) -> int:
        count = self.pgresult.command_tuples
        return -1 if count is None else count

    @property
    def description(self) -> list[tuple[str, int]] | None:
        result = self.pgresult
        if not result.nfields:
            return None
        return [(result.fname(i).decode(), result.ftype(i)) for i in range(result.nfields)]


def _answers(pgconn, pipelined: bool):
    """A generator for psycopg's waits: flush what was sent, then read every command's results (a pipeline's up to
    its sync); one list of results per command. One wait for a round trip, where a psycopg cursor in a pipeline
    makes one per statement and one more to end it."""
    while pgconn.flush() != 0:
        ready = yield WAIT_RW
        if ready & READY_R:
            pgconn.consume_input()
    answers: list[list] = []
    current: list = []
    while True:
        while pgconn.is_busy():
            if (yield WAIT_R):
                pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            answers.append(current)
            current = []
            if not pipelined:
                return answers
        elif result.status == ExecStatus.PIPELINE_SYNC:
            return answers
        else:
            current.append(result)


class InPlace(bridge.Tries):
    """Whether a bridged call's round trip is first waited for in place, on the event loop's thread, for at most
    `budget` seconds, before the rest of the wait goes to the loop.

    On a database that answers within a millisecond (on the same machine or the same rack) a round trip waited for
    in place costs the node nothing but the wait: no hand-over to the loop and back, and the call runs on to its
    end instead of interleaving with every other call in service, so calls finish in the order they began (as
    SQLite's do, whose statements are function calls). With eight clients on one node it halved the p50 of the
    board's reads. A wait that outlasts the budget (a slow statement, a lock held elsewhere, a database further
    away) goes on on the loop: the node stalls for at most the budget. Should most of the recent waits outlast
    it (the database is far away), waits go straight to the loop, one in `window` still tried in place to notice
    when the database answers quickly again (`bridge.Tries`)."""

    def __init__(self, budget: float = 0.001, window: int = 16) -> None:
        super().__init__(window)
        self.budget = budget


IN_PLACE = InPlace()
_POLLED = {WAIT_R: select.POLLIN, WAIT_W: select.POLLOUT, WAIT_RW: select.POLLIN | select.POLLOUT}


def _waited_here(gen, fd: int, budget: float) -> tuple[bool, object]:
    """Drive a psycopg wait generator in place for at most `budget` seconds: (True, its result), or (False, the
    state it waits in) once the budget is spent."""
    end = time.monotonic() + budget
    poller = select.poll()
    try:
        state = next(gen)
        poller.register(fd, _POLLED[state])
        while True:
            left = end - time.monotonic()
            events = poller.poll(left * 1000) if left > 0 else []
            if not events:
                return False, state
            event = events[0][1]
            # an error or hang-up is handed over as readable: reading then raises the driver's error
            ready = (READY_R if event & ~select.POLLOUT else 0) | (READY_W if event & select.POLLOUT else 0)
            state = gen.send(ready)
            poller.modify(fd, _POLLED[state])
    except StopIteration as done:
        return True, done.value


def _resumed(state, gen):
    """The rest of a wait generator stopped in `state` (by _waited_here), for psycopg's wait functions."""
    while True:
        ready = yield state
        try:
            state = gen.send(ready)
        except StopIteration as done:
            return done.value


class _Connection(psycopg.Connection):
    """psycopg's connection, whose waits for the server go to the event loop in a bridged call (board/bridge.py),
    once they outlast a brief wait in place (`InPlace`): the loop serves other requests during a long round trip
    instead of a worker thread blocking on it. Once its transaction holds the board's write lock (`locked`), it
    waits in place until the transaction ends: every writer waits for that lock, so it is held for the
    database's time only, not also until the event loop comes back round to this call (bridge.blocking). The
    board's statements go through `exchange`, not psycopg's cursors."""

    locked = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.statements: dict[tuple, bytes] = {}  # (statement, parameter types) -> the name it is prepared under
        self.seen: set[tuple] = set()  # statements sent once, not prepared yet
        self.named = 0  # names given so far (never reused: a name dropped from `statements` may still exist)
        self.transformer = Transformer(self)

    def exchange(self, statements: list[tuple[str, tuple]]) -> list[_Result]:
        """Statements (translate()'s form) in one round trip, each one's answer, without psycopg's cursors: the
        parameters dumped and the rows loaded by psycopg's own adapters (its C code), a statement sent the second
        time prepared under a name and executed by it after that. Several statements, or one to prepare, travel
        as a pipeline; a statement's error is raised once every answer is in (the rest of a pipeline after it
        did not run), as psycopg's pipeline raises it."""
        pgconn, tx = self.pgconn, self.transformer
        self.sending()
        # per command: (the statement's key, its name) for one that prepares it, else None
        sent: list[tuple | None] = []
        commands = []
        for sql, args in statements:
            query = _numbered(sql)
            if args:
                params = tx.dump_sequence(args, [PyFormat.AUTO] * len(args))
                types, formats = tuple(tx.types), tx.formats
            else:
                params, types, formats = None, (), None
            key = (query, types)
            name = self.statements.get(key)
            if name is None and sql.startswith(_PREPARABLE) and len(self.statements) < PREPARED_AT_MOST:
                if key in self.seen:
                    self.seen.discard(key)
                    self.named += 1
                    name = b"hb%d" % self.named
                    commands.append((pgconn.send_prepare, (name, query, types or None)))
                    sent.append((key, name))
                elif len(self.seen) < 4 * PREPARED_AT_MOST:
                    self.seen.add(key)
            if name is None:
                commands.append((pgconn.send_query_params, (query, params, types or None, formats)))
            else:
                commands.append((pgconn.send_query_prepared, (name, params, formats)))
            sent.append(None)
        pipelined = len(commands) > 1
        if pipelined:
            pgconn.enter_pipeline_mode()
        for send, args in commands:
            send(*args)
        if pipelined:
            pgconn.pipeline_sync()
        answers = self.wait(_answers(pgconn, pipelined))
        if pipelined:
            pgconn.exit_pipeline_mode()
        results: list[_Result] = []
        error = None
        for preparing, answer in zip(sent, answers):
            result = answer[-1] if answer else None
            status = result.status if result is not None else ExecStatus.COMMAND_OK
            if status == ExecStatus.FATAL_ERROR and error is None:
                error = psycopg.errors.error_from_result(result, encoding=pgconn._encoding)
            if preparing is not None:
                if status == ExecStatus.COMMAND_OK:
                    key, name = preparing
                    self.statements[key] = name
                continue
            rows = []
            if status == ExecStatus.TUPLES_OK:
                tx.set_pgresult(result)
                rows = tx.load_rows(0, result.ntuples, tuple)
            results.append(_Result(result, rows))
        if error is not None:
            if error.sqlstate == "0A000":  # "cached plan must not change result type": a node migrated the schema
                self.statements.clear()
            raise error
        return results

    def sending(self) -> None:
        """Before a command is sent: `locked` is forgotten once the transaction that took the lock has ended. Only
        here can that be seen (while a command runs the connection is not idle, so `wait` cannot tell); a stale
        flag would wait in place, holding up the event loop, for a round trip that may wait for another call's
        lock."""
        if self.locked and self.pgconn.transaction_status == TransactionStatus.IDLE:
            self.locked = False

    def wait(self, gen, interval: float = 0.1, timeout: float | None = None):
        if self.locked or not bridge.yields():
            return super().wait(gen, interval=interval, timeout=timeout)
        if timeout is None and IN_PLACE.tried():
            done, state = _waited_here(gen, self.pgconn.socket, IN_PLACE.budget)
            IN_PLACE.note(not done)
            if done:
                return state
            gen = _resumed(state, gen)
        return bridge.wait_for(waiting.wait_async(gen, self.pgconn.socket, interval=interval, timeout=timeout))


class PgDatabase:
    """A psycopg connection with the small surface the board uses of sqlite_utils' Database: `execute`,
    `query`, and `conn` (itself) for `execute`/`executemany`/`close`. A lost connection (the server
    restarted or cannot be reached) is `Unavailable`, one sentence the agent can act on; the store then
    opens a new connection for the next call.

    Statements whose answer nobody reads (BEGIN, the write lock, a NOTIFY) are `defer`red: they travel
    with the next statement in one pipeline, so a transaction's opening costs no round trip of its own."""

    def __init__(self, conn, reconnect: Callable[[], object] | None = None):
        self._conn = conn
        self.conn = self
        self._deferred: list[tuple[str, tuple | None]] = []
        self._reconnect = reconnect  # a new psycopg connection to the same database
        self._refused = False  # this transaction tried the write lock and found it held: only ROLLBACK is sent
        self._then: dict[int, tuple[tuple, Callable[[list[dict]], None]]] = {}  # deferred statements' readers
        self.looked_at = -GATHER  # a watcher's connection: when its node last read the events (wait_for_commit)

    def defer(self, sql: str, params: Iterable = (), then: Callable[[list[dict]], None] | None = None) -> None:
        """A statement sent with the next one; `then`: given its rows once that round trip is back."""
        # always a tuple, even empty: psycopg reads the `%%` of translate() back as `%` only then
        statement = (translate(sql), tuple(params))
        self._deferred.append(statement)
        if then is not None:
            self._then[id(statement)] = (statement, then)

    def execute(self, sql: str, params: Iterable = ()):
        """One statement (with what was deferred ahead of it). COMMIT ends a write; END ends a read (so
        losing the server there is not reported as a commit that may have happened)."""
        if sql == "ROLLBACK":
            self._refused, self._then = False, {}
        self._not_refused()
        if sql in ("COMMIT", "END", "ROLLBACK") and self._deferred and not self._begun:
            if sql == "ROLLBACK" or all(ahead.startswith(OPENING) for ahead, _ in self._deferred):
                self._deferred = []  # a transaction that never reached the server: nothing to end
                return None
            # else its statements were all sent ahead (`send`): they go now, with the COMMIT
        if sql == "ROLLBACK":
            self._deferred = []  # what was deferred belongs to the transaction being abandoned
        deferred, self._deferred = self._deferred, []
        # a transaction's first round trip, or a read: if the connection turns out dead (the server restarted
        # since its last use), nothing of it took effect, and it goes again on a new connection. Not a round
        # trip that commits: the server may have committed it and lost only its answer (then: Unavailable, which
        # says to check whether the change took effect)
        again = (
            self._reconnect is not None
            and sql != "COMMIT"
            and ((deferred and deferred[0][0].startswith("BEGIN")) or (not deferred and sql.startswith("SELECT")))
        )
        with _reachable(committing=sql == "COMMIT"):
            try:
                return self._send(deferred, sql, params)
            except psycopg.OperationalError:
                if not again or self.alive:
                    raise
            self._conn.close()
            self._conn = self._reconnect()
            return self._send(deferred, sql, params)

    def _send(self, deferred: list, sql: str, params: Iterable):
        ours = [(translate(sql), tuple(params))]
        deferred = self._tried_first(deferred, ours)
        cursors = self._pipelined([*deferred, *ours])
        self._took_lock(deferred, cursors)
        return cursors[-1]

    def _not_refused(self) -> None:
        if self._refused:  # WouldWait was raised and not heeded: nothing more of this transaction may run
            raise WouldWait("the board's write lock is held; this transaction must be rolled back")

    def _tried_first(self, deferred: list, ours: list) -> list:
        """What of `deferred` goes with `ours`: all of it, a try of the write lock included, when everything after
        that try only reads (reads that turn out to be made without the lock are thrown away); else the try goes
        alone first, one round trip, so that nothing writes before the lock is known held."""
        at = next((i for i, (sql, _) in enumerate(deferred) if sql.startswith(TRYING)), None)
        if at is None or _reads_only([*deferred[at + 1 :], *ours]):
            return deferred
        cursors = self._pipelined(deferred[: at + 1])
        self._took_lock(deferred[: at + 1], cursors)
        return deferred[at + 1 :]

    def _pipelined(self, statements: list[tuple[str, tuple]]) -> list[_Result]:
        """Statements (translated) in one round trip; their answers (`_Connection.exchange`)."""
        results = self._conn.exchange(statements)
        if self._then:
            for statement, result in zip(statements, results):
                reader = self._then.pop(id(statement), None)
                if reader is not None and reader[0] is statement:
                    reader[1](_dicts(result))
        return results

    def _took_lock(self, sent: list, cursors: list) -> None:
        """After a round trip: if it took the board's write lock, the rest of the transaction waits in place; if it
        tried the lock and found it held, `WouldWait` (nothing was written: the transaction only read)."""
        for (sql, _), cursor in zip(sent, cursors):
            if sql.startswith(TRYING) and not cursor.fetchone()[0]:
                self._refused = True
                raise WouldWait("the board's write lock is held")
            if sql.startswith((LOCKING, TRYING)):
                self._conn.locked = True

    def rows_many(self, statements: list[tuple[str, Iterable]], end: bool = False) -> list[list[dict]]:
        """Statements that do not depend on each other's answers, in one round trip (with what was
        deferred); each one's rows as dicts. `end`: the transaction ends in the same round trip."""
        self._not_refused()
        deferred, self._deferred = self._deferred, []
        ours = [(translate(sql), tuple(params)) for sql, params in statements]
        with _reachable():
            deferred = self._tried_first(deferred, ours)
            cursors = self._pipelined([*deferred, *ours, *([("END", ())] if end else [])])
        self._took_lock(deferred, cursors)
        return [_dicts(cursor) for cursor in cursors[len(deferred) : len(deferred) + len(ours)]]

    def commit_after(self, sql: str, params: Iterable, then: tuple[str, Iterable]) -> list[tuple]:
        """What was deferred, `sql`, `then` and COMMIT in one round trip; the rows `sql` returned."""
        self._not_refused()
        deferred, self._deferred = self._deferred, []
        ours = [(translate(sql), tuple(params)), (translate(then[0]), tuple(then[1])), ("COMMIT", ())]
        with _reachable():
            deferred = self._tried_first(deferred, ours)  # the try alone first: these write
        with _reachable(committing=True):
            cursors = self._pipelined([*deferred, *ours])
        return cursors[len(deferred)].fetchall()

    def executemany(self, sql: str, seq: Iterable) -> None:
        self._not_refused()
        with _reachable():  # a try of the lock goes alone first: these write
            self._deferred = self._tried_first(self._deferred, [(sql, ())])
        if self._deferred:
            self.execute("SELECT 1")
        self._conn.sending()
        with _reachable(), self._conn.cursor() as cursor:
            cursor.executemany(translate(sql), [tuple(p) for p in seq])

    def query(self, sql: str, params: Iterable = ()) -> Iterator[dict]:
        return iter(_dicts(self.execute(sql, params)))

    @property
    def alive(self) -> bool:
        # a pipeline the server broke off mid-way can leave the connection in pipeline mode, unusable, and a wait
        # given up (a call cancelled mid-way) a command running
        conn = self._conn
        pgconn = conn.pgconn
        return (
            not (conn.closed or conn.broken)
            and pgconn.pipeline_status == PipelineStatus.OFF
            and pgconn.transaction_status != TransactionStatus.ACTIVE
        )

    @property
    def _begun(self) -> bool:
        return self.alive and self._conn.info.transaction_status != TransactionStatus.IDLE

    @property
    def in_transaction(self) -> bool:
        return self._begun or bool(self._deferred and self._deferred[0][0].startswith("BEGIN"))

    def close(self) -> None:
        self._deferred, self._refused, self._then = [], False, {}
        self._conn.close()


def _dicts(cursor) -> list[dict]:
    """The rows of the cursor's result as dicts, the column names read from the result itself (cheaper than
    the cursor's description, whose columns the driver builds one object each)."""
    result = cursor.pgresult
    if result is None or not result.nfields:  # a statement that returns no rows
        return []
    keys = [result.fname(i).decode() for i in range(result.nfields)]
    return [dict(zip(keys, row)) for row in cursor.fetchall()]


@contextmanager
def _reachable(committing: bool = False) -> Iterator[None]:
    """The driver's "cannot reach the server" as Unavailable, a guarded update that found its row moved on
    (update_version) as Conflict (its other errors pass through)."""
    try:
        yield
    except psycopg.errors.DivisionByZero:
        raise Conflict("a card changed meanwhile; nothing was written; call get_task and retry") from None
    except psycopg.OperationalError as exc:
        reason = first_line(exc)
        if committing:
            raise Unavailable(
                f"the database became unavailable while committing ({reason}); check with get_task or "
                "get_messages whether the change took effect before you retry",
                reason,
            ) from None
        raise Unavailable(
            f"the database is unavailable ({reason}); nothing was written; retry in a moment", reason
        ) from None


class PostgreSQL(Dialect):
    """One PostgreSQL database shared by every node."""

    name = "postgresql"
    pushes = True
    awaits = True  # _Connection hands its waits to the event loop in a bridged call
    writing_ctes = True

    def __init__(self) -> None:
        self.Error = psycopg.Error

    def connect(self, target: str) -> PgDatabase:
        # autocommit: the store begins and commits its transactions itself, as on SQLite
        def connection():
            return _Connection.connect(target, autocommit=True, application_name="hiveboard")

        with _reachable():
            return PgDatabase(connection(), connection)

    def alive(self, db: PgDatabase) -> bool:
        return db.alive

    def migrate(self, db: PgDatabase) -> list[str]:
        return apply_migrations(db, MIGRATE_LOCK)

    def begin_write(self, db: PgDatabase) -> None:
        db.defer("BEGIN")  # sent with the transaction's first statement, the lock too
        db.defer("SELECT pg_advisory_xact_lock(?)", [WRITE_LOCK])

    def try_begin_write(self, db: PgDatabase, lazily: bool = False) -> bool:
        db.defer("BEGIN")
        if lazily:  # tried with the transaction's first reads (PgDatabase._tried_first): a round trip fewer
            db.defer("SELECT pg_try_advisory_xact_lock(?)", [WRITE_LOCK])
            return True
        if db.execute("SELECT pg_try_advisory_xact_lock(?)", [WRITE_LOCK]).fetchone()[0]:
            return True
        db.execute("ROLLBACK")
        return False

    def begin_read(self, db: PgDatabase) -> None:
        db.defer("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def read_many(self, db: PgDatabase, statements: list[tuple[str, list]]) -> list[list[dict]]:
        """One round trip: the transaction's beginning, the statements and its end."""
        self.begin_read(db)
        try:
            return db.rows_many(statements, end=True)
        except BaseException:
            if db.in_transaction:  # a statement failed: the rest of the pipeline did not run, END included
                db.execute("ROLLBACK")
            raise

    def in_transaction(self, db: PgDatabase) -> bool:
        return db.in_transaction

    def optimize(self, db: PgDatabase) -> None:
        db.execute("ANALYZE")

    def after_copy(self, db: PgDatabase, tables: tuple[str, ...]) -> None:
        for table in tables:  # an identity does not see ids given explicitly: move it past them
            db.execute(
                f"SELECT setval(pg_get_serial_sequence(?, 'id'), coalesce(max(id), 0) + 1, false) FROM {table}",
                [table],
            )

    def send(
        self, db: PgDatabase, sql: str, params: list | tuple = (), then: Callable[[list[dict]], None] | None = None
    ) -> None:
        db.defer(sql, params, then)

    def update_version(self, db: PgDatabase, table: str, row: dict, sets: dict) -> dict | None:
        """Sent with the next statement, not waited for: the row after it is the row read with `sets` and the
        new version (the UPDATE changes nothing else). Should the row not be at that version, the statement
        divides by zero, failing the transaction (Conflict: nothing is written)."""
        assignments = ", ".join(f"{column} = ?" for column in sets)
        db.defer(
            f"WITH u AS (UPDATE {table} SET {assignments}, version = version + 1 WHERE id = ? AND version = ? "
            "RETURNING 1) SELECT 1 / (SELECT count(*) FROM u)",
            [*sets.values(), row["id"], row["version"]],
        )
        return {**row, **sets, "version": row["version"] + 1}

    def send_many(self, db: PgDatabase, sql: str, seq: list) -> None:
        for params in seq:
            db.defer(sql, params)

    def commit(
        self, db: PgDatabase, events: list[tuple[str, str]], origin: str = "", pushed: bool = False
    ) -> list[int]:
        """One round trip: what was deferred, the events' rows (in statements of EVENTS_AT_ONCE), a NOTIFY naming
        the origin (delivered to every node's watcher when, and only if, the transaction commits; the other nodes'
        watchers read the rows, this node's has them already), COMMIT."""
        if not events:
            if pushed:  # only statements of the transaction wrote events' rows
                db.defer("SELECT pg_notify(?, ?)", [CHANNEL, origin])
            db.execute("COMMIT")
            return []
        # in parts (a statement takes at most 65,535 parameters), all of them sent with the COMMIT
        *ahead, last = events_parts(events)
        ids: list[int] = []
        for part in ahead:
            db.defer(*events_insert(part), then=lambda found: ids.extend(r["id"] for r in found))
        ids += [row[0] for row in db.commit_after(*events_insert(last), ("SELECT pg_notify(?, ?)", [CHANNEL, origin]))]
        return sorted(ids)  # a sequence numbers the rows in the order they are written: sorted, they are the events'

    def commit_counter(self, conn) -> int:
        return 0  # nodes are woken by NOTIFY (wait_for_commit), not by a counter

    def size(self, db: PgDatabase) -> int:
        return db.execute("SELECT pg_database_size(current_database())").fetchone()[0]

    def analyze_apart(self, target: str, table: str) -> bool:
        """ANALYZE takes a lock of its own, which no board statement waits for: not under the board's write lock (on
        a memory of 64,000 items it reads for 150 ms)."""
        with psycopg.connect(target, autocommit=True, application_name="hiveboard-analyze") as conn:
            conn.execute(f"ANALYZE {table}")
        return True

    def watch_connect(self, target: str) -> PgDatabase:
        conn = _Connection.connect(target, autocommit=True, application_name="hiveboard-watch")
        conn.execute(f"LISTEN {CHANNEL}")
        return PgDatabase(conn)

    def wait_for_commit(self, conn: PgDatabase, timeout: float, origin: str = "") -> bool:
        """Whether another node (or process) committed within `timeout`. This node's own commits, whose events
        its notifier has already, are waited through here: they do not bring the wait back to the event loop
        (two hand-overs to a thread and back for each of this node's writes).

        Another node's commit is answered at once, unless the last one was less than GATHER ago: then the rest of
        that interval is waited first, and one look at the events serves every commit heard meanwhile. On a quiet
        board a wake-up costs nothing more; on a busy one each node reads the events at most 1/GATHER times a
        second instead of once per commit of every other node (with three nodes, two reads a write)."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            heard = [n.payload for n in conn._conn.notifies(timeout=left, stop_after=1)]
            if not heard:
                return False
            heard += [n.payload for n in conn._conn.notifies(timeout=0)]  # one look at the events serves them all
            if any(payload != origin for payload in heard):  # a node of an older version sends ''
                gathered = conn.looked_at + GATHER - time.monotonic()
                if gathered > 0:
                    time.sleep(gathered)
                    list(conn._conn.notifies(timeout=0))  # heard meanwhile: the look about to be taken serves them
                conn.looked_at = time.monotonic()
                return True
        return False

    def json_has(self, column: str) -> str:
        return f"EXISTS (SELECT 1 FROM jsonb_array_elements_text(({column})::jsonb) AS e(value) WHERE e.value = ?)"

    def json_elements(self, column: str, alias: str) -> str:
        return f"jsonb_array_elements(({column})::jsonb) AS {alias}(value)"

    def json_texts(self, column: str, alias: str) -> str:
        return f"jsonb_array_elements_text(({column})::jsonb) AS {alias}(value)"

    def json_field(self, expr: str, key: str) -> str:
        return f"(({expr})::jsonb ->> '{key}')"

    def json_number(self, expr: str, key: str) -> str:
        return f"((({expr})::jsonb ->> '{key}')::double precision)"

    def keyword_match(self, words: list[str]) -> str | None:
        # the words are \w+ runs (knowledge.query_words), so they need no quoting for to_tsquery
        return " | ".join(words) or None

    def keyword_count(self) -> str:
        return "SELECT count(*) FROM memory_items WHERE search @@ to_tsquery('hiveboard', ?)"

    def keyword_ids(self) -> str:
        return "SELECT id FROM memory_items WHERE search @@ to_tsquery('hiveboard', ?)"

    def keyword_ranked(self) -> str:
        # Ranked as FTS5's bm25 ranks: each query word's weight in the item (ts_rank: its frequency, saturating,
        # the title (A) counting twice the text (B) and the code words (C) as bm25(memory_fts, 2.0, 1.0) has
        # it, divided by 1 + the log of the item's length) times the word's IDF, summed over the words. ts_rank
        # of the whole query has no IDF: a common word counted as much as the rare one the query is about.
        # One index scan per word finds its rows: their count is its document frequency.
        return (
            "WITH w AS MATERIALIZED (SELECT x AS word, to_tsquery('hiveboard', x) AS q "
            "FROM unnest(string_to_array(CAST(? AS text), ' | ')) x), "
            "s AS MATERIALIZED (SELECT m.id, w.word, ts_rank('{0.1, 0.5, 0.5, 1.0}', m.search, w.q, 1) AS r "
            "FROM w JOIN memory_items m ON m.search @@ w.q), "
            "d AS (SELECT word, ln(1 + ((SELECT coalesce(max(id), 0) FROM memory_items) - count(*) + 0.5) "
            "/ (count(*) + 0.5)) AS idf FROM s GROUP BY word) "
            "SELECT s.id FROM s JOIN d USING (word) GROUP BY s.id ORDER BY sum(d.idf * s.r) DESC, s.id"
        )
