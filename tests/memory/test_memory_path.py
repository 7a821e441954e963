"""The memory off the request path: claims hand lessons computed ahead, and new items are embedded in a process
of the server's own, which is started again when it dies, losing nothing."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from conftest import call, stdio_server, until

pytestmark = pytest.mark.anyio

SQL_LESSON = dict(
    problem="The search endpoint built its SQL with an f-string from the request, so a quote in the name broke "
    "out of the query (SQL injection).",
    fix="Pass user values as parameters: cursor.execute('... WHERE name = ?', (name,)).",
    task_type="code",
)
RETRY_LESSON = dict(
    problem="Retries hammered the payments API in lockstep after an outage.",
    fix="Back off exponentially with random jitter between attempts.",
    task_type="code",
)
# the third card's new text in the tests that change one (about retries: the retry lesson fits it best)
RETITLED = dict(
    title="Retry the payments API",
    description="Payments API calls retried together after an outage and overloaded it.",
)
CARD = dict(
    title="Fix the customer search endpoint's SQL query",
    task_type="code",
    description="The endpoint builds its SQL query from the name in the request; a quote in the name breaks it.",
)


class Counted:
    """Counts the calls of one method of an object (and keeps their positional arguments), calling through."""

    def __init__(self, monkeypatch, obj, name: str):
        self.calls = 0
        self.args: list[tuple] = []
        real = getattr(obj, name)

        def counted(*args, **kwargs):
            self.calls += 1
            self.args.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(obj, name, counted)


@pytest.mark.backends("sqlite", "postgresql")
async def test_a_claim_hands_the_lessons_computed_ahead_without_embedding_or_searching(connect, memory, monkeypatch):
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        await call(lead, "record_lesson", **SQL_LESSON)
        await call(lead, "record_lesson", **RETRY_LESSON)
        memory.drain()
        ahead, searched = [await call(lead, "create_task", **CARD) for _ in range(2)]
        assert memory.prepare() == 2  # both cards are todo and new
        assert memory.prepare() == 0  # nothing changed since
        embeds = Counted(monkeypatch, memory.embedder, "embed")
        searches = Counted(monkeypatch, memory, "query")
        handed = (await call(dev, "claim_task", task_id=ahead["id"]))["lessons"]
        assert (embeds.calls, searches.calls) == (0, 0)
        # each lesson handed is recorded once for the agent and card: a claim again by its holder adds none
        assert handed and (await call(dev, "board_stats"))["memory_surfaced"] == len(handed)
        assert (await call(dev, "claim_task", task_id=ahead["id"]))["lessons"] == handed
        assert (await call(dev, "board_stats"))["memory_surfaced"] == len(handed)
        # the other card's lessons, searched now as before the change, are the same
        with memory.board.store.write() as db:
            db.execute("DELETE FROM card_context WHERE task_id = ?", [searched["id"]])
        again = (await call(dev, "claim_task", task_id=searched["id"]))["lessons"]
        assert embeds.calls == 1 and searches.calls >= 1
    assert handed and [h["id"] for h in handed] == [h["id"] for h in again]
    assert [h["score"] for h in handed] == pytest.approx([h["score"] for h in again], abs=1e-4)
    assert "f-string" in handed[0]["snippet"]


@pytest.mark.backends("sqlite", "postgresql")
async def test_lessons_computed_ahead_give_way_to_newer_and_deprecated_ones(connect, memory, monkeypatch):
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        old = await call(lead, "record_lesson", **RETRY_LESSON)
        memory.drain()
        cards = [await call(lead, "create_task", **CARD) for _ in range(3)]
        memory.prepare()
        newer = await call(lead, "record_lesson", **SQL_LESSON)  # after the cards' lessons were computed
        memory.drain()
        embeds = Counted(monkeypatch, memory.embedder, "embed")
        first = (await call(dev, "claim_task", task_id=cards[0]["id"]))["lessons"]
        assert embeds.calls == 0  # searched again from the card's stored vector
        assert first[0]["id"] == newer["item"]["id"]
        # computed again ahead (the next cards in claim order), then a lesson is replaced
        assert memory.prepare() == 2
        replacing = dict(
            SQL_LESSON, fix="Use the ORM's bound parameters; never format SQL.", supersedes=newer["item"]["id"]
        )
        await call(lead, "record_lesson", **replacing)
        memory.drain()
        embeds.calls = 0
        second = (await call(dev, "claim_task", task_id=cards[1]["id"]))["lessons"]
        assert embeds.calls == 0
        # a card whose text changed is searched with its new text
        await call(lead, "update_task", task_id=cards[2]["id"], **RETITLED)
        third = (await call(dev, "claim_task", task_id=cards[2]["id"]))["lessons"]
        assert embeds.calls == 1
    assert newer["item"]["id"] not in [h["id"] for h in second]
    assert old["item"]["id"] == third[0]["id"]


@pytest.mark.backends("sqlite", "postgresql")
async def test_lessons_computed_again_ahead_reuse_the_vectors_of_unchanged_cards(connect, memory, monkeypatch):
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        await call(lead, "record_lesson", **RETRY_LESSON)
        memory.drain()
        cards = [await call(lead, "create_task", **CARD) for _ in range(3)]
        assert memory.prepare() == 3
        embeds = Counted(monkeypatch, memory, "_embed_background")
        newer = await call(lead, "record_lesson", **SQL_LESSON)  # every card's lessons are computed again
        memory.drain()
        embeds.args.clear()  # the lesson's own readings
        await call(lead, "update_task", task_id=cards[1]["id"], priority="high")  # a change that keeps its text
        assert memory.prepare() == 3
        assert embeds.args == []  # their text is as it was: the vectors computed for it are searched again
        await call(lead, "update_task", task_id=cards[2]["id"], **RETITLED)
        assert memory.prepare() == 1
        (texts,) = embeds.args[0]
        assert len(embeds.args) == 1 and len(texts) == 1 and "payments API" in texts[0]  # changed text: embedded
        searches = Counted(monkeypatch, memory, "query")
        handed = [(await call(dev, "claim_task", task_id=card["id"]))["lessons"] for card in cards]
        assert searches.calls == 0  # handed as computed ahead
    assert handed[0][0]["id"] == handed[1][0]["id"] == newer["item"]["id"]
    assert handed[2][0]["id"] != newer["item"]["id"]  # the retry lesson ranks first for the card about retries


@pytest.mark.backends("sqlite", "postgresql")
async def test_lessons_computed_ahead_are_handed_as_read_until_a_stored_item_changes(connect, memory, monkeypatch):
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        sql = await call(lead, "record_lesson", **SQL_LESSON)
        await call(lead, "record_lesson", **RETRY_LESSON)
        memory.drain()
        cards = [await call(lead, "create_task", **CARD) for _ in range(3)]
        assert memory.prepare() == 3
        reads = Counted(monkeypatch, memory.knowledge, "get")
        first = (await call(dev, "claim_task", task_id=cards[0]["id"]))["lessons"]
        assert reads.calls == 0  # handed as they were read ahead: the items are not read again
        # the same lesson recorded again is merged into the stored one: no new lesson, but an item changed
        merged = await call(lead, "record_lesson", **SQL_LESSON)
        assert merged["merged"] and merged["item"]["id"] == sql["item"]["id"]
        reads.calls = 0
        second = (await call(dev, "claim_task", task_id=cards[1]["id"]))["lessons"]
        assert reads.calls == 1  # read again, as they are now
        # computed ahead again, the items are not read at the claim
        assert memory.prepare() == 1
        reads.calls = 0
        third = (await call(dev, "claim_task", task_id=cards[2]["id"]))["lessons"]
        assert reads.calls == 0
    counted = {h["id"]: h["merged_count"] for h in first}, {h["id"]: h["merged_count"] for h in second}
    assert counted[0][sql["item"]["id"]] == 1 and counted[1][sql["item"]["id"]] == 2
    assert {h["id"]: h["merged_count"] for h in third} == counted[1]
    assert [h["id"] for h in first] == [h["id"] for h in second] == [h["id"] for h in third]
    assert [{k: v for k, v in h.items() if k != "merged_count"} for h in first] == [
        {k: v for k, v in h.items() if k != "merged_count"} for h in second
    ]


@pytest.mark.backends("sqlite", "postgresql")
async def test_with_no_lesson_a_claim_neither_embeds_nor_searches(connect, memory, monkeypatch):
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        await call(lead, "remember", items=[{"text": "The staging database lives on db-2.", "kind": "note"}])
        memory.drain()
        card = await call(lead, "create_task", **CARD)
        assert memory.prepare() == 0  # nothing a claim could hand
        embeds = Counted(monkeypatch, memory.embedder, "embed")
        searches = Counted(monkeypatch, memory, "query")
        claimed = await call(dev, "claim_task", task_id=card["id"])
    assert claimed["claimed"] and claimed["lessons"] == []
    assert (embeds.calls, searches.calls) == (0, 0)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def embed_workers(home: Path) -> list[int]:
    """The embedding processes of the servers serving `home` (their children running embed_process)."""
    workers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and str(home).encode() in argv:
            for child in _children(int(entry.name)):
                try:
                    if b"hiveboard.memory.embed_process" in Path(f"/proc/{child}/cmdline").read_bytes():
                        workers.append(child)
                except OSError:
                    pass
    return workers


async def _found(client, query: str, message_id: int) -> bool:
    hits = (await call(client, "query_memory", query=query, mode="vector", k=5, wait_seconds=1))["hits"]
    return message_id in [h.get("message_id") for h in hits]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker process through /proc")
@pytest.mark.slow
async def test_a_killed_embedding_process_is_started_again_and_loses_no_item(tmp_path):
    home = tmp_path / "home"
    async with stdio_server(home, "alice") as alice, stdio_server(home, "bob") as bob:
        first = await call(
            alice,
            "publish_message",
            intent="info",
            content="The nightly backup filled the disk of the staging database host, so writes failed until morning.",
        )
        # found by meaning, from the other process too
        await until(lambda: _found(bob, "storage ran out because of backups", first["id"]), what="the first message")
        workers = await until(lambda: embed_workers(home), what="an embedding process")
        assert len(workers) == 1  # the process that owns the index embeds; the other relays its searches
        if hasattr(os, "SCHED_IDLE"):  # on spare CPU only: the idle scheduling class
            assert os.sched_getscheduler(workers[0]) == os.SCHED_IDLE
        os.kill(workers[0], signal.SIGKILL)
        later = [
            await call(bob, "publish_message", intent="info", content=text)
            for text in (
                "Login tokens expired early because the server clock drifted by ten minutes.",
                "The thumbnail service ran out of file handles under load and stopped answering.",
            )
        ]
        for message, query in zip(later, ("authentication failing after time skew", "too many open files")):
            await until(lambda m=message, q=query: _found(alice, q, m["id"]), what=f"message {message['id']}")
        assert await _found(alice, "storage ran out because of backups", first["id"])
        restarted = embed_workers(home)
        assert len(restarted) == 1 and restarted != workers
