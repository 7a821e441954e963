"""Copying a whole board from one store into another (a SQLite file into PostgreSQL, when a team outgrows
one machine), and proving the copy: per-table row counts and checksums of every value.

The copy keeps every id (cards, messages, reviews, memory items keep their numbers, so links and history
stay true), runs in one write transaction on the target (all or nothing), and refuses a target that
already holds a board. Memory items are all queued for the vector index again: the target's Chroma
server has none of their vectors yet.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from . import schema
from ._sqlite_utils import Database
from .db import Store, placeholders
from .errors import InvalidInput

# every table a board keeps, parents before children, as board/schema.py declares them (each table left behind
# says why there); a table's rows are read in its primary key's order
TABLES = tuple(t.name for t in schema.COPIED)
KEYS = {t.name: ", ".join(t.primary_key) for t in schema.COPIED}
LATER = {"memory_items": ("superseded_by",)}  # columns naming a later row of the same table: set afterwards
IDENTITY = tuple(t.name for t in schema.COPIED if t.has_id)  # the tables whose ids a sequence gives


@dataclass(frozen=True)
class TableCopy:
    table: str
    rows: int
    checksum: str
    same: bool


def _columns(table: str) -> list[str]:
    """The table's columns both databases have (not one's own, such as PostgreSQL's keyword index)."""
    return [c.name for c in schema.table(table).columns if c.only is None]


def _order(table: str) -> str:
    return KEYS[table]


def checksum(db: Database, table: str, columns: list[str]) -> tuple[int, str]:
    """(rows, a digest of every value of every row in key order): equal on two stores when the copy is exact."""
    digest, count = hashlib.sha256(), 0
    for row in db.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {_order(table)}"):
        count += 1
        for value in row:
            text = "\x00" if value is None else (value.hex() if isinstance(value, bytes | memoryview) else repr(value))
            digest.update(text.encode("utf-8", "surrogatepass") + b"\x1f")
        digest.update(b"\x1e")
    return count, digest.hexdigest()[:16]


def copy_board(source: Store, target: Store, batch: int = 500) -> list[TableCopy]:
    """Copy every table of `source` into the empty `target`, then check each table's rows and checksum.

    The source is read in one snapshot, the copy and its checksums alike: a board still written to meanwhile
    (a node left running) is copied as it was when the copy began, whole, and checked against that."""
    with source.read() as src:
        columns = {table: _columns(table) for table in TABLES}
        with target.write() as db:
            held = [t for t in TABLES if db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone()]
            if held:
                raise InvalidInput(
                    f"the target already holds a board ({', '.join(held)} not empty); copy into an empty database"
                )
            for table, names in columns.items():
                _copy_table(src, db, table, names, batch)
            target.dialect.after_copy(db, IDENTITY)
            ids = [r[0] for r in db.execute("SELECT id FROM memory_items").fetchall()]
            if ids:  # the target's vector index has none of them yet
                db.execute(
                    "INSERT INTO memory_outbox (item_id, queued_at) SELECT id, ? FROM memory_items WHERE true "
                    "ON CONFLICT (item_id) DO UPDATE SET queued_at = excluded.queued_at, leased_until = NULL",
                    [0.0],
                )
        theirs = {table: checksum(src, table, names) for table, names in columns.items()}
    with target.read() as db:
        ours = {table: checksum(db, table, names) for table, names in columns.items()}
    target.optimize()  # statistics taken while the tables were empty (at open) would mislead the planner
    return [TableCopy(table, theirs[table][0], ours[table][1], theirs[table] == ours[table]) for table in TABLES]


def _copy_table(src: Database, db: Database, table: str, columns: list[str], batch: int) -> None:
    """The rows of `table`, in key order, in batches; the columns that name rows copied later (LATER) after."""
    later = [c for c in LATER.get(table, ()) if c in columns]
    insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders(columns)})"
    cursor = src.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {_order(table)}")
    while rows := cursor.fetchmany(batch):
        first = [tuple(None if c in later else v for c, v in zip(columns, r)) for r in rows]
        db.conn.executemany(insert, first)
        for name in later:
            at = columns.index(name)
            pending = [(r[at], r[columns.index("id")]) for r in rows if r[at] is not None]
            if pending:
                db.conn.executemany(f"UPDATE {table} SET {name} = ? WHERE id = ?", pending)
