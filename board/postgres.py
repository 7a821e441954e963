"""PostgreSQL as the board's store: the second `Dialect`, for several hiveboard nodes on one database.

The board's queries are written once with `?` placeholders in the SQL both databases share; a connection here
translates them to psycopg's `%s` (and a literal `%` to `%%`). Everything else is psycopg's public API: plain
connections in autocommit mode (the store begins and commits its transactions itself, as on SQLite), its
automatic prepared statements, and its pipeline mode where a transaction's statements need none of each other's
answers (`PgDatabase.pipelined`).

Concurrency is PostgreSQL's own. A write transaction runs at READ COMMITTED and holds only what its work needs:
- the rows it changes, locked by the guarded UPDATE that changes them, and read `FOR UPDATE` where the write
  reads a row before it decides (`Dialect.locking`: a card in a move; `Dialect.skip_locked`: claim-next and
  the lease sweep pass over cards another transaction holds instead of queueing behind it);
- a scope lock for a check that spans rows (`Store.write(*scopes)`: one agent's quotas, one review's critics,
  one repository's reservations), a transaction-scoped advisory lock per scope, all taken in one statement, in
  one order, at BEGIN, so two writers never wait for each other in a cycle;
- the board lock (board/scopes.py `BOARD_LOCK`): a write that names scopes holds it shared, which never makes two such writes
  wait for each other; a write that names none (migrations, a restore, rare administration whose checks were
  not split into scopes) holds it exclusively, and so runs alone, as every write did on one lock.

Change feed: each commit that wrote events sends them in NOTIFY payloads in the same transaction. PostgreSQL
delivers a transaction's notifications only if it commits, and to every listening session in commit order, so a
node that listens hears every other node's events once each, in commit order (its own too, when it was
listening as they were written: `Listener`). Should its listening connection be lost, what was committed
meanwhile is read back from the events table by transaction id against the snapshots the listener took
(`Listener`'s docstring); waiters are woken as well.

Also here: consistent reads (REPEATABLE READ), JSON columns (text read through jsonb), keyword search (a
weighted tsvector, its words those of FTS5's 'porter unicode61', ranked by ts_rank times each word's IDF), and the
schema (board/pg_migrations.py), applied under an advisory lock so nodes that start together migrate once.

psycopg is imported here only, and this module only when a `postgresql://` target is used
(board/db.py dialect_for).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import psycopg
from psycopg.pq import TransactionStatus

from .dialect import Dialect, as_dicts, events_insert, events_parts
from .errors import Conflict, Unavailable, first_line
from .pg_migrations import apply_migrations
from .scopes import lock_statement

MIGRATE_LOCK = 0x48495646  # held while the schema is brought up to date
CHANNEL = "hiveboard_events"
PAYLOAD_MAX = 7900  # bytes of one NOTIFY's payload (PostgreSQL takes fewer than 8000)
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


class PgDatabase:
    """A psycopg connection with the small surface the board uses of sqlite_utils' Database: `execute`, `query`,
    and `conn` (itself) for `execute`/`executemany`/`close`. A lost connection (the server restarted or cannot be
    reached) is `Unavailable`, one sentence the agent can act on; a connection found dead at a transaction's first
    round trip is replaced and the round trip sent again (nothing of it took effect)."""

    def __init__(self, conn: psycopg.Connection, reconnect=None):
        self._conn = conn
        self.conn = self
        self._reconnect = reconnect  # a new psycopg connection to the same database
        self.writing = False  # inside a write transaction (`for_update` locks the rows it reads)
        self._opening: list[tuple[str, Iterable]] = []  # a write's BEGIN and locks, sent with its first statement

    @property
    def lock_rows(self) -> str:
        """What a SELECT of rows a write reads to change them ends with (board/db.py for_update)."""
        return " FOR NO KEY UPDATE" if self.writing else ""

    @property
    def skip_locked(self) -> str:
        """The same, passing over rows another write holds (a queue's next item)."""
        return " FOR NO KEY UPDATE SKIP LOCKED" if self.writing else ""

    def execute(self, sql: str, params: Iterable = ()) -> psycopg.Cursor:
        """One statement; its cursor. COMMIT ends a write; END ends a read (so losing the server there is not
        reported as a commit that may have happened)."""
        return self.pipelined([(sql, params)])[0]

    def pipelined(self, statements: list[tuple[str, Iterable]]) -> list[psycopg.Cursor]:
        """Statements that need none of each other's answers in one round trip (psycopg's pipeline mode); their
        cursors. A statement's error fails the rest of them, and the transaction. A write's opening (`open`) goes
        with the first of them."""
        opening, self._opening = self._opening, []
        if opening:
            if statements[0][0] == "ROLLBACK":  # nothing of the transaction reached the server
                self.writing = False
                return [None]
            return self.pipelined([*opening, *statements])[len(opening) :]
        first = statements[0][0]
        committing = any(sql == "COMMIT" for sql, _ in statements)
        # a transaction's first round trip on a connection found dead: nothing of it took effect, and it goes again
        # on a new connection; never one that commits (the server may have committed it and lost only the answer)
        again = (
            self._reconnect is not None
            and not committing
            and not self.in_transaction
            and first.startswith(("BEGIN", "SELECT"))
        )
        if committing or any(sql == "ROLLBACK" for sql, _ in statements):
            self.writing = False
        with _reachable(committing=committing):
            try:
                return self._send(statements)
            except psycopg.OperationalError:
                if not again or self.alive:
                    raise
            self._conn.close()
            self._conn = self._reconnect()
            return self._send(statements)

    def _send(self, statements: list[tuple[str, Iterable]]) -> list[psycopg.Cursor]:
        conn = self._conn
        if len(statements) == 1:
            sql, params = statements[0]
            return [conn.execute(translate(sql), tuple(params))]
        with conn.pipeline():
            return [conn.execute(translate(sql), tuple(params)) for sql, params in statements]

    def rows_many(self, statements: list[tuple[str, Iterable]]) -> list[list[dict]]:
        """Statements that do not depend on each other's answers, in one round trip; each one's rows as dicts."""
        return [as_dicts(cursor) for cursor in self.pipelined(statements)]

    def executemany(self, sql: str, seq: Iterable) -> None:
        opening, self._opening = self._opening, []
        if opening:
            self.pipelined(opening)
        with _reachable(), self._conn.cursor() as cursor:
            cursor.executemany(translate(sql), [tuple(p) for p in seq])

    def query(self, sql: str, params: Iterable = ()) -> Iterator[dict]:
        return iter(as_dicts(self.execute(sql, params)))

    @property
    def alive(self) -> bool:
        conn = self._conn
        return not (conn.closed or conn.broken) and conn.info.transaction_status != TransactionStatus.ACTIVE

    def open(self, statements: list[tuple[str, Iterable]]) -> None:
        """A write's BEGIN and the statement taking its locks, sent with its first statement (whose answer waits for
        the locks anyway): a round trip fewer for every write."""
        self._opening = statements
        self.writing = True

    @property
    def in_transaction(self) -> bool:
        if self._opening:
            return True
        return self.alive and self._conn.info.transaction_status != TransactionStatus.IDLE

    def notifies(self, timeout: float) -> list[str]:
        """The payloads of the notifications that arrive within `timeout` seconds (all those already there, without
        waiting, when some are)."""
        heard = [n.payload for n in self._conn.notifies(timeout=0)]
        if not heard:
            heard = [n.payload for n in self._conn.notifies(timeout=timeout, stop_after=1)]
            heard += [n.payload for n in self._conn.notifies(timeout=0)]
        return heard

    def close(self) -> None:
        self._opening = []
        self._conn.close()


@contextmanager
def _reachable(committing: bool = False) -> Iterator[None]:
    """The driver's "cannot reach the server" as Unavailable; a write that met another's change to the same rows
    in a way PostgreSQL cannot order (a deadlock, a serialization failure) as Conflict (nothing was written); its
    other errors pass through."""
    try:
        yield
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
        raise Conflict("another agent's change met this one; nothing was written; call get_task and retry") from None
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


def payloads(rows: list[tuple[str, str]]) -> list[str]:
    """A commit's events, (kind, data) each in the order written, as NOTIFY payloads of at most PAYLOAD_MAX bytes:
    JSON lists of [kind, data]. When one event alone is too large for a payload, the commit is told as `null`: its
    listeners read the transaction's rows (Listener.events)."""
    out: list[str] = []
    part: list[str] = []
    size = 2
    for kind, data in rows:
        item = json.dumps([kind, data])
        length = len(item.encode()) + 1
        if length + 2 > PAYLOAD_MAX:
            return ["null"]
        if part and size + length > PAYLOAD_MAX:
            out.append("[" + ",".join(part) + "]")
            part, size = [], 2
        part.append(item)
        size += length
    if part:
        out.append("[" + ",".join(part) + "]")
    return out


class Snapshot:
    """A pg_snapshot as its text gives it (`xmin:xmax:xip,…`): whether a committed transaction is visible in it."""

    def __init__(self, text: str) -> None:
        xmin, xmax, xip = text.split(":")
        self.text, self.xmin, self.xmax = text, int(xmin), int(xmax)
        self.running = {int(x) for x in xip.split(",") if x}

    def sees(self, xid: int) -> bool:
        return xid < self.xmax and xid not in self.running


_CATCH_UP = (
    "SELECT id, kind, data FROM events WHERE tx >= pg_snapshot_xmin(CAST(? AS pg_snapshot)) "
    "AND NOT pg_visible_in_snapshot(tx, CAST(? AS pg_snapshot)) AND NOT (tx = ANY(CAST(? AS xid8[]))) ORDER BY tx, id"
)
_COMMITTED_SINCE = (
    "SELECT DISTINCT tx::text FROM events WHERE tx >= pg_snapshot_xmin(CAST(? AS pg_snapshot)) "
    "AND NOT pg_visible_in_snapshot(tx, CAST(? AS pg_snapshot)) AND pg_visible_in_snapshot(tx, CAST(? AS pg_snapshot))"
)


class Listener:
    """A node's listening connection: the events other transactions commit, in commit order, each once.

    Each commit's NOTIFY carries its events and its transaction id. At connect the listener begins listening, then
    takes a snapshot (`start`): a transaction it shows committed before, and is not delivered again by a
    notification. It also keeps a snapshot `seen` and the ids of the transactions heard that `seen` does not show
    (`heard`): every committed transaction is then visible in `seen`, or in `heard`, or on its way (it committed
    after LISTEN, so PostgreSQL delivers it). When the connection is lost, a new one listens first and then reads,
    in its `start` snapshot, the events of the transactions neither `seen` shows nor were heard: what was committed
    while nobody listened. `heard` is kept small by moving `seen` forward (`move_on`): to a newer snapshot, the
    transactions that wrote events in between and were not heard yet remembered in `due` until they are."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.db: PgDatabase | None = None
        self.start: Snapshot | None = None
        self.seen: Snapshot | None = None
        self.heard: set[int] = set()
        self.due: set[int] = set()
        self.backlog: list[tuple[int, str, str]] = []  # read back after a reconnect, handed out first

    def connect(self, catch_up: bool) -> None:
        db = PgDatabase(psycopg.connect(self.target, autocommit=True, application_name="hiveboard-watch"))
        try:
            db.execute(f"LISTEN {CHANNEL}")
            db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            start = Snapshot(db.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
            if catch_up and self.seen is not None:
                heard, due = [str(x) for x in self.heard], [str(x) for x in self.due]
                rows = db.execute(_CATCH_UP, [self.seen.text, self.seen.text, heard]).fetchall()
                rows += db.execute(
                    "SELECT id, kind, data FROM events WHERE tx = ANY(CAST(? AS xid8[])) ORDER BY tx, id", [due]
                ).fetchall()
                self.backlog += [tuple(r) for r in rows]
            db.execute("END")
        except BaseException:
            db.close()
            raise
        self.db, self.start, self.seen, self.heard, self.due = db, start, start, set(), set()

    def events(self, timeout: float) -> list[tuple[int, str, str]]:
        """The events heard within `timeout` seconds, (id, kind, data) each (id 0: told whole by the notification),
        in commit order."""
        if self.backlog:
            found, self.backlog = self.backlog, []
            return found
        found: list[tuple[int, str, str]] = []
        for payload in self.db.notifies(timeout):
            xid, _, body = payload.partition(" ")
            if not xid.isdigit() or self.start.sees(int(xid)):  # read at connect; or an older node's (its origin)
                continue
            xid = int(xid)
            if not self.seen.sees(xid):
                self.heard.add(xid)
            self.due.discard(xid)
            items = json.loads(body)
            if items is None:  # too large to tell: the transaction's rows are read (none twice: `xid` is heard once)
                read = self.db.execute("SELECT id, kind, data FROM events WHERE tx = ?::xid8 ORDER BY id", [str(xid)])
                found += [tuple(r) for r in read.fetchall()]
            else:
                found += [(0, kind, data) for kind, data in items]
        if len(self.heard) > (1000 if found else 0):
            self.move_on()
        return found

    def move_on(self) -> None:
        """Move `seen` to a newer snapshot (class docstring)."""
        db = self.db
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            now = Snapshot(db.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
            between = {int(r[0]) for r in db.execute(_COMMITTED_SINCE, [self.seen.text, self.seen.text, now.text])}
        finally:
            db.execute("END")
        self.due |= between - self.heard
        self.heard = {x for x in self.heard if not now.sees(x)}
        self.seen = now

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


class PostgreSQL(Dialect):
    """One PostgreSQL database shared by every node."""

    name = "postgresql"
    pushes = True
    writing_ctes = True
    status_counts = "SELECT status, count(*) AS n FROM tasks GROUP BY status"

    def __init__(self) -> None:
        self.Error = psycopg.Error

    def connect(self, target: str) -> PgDatabase:
        def connection():
            return psycopg.connect(target, autocommit=True, application_name="hiveboard")

        with _reachable():
            return PgDatabase(connection(), connection)

    def alive(self, db: PgDatabase) -> bool:
        return db.alive

    def migrate(self, db: PgDatabase) -> list[str]:
        return apply_migrations(db, MIGRATE_LOCK)

    def begin_write(self, db: PgDatabase, scopes: tuple[str, ...] = ()) -> None:
        db.open([("BEGIN", ()), lock_statement(scopes)])

    def try_begin_write(self, db: PgDatabase, scopes: tuple[str, ...] = ()) -> bool:
        if db.pipelined([("BEGIN", ()), lock_statement(scopes, trying=True)])[1].fetchone()[0]:
            db.writing = True
            return True
        db.execute("ROLLBACK")
        return False

    def begin_read(self, db: PgDatabase) -> None:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def read_many(self, db: PgDatabase, statements: list[tuple[str, list]]) -> list[list[dict]]:
        """One round trip: the transaction's beginning, the statements and its end."""
        try:
            found = db.rows_many([("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", ()), *statements, ("END", ())])
        except BaseException:
            if db.in_transaction:  # a statement failed: the rest of the pipeline did not run, END included
                db.execute("ROLLBACK")
            raise
        return found[1:-1]

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

    def commit(
        self, db: PgDatabase, events: list[tuple[str, str]], written: list[tuple[int, str, str]] = ()
    ) -> list[int]:
        """One round trip: the events' rows (in statements of EVENTS_AT_ONCE), the NOTIFYs that carry them with the
        transaction's id (`payloads`; those of `written` first, rows statements of the transaction wrote earlier),
        and COMMIT."""
        parts = events_parts(events)
        told = [*((kind, data) for _, kind, data in sorted(written)), *events]
        notify = "SELECT pg_notify(?, pg_current_xact_id()::text || ' ' || ?)"
        notifies = [(notify, [CHANNEL, p]) for p in payloads(told)]
        cursors = db.pipelined([*(events_insert(part) for part in parts), *notifies, ("COMMIT", ())])
        # ids are given in the order the rows are written: sorted, they are the events' (RETURNING's order is not)
        return [i for cursor in cursors[: len(parts)] for i in sorted(row[0] for row in cursor.fetchall())]

    def size(self, db: PgDatabase) -> int:
        return db.execute("SELECT pg_database_size(current_database())").fetchone()[0]

    def analyze_apart(self, target: str, table: str) -> bool:
        """ANALYZE takes a lock of its own, which no board statement waits for: on a connection of its own."""
        with psycopg.connect(target, autocommit=True, application_name="hiveboard-analyze") as conn:
            conn.execute(f"ANALYZE {table}")
        return True

    def watch_connect(self, target: str, after: Listener | None = None) -> Listener:
        """A listening connection; `after`: the one that was lost, whose missed commits the new one reads back."""
        listener = after if after is not None else Listener(target)
        listener.connect(catch_up=after is not None)
        return listener

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
