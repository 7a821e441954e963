"""Both migration chains build the schema board/schema.py declares.

Each chain is applied to a fresh database the way the product does it (opening a Store), and what it made is
read back from the database's own catalog (SQLite: sqlite_master and PRAGMA table_info / index_list /
index_xinfo / foreign_key_list; PostgreSQL: information_schema and pg_indexes / pg_constraint), then compared
with the declaration in that database's types: the same tables, columns, types, nullability, defaults, primary
and unique keys, CHECK constraints, indexes (columns, order, uniqueness, condition), foreign keys, triggers'
names, and the storage choices declared per database (SQLite's WITHOUT ROWID, PostgreSQL's INCLUDE). A column
added to one chain only, or to the chains and not to the declaration, is a difference listed by name.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from hiveboard.board.db import Store
from hiveboard.board.schema import (
    POSTGRESQL,
    POSTGRESQL_SERIAL_IDS,
    SQLITE,
    SQLITE_PLAIN_IDS,
    TABLES,
    TYPES,
    Table,
    tables_in,
)

FTS5_SHADOWS = ("data", "idx", "docsize", "config")  # an external-content FTS5 table's own tables


@dataclass(frozen=True)
class Shape:
    """One table as a database holds it, in that database's words."""

    columns: dict[str, tuple[str, bool, str | None]]  # name: (type, nullable, default)
    key: tuple[str, ...]
    unique: frozenset[tuple[str, ...]] = frozenset()
    checks: frozenset[str] = frozenset()
    indexes: dict[str, tuple[tuple[str, ...], bool, str | None]] = field(default_factory=dict)
    refs: frozenset[tuple[str, str]] = frozenset()  # (column, table it names)
    triggers: frozenset[str] = frozenset()


def shape(t: Table, dialect: str) -> Shape:
    """What the declared table `t` must look like in `dialect`, in its types."""
    return Shape(
        columns={
            c.name: ("" if t.virtual else TYPES[c.type][dialect], c.null, c.sql_default())
            for c in t.columns_in(dialect)
        },
        key=t.primary_key,
        unique=frozenset(t.unique),
        checks=frozenset(_condition(c) for c in t.checks),
        indexes={i.name: (i.columns, i.unique, _condition(i.where)) for i in t.indexes_in(dialect)},
        refs=frozenset((c.name, c.ref) for c in t.columns_in(dialect) if c.ref),
        triggers=frozenset(t.triggers_in(dialect)),
    )


def _condition(condition: str | None) -> str | None:
    """A condition in one spelling, whichever database printed it: PostgreSQL stores `status IN ('a', 'b')` as
    `(status = ANY (ARRAY['a'::text, 'b'::text]))`, and `contest IS NOT NULL` as `(contest IS NOT NULL)`."""
    if condition is None:
        return None
    condition = " ".join(re.sub(r"[()\[\]]", " ", re.sub(r"::[a-z ]+", "", condition)).split())
    return condition.replace("= ANY ARRAY", "IN")


def _checks(create: str) -> set[str]:
    """The CHECK constraints of a CREATE TABLE statement."""
    found = set()
    for m in re.finditer(r"\bCHECK\s*\(", create, re.I):
        depth, at = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(create[at], 0)
            at += 1
        found.add(_condition(create[m.end() : at - 1]))
    return found


def _default(value: str | None) -> str | None:
    return None if value is None or value.startswith("nextval(") else re.sub(r"::[a-z ]+$", "", value)


def sqlite_shapes(path: Path) -> tuple[dict[str, Shape], dict[str, str]]:
    """(every table's shape, every table's CREATE statement) of the SQLite file at `path`."""
    with closing(sqlite3.connect(path)) as conn:
        sql = dict(
            conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        )
        triggers: dict[str, set[str]] = {}
        for name, table in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"):
            triggers.setdefault(table, set()).add(name)
        shapes = {}
        for table in sql:
            info = conn.execute(f"PRAGMA table_info('{table}')").fetchall()
            key = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
            # a PRIMARY KEY column of a rowid table may hold NULL in SQLite (its legacy): the key is read as NOT NULL
            columns = {r[1]: (r[2], not r[3] and not r[5], _default(r[4])) for r in info}
            unique, indexes = set(), {}
            for _, index, is_unique, origin, partial in conn.execute(f"PRAGMA index_list('{table}')"):
                keys = tuple(
                    r[2] + (" DESC" if r[3] else "")
                    for r in conn.execute(f"PRAGMA index_xinfo('{index}')").fetchall()
                    if r[5]
                )
                if origin == "u":
                    unique.add(keys)
                elif origin == "c":
                    create = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", [index]).fetchone()[0]
                    where = re.search(r"\bWHERE\b(.*)$", create, re.S | re.I) if partial else None
                    indexes[index] = (keys, bool(is_unique), _condition(where.group(1)) if where else None)
            refs = {(r[3], r[2]) for r in conn.execute(f"PRAGMA foreign_key_list('{table}')")}
            shapes[table] = Shape(
                columns,
                key,
                unique=frozenset(unique),
                checks=frozenset(_checks(sql[table])),
                indexes=indexes,
                refs=frozenset(refs),
                triggers=frozenset(triggers.get(table, ())),
            )
    return shapes, sql


def postgres_shapes(url: str) -> tuple[dict[str, Shape], dict[str, tuple[str, ...]]]:
    """(every table's shape, the columns each primary key INCLUDEs) of the PostgreSQL database at `url`."""
    import psycopg

    with psycopg.connect(url) as conn:
        q = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
        tables = [
            r[0]
            for r in q(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                "AND table_type = 'BASE TABLE'"
            )
        ]
        columns: dict[str, dict] = {t: {} for t in tables}
        for table, name, type_, nullable, default in q(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
        ):
            if table in columns:
                columns[table][name] = (type_, nullable == "YES", _default(default))
        constraints = {
            index: (kind, table)
            for kind, table, index in q(
                "SELECT contype, conrelid::regclass::text, conindid::regclass::text FROM pg_constraint "
                "WHERE contype IN ('p', 'u') AND connamespace = current_schema()::regnamespace"
            )
        }
        key: dict[str, tuple[str, ...]] = {}
        include: dict[str, tuple[str, ...]] = {}
        unique: dict[str, set] = {t: set() for t in tables}
        indexes: dict[str, dict] = {t: {} for t in tables}
        for table, index, definition in q(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        ):
            m = re.search(r"USING \w+ \((.*?)\)(?: INCLUDE \((.*?)\))?(?: WHERE (.*))?$", definition)
            keys = tuple(k.strip() for k in m.group(1).split(","))
            kind = constraints.get(index, (None,))[0]
            if kind == "p":
                key[table] = keys
                include[table] = tuple(k.strip() for k in m.group(2).split(",")) if m.group(2) else ()
            elif kind == "u":
                unique[table].add(keys)
            else:
                indexes[table][index] = (keys, definition.startswith("CREATE UNIQUE"), _condition(m.group(3)))
        refs: dict[str, set] = {t: set() for t in tables}
        for table, column, target in q(
            "SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text FROM pg_constraint c "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
            "WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace"
        ):
            refs[table].add((column, target))
        checks: dict[str, set] = {t: set() for t in tables}
        for table, definition in q(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'c' AND connamespace = current_schema()::regnamespace"
        ):
            checks[table].add(_condition(definition.removeprefix("CHECK ")))
        triggers: dict[str, set] = {t: set() for t in tables}
        for table, name in q(
            "SELECT event_object_table, trigger_name FROM information_schema.triggers "
            "WHERE trigger_schema = current_schema()"
        ):
            triggers[table].add(name)
    shapes = {
        t: Shape(
            columns[t],
            key.get(t, ()),
            unique=frozenset(unique[t]),
            checks=frozenset(checks[t]),
            indexes=indexes[t],
            refs=frozenset(refs[t]),
            triggers=frozenset(triggers[t]),
        )
        for t in tables
    }
    return shapes, include


def differences(declared: dict[str, Shape], found: dict[str, Shape]) -> list[str]:
    """Every way `found` differs from `declared`, one line each (empty: the same)."""
    out = [f"table {t}: built by the chain, not declared in board/schema.py" for t in found.keys() - declared.keys()]
    out += [f"table {t}: declared, not built by the chain" for t in declared.keys() - found.keys()]
    for t in sorted(declared.keys() & found.keys()):
        want, got = declared[t], found[t]
        out += [f"{t}.{c}: built by the chain, not declared" for c in got.columns.keys() - want.columns.keys()]
        out += [f"{t}.{c}: declared, not built by the chain" for c in want.columns.keys() - got.columns.keys()]
        for c in want.columns.keys() & got.columns.keys():
            for what, w, g in zip(("type", "nullable", "default"), want.columns[c], got.columns[c], strict=True):
                if w != g:
                    out.append(f"{t}.{c}: {what} is {g!r}, declared {w!r}")
        for what in ("key", "unique", "checks", "refs", "triggers"):
            if getattr(want, what) != getattr(got, what):
                out.append(f"{t}: {what} is {getattr(got, what)!r}, declared {getattr(want, what)!r}")
        for i in sorted(want.indexes.keys() | got.indexes.keys()):
            if want.indexes.get(i) != got.indexes.get(i):
                out.append(f"{t}: index {i} is {got.indexes.get(i)!r}, declared {want.indexes.get(i)!r}")
    return out


def declared(dialect: str) -> dict[str, Shape]:
    return {t.name: shape(t, dialect) for t in tables_in(dialect)}


def sqlite_built(tmp_path: Path) -> Path:
    path = tmp_path / "fresh.db"
    Store(str(path)).close()
    return path


def test_sqlites_chain_builds_the_declared_schema(tmp_path):
    found, sql = sqlite_shapes(sqlite_built(tmp_path))
    virtual = [t for t in tables_in(SQLITE) if t.virtual]
    shadows = {f"{t.name}_{s}" for t in virtual for s in FTS5_SHADOWS}
    assert shadows <= found.keys(), "the FTS5 table's own tables are missing"
    assert differences(declared(SQLITE), {t: s for t, s in found.items() if t not in shadows}) == []
    for t in virtual:
        assert re.search(rf"USING\s+{t.virtual}\s*\(", sql[t.name]), sql[t.name]
    without_rowid = {t for t, create in sql.items() if "WITHOUT ROWID" in create and t not in shadows}
    assert without_rowid == {t.name for t in TABLES if t.without_rowid}
    plain = {t.name for t in TABLES if t.has_id and "AUTOINCREMENT" not in sql[t.name]}
    assert plain == set(SQLITE_PLAIN_IDS), "a new table's id is INTEGER PRIMARY KEY AUTOINCREMENT"


def test_postgresqls_chain_builds_the_declared_schema(postgres):
    url = postgres.database()
    Store(url).close()
    found, include = postgres_shapes(url)
    assert differences(declared(POSTGRESQL), found) == []
    import psycopg

    with psycopg.connect(url) as conn:
        serial = conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND column_name = 'id' AND column_default LIKE 'nextval(%'"
        ).fetchall()
    assert {r[0] for r in serial} == set(POSTGRESQL_SERIAL_IDS), "a new table's id is an identity"
    assert {t: cols for t, cols in include.items() if cols} == {t.name: t.include for t in TABLES if t.include}


def test_a_column_one_chain_adds_alone_or_the_declaration_lacks_is_a_difference(tmp_path):
    path = sqlite_built(tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("ALTER TABLE tasks ADD COLUMN nickname TEXT")
        conn.commit()
    found, _ = sqlite_shapes(path)
    want = declared(SQLITE)
    assert "tasks.nickname: built by the chain, not declared" in differences(want, found)
    lacking = dict(want)
    lacking["agents"] = Shape({**want["agents"].columns, "mood": ("TEXT", True, None)}, want["agents"].key)
    assert "agents.mood: declared, not built by the chain" in differences(lacking, found)


def test_tables_come_after_the_tables_they_name():
    """The declaration's order is the copy's (board/copy.py): a row's parent is copied before it."""
    seen: set[str] = set()
    for t in TABLES:
        for c in t.columns:
            assert c.ref is None or c.ref in seen | {t.name}, f"{t.name}.{c.name} names {c.ref}, declared later"
        seen.add(t.name)
