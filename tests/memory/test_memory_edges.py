"""The memory where it can go wrong: failing models, owners that leave, filters, privacy, the outbox."""

from __future__ import annotations

import pytest
from conftest import call, call_error

from hiveboard.memory.embeddings import EmbeddingError, get_embedder
from hiveboard.memory.index import VectorIndex
from hiveboard.memory.owner import SharedIndex
from hiveboard.memory.service import open_memory

pytestmark = pytest.mark.anyio


class BrokenEmbedder:
    name, dim = "all-MiniLM-L6-v2-onnx-int8", 384

    def embed(self, texts):
        raise EmbeddingError("embedding endpoint failed: connection refused")


async def test_a_claim_stands_and_search_falls_back_when_the_model_fails(connect, memory):
    async with connect("lead", memory=memory) as lead, connect("dev", memory=memory) as dev:
        await call(lead, "record_lesson", problem="The users search endpoint built SQL from strings.",
                   fix="Use parameters.", task_type="code")
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
    lesson = second.record_lesson("alice", problem="Cron ran twice on DST change.", fix="Use UTC.",
                                  task_type="ops")
    assert second.index_pending() == 1  # took the index over by itself
    assert second.query("daylight saving time", mode="vector").hits[0].id == lesson.item.id
    second.stop()


def test_the_tag_filter_applies_inside_the_vector_search(board, memory):
    board.agents.ensure("alice")
    with board.store.write() as db:
        for i in range(60):
            board.knowledge.add(db, kind="note", text=f"SQL injection risk number {i} in a query builder",
                                created_by="alice", task_type="code")
        tagged = board.knowledge.add(db, kind="note", text="Escaping user input in database queries",
                                     created_by="alice", task_type="code", tags=["security"])
    memory.drain()
    hits = memory.query("SQL injection", tags=["security"], mode="vector").hits
    assert [h.id for h in hits] == [tagged]


async def test_supersede_only_replaces_a_live_lesson_of_the_same_type(connect, memory):
    async with connect("alice", memory=memory) as c:
        card = await call(c, "create_task", title="t")
        claim = await call(c, "claim_task")
        await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="an output item")
        output_id = memory.knowledge.keyword("output item")[0]
        assert "can supersede only a lesson" in await call_error(
            c, "record_lesson", problem="p", fix="f", task_type="code", supersedes=output_id)
        old = await call(c, "record_lesson", problem="Old way.", fix="Old fix.", task_type="docs")
        assert "own task type" in await call_error(c, "record_lesson", problem="p", fix="f", task_type="code",
                                                    supersedes=old["item"]["id"])
        await call(c, "record_lesson", problem="New way.", fix="New fix.", task_type="docs",
                   supersedes=old["item"]["id"])
        assert "already superseded" in await call_error(c, "record_lesson", problem="p2", fix="f2",
                                                        task_type="docs", supersedes=old["item"]["id"])


async def test_a_follow_up_to_a_direct_message_stays_private(connect, memory):
    async with connect("alice", memory=memory) as alice, connect("bob", memory=memory) as bob, \
            connect("carol", memory=memory) as carol:
        await call(bob, "whoami")
        await call(carol, "whoami")
        first = await call(alice, "publish_message", intent="info", recipient="bob", content="the plan")
        follow = await call(alice, "publish_message", intent="info", reply_to=first["id"],
                            content="and the key is sk-live-1234")
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
        newer = board.knowledge.add(db, kind="lesson", text="Problem: x\nFix: z", created_by="alice",
                                    task_type="code")
        board.knowledge.supersede(db, item, newer)
    board.knowledge.indexed({item: get_embedder().embed(["x"])[0]}, get_embedder().name, lease)
    assert board.knowledge.pending() == 2  # the re-queued one and the newer one
    memory.drain()
    assert memory.query("Problem x", mode="vector").hits[0].id == newer


async def test_tag_lists_are_bounded_with_one_sentence(connect, memory):
    async with connect("alice", memory=memory) as c:
        many = [f"t{n}" for n in range(2000)]
        error = await call_error(c, "query_memory", query="retry", tags=many)
        assert "argument 'tags' has 2000 items; at most 20 are accepted" in error
        error = await call_error(c, "record_lesson", problem="p", fix="f", task_type="code", tags=many)
        assert "argument 'tags'" in error and "nothing was done" in error
        assert (await call(c, "query_memory", query="p", mode="keyword"))["hits"] == []
