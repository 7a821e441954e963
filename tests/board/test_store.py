"""The SQLite store under the board: migrations, WAL, and claims from many threads at once."""

from __future__ import annotations

import gc
import sqlite3
import threading

import pytest

from hiveboard.board.db import Store
from hiveboard.board.migrations import MIGRATIONS
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board


def test_migrations_are_recorded_once_and_reopening_is_safe(tmp_path):
    path = tmp_path / "hb.db"
    store = Store(path)
    names = [r[0] for r in store.db.execute("SELECT name FROM migrations ORDER BY rowid")]
    assert names == [m.__name__ for m in MIGRATIONS]
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    Board(store).create("alice", NewTask(title="kept"))
    store.close()
    again = Store(path)
    assert [r[0] for r in again.db.execute("SELECT name FROM migrations")] == names
    assert Board(again).get(1).title == "kept"


def test_threads_claiming_at_once_never_share_a_card(tmp_path):
    board = Board(Store(tmp_path / "hb.db"))
    for i in range(200):
        board.create("lead", NewTask(title=f"card {i}"))
    won: dict[str, list[int]] = {}
    barrier = threading.Barrier(8)

    def worker(name: str) -> None:
        mine = won.setdefault(name, [])
        barrier.wait()
        while (claim := board.claim(name)).claimed:
            mine.append(claim.task.id)

    threads = [threading.Thread(target=worker, args=(f"agent-{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for got in won.values() for i in got]
    assert sorted(ids) == list(range(1, 201))
    rows = board.store.db.execute("SELECT id, assignee FROM tasks").fetchall()
    owner = {i: name for name, got in won.items() for i in got}
    assert all(owner[task_id] == assignee for task_id, assignee in rows)


def test_connections_of_finished_threads_are_closed(tmp_path):
    board = Board(Store(tmp_path / "hb.db"))
    board.create("lead", NewTask(title="t"))
    for _ in range(5):  # bursts of short-lived worker threads, as anyio retires idle workers
        threads = [threading.Thread(target=board.get, args=(1,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    gc.collect()
    assert board.store.open_connections() == 1  # only this thread's


def test_upkeep_that_need_not_wait_is_skipped_while_another_writer_holds_the_lock(tmp_path):
    store = Store(tmp_path / "hb.db")
    store.db.execute("CREATE TABLE upkeep (n INTEGER)")
    other = sqlite3.connect(store.path, isolation_level=None)  # another process
    other.execute("BEGIN IMMEDIATE")
    with store.try_write() as db:
        assert db is None
    other.execute("ROLLBACK")

    held, release = threading.Event(), threading.Event()

    def writer() -> None:  # another thread of this process, mid-transaction
        with store.write():
            held.set()
            release.wait()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait()
    with store.try_write() as db:
        assert db is None
    release.set()
    thread.join()

    with store.try_write() as db:
        db.execute("INSERT INTO upkeep VALUES (1)")
    try:
        with store.try_write() as db:
            db.execute("INSERT INTO upkeep VALUES (2)")
            raise RuntimeError("the body failed")
    except RuntimeError:
        pass
    assert [n for (n,) in store.db.execute("SELECT n FROM upkeep")] == [1]  # the failed body wrote nothing
    assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000  # writers still wait their turn
    other.close()
    store.close()


def test_times_read_as_datetime_writes_them_to_the_millisecond():
    import random
    from datetime import UTC, datetime

    from hiveboard.board.db import iso

    rng = random.Random(7)
    edges = [0.0, 0.0005, 0.9995, 0.9999995, 1.0000005, 59.9999996, 1e9 + 0.0015, 4102444799.9999995, -1.5, -86400.25]
    stamps = edges + [rng.uniform(1.6e9, 2e9) for _ in range(20_000)]
    stamps += [round(rng.uniform(1.6e9, 2e9), 3) + rng.choice([0.0005, -0.0005, 5e-7, -5e-7]) for _ in range(20_000)]
    for ts in stamps:
        want = datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert iso(ts) == want, ts
    assert iso(None) is None


@pytest.mark.backends("sqlite", "postgresql")
def test_the_newest_memory_items_of_each_kind_and_their_counts(board):
    from hiveboard.board.knowledge import NewItem

    items = [NewItem(kind=kind, text=f"{kind} {n}") for n in range(3) for kind in ("lesson", "note")]
    with board.store.write() as db:
        ids = board.knowledge.add_many(db, items, "lee")
        board.knowledge.supersede(db, ids[0], ids[2])  # a superseded lesson is not shown, nor counted
    counts, newest = board.knowledge.recent(per_kind=1)
    assert counts == {"lesson": 2, "note": 3}
    assert [(x.kind, x.text) for x in newest] == [("note", "note 2"), ("lesson", "lesson 2")]
