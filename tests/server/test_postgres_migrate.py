"""`hiveboard migrate` at scale: a SQLite board of 1,000 cards, 10,000 messages, real offline reviews and a
shared memory of some 1,500 items, copied into PostgreSQL by the CLI and proven there: every table's
rows and checksum the same, counted again on both sides, and query_memory's top 5 the same through MCP on a
node of each store (the SQLite board with its embedded Chroma; a `hiveboard serve` on PostgreSQL whose vectors
go to a Chroma server)."""

from __future__ import annotations

import json
import random
import sqlite3
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import call, clean_env, run_cli, stdio_server
from mcp import Client

from hiveboard.board.copy import TABLES
from hiveboard.board.db import Store
from hiveboard.board.knowledge import NewItem
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import Artifact, NewTask
from hiveboard.board.tasks import Board
from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.engine import ReviewEngine
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.index import COLLECTION, HiveboardEmbedding, chroma_client
from hiveboard.memory.service import open_memory
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CARDS, MESSAGES = 1_000, 10_000
EVERY_ITEM = 20_000  # neighbours an exhaustive search considers: more than the memory holds
AGENTS = {"lee": "lead", "alice": "coder", "bob": "coder", "carol": "tester", "dave": "writer"}
WORKERS = ["alice", "bob", "carol", "dave"]
TYPES = ["code", "test", "docs", "refactor", "bug"]
PRIORITIES = ["critical", "high", "medium", "low"]
MODULES = (
    "billing,auth,search,exports,scheduler,uploads,reports,notifications,invoices,sessions,webhooks,payments,"
    "profiles,audit log,cache,onboarding,admin panel,CLI"
).split(",")
ACTIONS = (
    "add pagination to,fix the timezone bug in,write tests for,split up,document,speed up,add retries to,"
    "log errors in,migrate,review the API of,remove dead code from,translate"
).split(",")
DONE = [
    "paged with a cursor instead of an offset",
    "stored timestamps in UTC and converted them at the edge",
    "covered the happy path and three failure cases",
    "moved the parsing into its own module",
    "wrote a how-to with a worked example",
    "cached the lookup and cut the p95 from 900 ms to 120 ms",
    "retried twice with jittered backoff on connection errors",
    "logged the request id with every error",
    "ran the migration in batches of 500 rows",
    "renamed the endpoints to match the style guide",
]
SAYS = [
    "heads-up: the staging deploy of {m} is failing its smoke test",
    "can someone pair with me on {m}? the fixtures are confusing",
    "I am halfway through {m}; expect a PR tomorrow",
    "the {m} dashboard shows a spike of 502s since noon",
    "reminder: freeze for {m} starts on Friday",
    "found a flaky test in {m}, quarantined it for now",
    "the {m} docs still describe the old flags",
    "who owns the {m} cron job? it ran twice last night",
    "benchmarks for {m} are in the wiki",
    "please do not merge into {m} until the release is cut",
]
# the offline review's critics (bandit, ruff) fail these, and pass them fixed: each pair becomes a lesson
FIXES = [
    (
        "def main():\n    value = eval(input())\n    print(value)\n",
        "import ast\n\n\ndef main():\n    value = ast.literal_eval(input())\n    print(value)\n",
    ),
    (
        "def find(db, name):\n    return db.execute(\"SELECT * FROM users WHERE name = '%s'\" % name).fetchall()\n",
        'def find(db, name):\n    return db.execute("SELECT * FROM users WHERE name = ?", [name]).fetchall()\n',
    ),
    (
        "import subprocess\n\n\ndef archive(name):\n    subprocess.run('tar czf out.tgz ' + name, shell=True)\n",
        "import subprocess\n\n\ndef archive(name):\n    subprocess.run(['tar', 'czf', 'out.tgz', '--', name], check=True)\n",
    ),
]
CLEAN = 'def area(w, h):\n    """The area of a w by h rectangle."""\n    return w * h\n'
RETRIEVAL_SET = Path(__file__).parents[1] / "memory" / "retrieval_set.json"
# by meaning, by question, and by identifier or error text (some within one task type); the last two are
# about the cards' own outputs and messages
QUERIES = [
    ("concatenating untrusted text into a database statement", None),
    ("a listing loads each related record with its own separate lookup", None),
    ("wait progressively longer between attempts so an overloaded service can recover", None),
    ("secret credentials end up in plain text in our logging", None),
    ("identifiers that give no hint of their purpose", "refactor"),
    ("How do we avoid charging a customer twice when a payment request is retried?", "code"),
    ("Why do my tests still see the old value after I change an environment variable?", None),
    ("How do I test code that depends on the current time?", "test"),
    ("Why would two database transactions wait on each other forever?", None),
    ("psycopg2 ProgrammingError", None),
    ("lru_cache", None),
    ("pool_pre_ping", None),
    ("autospec", "test"),
    ("OSError: [Errno 24] Too many open files", "bug"),
    ("select_related", None),
    ("mock.patch requests.get", "test"),
    ("ROUND_HALF_UP", None),
    ("EAI_AGAIN", None),
    ("EXPLAIN ANALYZE", None),
    ("deadlock detected", None),
    ("the scheduler cron job ran twice", None),
    ("cut the p95 latency with a cache", None),
]


def build(home: Path) -> None:
    """The SQLite board and its embedded memory, through the board's own functions (bulk where there is one)."""
    rng = random.Random(20261125)
    exhaustive(chroma_client(home / "chroma"), COLLECTION)
    board = Board(Store(home / "hiveboard.db"), lease_seconds=3600)
    memory = open_memory(board, get_embedder(), home)
    try:
        for name, role in AGENTS.items():
            board.agents.ensure(name, role)
        board.messages.subscribe("carol", "intent", "test_results")
        board.messages.subscribe("dave", "channel", "release")
        lessons = remember_set(board)
        ids = []
        for n in range(CARDS):
            action, module = ACTIONS[n % len(ACTIONS)], MODULES[n % len(MODULES)]
            ids.append(
                board.create(
                    "lee",
                    NewTask(
                        title=f"{action} {module} (#{n})",
                        description=f"{action.capitalize()} {module}; see the notes in the {module} channel.",
                        task_type=TYPES[n % len(TYPES)],
                        priority=PRIORITIES[n % len(PRIORITIES)],
                        labels=[module.split()[0], f"sprint-{n % 6}"],
                        acceptance_criteria=[f"{module} still passes its tests"] if n % 3 == 0 else [],
                        depends_on=[ids[-1]] if n >= 950 else [],  # left in todo, waiting on each other
                    ),
                ).id
            )
        for n, task_id in enumerate(ids[:400]):  # done with output; a tenth claimed, released, then taken by another
            worker = WORKERS[n % len(WORKERS)]
            if n % 10 == 0:
                claim = board.claim(worker, task_id)
                board.release(worker, task_id, claim.token, "out of time today")
                worker = WORKERS[(n + 1) % len(WORKERS)]
            claim = board.claim(worker, task_id)
            helpful = []
            if n % 40 == 0:  # a lesson handed out at the claim, marked helpful at completion
                helpful = [lessons[n % len(lessons)]]
                board.knowledge.surfaced(worker, task_id, helpful)
            board.complete(
                worker,
                task_id,
                claim.token,
                f"{DONE[rng.randrange(len(DONE))].capitalize()} in {MODULES[n % len(MODULES)]}; "
                f"{rng.randint(3, 90)} tests pass, {rng.choice(['no', 'one', 'two'])} follow-ups filed.",
                summary=f"{ACTIONS[n % len(ACTIONS)]} {MODULES[n % len(MODULES)]}: done",
                artifacts=[Artifact(name=f"notes{n}.md", kind="text", content=f"Notes for card {n}.")]
                if n % 7 == 0
                else None,
                to_status="done",
                helpful=helpful,
            )
        for n, task_id in enumerate(ids[400:480]):  # held; some blocked or escalated by their holder
            worker = WORKERS[n % len(WORKERS)]
            claim = board.claim(worker, task_id)
            if n % 4 == 1:
                board.update(worker, task_id, token=claim.token, status="blocked", reason="waiting for credentials")
            elif n % 4 == 2:
                board.update(worker, task_id, token=claim.token, status="needs_human", reason="which API version?")
        review(board, memory, [t for n, t in enumerate(ids) if n >= 480 and TYPES[n % len(TYPES)] == "code"][:5])
        post_messages(board, rng)
        assert memory.drain() > 0 and memory.pending() == 0
    finally:
        memory.stop()
        board.store.close()


def review(board: Board, memory, cards: list[int]) -> None:
    """Real reviews by the offline critics, run here one job at a time: three cards fail and pass fixed (each
    fix a lesson), one passes at once, one is sent back and left with its author."""
    engine = ReviewEngine(board, ReviewConfig(agent_deadline=0), memory)

    def hand_in(task_id: int, token: int, code: str) -> None:
        board.complete(
            "alice",
            task_id,
            token,
            "done",
            artifacts=[Artifact(name="app.py", kind="code", content=code)],
            to_status="review",
        )
        job = board.reviews.claim_job("reviewer", 120)
        engine.run(job, "reviewer")

    for task_id, (wrong, right) in zip(cards, [*FIXES, (CLEAN, None), (FIXES[0][0], None)]):
        claim = board.claim("alice", task_id)
        hand_in(task_id, claim.token, wrong)
        if right is not None:
            assert board.get(task_id).status == "in_progress"
            hand_in(task_id, claim.token, right)
    statuses = [board.get(t).status for t in cards]
    assert statuses == ["done", "done", "done", "done", "in_progress"], statuses


def post_messages(board: Board, rng: random.Random) -> None:
    """MESSAGES messages in a few transactions: direct ones and replies to them, and a tenth in the open (to a
    card's people, a role, everyone, and replies there), which join the shared memory."""
    names = list(AGENTS)
    direct: list[int] = []
    pool: list[int] = []
    for start in range(0, MESSAGES, 2_500):
        with board.store.write() as db:
            for k in range(start, start + 2_500):
                sender, to = names[k % len(names)], names[(k + 1) % len(names)]
                text = SAYS[rng.randrange(len(SAYS))].format(m=rng.choice(MODULES)) + f" (note {k})"
                kind = k % 40
                if kind < 27:
                    msg, into = NewMessage(intent="info", recipient=to, content=text), direct
                elif kind < 36:
                    msg, into = (
                        NewMessage(intent="answer", reply_to=rng.choice(direct[-50:]), content=f"re: {text}"),
                        direct,
                    )
                elif kind == 36 and pool:
                    msg, into = (
                        NewMessage(intent="answer", reply_to=rng.choice(pool[-20:]), content=f"re: {text}"),
                        pool,
                    )
                elif kind <= 37:
                    msg, into = NewMessage(intent="status_update", task_id=1 + rng.randrange(CARDS), content=text), pool
                elif kind == 38:
                    msg, into = (
                        NewMessage(intent="request_help", recipient="role:coder", content=text, priority="high"),
                        pool,
                    )
                else:
                    msg, into = NewMessage(intent="info", recipient="everyone", content=text, thread="release"), pool
                into.append(board.messages.post(db, sender, msg).row[0])


def remember_set(board: Board) -> list[int]:
    """The labelled retrieval set's lessons, critiques and outputs, and one lesson superseded by another; the
    ids of the set's lessons."""
    items = json.loads(RETRIEVAL_SET.read_text())["items"]
    stored = board.knowledge.remember(
        "lee", [NewItem(kind=i["kind"], title=i["title"], text=i["text"], task_type=i["task_type"]) for i in items]
    )
    older, newer = board.knowledge.remember(
        "lee",
        [
            NewItem(kind="lesson", title="Flaky upload test", text="Problem: flaky\nFix: sleep 1 s", task_type="test"),
            NewItem(
                kind="lesson",
                title="Flaky upload test",
                text="Problem: flaky\nFix: wait for the event",
                task_type="test",
            ),
        ],
    )
    with board.store.write() as db:
        board.knowledge.supersede(db, older.id, newer.id)
    return [item.id for item in stored if item.kind == "lesson"]


def counts(query) -> dict:
    """What the test counts itself on one side, `query(sql)` returning rows."""
    found = {t: query(f"SELECT count(*) FROM {t}")[0][0] for t in ("tasks", "task_history", "messages", "inbox")}
    found |= {t: query(f"SELECT count(*) FROM {t}")[0][0] for t in ("reviews", "critiques", "memory_items")}
    found["statuses"] = [tuple(r) for r in query("SELECT status, count(*) FROM tasks GROUP BY status ORDER BY status")]
    found["kinds"] = [tuple(r) for r in query("SELECT kind, count(*) FROM memory_items GROUP BY kind ORDER BY kind")]
    found["replies"] = query("SELECT count(*) FROM messages WHERE reply_to IS NOT NULL")[0][0]
    found["surfaced, useful"] = tuple(query("SELECT count(*), count(useful_at) FROM memory_surfaced")[0])
    found["lessons from reviews"] = query(
        "SELECT count(*) FROM memory_items WHERE kind = 'lesson' AND created_by = 'review'"
    )[0][0]
    return found


async def top5(client: Client, query: str, task_type: str | None, **more) -> list[tuple[int, str]]:
    found = await call(client, "query_memory", query=query, task_type=task_type, k=5, **more)
    assert "note" not in found, found  # both halves ran, over every item
    return [(h["id"], h["title"]) for h in found["hits"]]


async def test_migrate_copies_a_board_at_scale_and_its_memory_answers_alike(postgres, chroma_server, tmp_path):
    home, url = tmp_path / "home", postgres.database()
    started = time.monotonic()
    build(home)
    built = time.monotonic()

    done = run_cli("--home", str(home), "migrate", "--to", url, env=clean_env(HIVEBOARD_CHROMA_URL=chroma_server))
    assert done.returncode == 0, done.stderr
    migrated = time.monotonic()
    report = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:] if line.split()[:1] != ["copied"]}
    assert list(report) == list(TABLES), done.stdout
    assert all(row[-1] == "same" for row in report.values()), done.stdout

    with sqlite3.connect(home / "hiveboard.db") as lite, psycopg.connect(url) as pg:
        ours = counts(lambda sql: lite.execute(sql).fetchall())
        theirs = counts(lambda sql: pg.execute(sql).fetchall())
    assert ours == theirs
    assert ours["tasks"] == CARDS and ours["messages"] >= MESSAGES and ours["replies"] >= MESSAGES // 5
    assert ours["reviews"] >= 8 and ours["critiques"] >= 30 and ours["lessons from reviews"] == len(FIXES)
    assert dict(ours["statuses"]).keys() == {"todo", "in_progress", "blocked", "needs_human", "done"}
    assert 1_000 < ours["memory_items"] < EVERY_ITEM and ours["surfaced, useful"] == (10, 10)
    for table in ("tasks", "task_history", "messages", "inbox", "reviews", "critiques", "memory_items"):
        assert int(report[table][1]) == ours[table], (table, done.stdout)

    # the SQLite board as it was, with its embedded memory, in this process; the PostgreSQL board through a
    # node started as the migration told the operator to (its indexer fills the Chroma server from the queue)
    board = Board(Store(home / "hiveboard.db"))
    memory = open_memory(board, get_embedder(), home)
    collection = f"t{uuid.uuid4().hex[:16]}"
    exhaustive(chroma_client(url=chroma_server), collection)
    env = clean_env(
        HIVEBOARD_DB=url,
        HIVEBOARD_CHROMA_URL=chroma_server,
        HIVEBOARD_CHROMA_COLLECTION=collection,
        HIVEBOARD_AGENT="lee",
        HIVEBOARD_REVIEW__ENABLED="false",
    )
    try:
        server = build_server(board, Identity(board.agents, "memory", agent="lee"), memory=memory)
        async with Client(server) as lite, stdio_server(tmp_path / "node", env=env) as node:
            await top5(node, QUERIES[0][0], None, wait_seconds=60)  # once the node has indexed the copied items
            searched = time.monotonic()
            for query, task_type in QUERIES:
                assert await top5(lite, query, task_type) == await top5(node, query, task_type), query
    finally:
        memory.stop()
        board.store.close()
    print(
        f"\nbuilt in {built - started:.1f} s, migrated in {migrated - built:.1f} s, node indexed in "
        f"{searched - migrated:.1f} s, {len(QUERIES)} queries on each in {time.monotonic() - searched:.1f} s"
    )


def exhaustive(client, name: str) -> None:
    """Make the memory's collection as the product does (memory/index.py), but searched exhaustively.

    Chroma's search is approximate (HNSW, ef_search 100), and its graph depends on the batches the vectors
    came in (256 at a time here, 64 on the node): two indexes of the same vectors can each miss a different
    near-tie among the 100 neighbours a search fetches (here a fetch often misses a few of the exact 100).
    Searched exhaustively both find the exact neighbours, and a difference left is the copy's or the keyword
    half's. (A Chroma server keeps the ef_search it loaded a collection with: it is set at creation.)"""
    embedder = get_embedder()
    client.create_collection(
        name,
        embedding_function=HiveboardEmbedding(embedder.name),
        configuration={"hnsw": {"space": "cosine", "ef_search": EVERY_ITEM}},
        metadata={"hiveboard_model": embedder.name, "hiveboard_dim": embedder.dim},
    )
