"""The store seam: SQL that only SQLite speaks lives in board/dialect.py (and SQLite's migrations), so that
a second database is a second Dialect, not edits across the packages."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hiveboard.board.db import Store
from hiveboard.board.dialect import SQLite

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("board", "memory", "critics", "server")
# and the hook's read path, which opens the database with its driver alone to start in well under 150 ms
SEAM = {Path("board/dialect.py"), Path("board/migrations.py"), Path("board/hook_view.py")}
# SQL no other database shares: SQLite's settings and locks, its JSON functions, FTS5, its upsert forms and
# catalog; a statement's new id comes back with RETURNING, not the driver's lastrowid
SQLITE_ONLY = re.compile(
    r"\bPRAGMA\b|\bBEGIN\s+IMMEDIATE\b|\bjson_each\s*\(|\bjson_extract\s*\(|\bINSERT\s+OR\s+(IGNORE|REPLACE)\b"
    r"|\bMATCH\s+\?|\bbm25\s*\(|\bdata_version\b|\bsqlite_(master|schema|stat1)\b|\bAUTOINCREMENT\b"
    r"|\bUSING\s+fts5\b|\bCROSS\s+JOIN\s+\w+\s+\w+\s+ON\b|\bIS\s+\?",
    re.IGNORECASE,
)


def offences(source: str) -> list[str]:
    """SQLite-only SQL in the string literals of one module, the driver's lastrowid, or an import of sqlite3."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SQLITE_ONLY.search(node.value) and _is_sql(node.value):
                found.append(f"line {node.lineno}: {SQLITE_ONLY.search(node.value).group(0)}")
        elif isinstance(node, ast.Attribute) and node.attr == "lastrowid":
            found.append(f"line {node.lineno}: .lastrowid")
        elif isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names):
            found.append(f"line {node.lineno}: import sqlite3")
    return found


def _is_sql(text: str) -> bool:
    """A string that is (part of) a statement, not prose that names a SQLite feature."""
    return bool(
        re.search(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|WHERE|FROM)\b", text)
        or re.match(r"\s*(PRAGMA|BEGIN)\b", text, re.IGNORECASE)
    )


def test_sqlite_only_sql_stays_behind_the_dialect():
    problems = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative not in SEAM and (found := offences(path.read_text(encoding="utf-8"))):
                problems[str(relative)] = found
    assert not problems, f"SQLite-only SQL outside board/dialect.py (move it behind Dialect): {problems}"


def test_the_check_finds_what_it_looks_for():
    bad = """
import sqlite3
db.execute("INSERT OR IGNORE INTO agents (name) VALUES (?)")
db.execute(f"SELECT id FROM tasks WHERE EXISTS (SELECT 1 FROM json_each(labels) WHERE value = ?)")
task_id = db.execute("INSERT INTO tasks (title) VALUES (?)", ["t"]).lastrowid
"""
    assert len(offences(bad)) == 4
    assert offences('"""FTS5 ranks by BM25; PRAGMA data_version moves on commit."""') == []  # prose


def test_the_sqlite_dialect_runs_the_board(tmp_path):
    store = Store(tmp_path / "hiveboard.db")
    try:
        assert isinstance(store.dialect, SQLite)
        with store.write() as db:
            db.execute("INSERT INTO agents (name, created_at) VALUES ('a', 0) ON CONFLICT DO NOTHING")
            db.execute("INSERT INTO agents (name, created_at) VALUES ('a', 0) ON CONFLICT DO NOTHING")
        assert store.db.execute("SELECT count(*) FROM agents").fetchone()[0] == 1
        sql = store.dialect
        row = store.db.execute(
            f"SELECT {sql.json_field('?', 'k')}, EXISTS (SELECT 1 FROM {sql.json_elements('?', 'e')} "
            "WHERE e.value = 2), " + sql.json_has("?"),
            ['{"k": 7}', "[1, 2]", '["x"]', "x"],
        ).fetchone()
        assert tuple(row) == (7, 1, 1)
        with store.write() as db:  # the write lock can be tried without waiting when nobody holds it
            pass
        with store.try_write() as db:
            assert db is not None
    finally:
        store.close()
