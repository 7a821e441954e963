"""The SQL that differs between databases, in one place: the store seam.

The board's queries are written once, in the SQL that SQLite and PostgreSQL share: `?` placeholders,
`INSERT … ON CONFLICT … DO NOTHING / DO UPDATE SET … = excluded.…`, `INSERT … RETURNING id`, `UPDATE …
RETURNING *`. What has no common form lives here, behind `Dialect`:

- opening a connection and its settings (SQLite's PRAGMAs);
- taking the write lock up front (`BEGIN IMMEDIATE`), and trying to take it without waiting;
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

import sqlite3
from abc import ABC, abstractmethod

from sqlite_utils import Database

from .migrations import apply_migrations

BUSY_TIMEOUT_MS = 30_000


class Dialect(ABC):
    """What the board needs from a database beyond the SQL the databases share."""

    name: str
    Error: type[Exception]  # the driver's base error: what a retry loop catches

    @abstractmethod
    def connect(self, target: str) -> Database:
        """A new connection in autocommit mode, with the board's settings."""

    @abstractmethod
    def migrate(self, db: Database) -> list[str]:
        """Apply the schema's migrations not yet applied, inside the caller's write transaction."""

    @abstractmethod
    def begin_write(self, db: Database) -> None:
        """Begin a transaction that holds the write lock from its start, waiting for it if need be."""

    @abstractmethod
    def try_begin_write(self, db: Database) -> bool:
        """Begin such a transaction only if the lock is free right now; False (nothing begun) if not."""

    @abstractmethod
    def in_transaction(self, db: Database) -> bool:
        """Whether this connection is inside a transaction it began."""

    @abstractmethod
    def optimize(self, db: Database) -> None:
        """Refresh the query planner's statistics."""

    @abstractmethod
    def commit_counter(self, conn) -> int:
        """A number that changes when another connection commits (read on the watcher's connection)."""

    @abstractmethod
    def watch_connect(self, target: str):
        """The cross-process watcher's own connection (plain driver connection, used from one thread)."""

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

    # the keyword index over memory items (title, text, code words)
    @abstractmethod
    def keyword_count(self) -> str:
        """A query: how many items match the one quoted word given as its parameter."""

    @abstractmethod
    def keyword_ids(self) -> str:
        """A query: the ids of the items matching the query given as its parameter."""

    @abstractmethod
    def keyword_ranked(self) -> str:
        """A query: the ids of the items matching the query given as its parameter, best first."""


class SQLite(Dialect):
    """One SQLite file shared by threads and processes: WAL, a busy timeout, an immediate write lock."""

    name = "sqlite"
    Error = sqlite3.Error

    def connect(self, target: str) -> Database:
        conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA analysis_limit = 1000")  # keeps ANALYZE cheap enough to run at every open
        # no sqlite-utils plugins: finding them reads every installed package's metadata at each start,
        # and the board's connections are its own
        return Database(conn, execute_plugins=False)

    def migrate(self, db: Database) -> list[str]:
        return apply_migrations(db)

    def begin_write(self, db: Database) -> None:
        # A deferred transaction that reads and then writes fails fast with "database is locked" under WAL
        # when another process wrote in between; an immediate one waits its turn instead.
        db.execute("BEGIN IMMEDIATE")

    def try_begin_write(self, db: Database) -> bool:
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

    def watch_connect(self, target: str) -> sqlite3.Connection:
        return sqlite3.connect(target, check_same_thread=False)

    def json_has(self, column: str) -> str:
        return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value = ?)"

    def json_elements(self, column: str, alias: str) -> str:
        return f"json_each({column}) AS {alias}"

    def json_field(self, expr: str, key: str) -> str:
        return f"json_extract({expr}, '$.{key}')"

    def keyword_count(self) -> str:
        return "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?"

    def keyword_ids(self) -> str:
        return "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?"

    def keyword_ranked(self) -> str:
        # title weighs twice the text: a word in an item's title says more about what it is
        return "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts, 2.0, 1.0)"
