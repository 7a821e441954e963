"""The change feed under row-level concurrency on PostgreSQL (board/postgres.py): many writers on several nodes at
once, and every node's notifier publishes every event exactly once, each card's in the order of its commits.

Event ids are taken from a sequence before a transaction commits, so they are not in commit order once writes run
together; the feed must not depend on them. A card's version is bumped by every change under the card's row lock, so
the versions a node hears of one card must rise by one each time."""

from __future__ import annotations

import contextlib
import random
import threading
from collections import Counter

import anyio
import pytest

from hiveboard.board.db import Store
from hiveboard.board.errors import BoardError
from hiveboard.board.events import TaskChanged, decode
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board

pytestmark = pytest.mark.anyio

NODES, WRITERS, ROUNDS, CARDS = 3, 4, 12, 6


def _writer(board: Board, name: str, cards: list[int], seed: int, failures: list) -> None:
    pick = random.Random(seed)
    for n in range(ROUNDS):
        card = pick.choice(cards)
        try:
            claim = board.claim(name, task_id=card)
            board.update(name, card, token=claim.token, note=f"{name} round {n}")
            board.release(name, card, claim.token)
        except BoardError as exc:  # another writer holds the card: the claim is refused, nothing written
            if "is claimed by" not in str(exc):
                failures.append(f"{name}: {exc}")
        board.messages.publish(
            name, NewMessage(intent="note", content=f"{name} {n}", recipient=f"w{pick.randrange(9)}")
        )


@pytest.mark.slow
async def test_every_node_hears_every_event_once_and_each_cards_in_commit_order(postgres):
    url = postgres.database()
    boards = [Board(Store(url)) for _ in range(NODES)]
    heard: list[list] = [[] for _ in boards]
    try:
        for n, board in enumerate(boards):
            board.store.notifier.subscribe(heard[n].extend)
        for w in range(NODES * WRITERS):
            boards[0].agents.register(f"w{w}")
        async with contextlib.AsyncExitStack() as stack:
            for board in boards:
                await stack.enter_async_context(board.store.notifier.watching())
            first = boards[0].store.db.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]
            cards = [boards[n % NODES].create("lead", NewTask(title=f"card {n}")).id for n in range(CARDS)]
            failures: list[str] = []
            threads = [
                threading.Thread(
                    target=_writer, args=(boards[w % NODES], f"w{w}", cards, w, failures), name=f"writer-{w}"
                )
                for w in range(NODES * WRITERS)
            ]

            def run() -> None:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()

            await anyio.to_thread.run_sync(run)
            assert failures == []
            rows = boards[0].store.db.execute("SELECT kind, data FROM events WHERE id > ?", [first]).fetchall()
            committed = Counter(decode(kind, data) for kind, data in rows)
            assert len(committed) == len(rows) > NODES * WRITERS * ROUNDS  # each event is told apart by its values
            with anyio.fail_after(30):
                while any(len(h) < len(rows) for h in heard):
                    await anyio.sleep(0.05)
            await anyio.sleep(0.5)  # nothing more arrives: no event twice
        for n, events in enumerate(heard):
            assert Counter(events) == committed, f"node {n} heard a different set of events"
            for card in cards:
                versions = [e.version for e in events if isinstance(e, TaskChanged) and e.task_id == card]
                assert versions == list(range(1, len(versions) + 1)), f"node {n}, card {card}: {versions}"
    finally:
        for board in boards:
            board.store.close()


@pytest.mark.slow
async def test_a_node_that_lost_its_listening_connection_reads_back_what_it_missed_once(postgres):
    """A node's listening connection is cut (its server backend terminated) while another node writes: once it
    listens again it reads back the events committed meanwhile, by transaction against its snapshots, and hands each
    over once; events heard before the cut are not handed again."""
    import psycopg

    url = postgres.database()
    one, two = Board(Store(url)), Board(Store(url))
    heard: list = []
    try:
        two.store.notifier.subscribe(heard.extend)
        async with two.store.notifier.watching():
            before = [one.create("lead", NewTask(title=f"before {n}")).id for n in range(3)]
            with anyio.fail_after(20):
                while len(heard) < 3:
                    await anyio.sleep(0.05)
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'hiveboard-watch' "
                    "AND datname = current_database()"
                )
            during = [one.create("lead", NewTask(title=f"during {n}")).id for n in range(5)]
            with anyio.fail_after(30):
                while len([e for e in heard if isinstance(e, TaskChanged)]) < 8:
                    await anyio.sleep(0.05)
            after = one.create("lead", NewTask(title="after")).id
            with anyio.fail_after(30):
                while len([e for e in heard if isinstance(e, TaskChanged)]) < 9:
                    await anyio.sleep(0.05)
            await anyio.sleep(1.5)
        created = [e.task_id for e in heard if isinstance(e, TaskChanged)]
        assert sorted(created) == sorted([*before, *during, after])
        assert created[:3] == before and created[-1] == after
    finally:
        one.store.close()
        two.store.close()
