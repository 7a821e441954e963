"""Keyword search (Knowledge.keyword): FTS5 ranks first and the filters are checked afterwards, and a
query's most common words are dropped on a large memory. Both must keep the answers a full join gives."""

from __future__ import annotations

import random

import pytest

from hiveboard.board import knowledge as knowledge_mod
from hiveboard.board.knowledge import fts_query

TYPES = ("code", "test", "docs", "bug")
WORDS = "cache timeout retry index query deadlock migration parser socket thread encoding cursor".split()


def fill(board, n: int = 240, seed: int = 7) -> None:
    rng = random.Random(seed)
    with board.store.write() as db:
        for i in range(n):
            words = rng.choices(WORDS, k=rng.randint(3, 12))
            board.knowledge.add(
                db,
                kind=rng.choice(["lesson", "critique", "output", "message"]),
                text=" ".join(words) + f" item{i}",
                title=" ".join(words[:2]),
                task_type=rng.choice(TYPES),
                tags=rng.sample(["slow", "flaky", "prod"], k=rng.randint(0, 2)),
                created_by="tester",
            )
        db.execute("UPDATE memory_items SET deprecated = 1 WHERE id % 7 = 0")


def reference(board, query: str, limit: int = 50, **filters) -> list[tuple[int, float]]:
    """The plain way: join every match to memory_items, filter, then sort by BM25 (what keyword() replaced)."""
    where, params = board.knowledge._filters(
        filters.get("task_type"), filters.get("kinds"), filters.get("tags"), filters.get("include_deprecated", False)
    )
    return [
        tuple(r)
        for r in board.store.db.execute(
            f"SELECT m.id, bm25(memory_fts, 2.0, 1.0) FROM memory_fts f JOIN memory_items m ON m.id = f.rowid "
            f"WHERE memory_fts MATCH ?{where} ORDER BY 2 LIMIT ?",
            [fts_query(query), *params, limit],
        )
    ]


FILTERS = [
    {},
    {"task_type": "code"},
    {"kinds": ["lesson"], "task_type": "bug"},
    {"tags": ["prod", "flaky"]},
    {"include_deprecated": True},
    {"kinds": ["critique", "output"], "tags": ["slow"], "include_deprecated": True},
]


@pytest.mark.parametrize("prefetch", [knowledge_mod.PREFETCH, 3])
@pytest.mark.parametrize("filters", FILTERS)
def test_ranking_first_gives_the_same_answers_as_the_full_join(board, monkeypatch, prefetch, filters):
    monkeypatch.setattr(knowledge_mod, "PREFETCH", prefetch)  # 3: the filters leave too few, read on in chunks
    fill(board)
    for query in ["cache timeout", "deadlock in the migration", "parser socket thread encoding", "item17 cursor"]:
        for limit in (5, 50):
            expected = reference(board, query, limit, **filters)
            found = board.knowledge.keyword(query, limit=limit, **filters)
            assert len(found) == len(expected), (query, filters)
            allowed = board.knowledge.allowed(found, **filters)
            assert set(found) == allowed  # nothing outside the filters
            scores = dict(reference(board, query, 10_000, **filters))
            # the same scores in the same order (ties between equal scores may come in either order)
            assert [round(scores[i], 9) for i in found] == [round(s, 9) for _, s in expected], (query, filters)


def test_common_words_are_dropped_only_past_the_budget(board, monkeypatch):
    fill(board)
    kn = board.knowledge
    df = {w: kn._document_frequency(w) for w in WORDS}
    # small: all kept, an identifier also by its parts
    assert kn.keyword_words("the cache timeout of item3") == ["cache", "timeout", "item3", "item"]
    monkeypatch.setattr(knowledge_mod, "SCORED_ROWS", 5)
    assert kn.keyword_words("the cache timeout of item3") == ["item3"]  # the rare word stays
    common = sorted(WORDS, key=df.get)
    assert kn.keyword_words(f"{common[-1]} {common[0]}") == [common[0]]  # the rarest is always kept
    assert kn.keyword_words("cache nosuchword") == ["cache"]  # a word no item has: not searched
    assert kn.keyword("nosuchword") == []
    assert kn.item(kn.keyword("item3 cache")[0]).text.endswith(" item3")


def test_a_new_item_is_found_by_its_rare_word_at_once(board):
    fill(board)
    assert board.knowledge.keyword("zanzibar") == []
    with board.store.write() as db:
        new = board.knowledge.add(db, kind="lesson", text="zanzibar cache", task_type="code", created_by="tester")
    assert board.knowledge.keyword("zanzibar cache")[0] == new


def test_hybrid_search_inside_a_write_transaction_sees_its_own_items(board, memory):
    fill(board, n=40)
    memory.drain()
    outside = memory.query("deadlock migration", k=10)
    assert {"keyword", "vector"} <= {m for h in outside.hits for m in h.matched}
    with board.store.write() as db:
        assert memory.query("deadlock migration", k=10).hits == outside.hits  # searched in this thread
        new = board.knowledge.add(db, kind="lesson", text="quokka wombat", task_type="code", created_by="tester")
        assert [h.id for h in memory.query("quokka", k=3).hits] == [new]  # not yet committed, not yet embedded


@pytest.mark.parametrize("small_fetch", [5, 100])
def test_a_smaller_first_vector_fetch_gives_the_same_answers(board, memory, monkeypatch, small_fetch):
    from hiveboard.memory import service

    fill(board, n=150)  # every 7th item deprecated
    memory.drain()
    queries = ["deadlock in a migration", "socket timeout retry", "cursor encoding parser"]
    monkeypatch.setattr(service, "SMALL_FETCH", service.OVERFETCH)  # as before: always the full over-fetch
    before = [memory.query(q, k=50, mode="vector").hits for q in queries]
    monkeypatch.setattr(service, "SMALL_FETCH", small_fetch)  # 5: too few survive, the full over-fetch follows
    assert [memory.query(q, k=50, mode="vector").hits for q in queries] == before
    assert all(not h.deprecated for hits in before for h in hits) and len(before[0]) > 10


CODE_LESSONS = [
    dict(problem="Printing a number in base two", fix="def intToBin(n):\n    return format(n, 'b')", task_type="code"),
    dict(
        problem="Reading a count typed by the user", fix="def str2int(s):\n    return int(s.strip())", task_type="code"
    ),
    dict(
        problem="Looking keys up by value",
        fix="def invertDictMapping(d):\n    return {v: k for k, v in d.items()}",
        task_type="code",
    ),
    dict(
        problem="Parsing a query string", fix="from urllib.parse import parse_qsl\nparse_qsl(query)", task_type="code"
    ),
]


@pytest.mark.anyio
async def test_keyword_search_sees_inside_identifiers(connect, memory):
    from conftest import call

    async with connect("alice", memory=memory) as c:
        ids = [(await call(c, "record_lesson", **lesson))["item"]["id"] for lesson in CODE_LESSONS]
        for query, expected in [
            ("python int to bin", ids[0]),
            ("make a str an int", ids[1]),
            ("invert dict", ids[2]),
            ("intToBin", ids[0]),
            ("parse qsl", ids[3]),
        ]:
            hits = (await call(c, "query_memory", query=query, mode="keyword"))["hits"]
            assert hits and hits[0]["id"] == expected, (query, [h["title"] for h in hits])


def test_a_store_made_before_code_words_is_migrated_and_keeps_working(tmp_path):
    from sqlite_utils import Database

    from hiveboard.board.db import Store
    from hiveboard.board.migrations import MIGRATIONS
    from hiveboard.board.tasks import Board

    old = Database(tmp_path / "hiveboard.db")
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for migration in MIGRATIONS[: MIGRATIONS.index(next(m for m in MIGRATIONS if m.__name__ == "m013_code_words"))]:
        migration(old)
        old.execute("INSERT INTO migrations VALUES (?, datetime('now'))", [migration.__name__])
    old.execute(
        "INSERT INTO memory_items (kind, title, text, created_by, created_at) VALUES "
        "('lesson', 'base two', 'def intToBin(n): return format(n, ''b'')', 'alice', 0)"
    )
    old.conn.commit()
    old.close()

    board = Board(Store(tmp_path / "hiveboard.db"))
    try:
        assert board.knowledge.keyword("int to bin") == [1]  # the old item, found by its identifier's parts
        with board.store.write() as db:
            board.knowledge.add(db, kind="lesson", text="def str2int(s): return int(s)", created_by="bob")
        assert board.knowledge.keyword("str int")[0] == 2
        assert board.knowledge.keyword("format") == [1]  # its text is still indexed as before
    finally:
        board.store.close()


@pytest.mark.backends("sqlite", "postgresql")
def test_writes_leave_merging_to_the_worker_and_searches_see_the_same_before_and_after(board):
    """Each write adds a segment to the keyword index without merging earlier ones (board/migrations.py m026); the
    indexing worker's merge steps (Knowledge.merge_keywords) change nothing a search answers."""
    rng = random.Random(3)
    for i in range(120):  # a transaction each, as pool messages are: one segment each
        words = rng.choices(WORDS, k=6)
        with board.store.write() as db:
            board.knowledge.add(db, kind="message", text=" ".join(words) + f" note{i}", title=words[0], created_by="a")
    queries = ["cache timeout", "deadlock parser", "note17", "socket encoding cursor"]
    before = {q: board.knowledge.keyword(q, limit=50) for q in queries}
    assert all(before.values())
    steps = 0
    while board.knowledge.merge_keywords():
        steps += 1
        assert steps < 1000
    if not board.store.dialect.merges_keywords:  # PostgreSQL's GIN index keeps itself
        assert steps == 0
        return
    assert steps > 0  # 120 segments were left for it
    assert {q: board.knowledge.keyword(q, limit=50) for q in queries} == before
    db = board.store.db
    assert db.execute("SELECT v FROM memory_fts_config WHERE k = 'automerge'").fetchone()[0] == 0
    db.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")  # raises on a damaged index
