"""Typed commit events and the one notifier: waiters wake on the change they wait for, in this process
and from another store on the same file (as another server process would write it), and a waiting
call does not re-read the board while nothing changes."""

from __future__ import annotations

import anyio
import pytest
from conftest import call

from hiveboard.board.db import Store
from hiveboard.board.events import (
    InboxChanged,
    MemoryAdded,
    MemoryIndexed,
    Notifier,
    ReviewChanged,
    TaskChanged,
    Topic,
)
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask
from hiveboard.board.review_models import Synthesis
from hiveboard.board.tasks import Board

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


async def until_waiting(board: Board, topic: str) -> None:
    """Readiness by signal: the waiter has registered on the notifier."""
    with anyio.fail_after(30):
        while topic not in board.store.notifier.waiting():
            await anyio.sleep(0.005)


# each event with the topics whose waiters it must wake; ids differ, so a topic keyed by the wrong id shows
PUBLISHED = [
    (TaskChanged(task_id=7, status="open"), [Topic.task(7), Topic.BOARD]),
    (
        InboxChanged(message_id=3, agents=frozenset({"alice", "bob"})),
        [Topic.inbox("alice"), Topic.inbox("bob"), Topic.MESSAGES],
    ),
    (ReviewChanged(review_id=5, task_id=7), [Topic.review(7), Topic.REVIEWS]),
    (MemoryAdded(item_id=9), [Topic.MEMORY]),
    (MemoryIndexed(count=2), [Topic.MEMORY_INDEXED]),
]
EVERY_TOPIC = {topic for _, topics in PUBLISHED for topic in topics}


@pytest.mark.parametrize(("event", "topics"), PUBLISHED, ids=[type(event).__name__ for event, _ in PUBLISHED])
async def test_a_waiter_on_a_topic_wakes_when_its_event_is_published(tmp_path, event, topics):
    notifier = Notifier(str(tmp_path / "board.db"))  # publishing in this process: the file is never opened
    others = EVERY_TOPIC - set(topics) | {Topic.task(5), Topic.inbox("carol"), Topic.review(5)}
    marks = {topic: notifier.mark(topic) for topic in [*topics, *others]}
    woke: dict[str, bool] = {}

    async def wait(topic: str) -> None:
        woke[topic] = await notifier.wait(topic, marks[topic], 10)

    async with anyio.create_task_group() as tg:
        for topic in topics:
            tg.start_soon(wait, topic)
        with anyio.fail_after(10):
            while not set(topics) <= notifier.waiting():
                await anyio.sleep(0.005)
        notifier.publish([(1, event)])
    assert woke == dict.fromkeys(topics, True)
    assert [t for t in others if notifier.mark(t) != marks[t]] == [], "it woke the waiters of other topics"


async def in_review(client) -> int:
    task_id = (await call(client, "create_task", title="write it"))["id"]
    claim = await call(client, "claim_task", task_id=task_id)
    await call(client, "complete_task", task_id=task_id, token=claim["token"], output="done")
    return task_id


async def test_a_waiting_get_review_reads_the_trail_only_when_something_changes(connect, board):
    reads = []
    trail = board.reviews.trail

    def counted(task_id):
        reads.append(task_id)
        return trail(task_id)

    board.reviews.trail = counted
    async with connect("alice", wants_review=lambda task: True) as alice:
        task_id = await in_review(alice)
        answer = await call(alice, "get_review", task_id=task_id, wait_seconds=1.5)
    assert answer["rounds"][-1]["status"] == "queued"
    assert len(reads) <= 2, f"get_review re-read the trail {len(reads)} times while nothing changed"


async def test_a_verdict_written_through_another_store_wakes_a_waiting_get_review(connect, board, tmp_path):
    other = Board(Store(board.store.path))  # another server process on the same data directory
    try:
        async with connect("alice", wants_review=lambda task: True) as alice:
            task_id = await in_review(alice)
            answers = []

            async def wait_for_verdict():
                answers.append(await call(alice, "get_review", task_id=task_id, wait_seconds=60))

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_verdict)
                await until_waiting(board, Topic.review(task_id))

                def review_elsewhere():
                    job = other.reviews.claim_job("other-worker", 30)
                    other.reviews.begin(job, "other-worker", [], [], None)
                    other.reviews.finish(job, "other-worker", Synthesis(verdict="PASS", score=9), "done", "passed", [])

                with anyio.fail_after(20):  # far below the 60 s wait: only a wake-up returns this early
                    await anyio.to_thread.run_sync(review_elsewhere)
                    while not answers:
                        await anyio.sleep(0.01)
        last = answers[0]["rounds"][-1]
        assert last["status"] == "finished" and last["outcome"] == "done"
    finally:
        other.store.close()


async def test_a_message_published_through_another_store_wakes_a_waiting_inbox(connect, board):
    other = Board(Store(board.store.path))
    try:
        other.agents.ensure("bob")
        async with connect("alice") as alice:
            await call(alice, "whoami")
            answers = []

            async def wait_for_mail():
                answers.append(await call(alice, "get_messages", wait_seconds=60))

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_mail)
                await until_waiting(board, Topic.inbox("alice"))
                with anyio.fail_after(20):
                    await anyio.to_thread.run_sync(
                        lambda: other.messages.publish(
                            "bob", NewMessage(intent="ping", content="hello", recipient="alice")
                        )
                    )
                    while not answers:
                        await anyio.sleep(0.01)
        assert [m["sender"] for m in answers[0]["messages"]] == ["bob"]
    finally:
        other.store.close()


async def test_a_failed_write_emits_nothing(connect, board):
    async with connect("alice") as alice:
        await call(alice, "create_task", title="one")
        before = board.store.db.execute("SELECT count(*) FROM events").fetchone()[0]
        answer = await alice.call_tool("claim_task", {"task_id": 999})
        assert answer.is_error
        await call(alice, "get_board")
        assert board.store.db.execute("SELECT count(*) FROM events").fetchone()[0] == before


async def test_a_server_starting_as_the_last_one_stops_still_hears_other_stores(board):
    """One server leaves watching() while another enters it (in-process servers do, one per connection): the
    newcomer must get a watcher of its own, not join the one being cancelled, and hear another store's commit."""
    import asyncio

    notifier = board.store.notifier
    heard: list = []
    notifier.subscribe(lambda events: heard.extend(e for e in events if isinstance(e, TaskChanged)))
    first = notifier.watching()
    await first.__aenter__()
    entered, leave = asyncio.Event(), asyncio.Event()

    async def second() -> None:
        async with notifier.watching():
            entered.set()
            await leave.wait()

    joining = asyncio.create_task(second())  # starts while the first one's exit awaits its watcher's end
    await first.__aexit__(None, None, None)
    other = Board(Store(board.store.path))
    try:
        with anyio.fail_after(30):
            await entered.wait()
            other.agents.ensure("bob")
            await anyio.to_thread.run_sync(lambda: other.create("bob", NewTask(title="from elsewhere")))
            while not heard:
                await anyio.sleep(0.01)
    finally:
        leave.set()
        await joining
        other.store.close()
    assert heard
