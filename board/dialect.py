"""The SQL that differs between databases, in one place: the store seam.

The board's queries are written once, in the SQL that SQLite and PostgreSQL share: `?` placeholders,
`INSERT … ON CONFLICT … DO NOTHING / DO UPDATE SET … = excluded.…`, `INSERT … RETURNING id`, `UPDATE …
RETURNING *`. What has no common form lives here, behind `Dialect`:

- opening a connection and its settings (SQLite's PRAGMAs);
- taking a write's locks up front (`BEGIN IMMEDIATE`), and trying to take them without waiting;
- refreshing the planner's statistics;
- a counter that moves when another connection commits (the cross-process watcher's wake-up);
- JSON inside a column (a card's labels, a critique's issues, a synthesis' score);
- the keyword index (FTS5 with BM25 here; a PostgreSQL dialect would use tsvector and ts_rank);
- the schema's migrations (board/migrations.py is SQLite's).

A second database is a second implementation of this class (and its migrations, and a placeholder
translation from `?`), not edits across board/. tests/board/test_dialect.py fails when SQLite-only SQL
appears outside this module and the migrations.
"""

from __future__ import annotations

import os
import sqlite3
from abc import ABC, abstractmethod
from contextlib import closing
from pathlib import Path

from ._sqlite_utils import Database
from .migrations import apply_migrations

BUSY_TIMEOUT_MS = 30_000
EVENTS_AT_ONCE = 500  # events rows written by one statement (SQLite takes at most 32,766 parameters in one)


def grown(count: int) -> bool:
    """Whether a table whose rows now number about `count` (a new row's id) has doubled since its statistics were
    last taken here: at 64, 128, 256 … rows (`Dialect.analyze`)."""
    return count >= 64 and count & (count - 1) == 0


def events_parts(events: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """A transaction's events' rows, (kind, data) each, in parts of EVENTS_AT_ONCE."""
    return [events[at : at + EVENTS_AT_ONCE] for at in range(0, len(events), EVENTS_AT_ONCE)]


def events_insert(part: list[tuple[str, str]]) -> tuple[str, list]:
    """The statement that writes a part of `events_parts` and returns the rows' ids, and its parameters."""
    return f"INSERT INTO events (kind, data) VALUES {', '.join(['(?, ?)'] * len(part))} RETURNING id", [
        v for row in part for v in row
    ]


def fts5_match(words: list[str]) -> str | None:
    """An FTS5 query for any of these words, each quoted: no FTS5 syntax errors from what a user typed."""
    return " OR ".join(f'"{w}"' for w in words) or None


def as_dicts(cursor) -> list[dict]:
    """A DB-API cursor's rows (a SELECT, or a write with RETURNING) as dicts, all fetched."""
    if cursor.description is None:  # a statement that returns no rows
        return []
    keys = [d[0] for d in cursor.description]
    return [dict(zip(keys, row)) for row in cursor.fetchall()]


def sqlite_file_copy(source: Path, target: Path) -> dict[str, int]:
    """SQLite's online backup of the board file `source` into `target`: one step, so one read transaction and one
    consistent state, written as one self-contained file (no -wal beside it). The copy's rows per table."""
    with closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=30)) as src:
        with closing(sqlite3.connect(target)) as dst:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode = DELETE")
    with closing(sqlite3.connect(target)) as copy:
        return _sqlite_rows(copy)


def sqlite_file_check(file: Path) -> tuple[list[str], dict[str, int]]:
    """(SQLite's integrity check's findings, ["ok"] when whole; rows per table) of a board file, read only;
    ValueError when it is no readable SQLite database."""
    try:
        with closing(sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            found = [r[0] for r in conn.execute("PRAGMA integrity_check(3)")]
            return found, _sqlite_rows(conn) if found == ["ok"] else {}
    except sqlite3.DatabaseError as exc:
        raise ValueError(str(exc)) from None


def _sqlite_rows(conn: sqlite3.Connection) -> dict[str, int]:
    names = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
        )
    ]
    return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


class Dialect(ABC):
    """What the board needs from a database beyond the SQL the databases share."""

    name: str
    Error: type[Exception]  # the driver's base error: what a retry loop catches

    @abstractmethod
    def connect(self, target: str) -> Database:
        """A new connection in autocommit mode, with the board's settings."""

    def read_only_target(self, path: str) -> str:
        """What `connect` and `watch_connect` open to read the database at `path` where it cannot be written:
        a target that creates no file (the driver's error if it cannot be read so). Only a database kept
        in a file has one."""
        raise NotImplementedError(f"{self.name} is not opened read-only from a file")

    def check(self, db: Database) -> str | None:
        """Why the database is damaged (a few of the problems found), or None when it is intact."""
        raise NotImplementedError(f"{self.name} has no integrity check here")

    @abstractmethod
    def migrate(self, db: Database) -> list[str]:
        """Apply the schema's migrations not yet applied, inside the caller's write transaction."""

    @abstractmethod
    def begin_write(self, db: Database, scopes: tuple[str, ...] = ()) -> None:
        """Begin a write transaction holding its locks from its start, waiting for them if need be: the database's
        one write lock, or those of `scopes` (board/postgres.py)."""

    @abstractmethod
    def try_begin_write(self, db: Database, scopes: tuple[str, ...] = ()) -> bool:
        """Begin such a transaction only if its locks are free right now; False (nothing begun) if not."""

    @abstractmethod
    def in_transaction(self, db: Database) -> bool:
        """Whether this connection is inside a transaction it began."""

    @abstractmethod
    def optimize(self, db: Database) -> None:
        """Refresh the query planner's statistics."""

    def analyze(self, db: Database, table: str) -> None:
        """Refresh the planner's statistics of one table that has `grown` (inside a write, or not). Taken when the
        table was small, they mislead it: on PostgreSQL a claim-next of a board of 1,600 cards read and sorted every
        card in todo (0.5 ms) and each foreign-key check scanned the cards (70 µs), until autovacuum, a minute
        later, took them again (bench/README.md)."""
        db.execute(f"ANALYZE {table}")

    def analyze_apart(self, target: str, table: str) -> bool:
        """`analyze` on a connection of its own, outside any transaction, where the database needs no write lock
        for it; False where it does (then the caller writes: `Store.analyze`)."""
        return False

    def commit_counter(self, conn) -> int:
        """A number that changes when another connection commits (read on the watcher's connection; a dialect that
        `pushes` its commits has none)."""
        raise NotImplementedError(f"{self.name} pushes its commits to the watcher")

    @abstractmethod
    def watch_connect(self, target: str, after=None):
        """The cross-process watcher's own connection (plain driver connection, used from one thread); `after`: the
        one it replaces, lost (a pushing dialect's reads back what was committed meanwhile)."""

    ordered_join = "JOIN"  # a join the planner must do in the order written (where it needs telling)
    same = "IS NOT DISTINCT FROM"  # equality that holds for two NULLs
    pushes = False  # True: the watcher's connection hears commits (Listener.events); False: it polls commit_counter
    embedded = False  # True: the database runs in this process, a statement is a function call (no round trip)
    writing_ctes = False  # True: a WITH may hold INSERTs (several tables written by one statement)
    # the cards per status, (status, n) rows: kept by triggers in a table on SQLite (m028_task_counts), whose one
    # writer is alone; counted on PostgreSQL, where a row every move updates would make all moves wait for each other
    status_counts = "SELECT status, n FROM task_counts"

    def alive(self, db: Database) -> bool:
        """Whether a connection still works (a server's connection breaks when the server restarts)."""
        return True

    def size(self, db: Database) -> int:
        """The database's size in bytes (board/quotas.py's ceiling)."""
        raise NotImplementedError(f"{self.name} cannot say its size here")

    def begin_read(self, db: Database) -> None:
        """Begin a transaction whose reads all see one snapshot."""
        db.execute("BEGIN")

    def read_many(self, db: Database, statements: list[tuple[str, list]]) -> list[list[dict]]:
        """Reads that do not depend on each other's answers, in one snapshot (a transaction of their own):
        each one's rows as dicts."""
        self.begin_read(db)
        try:
            return [as_dicts(db.conn.execute(sql, params)) for sql, params in statements]
        finally:
            db.execute("END")

    @abstractmethod
    def after_copy(self, db: Database, tables: tuple[str, ...]) -> None:
        """After rows were inserted with their ids given: new rows of these tables get ids after them."""

    def commit(
        self, db: Database, events: list[tuple[str, str]], written: list[tuple[int, str, str]] = ()
    ) -> list[int]:
        """Commit the write transaction with its events' rows, (kind, data) each, written in it; their ids, in order.
        `written`: (id, kind, data) of the events whose rows statements of the transaction wrote themselves
        (Store.emit_written), for a dialect that pushes its commits. Here: the rows in statements of
        EVENTS_AT_ONCE, then COMMIT."""
        ids: list[int] = []
        for part in events_parts(events):
            # ids are given in the order the rows are written: sorted, they are the events' (RETURNING's order is not)
            ids += sorted(row[0] for row in db.conn.execute(*events_insert(part)))
        db.execute("COMMIT")
        return ids

    # JSON in a column holding a JSON array or object
    @abstractmethod
    def json_has(self, column: str) -> str:
        """A condition: the JSON array in `column` holds the next parameter's value."""

    @abstractmethod
    def json_elements(self, column: str, alias: str) -> str:
        """A FROM item: one row per element of the JSON array in `column`, its element as `alias`.value."""

    @abstractmethod
    def json_field(self, expr: str, key: str) -> str:
        """An expression: the value under `key` of the JSON object `expr`."""

    @abstractmethod
    def json_texts(self, column: str, alias: str) -> str:
        """A FROM item: one row per string of the JSON array in `column`, as text in `alias`.value."""

    @abstractmethod
    def json_number(self, expr: str, key: str) -> str:
        """An expression: the number under `key` of the JSON object `expr`."""

    # the keyword index over memory items (title, text, code words)
    @abstractmethod
    def keyword_match(self, words: list[str]) -> str | None:
        """The parameter the keyword queries take for these words (any may match); None for no words."""

    @abstractmethod
    def keyword_count(self) -> str:
        """A query: how many items match the one quoted word given as its parameter."""

    @abstractmethod
    def keyword_ids(self) -> str:
        """A query: the ids of the items matching the query given as its parameter."""

    @abstractmethod
    def keyword_ranked(self) -> str:
        """A query: the ids of the items matching the query given as its parameter, best first."""

    merges_keywords = False  # True: the keyword index leaves merging to the memory's worker (`merge_keywords`)

    def merge_keywords(self, db: Database, pages: int) -> bool:
        """One small step of the keyword index's upkeep, inside the caller's write transaction (about `pages`
        pages written); whether there was any to do (`merges_keywords` dialects)."""
        raise NotImplementedError(f"{self.name}'s keyword index keeps itself")


class SQLite(Dialect):
    """One SQLite file shared by threads and processes: WAL, a busy timeout, an immediate write lock."""

    name = "sqlite"
    embedded = True
    ordered_join = "CROSS JOIN"  # SQLite's planner keeps a CROSS JOIN's tables in the order written
    same = "IS"  # SQLite's IS compares any two values, NULL included
    Error = sqlite3.Error

    def connect(self, target: str) -> Database:
        conn = sqlite3.connect(
            target,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
            uri=target.startswith("file:"),  # a read-only target
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA analysis_limit = 1000")  # keeps ANALYZE cheap enough to run at every open
        # no sqlite-utils plugins: finding them reads every installed package's metadata at each start,
        # and the board's connections are its own
        return Database(conn, execute_plugins=False)

    def read_only_target(self, path: str) -> str:
        """The file itself where this user may write it (a plain connection removes the -wal and -shm files
        it made when it closes); else read-only mode, which needs the -shm file of a WAL database to exist
        or to be creatable; else, when neither a -shm file nor a write-ahead log waiting to be replayed is
        there (and none can be made), the file as immutable: then no process can be writing it."""
        file = Path(path).resolve()
        if os.access(file, os.R_OK | os.W_OK) and os.access(file.parent, os.W_OK):
            return str(file)
        read_only = f"{file.as_uri()}?mode=ro"
        try:
            with closing(sqlite3.connect(read_only, uri=True)) as probe:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return read_only
        except sqlite3.OperationalError as exc:
            in_use = any(os.path.getsize(f) for f in (f"{file}-wal", f"{file}-shm") if os.path.exists(f))
            # the -shm file cannot be made: the directory is read-only (CANTOPEN or READONLY_DIRECTORY)
            if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY) or in_use:
                raise
        return f"{file.as_uri()}?immutable=1"

    def check(self, db: Database) -> str | None:
        try:
            found = [row[0] for row in db.execute("PRAGMA quick_check(3)").fetchall()]
        except sqlite3.DatabaseError as exc:
            return str(exc)
        if found == ["ok"]:
            return None
        # rows such as "*** in database main ***\nOn tree page 9 cell 0: invalid page number -1"
        return "; ".join(line for row in found for line in row.splitlines() if line and not line.startswith("***"))

    def migrate(self, db: Database) -> list[str]:
        return apply_migrations(db)

    def begin_write(self, db: Database, scopes: tuple[str, ...] = ()) -> None:
        # A deferred transaction that reads and then writes fails fast with "database is locked" under WAL
        # when another process wrote in between; an immediate one waits its turn instead.
        db.execute("BEGIN IMMEDIATE")

    def try_begin_write(self, db: Database, scopes: tuple[str, ...] = ()) -> bool:
        db.execute("PRAGMA busy_timeout = 0")  # another process's lock: do not wait for it either
        try:
            db.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError:  # another process holds the lock
            return False
        finally:
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def in_transaction(self, db: Database) -> bool:
        return db.conn.in_transaction

    def optimize(self, db: Database) -> None:
        """Without statistics SQLite walks a whole inbox for a filtered fetch. FTS5's shadow tables are left
        out: statistics taken while they were tiny can make SQLite plan FTS5's own maintenance statements as
        full scans, and its default estimates serve those tables well."""
        db.execute("ANALYZE")
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            db.execute("DELETE FROM sqlite_stat1 WHERE tbl LIKE 'memory_fts%'")
            db.execute("ANALYZE sqlite_schema")  # reload the statistics the planner uses

    def commit_counter(self, conn: sqlite3.Connection) -> int:
        return conn.execute("PRAGMA data_version").fetchone()[0]

    def size(self, db: Database) -> int:
        # the pages of the database as this connection sees it, committed write-ahead log included
        return db.execute("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()").fetchone()[0]

    def watch_connect(self, target: str, after=None) -> sqlite3.Connection:
        return sqlite3.connect(target, check_same_thread=False, uri=target.startswith("file:"))

    def json_has(self, column: str) -> str:
        return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value = ?)"

    def json_elements(self, column: str, alias: str) -> str:
        return f"json_each({column}) AS {alias}"

    def json_field(self, expr: str, key: str) -> str:
        return f"json_extract({expr}, '$.{key}')"

    def after_copy(self, db: Database, tables: tuple[str, ...]) -> None:
        pass  # AUTOINCREMENT continues after the largest id there is

    def json_texts(self, column: str, alias: str) -> str:
        return f"json_each({column}) AS {alias}"

    def json_number(self, expr: str, key: str) -> str:
        return f"json_extract({expr}, '$.{key}')"

    def keyword_match(self, words: list[str]) -> str | None:
        return fts5_match(words)

    def keyword_count(self) -> str:
        return "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?"

    def keyword_ids(self) -> str:
        return "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?"

    def keyword_ranked(self) -> str:
        # title weighs twice the text: a word in an item's title says more about what it is
        return "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts, 2.0, 1.0)"

    merges_keywords = True  # board/migrations.py m026

    def merge_keywords(self, db: Database, pages: int) -> bool:
        # FTS5 merges only where a level holds `usermerge` (4) segments or a merge is under way, and then
        # changes at least two rows (FTS5's documented test for "work was done")
        before = db.conn.total_changes
        db.execute("INSERT INTO memory_fts (memory_fts, rank) VALUES ('merge', ?)", [pages])
        return db.conn.total_changes - before >= 2
