"""The memory where it can go wrong: failing models, owners that leave, filters, privacy, the outbox."""

from __future__ import annotations

import pytest
from conftest import call, call_error

from hiveboard.memory.embeddings import EmbeddingError, get_embedder
from hiveboard.memory.index import VectorIndex
from hiveboard.memory.owner import SharedIndex
from hiveboard.memory.service import open_memory

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


class BrokenEmbedder:
    name, dim = "all-MiniLM-L6-v2-onnx-int8", 384

    def embed(self, texts):
        raise EmbeddingError("embedding endpoint failed: connection refused")


async def test_a_claim_stands_and_search_falls_back_when_the_model_fails(connect, memory):
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        await call(
            lead,
            "record_lesson",
            problem="The users search endpoint built SQL from strings.",
            fix="Use parameters.",
            task_type="code",
        )
        memory.drain()
        card = await call(lead, "create_task", title="Users search endpoint", task_type="code")
        memory.embedder = BrokenEmbedder()
        claim = await call(dev, "claim_task")
        assert claim["claimed"] and claim["task"]["id"] == card["id"]
        assert [h["matched"] for h in claim["lessons"]] == [["keyword"]]  # found by keywords alone
        found = await call(dev, "query_memory", query="users search SQL")
        assert found["hits"] and "unavailable" in found["note"]


def test_a_failed_takeover_leaves_the_lock_for_others(tmp_path):
    def broken():
        raise RuntimeError("damaged index directory")

    with pytest.raises(RuntimeError):
        SharedIndex(tmp_path, broken)
    healthy = SharedIndex(tmp_path, lambda: VectorIndex(get_embedder(), path=tmp_path / "chroma"))
    assert healthy.owner
    healthy.close()


def test_indexing_goes_on_after_the_owner_leaves(board, tmp_path):
    first = open_memory(board, get_embedder(), tmp_path)
    second = open_memory(board, get_embedder(), tmp_path)
    assert first.index.owner and not second.index.owner
    first.stop()
    board.agents.ensure("alice")
    lesson = second.record_lesson("alice", problem="Cron ran twice on DST change.", fix="Use UTC.", task_type="ops")
    assert second.index_pending() == 1  # took the index over by itself
    assert second.query("daylight saving time", mode="vector").hits[0].id == lesson.item.id
    second.stop()


def sixty_close_untagged_and_one_tagged(board, memory) -> int:
    """60 notes closer to "SQL injection" than the one tagged "security", all indexed; the tagged one's id."""
    board.agents.ensure("alice")
    with board.store.write() as db:
        for i in range(60):
            board.knowledge.add(
                db,
                kind="note",
                text=f"SQL injection risk number {i} in a query builder",
                created_by="alice",
                task_type="code",
            )
        tagged = board.knowledge.add(
            db,
            kind="note",
            text="Escaping user input in database queries",
            created_by="alice",
            task_type="code",
            tags=["security"],
        )
    memory.drain()
    return tagged


def test_the_tag_filter_applies_inside_the_vector_search(board, memory):
    tagged = sixty_close_untagged_and_one_tagged(board, memory)
    hits = memory.query("SQL injection", tags=["security"], mode="vector").hits
    assert [h.id for h in hits] == [tagged]


async def test_supersede_only_replaces_a_live_lesson_of_the_same_type(connect, memory):
    async with connect("alice", memory=memory) as c:
        card = await call(c, "create_task", title="t")
        claim = await call(c, "claim_task")
        await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="an output item")
        output_id = memory.knowledge.keyword("output item")[0]
        assert "can supersede only a lesson" in await call_error(
            c, "record_lesson", problem="p", fix="f", task_type="code", supersedes=output_id
        )
        old = await call(c, "record_lesson", problem="Old way.", fix="Old fix.", task_type="docs")
        assert "own task type" in await call_error(
            c, "record_lesson", problem="p", fix="f", task_type="code", supersedes=old["item"]["id"]
        )
        await call(
            c, "record_lesson", problem="New way.", fix="New fix.", task_type="docs", supersedes=old["item"]["id"]
        )
        assert "already superseded" in await call_error(
            c, "record_lesson", problem="p2", fix="f2", task_type="docs", supersedes=old["item"]["id"]
        )


async def test_a_follow_up_to_a_direct_message_stays_private(connect, memory):
    async with (
        connect("alice", memory=memory) as alice,
        connect("bob", memory=memory) as bob,
        connect("carol", memory=memory) as carol,
    ):
        await call(bob, "whoami")
        await call(carol, "whoami")
        first = await call(alice, "publish_message", intent="info", recipient="bob", content="the plan")
        follow = await call(
            alice, "publish_message", intent="info", reply_to=first["id"], content="and the key is sk-live-1234"
        )
        assert follow["recipient"] == "bob"
        assert len((await call(bob, "get_messages"))["messages"]) == 2
        memory.drain()
        leaked = await call(carol, "query_memory", query="sk-live-1234 key")
        assert leaked["hits"] == []


def test_an_item_queued_again_while_indexed_stays_queued(board, memory):
    board.agents.ensure("alice")
    with board.store.write() as db:
        item = board.knowledge.add(db, kind="lesson", text="Problem: x\nFix: y", created_by="alice", task_type="code")
    lease, items = board.knowledge.lease()
    with board.store.write() as db:  # superseded (so re-queued) while the worker holds it
        newer = board.knowledge.add(db, kind="lesson", text="Problem: x\nFix: z", created_by="alice", task_type="code")
        board.knowledge.supersede(db, item, newer)
    board.knowledge.indexed({item: get_embedder().embed(["x"])}, get_embedder().name, lease)
    assert board.knowledge.pending() == 2  # the re-queued one and the newer one
    memory.drain()
    assert memory.query("Problem x", mode="vector").hits[0].id == newer


def test_the_indexer_takes_each_agents_items_in_turn(board):
    """One agent's backlog delays its own items: another agent's new lesson is in the next batch, not
    behind 150 notes queued before it."""
    board.agents.ensure("alice"), board.agents.ensure("bob")
    with board.store.write() as db:
        flood = [board.knowledge.add(db, kind="note", text=f"note {n}", created_by="alice") for n in range(150)]
    with board.store.write() as db:
        lesson = board.knowledge.add(db, kind="lesson", text="Problem: x\nFix: y", created_by="bob", task_type="code")
    _, items = board.knowledge.lease(limit=10)
    assert sorted(i.id for i in items) == sorted([*flood[:9], lesson])
    _, rest = board.knowledge.lease(limit=1000)
    assert sorted(i.id for i in rest) == flood[9:]  # and every item is taken once


async def test_tag_lists_are_bounded_with_one_sentence(connect, memory):
    async with connect("alice", memory=memory) as c:
        many = [f"t{n}" for n in range(2000)]
        error = await call_error(c, "query_memory", query="retry", tags=many)
        assert "argument 'tags' has 2000 items; at most 20 are accepted" in error
        error = await call_error(c, "query_memory", query="retry", tags=many[:21])
        assert "argument 'tags': List should have at most 20 items" in error
        error = await call_error(c, "record_lesson", problem="p", fix="f", task_type="code", tags=["x" * 51])
        assert "argument 'tags" in error and "at most 50 characters" in error
        error = await call_error(c, "record_lesson", problem="p", fix="f", task_type="code", tags=many)
        assert "argument 'tags'" in error and "nothing was done" in error
        assert (await call(c, "query_memory", query="p", mode="keyword"))["hits"] == []


SQL_LESSON = dict(
    problem="The search endpoint built its SQL with an f-string from the request (SQL injection).",
    fix="Pass user values as parameters: cursor.execute('... WHERE name = ?', (name,)).",
    task_type="code",
    tags=["sql", "security"],
)
HOSTILE_TAGS = [
    "$and",
    "$or",
    "tag:security",
    "kind",
    "deprecated",
    '{"$ne": 1}',
    "' OR 1=1 --",
    "\u00e9t\u00e9",
    "\U0001f525" * 12,
    "%",
    "_",
    "*",
    "NULL",
    "x" * 50,
    *(f"t{n:02d}" + "z" * 46 for n in range(6)),
]


async def test_a_hostile_item_does_not_break_search_for_others(connect, memory):
    assert len(HOSTILE_TAGS) == 20 and max(map(len, HOSTILE_TAGS)) == 50  # as much as the edge accepts
    async with connect("mallory", memory=memory) as m, connect("alice", memory=memory) as a:
        hostile = dict(problem="mallory " + "p" * 3992, fix="\u202e\u200b" + "f" * 3998, task_type="code")
        bad = await call(m, "record_lesson", **hostile, tags=HOSTILE_TAGS)
        for n in range(3):  # merged into the first: its tags must stay bounded
            await call(m, "record_lesson", **hostile, tags=[f"more{n}-{k}" for k in range(20)])
        assert memory.knowledge.item(bad["item"]["id"]).tags == HOSTILE_TAGS  # merges add no tags past the bound
        good = await call(a, "record_lesson", **SQL_LESSON)
        memory.drain()
        assert memory.knowledge.pending() == 0
        for mode in ("vector", "hybrid", "keyword"):
            hits = (await call(a, "query_memory", query="SQL injection from an f-string", mode=mode))["hits"]
            assert hits[0]["id"] == good["item"]["id"], mode
        for tag in HOSTILE_TAGS:
            found = await call(a, "query_memory", query="mallory", tags=[tag], mode="keyword")
            assert [h["id"] for h in found["hits"]] == [bad["item"]["id"]], tag
        assert (await call(a, "query_memory", query="SQL", tags=["security"]))["hits"][0]["id"] == good["item"]["id"]
    index = memory.index.index if hasattr(memory.index, "index") else memory.index
    stored = index.collection.get(ids=[str(bad["item"]["id"])], include=["metadatas"])["metadatas"][0]
    assert set(stored) == {"kind", "task_type", "task_id", "deprecated", "created_at"}  # no key per tag


def test_a_rare_tag_is_ranked_from_sqlite_when_the_nearest_vectors_lack_it(board, memory, monkeypatch):
    from hiveboard.memory import service

    monkeypatch.setattr(service, "OVERFETCH", 20)  # 60 closer untagged items fill every vector fetch
    monkeypatch.setattr(service, "SMALL_FETCH", 20)
    tagged = sixty_close_untagged_and_one_tagged(board, memory)
    for mode in ("vector", "hybrid"):
        assert [h.id for h in memory.query("SQL injection", tags=["security"], mode=mode).hits] == [tagged]


def test_a_search_by_first_readings_looks_past_second_readings_it_drops(board, memory):
    """A claim's search scores items by their first reading and drops the second ones Chroma returns. When the
    nearest vectors are all second readings (notes whose bare text is the query, under an unrelated title), the
    unfiltered over-fetch holds no first reading of a lesson: the search must still ask Chroma for lessons
    rather than take the dropped rows for an index that ran out."""
    board.agents.ensure("alice")
    with board.store.write() as db:
        for n in range(120):
            board.knowledge.add(
                db,
                kind="note",
                title=f"zq{n} xv{n}",
                text=f"retry a failed HTTP request with backoff ({n})",
                created_by="alice",
            )
    memory.record_lesson(
        "alice",
        problem="Calls to the payment API failed now and then",
        fix="Retry them with exponential backoff",
        task_type="code",
    )
    memory.drain()
    result = memory.query("retry a failed HTTP request with backoff", kinds=["lesson"], mode="vector", bodies=False)
    assert result.note is None
    assert [h.kind for h in result.hits] == ["lesson"]


def test_a_filtered_search_ranks_a_small_set_exactly_whatever_the_index_answers(board, memory):
    """HNSW's filtered search is approximate: over a set much smaller than the index it can answer short (a node
    it does not reach; seen once in CI). When Chroma answers fewer vectors than asked, the filter matches few
    items, and their stored vectors are ranked exactly: a lesson whose vectors the index lost is still found."""
    board.agents.ensure("alice")
    with board.store.write() as db:
        for n in range(120):
            board.knowledge.add(
                db, kind="note", title=f"zq{n}", text=f"retry a failed request ({n})", created_by="alice"
            )
    lesson = memory.record_lesson(
        "alice", problem="Calls to the payment API failed now and then", fix="Retry them with backoff", task_type="code"
    ).item.id
    memory.drain()
    memory._local_index().collection.delete(ids=[str(lesson), f"{lesson}:b"])
    for bodies in (False, True):
        result = memory.query("retry a failed request", kinds=["lesson"], mode="vector", bodies=bodies)
        assert [h.id for h in result.hits] == [lesson]
        assert result.hits[0].similarity > 0.3
    typed = memory.query("retry a failed request", task_type="code", mode="vector").hits
    assert [h.id for h in typed] == [lesson]


def test_an_item_handed_twice_in_one_claim_is_recorded_once(board):
    """Knowledge.surfaced records each item once per agent and card, an id given twice in one call included (its
    one statement does not see its own rows)."""
    with board.store.write() as db:
        item = board.knowledge.add(
            db, kind="lesson", text="Problem: a flaky test.\nFix: wait for the port.", created_by="lead"
        )
    board.knowledge.surfaced("dev", None, [item, item])
    board.knowledge.surfaced("dev", None, [item])
    assert board.knowledge.reuse() == (1, 0)
