"""The PostgreSQL store: placeholders translated, other URL schemes refused, the schema applied once, and a
commit on one node waking a waiter on another (LISTEN/NOTIFY, no polling)."""

from __future__ import annotations

import json
import threading
import time
from contextlib import nullcontext

import anyio
import numpy as np
import pytest
from pg_cluster import PostgresCluster

from hiveboard.board import cards, copy
from hiveboard.board.db import Store, dialect_for, not_waiting, redact, rows
from hiveboard.board.errors import Conflict, Unavailable
from hiveboard.board.events import InboxChanged, MemoryAdded, TaskChanged, Topic, decode, encode
from hiveboard.board.machine import ANY_EXPIRED, EXPIRED
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask
from hiveboard.board.pg_migrations import MIGRATIONS
from hiveboard.board.postgres import translate
from hiveboard.board.quotas import QuotaConfig
from hiveboard.board.review_models import Synthesis
from hiveboard.board.tasks import Board

pytestmark = pytest.mark.anyio


def test_placeholders_become_psycopgs_outside_string_literals():
    assert translate("SELECT ? WHERE a = '?' AND b LIKE 'role:%' AND c = ?") == (
        "SELECT %s WHERE a = '?' AND b LIKE 'role:%%' AND c = %s"
    )
    assert translate("SELECT 'it''s ?', ?") == "SELECT 'it''s ?', %s"


def test_a_url_of_another_database_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"mysql://… is not supported: give a SQLite file path or a postgresql://"):
        dialect_for("mysql://root@127.0.0.1/board")
    assert dialect_for("/data/hiveboard.db").name == "sqlite"
    assert redact("postgresql://hb:s3cret@db:5432/board") == "postgresql://hb:***@db:5432/board"


def test_nodes_that_start_together_apply_the_schema_once(postgres):
    url = postgres.database()
    stores = []

    def open_store():
        stores.append(Store(url))

    threads = [threading.Thread(target=open_store) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(stores) == 3
        names = stores[0].db.execute("SELECT name FROM migrations").fetchall()
        assert [n[0] for n in names] == [m.__name__ for m in MIGRATIONS]
    finally:
        for s in stores:
            s.close()


async def test_a_commit_on_one_node_wakes_a_waiter_on_another(postgres):
    url = postgres.database()
    one, two = Board(Store(url)), Board(Store(url))
    try:
        notifier = two.store.notifier
        async with notifier.watching():
            mark = notifier.mark(Topic.BOARD)
            await anyio.to_thread.run_sync(lambda: one.create("alice", NewTask(title="from node one")))
            assert await notifier.wait(Topic.BOARD, mark, timeout=10), "node two was not woken"
        assert two.list().total == 1
    finally:
        one.store.close()
        two.store.close()


async def test_a_board_event_to_the_pool_reaches_inboxes_and_waiters_on_every_node(postgres):
    """A card's event (its claim) is written by one statement nobody waits for: the message, the inbox rows of
    those it concerns and of those following the task, and its InboxChanged event, whose id and recipients the node's
    own notifier hears once it commits, in order with the transaction's other events, and another node's waiter
    on a follower's inbox is woken."""
    url = postgres.database()
    one, two = Board(Store(url)), Board(Store(url))
    heard: list[list] = []
    try:
        for agent in ("lead", "dev", "watcher"):
            one.agents.new_token(agent)
        card = one.create("lead", NewTask(title="watched"))
        two.messages.subscribe("watcher", "task", str(card.id))
        one.store.notifier.subscribe(heard.append)
        notifier = two.store.notifier
        async with notifier.watching():
            mark = notifier.mark(Topic.inbox("watcher"))
            await anyio.to_thread.run_sync(lambda: one.claim("dev", task_id=card.id))
            assert await notifier.wait(Topic.inbox("watcher"), mark, timeout=10), "the follower was not woken"
        (events,) = heard
        inbox = [e for e in events if isinstance(e, InboxChanged)]
        assert len(inbox) == 1 and inbox[0].agents == {"watcher"}  # a claim is news to its followers only
        (got,) = two.messages.inbox("watcher", mark_read=False).messages
        assert (got.id, got.intent, got.task_id) == (inbox[0].message_id, "task_claim", card.id)
        assert two.messages.inbox("lead", mark_read=False).messages == []
        rows = one.store.db.execute("SELECT id, kind, data FROM events ORDER BY id").fetchall()
        assert [decode(kind, data) for _, kind, data in rows[-len(events) :]] == events
    finally:
        one.store.close()
        two.store.close()


def test_a_listener_hears_every_nodes_commits_in_commit_order_each_once(postgres):
    """A node's listener (board/postgres.py Listener) hears each commit's events from its NOTIFY, its own node's
    too, in the order the database committed them; none twice, and a node's own commits while it does not listen
    are not handed to it (it published them itself)."""
    url = postgres.database()
    one, two = Board(Store(url)), Board(Store(url))
    dialect = one.store.dialect
    listener = dialect.watch_connect(url)
    try:
        made = [
            one.create("alice", NewTask(title="by node one")).id,
            two.create("bob", NewTask(title="by node two")).id,
        ]
        made += [two.create("bob", NewTask(title=f"again {n}")).id for n in range(3)]
        heard: list = []
        deadline = time.monotonic() + 10
        while len(heard) < len(made) and time.monotonic() < deadline:
            heard += listener.events(0.5)
        events = [decode(kind, data) for _, kind, data in heard]
        assert [e.task_id for e in events] == made
        assert [i for i, _, _ in heard] == sorted(i for i, _, _ in heard)
        assert listener.events(0.3) == []
    finally:
        listener.close()
        one.store.close()
        two.store.close()


async def test_a_node_hears_a_busy_nodes_events_each_once_in_commit_order(postgres):
    """Node one commits from eight threads at once; node two, watching, publishes every event once, and each card's
    events in the order they were committed (created, then claimed)."""
    url = postgres.database()
    one, two = Board(Store(url)), Board(Store(url))
    heard: list = []
    try:
        notifier = two.store.notifier
        notifier.subscribe(heard.extend)
        async with notifier.watching():
            first = one.store.db.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]

            def busy(n: int) -> None:
                for k in range(5):
                    card = one.create("alice", NewTask(title=f"card {n}.{k}"))
                    one.claim(f"dev{n}", task_id=card.id)

            await anyio.to_thread.run_sync(lambda: _in_threads(busy, 8))
            written = one.store.db.execute("SELECT count(*) FROM events WHERE id > ?", [first]).fetchone()[0]
            with anyio.fail_after(20):
                while len(heard) < written:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.3)
        assert len(heard) == written and written >= 80
        moves = [(e.task_id, e.status) for e in heard if isinstance(e, TaskChanged)]
        assert len(set(moves)) == len(moves) == 80
        for card in {t for t, _ in moves}:
            assert [s for t, s in moves if t == card] == ["todo", "in_progress"]
    finally:
        one.store.close()
        two.store.close()


def _in_threads(fn, count: int) -> None:
    threads = [threading.Thread(target=fn, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _round_trips(store: Store):
    """Count the round trips to the server from this thread's connection: each statement sent alone, and each
    pipeline (board/postgres.py PgDatabase.pipelined), is one."""
    db = store.db
    counted = {"n": 0}
    send, conn = db._send, db._conn

    def counted_send(statements):
        counted["n"] += 1
        return send(statements)

    def counted_executemany(*args, **kwargs):
        counted["n"] += 1
        return executemany(*args, **kwargs)

    db._send = counted_send
    executemany = db.executemany
    db.executemany = counted_executemany
    assert db._conn is conn
    return counted


def test_a_direct_message_takes_four_round_trips_and_reads_back_as_answered(postgres):
    """A direct message, quotas on as the server runs: the locks, the recipient's check and the quota's reads, the
    quota's record, the message with its inbox row and event, and the commit with its NOTIFY. What `publish` answers is the
    stored row: a message without a thread gets its own (msg-<id>), and the recipient's inbox holds it. A message
    to the pool takes two round trips more (its followers are read, and its memory item names the message's id)
    and joins the memory."""
    board = Board(Store(postgres.database()), quotas=QuotaConfig())
    try:
        for name in ("dev", "peer"):
            board.agents.new_token(name)
        # the database's size is measured now and then (quotas' ceiling): once before counting
        board.messages.publish("dev", NewMessage(intent="note", content="first", recipient="peer"))
        trips = _round_trips(board.store)
        answers = []
        for wait in (nullcontext, not_waiting):
            trips["n"] = 0
            with wait():
                answers.append(board.messages.publish("dev", NewMessage(intent="note", content="hi", recipient="peer")))
            assert trips["n"] == (4 if wait is nullcontext else 5)
        for answer in answers:
            assert (answer.sender, answer.recipient, answer.thread) == ("dev", "peer", f"msg-{answer.id}")
        page = board.messages.inbox("peer")
        assert [m.id for m in page.messages][1:] == [a.id for a in answers]
        assert [m.thread for m in page.messages][1:] == [a.thread for a in answers]
        threaded = board.messages.publish(
            "dev", NewMessage(intent="note", content="more", recipient="peer", thread="x")
        )
        assert threaded.thread == "x"
        # to the pool: the lock, the followers with the quota's reads; the quota's record and the message; its memory
        # item (with its queue row and event), the inbox rows and the commit
        trips["n"] = 0
        pooled = board.messages.publish("dev", NewMessage(intent="note", content="the parser takes UTC dates now"))
        assert trips["n"] == 6
        (item,) = rows(board.store.db, "SELECT text FROM memory_items WHERE source = ?", [f"message:{pooled.id}"])
        assert "the parser takes UTC dates now" in item["text"]
        # naming a card costs no round trip more: the card is read with the quota's reads; its creator hears of it
        card = board.create("lead", NewTask(title="a card"))
        for recipient, expected in (("peer", 4), (None, 6)):
            trips["n"] = 0
            board.messages.publish(
                "dev", NewMessage(intent="note", content="on it", task_id=card.id, recipient=recipient)
            )
            assert trips["n"] == expected
        assert [m.content for m in board.messages.inbox("lead").messages] == ["on it"]
    finally:
        board.store.close()


def test_event_rows_written_by_statements_read_as_encode_writes_them(postgres):
    """The event rows a statement writes itself (a card's event to the pool, a direct message, a finished card's
    output joining the memory) are the JSON `encode` writes, ending with the node's origin as `encode` ends it: the
    node's own watcher knows them as its own by that ending and does not publish them a second time."""
    board = Board(Store(postgres.database()))
    try:
        for name in ("dev", "peer"):
            board.agents.new_token(name)
        card = board.create("lead", NewTask(title="a card"))
        claim = board.claim("dev", task_id=card.id)
        board.messages.publish("dev", NewMessage(intent="note", content="hi", recipient="peer"))
        board.complete("dev", card.id, claim.token, output="done, with a test")
        origin = board.store.notifier.origin
        found = rows(board.store.db, "SELECT kind, data FROM events ORDER BY id")
        assert {r["kind"] for r in found} >= {InboxChanged.kind, MemoryAdded.kind}
        for r in found:
            assert r["data"].endswith(f'"_o": "{origin}"}}'), r
            assert json.loads(r["data"]) == json.loads(encode(decode(r["kind"], r["data"]), origin))
    finally:
        board.store.close()


def test_reads_take_one_round_trip_and_writes_a_few(postgres):
    """What a tool costs on a database server is mostly its round trips: a read is one (its snapshot's
    beginning, the probe for expired leases, its statements and its end travel together), a claim, an update
    and a release a few."""
    board = Board(Store(postgres.database()))
    try:
        first = board.create("lead", NewTask(title="first"))
        card = board.create("lead", NewTask(title="second", depends_on=[first.id]))
        trips = _round_trips(board.store)
        for read in (lambda: board.get(card.id), lambda: board.list(), lambda: board.board()):
            trips["n"] = 0
            read()
            assert trips["n"] == 1
        costs = {}
        for name, write in (
            ("claim", lambda: board.claim("dev", task_id=first.id)),
            ("update", lambda: board.update("dev", first.id, token=1, note="half way")),
            ("release", lambda: board.release("dev", first.id, 1)),
            ("claim-next", lambda: board.claim("dev")),
            ("complete", lambda: board.complete("dev", first.id, 2, output="done, with a test")),
        ):
            trips["n"] = 0
            write()
            costs[name] = trips["n"]
        # claim: the card, its dependencies, digest and the sweep's probe; then the move with its history, the claim's
        # message with its inbox rows and event (one statement), the other events and the commit
        # complete (straight to done): the card and the sweep's probe; then the move, its history, the output's memory
        # item (of the artifacts the transaction wrote, not read back) with its queue row and event, the card's
        # event, the commit
        # claim: the locks with the card (locked), its dependencies, digest and the sweep's probe; the move with its history;
        # the claim's message with its inbox rows and event (one statement); the other events, their NOTIFY and COMMIT
        assert costs == {"claim": 4, "update": 3, "release": 5, "claim-next": 5, "complete": 8}
        # a write that must not wait (not_waiting) tries its locks first, a round trip of their own
        third = board.create("lead", NewTask(title="third"))
        tried = {}
        for name, write in (
            ("claim", lambda: board.claim("dev", task_id=third.id)),
            ("update", lambda: board.update("dev", third.id, token=1, note="half way")),
            ("release", lambda: board.release("dev", third.id, 1)),
        ):
            trips["n"] = 0
            with not_waiting():
                write()
            tried[name] = trips["n"]
        assert tried == {"claim": 5, "update": 4, "release": 6}
    finally:
        board.store.close()


def test_a_commit_whose_answer_is_lost_is_not_sent_again(postgres, monkeypatch):
    """A round trip that commits is never replayed on a new connection: the server may have committed it and lost
    only its answer. The caller hears the database became unavailable while committing, and the row is there once
    (a transaction whose statements all travel with its COMMIT, in a call that may wait and one that may not)."""
    import psycopg

    from hiveboard.board.postgres import PgDatabase

    url = postgres.database()
    store = Store(url)
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute("CREATE TABLE committed_once (x integer)")
    real = PgDatabase._send
    lose = {"next": False}

    def answer_lost(self, statements):
        out = real(self, statements)
        if lose["next"] and any(sql == "COMMIT" for sql, _ in statements):
            lose["next"] = False
            self._conn.close()  # committed, then the connection is gone before its answer is read
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return out

    monkeypatch.setattr(PgDatabase, "_send", answer_lost)
    try:
        for x, must_not_wait in ((1, True), (2, False)):
            lose["next"] = True
            with pytest.raises(Unavailable, match="while committing"):
                with not_waiting() if must_not_wait else nullcontext(), store.write() as db:
                    db.execute("INSERT INTO committed_once (x) VALUES (?)", [x])
        found = store.db.execute("SELECT x, count(*) FROM committed_once GROUP BY x ORDER BY x").fetchall()
        assert [tuple(r) for r in found] == [(1, 1), (2, 1)]
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_guarded_update_whose_row_moved_on_fails_and_writes_nothing(kind, postgres, tmp_path):
    board = Board(Store(postgres.database() if kind == "postgresql" else str(tmp_path / "b.db")))
    try:
        card = board.create("lead", NewTask(title="as written"))
        with pytest.raises(Conflict, match="changed meanwhile"):
            with board.store.write() as db:
                row = cards.row(db, card.id)
                board.machine.edit(
                    db, {**row, "version": row["version"] - 1}, "lead", "edited", {"title": "x"}, None, 1
                )
                db.execute("SELECT 1")  # on PostgreSQL the update travels with the next statement
        again = board.get(card.id)
        assert (again.title, again.version) == ("as written", card.version)
    finally:
        board.store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_write_of_many_statements_and_no_event_commits_them(kind, postgres, tmp_path):
    """A write transaction of an executemany that emits no event: its beginning with its locks, the statements and
    the COMMIT, a round trip each on PostgreSQL, and its rows are there."""
    board = Board(Store(postgres.database() if kind == "postgresql" else str(tmp_path / "b.db")))
    try:
        agent = board.agents.register("dev")[0].name
        trips = _round_trips(board.store) if kind == "postgresql" else {"n": 3}
        with board.store.write() as db:
            db.conn.executemany(
                "INSERT INTO subscriptions (agent, kind, value, created_at) VALUES (?, ?, ?, 0)",
                [(agent, "channel", "a"), (agent, "channel", "b")],
            )
        assert trips["n"] == 3
        with board.store.read() as db:
            found = db.execute("SELECT value FROM subscriptions WHERE agent = ? ORDER BY value", [agent]).fetchall()
        assert [tuple(r) for r in found] == [("a",), ("b",)]
    finally:
        board.store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_transaction_with_more_events_than_a_statement_takes_parameters_commits_them_all(kind, postgres, tmp_path):
    """A transaction's events' rows are written in parts: 40,000 events are 80,000 parameters, more than one
    statement takes (PostgreSQL 65,535, SQLite 32,766). Every one commits, and the notifier hears them in order;
    on PostgreSQL the parts go with the COMMIT: no round trip more than for one event."""
    board = Board(Store(postgres.database() if kind == "postgresql" else str(tmp_path / "b.db")))
    heard: list = []
    board.store.notifier.subscribe(heard.extend)
    try:
        card = board.create("lead", NewTask(title="a card"))
        trips = _round_trips(board.store) if kind == "postgresql" else {}
        counted = []
        for events in (1, 40_000):
            trips["n"] = 0
            with board.store.write() as db:
                db.execute("UPDATE tasks SET priority = ? WHERE id = ?", [events % 3 + 1, card.id])
                for n in range(events):
                    board.store.emit(MemoryAdded(n + 1))
            counted.append(trips["n"])
        # the parts add no round trip; the second transaction then prunes the rows past KEEP_EVENTS, a round trip
        # after its commit
        if kind == "postgresql":
            assert counted == [counted[0], counted[0] + 1]
        assert [e.item_id for e in heard if isinstance(e, MemoryAdded)] == [1, *range(1, 40_001)]
        with board.store.read() as db:
            kept = db.execute("SELECT count(*) FROM events WHERE kind = ?", [MemoryAdded.kind]).fetchone()[0]
            assert db.execute("SELECT priority FROM tasks WHERE id = ?", [card.id]).fetchone()[0] == 2
        assert kept >= 20_000  # all written; the oldest beyond KEEP_EVENTS are pruned after the commit
    finally:
        board.store.close()


def _rows_in_statistics(store: Store, table: str) -> float:
    """How many rows the planner's statistics of `table` say it holds."""
    with store.read() as db:
        if store.dialect.name == "postgresql":
            return max(0.0, db.execute("SELECT reltuples FROM pg_class WHERE relname = ?", [table]).fetchone()[0])
        found = db.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = ?", [table]).fetchall()
        return max((float(r[0].split()[0]) for r in found), default=0.0)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_planners_statistics_follow_a_growing_board(kind, postgres, tmp_path):
    """Statistics taken when the board was opened empty would tell the planner that the cards and the memory are
    a handful of rows (on PostgreSQL a claim-next then read and sorted every card in todo, and foreign-key checks
    scanned the cards, until autovacuum came a minute later): they are taken again each time a table doubles,
    the cards' when a card is created, the memory's when the indexer takes an item."""
    board = Board(Store(postgres.database() if kind == "postgresql" else str(tmp_path / "b.db")))
    try:
        for n in range(63):
            board.create("lead", NewTask(title=f"card {n}"))
        assert _rows_in_statistics(board.store, "tasks") < 63
        board.create("lead", NewTask(title="card 63"))
        assert _rows_in_statistics(board.store, "tasks") == 64
        for n in range(64, 130):
            board.create("lead", NewTask(title=f"card {n}"))
        assert _rows_in_statistics(board.store, "tasks") == 128
        with board.store.write() as db:
            for n in range(64):
                board.knowledge.add(db, kind="note", text=f"note {n}", created_by="lead")
        assert _rows_in_statistics(board.store, "memory_items") < 64
        lease, items = board.knowledge.lease(100)
        board.knowledge.indexed({i.id: np.ones((1, 4), dtype=np.float32) for i in items}, "m", lease)
        assert _rows_in_statistics(board.store, "memory_items") == 64
    finally:
        board.store.close()


def test_a_copied_board_has_the_statistics_of_its_rows(postgres, tmp_path):
    """`migrate` copies into an empty database, whose statistics were taken empty when the store opened: they are
    taken again once the rows are in."""
    source = Board(Store(str(tmp_path / "b.db")))
    target = Store(postgres.database())
    try:
        for n in range(40):
            source.create("lead", NewTask(title=f"card {n}"))
        assert all(c.same for c in copy.copy_board(source.store, target))
        assert _rows_in_statistics(target, "tasks") == 40
    finally:
        source.store.close()
        target.close()


def _scanned(plan: dict, alias: str) -> float:
    """The rows a plan's scans of `alias` produced or threw away (EXPLAIN ANALYZE, JSON)."""
    own = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0) if plan.get("Alias") == alias else 0
    return own + sum(_scanned(p, alias) for p in plan.get("Plans", ()))


def test_a_claim_next_reads_one_card_while_the_statistics_say_all_are_in_todo(postgres):
    """Statistics taken while every card was in todo (a new board's, until autovacuum takes them again) must not
    lead a claim-next to walk the cards done since, ahead of the first in todo in claim order: it reads one card."""
    board = Board(Store(postgres.database()))
    try:
        board.store.db.execute("ALTER TABLE tasks SET (autovacuum_enabled = false)")  # the statistics stay stale
        for n in range(256):  # the statistics are taken at 256 cards, all in todo
            board.create("lead", NewTask(title=f"card {n}"))
        for _ in range(200):
            claim = board.claim("dev")
            board.complete("dev", claim.task.id, claim.token, output="done")
        sql, params = board._claimable_query("dev", [])
        with board.store.read() as db:
            (plan,) = db.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchone()[0]
        assert _scanned(plan["Plan"], "t") <= 1, plan
        assert board.claim("dev").task.id == 201
    finally:
        board.store.close()


def test_the_lease_sweep_reads_no_card_whose_lease_runs_while_the_statistics_say_none_is_held(postgres):
    """Every write first looks for cards whose lease ran out. Statistics taken while no card was held must not lead
    it through the held cards one by one (on the index of their status alone): it reads none while none ran out."""
    board = Board(Store(postgres.database()))
    try:
        board.store.db.execute("ALTER TABLE tasks SET (autovacuum_enabled = false)")  # the statistics stay stale
        for n in range(256):  # the statistics are taken at 256 cards, none held
            board.create("lead", NewTask(title=f"card {n}"))
        for _ in range(100):
            board.claim("dev")
        for probe in (EXPIRED, ANY_EXPIRED):  # a write's, a read's
            with board.store.read() as db:
                (plan,) = db.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {probe}", [time.time()]).fetchone()[0]
            assert _scanned(plan["Plan"], "tasks") == 0, plan
    finally:
        board.store.close()


def test_a_restarted_server_costs_nothing_and_a_stopped_one_one_clear_error(postgres, tmp_path):
    """After a restart the old connections are dead: a transaction's first round trip finds that out before
    anything took effect, and goes again on a new connection. While the server is down, one sentence and
    nothing written; once it is back, the same store goes on by itself."""
    cluster = PostgresCluster(tmp_path / "pg")  # a server of this test's own, to stop and start
    board = Board(Store(cluster.database()))
    try:
        board.create("alice", NewTask(title="before"))
        cluster.restart()
        board.create("alice", NewTask(title="after the restart"))
        cluster.down()
        with pytest.raises(Unavailable, match=r"the database is unavailable \(.*\); nothing was written; retry"):
            board.create("alice", NewTask(title="while it is down"))
        with pytest.raises(Unavailable, match=r"the database is unavailable"):
            board.list()
        cluster.up()
        board.create("alice", NewTask(title="back"))
        assert [t.title for t in board.list().tasks] == ["before", "after the restart", "back"]
    finally:
        board.store.close()
        cluster.stop()


def test_agents_on_three_nodes_racing_claim_next_take_every_card_once(postgres):
    url = postgres.database()
    nodes = [Board(Store(url)) for _ in range(3)]
    try:
        for n in range(300):
            nodes[n % 3].create("lee", NewTask(title=f"card {n}"))
        claimed: list[tuple[str, int]] = []
        lock = threading.Lock()

        def agent(name: str, board: Board) -> None:
            while (claim := board.claim(name)).claimed:
                with lock:
                    claimed.append((name, claim.task.id))

        threads = [threading.Thread(target=agent, args=(f"agent-{i}", nodes[i % 3])) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = [task_id for _, task_id in claimed]
        assert len(ids) == 300 and len(set(ids)) == 300  # every card claimed, none twice
        assert len({name for name, _ in claimed}) > 1  # the agents really raced
        rows = nodes[0].store.db.execute("SELECT count(*) FROM tasks WHERE status = 'in_progress'").fetchone()
        assert rows[0] == 300
    finally:
        for board in nodes:
            board.store.close()


def test_a_review_whose_node_died_is_finished_by_another_node_once(postgres):
    url = postgres.database()
    a, b = Board(Store(url)), Board(Store(url))
    try:
        card = a.create("lee", NewTask(title="reviewed across nodes"))
        claim = a.claim("alice", card.id)
        a.complete("alice", card.id, claim.token, "done", to_status="review")
        first = a.reviews.claim_job("node-a", lease_seconds=0.5)  # node a takes the job, then dies
        assert first is not None and b.reviews.claim_job("node-b", 30) is None  # leased: nobody else runs it
        time.sleep(0.6)  # node a stopped renewing its lease
        resumed = b.reviews.claim_job("node-b", 30)
        assert resumed is not None and resumed.id == first.id and resumed.attempts == 2
        b.reviews.begin(resumed, "node-b", [], [], None)
        passed = Synthesis(verdict="PASS", score=9, brief="fine")
        assert b.reviews.finish(resumed, "node-b", passed, "done", "PASS", [])
        assert not a.reviews.finish(first, "node-a", passed, "done", "PASS", [])  # the dead node's late word
        history = [h.action for h in b.get(card.id).history]
        assert b.get(card.id).status == "done" and history.count("reviewed round 1") == 1, history
    finally:
        a.store.close()
        b.store.close()


def test_a_board_written_during_its_copy_is_copied_as_it_was_when_the_copy_began(postgres, tmp_path, monkeypatch):
    """`hiveboard migrate` reads the source in one snapshot: a card written by a node left running, after the
    copy took the cards and before it took their history, is in neither (it had been half copied: its history
    row naming a card the target lacks)."""
    source = Board(Store(str(tmp_path / "b.db")))
    other_node = Board(Store(str(tmp_path / "b.db")))
    target = Store(postgres.database())
    try:
        for n in range(3):
            source.create("lead", NewTask(title=f"card {n}"))
        copy_table = copy._copy_table

        def copy_then_write(src, db, table, columns, batch):
            copy_table(src, db, table, columns, batch)
            if table == "tasks":
                other_node.create("lead", NewTask(title="written during the copy"))

        monkeypatch.setattr(copy, "_copy_table", copy_then_write)
        report = copy.copy_board(source.store, target)
        assert [r.table for r in report if not r.same] == []
        assert [t.title for t in Board(target).list().tasks] == ["card 0", "card 1", "card 2"]
        assert len(source.list().tasks) == 4
    finally:
        for store in (source.store, other_node.store, target):
            store.close()


def test_a_copied_board_keeps_its_sessions_agents_and_what_they_were_told(postgres, tmp_path):
    """Issue 49: a Claude Code session's agent keeps its session, and what the channel told it stays told."""
    source = Board(Store(str(tmp_path / "b.db")))
    target = Store(postgres.database())
    try:
        source.agents.for_session("claude-3f2a9c1d", "3f2a9c1d-0000")
        assert source.pushes.first("claude-3f2a9c1d", "message:1")
        assert all(c.same for c in copy.copy_board(source.store, target))
        copied = Board(target)
        assert copied.agents.for_session("claude-3f2a9c1d", "3f2a9c1d-0000").name == "claude-3f2a9c1d"
        assert copied.pushes.first("claude-3f2a9c1d", "message:1") is False
    finally:
        source.store.close()
        target.close()


def test_a_copied_lesson_keeps_who_stands_behind_it(postgres, tmp_path):
    """A lesson's witnesses move with the board: an author already behind it who says it again after `migrate`
    adds no witness (the copy had left memory_witnesses behind, so the same author counted twice)."""
    source = Board(Store(str(tmp_path / "b.db")))
    target = Store(postgres.database())
    try:
        with source.store.write() as db:
            lesson = source.knowledge.add(db, kind="lesson", text="pin the driver's version", created_by="alice")
        assert all(c.same for c in copy.copy_board(source.store, target))
        copied = Board(target)
        with target.write() as db:
            copied.knowledge.merge_into(db, lesson, None, author="alice")
        item = copied.knowledge.item(lesson)
        assert (item.witnesses, item.merged_count) == (1, 2)
    finally:
        source.store.close()
        target.close()
