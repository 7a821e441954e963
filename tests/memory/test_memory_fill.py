"""Filling the memory as a user would (remember, many items a call, all or none), reading an item in full,
where a hit came from, and freshness: what waits for the vector index is counted and said."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import START_TIMEOUT, call, call_error

from hiveboard.board.events import Topic
from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

NOTES = [
    {
        "text": "The staging database is reset every Sunday at 02:00 UTC; never keep fixtures there.",
        "task_type": "ops",
        "tags": ["staging", "database"],
    },
    {
        "kind": "snippet",
        "title": "retry with backoff",
        "text": "for attempt in range(5):\n    try:\n        return call()\n    except TimeoutError:\n"
        "        time.sleep(2 ** attempt)",
        "task_type": "code",
        "tags": ["retry"],
    },
    {
        "kind": "document",
        "title": "Release checklist",
        "text": "Release checklist. " + "Bump the version, "
        "tag the commit, build the wheel, upload it, announce it in the channel. " * 40,
        "task_type": "ops",
    },
]


def count(memory) -> int:
    return memory.knowledge.count()


async def test_remember_stores_many_items_in_one_call(connect, memory):
    async with connect("alice", memory=memory) as c:
        stored = await call(c, "remember", items=NOTES)
        assert len(stored["ids"]) == 3 and stored["queued"] == 3
        items = memory.knowledge.get(stored["ids"])
        snippet = items[stored["ids"][1]]
        assert (snippet.kind, snippet.title, snippet.task_type, snippet.tags) == (
            "snippet",
            "retry with backoff",
            "code",
            ["retry"],
        )
        assert items[stored["ids"][0]].title.startswith("The staging database is reset")  # first line as title
        assert {i.created_by for i in items.values()} == {"alice"}
        memory.drain()
        found = await call(c, "query_memory", query="when is staging wiped", kinds=["note"])
        assert found["hits"][0]["id"] == stored["ids"][0]
        snippets = await call(c, "query_memory", query="retry a call that times out", kinds=["snippet"])
        assert [h["id"] for h in snippets["hits"]] == [stored["ids"][1]]


async def test_one_bad_item_refuses_the_whole_call_naming_it(connect, memory, board):
    async with connect("alice", memory=memory) as c:
        task = await call(c, "create_task", title="Write the release checklist")
        before = count(memory)
        error = await call_error(c, "remember", items=[NOTES[0], {"text": "ok", "tags": ["x" * 51]}])
        assert "argument 'items.1.tags.0'" in error and "at most 50 characters" in error
        assert "nothing was done" in error
        error = await call_error(c, "remember", items=[NOTES[0], NOTES[1], {"text": "   "}])
        assert "items.2.text" in error and "blank" in error
        error = await call_error(
            c, "remember", items=[{**NOTES[0], "task_id": task["id"]}, {"text": "about a card", "task_id": 999}]
        )
        assert error.startswith("remember: items[1].task_id: task 999 does not exist; nothing was stored")
        error = await call_error(c, "remember", items=[NOTES[0], {"text": "x", "kind": "lesson"}])
        assert "items.1.kind" in error
        assert count(memory) == before  # not even the good items before the bad one
        linked = await call(c, "remember", items=[{**NOTES[0], "task_id": task["id"]}])
        memory.drain()
        hit = (await call(c, "query_memory", query="staging database reset", kinds=["note"]))["hits"][0]
        assert hit["id"] == linked["ids"][0] and hit["task_id"] == task["id"]


async def test_a_hostile_item_is_refused_without_writing(connect, memory):
    async with connect("mallory", memory=memory) as c:
        before = count(memory)
        huge = [f"t{n}" for n in range(60_000)]
        error = await call_error(c, "remember", items=[NOTES[0], {"text": "x", "tags": huge}])
        assert "items[1].tags" in error and "at most" in error and "nothing was done" in error
        # (over HTTP the body is refused before any tool sees it: tests/server/test_hostile_input.py)
        error = await call_error(c, "remember", items=[NOTES[0], {"text": "bad \ud800 half a pair"}])
        assert "items.1.text" in error and "unicode" in error and "nothing was done" in error
        error = await call_error(c, "remember", items=[NOTES[0], {"text": "ok", "tags": ["fine", "a\ud83d"]}])
        assert "items.1.tags.1" in error and "unicode" in error
        error = await call_error(c, "remember", items=[{"text": "nul \x00 inside"}])
        assert "NUL character" in error
        error = await call_error(c, "remember", items=[{"text": "x" * 20_001}])
        assert "at most 20000 characters" in error
        error = await call_error(c, "remember", items=[{"text": "x"}] * 51)
        assert "at most 50 items" in error
        assert count(memory) == before and memory.knowledge.pending() == 0
    async with connect("alice", memory=memory) as a:  # and the memory works for everyone
        await call(a, "remember", items=NOTES[:1])
        memory.drain()
        assert (await call(a, "query_memory", query="staging reset"))["hits"]


async def test_a_note_is_never_merged_and_never_swallows_a_lesson(connect, memory):
    lesson = dict(
        problem="An lru_cache on a method kept every instance alive (memory leak).",
        fix="Cache at module level keyed by the id, or use cached_property.",
        task_type="code",
    )
    text = f"Problem: {lesson['problem']}\nFix: {lesson['fix']}"
    async with connect("alice", memory=memory) as c:
        note = await call(c, "remember", items=[{"text": text, "task_type": "code"}])
        again = await call(c, "remember", items=[{"text": text, "task_type": "code"}])
        assert again["ids"][0] != note["ids"][0]  # remembered twice: kept twice, as asked
        recorded = await call(c, "record_lesson", **lesson)
        assert recorded["merged"] is False  # a lesson is merged only into a lesson
        merged = await call(c, "record_lesson", **{**lesson, "problem": lesson["problem"] + " "})
        assert merged["merged"] is True and merged["duplicate_of"] == recorded["item"]["id"]
    items = memory.knowledge.get([note["ids"][0], again["ids"][0]])
    assert [i.kind for i in items.values()] == ["note", "note"] and all(i.merged_count == 1 for i in items.values())


async def test_a_cut_hit_says_so_and_the_resource_reads_it_all(connect, memory):
    async with connect("alice", memory=memory) as c:
        stored = await call(c, "remember", items=NOTES)
        memory.drain()
        hits = (await call(c, "query_memory", query="release checklist: tag, build and upload the wheel"))["hits"]
        document = next(h for h in hits if h["id"] == stored["ids"][2])
        uri = f"hiveboard://memory/{document['id']}"
        assert uri in document["cut"] and str(len(NOTES[2]["text"])) in document["cut"]
        assert len(document["snippet"]) <= 301
        short = next(
            h for h in (await call(c, "query_memory", query="staging database"))["hits"] if h["id"] == stored["ids"][0]
        )
        assert "cut" not in short
        read = await c.read_resource(uri)
        item = json.loads(read.contents[0].text)
        assert item["text"] == NOTES[2]["text"] and item["title"] == "Release checklist"
        assert item["kind"] == "document" and item["created_by"] == "alice"
        templates = (await c.list_resource_templates()).resource_templates
        assert "hiveboard://memory/{item_id}" in {t.uri_template for t in templates}
        with pytest.raises(Exception, match="memory item 99999 does not exist"):
            await c.read_resource("hiveboard://memory/99999")


async def test_hits_say_where_they_came_from(connect, memory, reviewer):
    engine = reviewer(ReviewConfig())
    async with connect("alice", memory=memory, review=engine) as c:
        card = await call(c, "create_task", title="Parse the config", task_type="code")
        claim = await call(c, "claim_task", task_id=card["id"])
        await call(
            c,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="reads the config",
            artifacts=[{"name": "app.py", "kind": "code", "content": "def main():\n    eval(input())\n"}],
        )
        trail = await call(c, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT)
        assert trail["rounds"][-1]["status"] == "finished", trail
        review_id = trail["rounds"][-1]["review_id"]
        # the fix passes, and the card's output joins the memory (the one sent back did not)
        claim = await call(c, "claim_task", task_id=card["id"])
        await call(
            c,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="reads the config",
            artifacts=[
                {
                    "name": "app.py",
                    "kind": "code",
                    "content": "import json\n\n\ndef main():\n    return json.loads(input())\n",
                }
            ],
        )
        trail = await call(c, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT)
        assert trail["rounds"][-1]["status"] == "finished" and trail["rounds"][-1]["verdict"] == "PASS", trail
        sent = await call(
            c,
            "publish_message",
            intent="info",
            task_id=card["id"],
            content="Config parsing must not evaluate input; use json.loads.",
        )
        memory.drain()
        critique = (await call(c, "query_memory", query="eval of input", kinds=["critique"]))["hits"][0]
        assert critique["review_id"] == review_id and critique["task_id"] == card["id"]
        message = (await call(c, "query_memory", query="config parsing evaluate input", kinds=["message"]))["hits"][0]
        assert message["message_id"] == sent["id"] and message["task_id"] == card["id"]
        output = (await call(c, "query_memory", query="reads the config", kinds=["output"]))["hits"][0]
        assert output["task_id"] == card["id"] and "message_id" not in output and "review_id" not in output


async def test_k_goes_up_to_50(connect, memory):
    async with connect("alice", memory=memory) as c:
        await call(
            c, "remember", items=[{"text": f"Runbook step {n}: rotate the zebra credentials"} for n in range(50)]
        )
        await call(
            c, "remember", items=[{"text": f"Runbook step {n}: rotate the zebra credentials"} for n in range(50, 60)]
        )
        memory.drain()
        found = await call(c, "query_memory", query="zebra credentials", k=50)
        assert len(found["hits"]) == 50
        assert "k" in await call_error(c, "query_memory", query="zebra", k=51)


def drain_once_waited(memory, board) -> threading.Thread:
    """Index the queued items once a search waits for them: a wait that works is woken by the indexing."""

    def run() -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while Topic.MEMORY_INDEXED not in board.store.notifier.waiting() and time.monotonic() < deadline:
            time.sleep(0.01)
        memory.drain()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_items_waiting_for_the_index_are_counted_said_and_waited_for(connect, memory, board):
    # the memory's indexing worker is not started here: what is remembered waits until drain()
    async with connect("alice", memory=memory) as c:
        stored = await call(c, "remember", items=NOTES)
        assert (await call(c, "board_stats"))["memory_pending"] == 3
        hybrid = await call(c, "query_memory", query="staging database reset")
        assert hybrid["unindexed"] == 3
        assert "3 memory item(s) are not yet indexed by meaning; keyword hits include them" in hybrid["note"]
        assert hybrid["hits"][0]["id"] == stored["ids"][0] and hybrid["hits"][0]["matched"] == ["keyword"]
        vector = await call(c, "query_memory", query="staging database reset", mode="vector")
        assert vector["hits"] == [] and "a vector search cannot see them" in vector["note"]
        keyword = await call(c, "query_memory", query="staging database reset", mode="keyword")
        assert "note" not in keyword and "unindexed" not in keyword  # keyword search sees everything
        drainer = drain_once_waited(memory, board)
        waited = await call(
            c, "query_memory", query="when is the staging database wiped", mode="vector", wait_seconds=60
        )
        drainer.join()
        assert "note" not in waited and waited["hits"][0]["id"] == stored["ids"][0]
        assert (await call(c, "board_stats"))["memory_pending"] == 0


async def test_a_bounded_wait_returns_with_the_note_when_nothing_indexes(connect, memory):
    async with connect("alice", memory=memory) as c:
        await call(c, "remember", items=NOTES[:1])
        answer = await call(c, "query_memory", query="staging", wait_seconds=0.2)
        assert answer["unindexed"] == 1 and "not yet indexed" in answer["note"]
