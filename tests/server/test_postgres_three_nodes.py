"""Three hiveboard nodes (`serve --http`, a home each) on one PostgreSQL database and one Chroma server,
as real processes: sixteen agents racing claim-next take every card once, a message on one node wakes a
waiter on another, a lesson recorded on one node is found by meaning on another, a PostgreSQL restart
mid-burst costs clear errors and nothing acknowledged, and a node killed (SIGKILL) mid-review and
mid-burst loses no acknowledged write while another node finishes its review, once.

The nodes are started once for the module (a start costs seconds of interpreter and model loading); a
test that finds one dead starts it again on its home."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import psycopg
import pytest
from conftest import (
    READY,
    START_TIMEOUT,
    call,
    clean_env,
    data,
    hiveboard_cmd,
    http_client,
    self_registered_token,
    stop_process,
    until,
    wait_until,
)
from fake_llm import FakeLLM, critique
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

# the two sentences a lost database connection may cost a call (board/postgres.py): a tool's error (after
# the tool's name), or the error of a request refused before any tool ran (its bearer token could not be checked)
NOTHING_WRITTEN = re.compile(r"^(\w+: )?the database is unavailable \(.+\); nothing was written; retry in a moment$")
WHILE_COMMITTING = re.compile(r"^\w+: the database became unavailable while committing \(.+\); check with get_task")
# a call that takes longer than this has hung (a bound for failing, not a timing the tests assert)
HANG = 120


class Nodes:
    """Three `hiveboard serve --http` processes, each on its own home, sharing one board and one index."""

    def __init__(self, root: Path, db: str, env: dict[str, str], fake: FakeLLM):
        self.root, self.db, self.env, self.fake = root, db, env, fake
        self.procs: list[subprocess.Popen | None] = [None, None, None]
        self.urls: list[str] = ["", "", ""]
        self.tokens: dict[str, str] = {}

    def home(self, n: int) -> Path:
        return self.root / f"node{n}"

    def log(self, n: int) -> Path:
        return self.root / f"node{n}.log"

    def start(self, n: int) -> None:
        """`serve --http` on a free port, its log in a file (read back when a test fails), once it listens."""
        mark = self.log(n).stat().st_size if self.log(n).exists() else 0
        args = ["--home", str(self.home(n)), "serve", "--http", "--port", "0", "--log-level", "INFO"]
        with self.log(n).open("a") as log:
            proc = subprocess.Popen(hiveboard_cmd(*args), stdout=subprocess.DEVNULL, stderr=log, env=self.env)

        def listening() -> re.Match | None:
            return READY.search(self.logged(n, mark))

        if not wait_until(listening, proc):
            raise RuntimeError(f"node {n} exited with {proc.returncode}:\n{self.logged(n, mark)}")
        self.procs[n], self.urls[n] = proc, listening().group(1) + "/mcp"

    def logged(self, n: int, since: int = 0) -> str:
        """What node n logged after byte `since` of its log."""
        return self.log(n).read_bytes()[since:].decode(errors="replace")

    def revive(self) -> None:
        """Start again, on the same home, each node a test killed."""
        dead = [n for n, proc in enumerate(self.procs) if proc is None or proc.poll() is not None]
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(self.start, dead))

    def node_of(self, pid: int) -> int:
        return next(n for n, proc in enumerate(self.procs) if proc is not None and proc.pid == pid)

    async def register(self, *names: str) -> dict[str, str]:
        """Register agents over HTTP (whoami), spread over the nodes; their tokens work on every node."""
        for i, name in enumerate(names):
            self.tokens[name] = await self_registered_token(self.urls[i % 3], name)
        return {name: self.tokens[name] for name in names}

    def client(self, n: int, agent: str):
        return http_client(self.urls[n], self.tokens[agent])

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                stop_process(proc)


def write_config(home: Path, fake_url: str) -> None:
    """Review on: one LLM critic (the fake server) for code cards, the built-in critics off, and a short
    job lease so that a dead node's job is taken over in seconds."""
    home.mkdir(parents=True, exist_ok=True)
    lines = [
        "[review]",
        "worker_lease = 3",
        "poll_seconds = 0.2",
        "agent_deadline = 0",
        "[review.task_types]",
        'code = ["correctness"]',
    ]
    for builtin in ("bandit", "ruff", "ruff-style", "acceptance"):
        lines += [f"[review.critics.{builtin}]", "enabled = false"]
    lines += [
        "[review.critics.judge]",
        'lens = "correctness"',
        'backend = "llm"',
        'model = "judge"',
        f'base_url = "{fake_url}"',
        'api_key_env = "HIVEBOARD_TEST_UNSET_KEY"',
    ]
    (home / "config.toml").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def three_nodes(postgres, chroma_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("three-nodes")
    fake = FakeLLM()
    env = clean_env(
        HIVEBOARD_DB=postgres.database(),
        HIVEBOARD_CHROMA_URL=chroma_server,
        HIVEBOARD_CHROMA_COLLECTION=f"three-{uuid.uuid4().hex[:12]}",  # the session's Chroma server is shared
    )
    nodes = Nodes(root, env["HIVEBOARD_DB"], env, fake)
    for n in range(3):
        write_config(nodes.home(n), fake.url)
    try:
        nodes.revive()
        yield nodes
    finally:
        nodes.stop()
        fake.close()


@pytest.fixture
def nodes(three_nodes: Nodes):
    three_nodes.revive()
    marks = [three_nodes.log(n).stat().st_size for n in range(3)]
    yield three_nodes
    for n, mark in enumerate(marks):  # shown with a failing test's report: what each node logged meanwhile
        lines = three_nodes.logged(n, mark).splitlines()
        print(f"--- node {n}", *[line for line in lines if " httpx " not in line][-60:], sep="\n")


def query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


async def test_sixteen_agents_on_three_nodes_claim_300_cards_each_once(nodes):
    """Sixteen agents, spread over the nodes, race claim_task (the next ready card) over 300 cards: each card is
    claimed once, by the agent the board says holds it, with one claim in its history."""
    racers = [f"racer-{i}" for i in range(16)]
    await nodes.register("planner", *racers)
    created: list[int] = []

    async def create(n: int) -> None:
        async with nodes.client(n, "planner") as c:
            for k in range(100):
                created.append((await call(c, "create_task", title=f"race {n}.{k}", task_type="race"))["id"])

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(create, n)
    assert len(set(created)) == 300

    claimed: list[tuple[str, int]] = []

    async def race(i: int) -> None:
        async with nodes.client(i % 3, racers[i]) as c:
            while (got := await call(c, "claim_task", task_type="race"))["claimed"]:
                claimed.append((racers[i], got["task"]["id"]))

    with anyio.fail_after(START_TIMEOUT):
        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(race, i)
    ids = [task_id for _, task_id in claimed]
    assert len(ids) == 300 and set(ids) == set(created)  # every card claimed, none twice
    assert {racers.index(name) % 3 for name, _ in claimed} == {0, 1, 2}  # claims were taken on every node
    rows = query(
        nodes.db,
        "SELECT t.id, t.status, t.assignee, (SELECT count(*) FROM task_history h WHERE h.task_id = t.id "
        "AND h.action = 'claimed') FROM tasks t WHERE t.task_type = 'race'",
    )
    assert {(task_id, status, assignee, claims) for task_id, status, assignee, claims in rows} == {
        (task_id, "in_progress", name, 1) for name, task_id in claimed
    }


async def patiently(client, tool: str, **args) -> dict:
    """A call made as its error tells an agent to: again while the database is unavailable (after a restart, each
    connection a node held finds out once). Any other error fails the test."""
    for _ in range(20):
        try:
            result = await client.call_tool(tool, args)
        except MCPError as exc:
            text = exc.message
        else:
            if not result.is_error:
                return data(result)
            text = result.content[0].text
        assert NOTHING_WRITTEN.match(text), text
        await anyio.sleep(0.1)
    raise AssertionError(f"{tool} still finds the database unavailable after 20 attempts: {text}")


def waiting(db: str, agent: str) -> bool:
    """Whether the agent is inside get_messages(wait_seconds=…): a wait marks it present until it ends."""
    return bool(query(db, "SELECT 1 FROM agents WHERE name = %s AND waiting_until > %s", (agent, time.time())))


async def woken_across(nodes: Nodes, sender: str, waiter: str, content: str, call=call) -> None:
    """A waiter in get_messages on node three is woken by a message published on node one."""
    wait = 240  # the wait is long so that a wake-up is told apart from its end; none is asserted
    got = {}
    async with nodes.client(2, waiter) as three, nodes.client(0, sender) as one:

        async def wait_for_it() -> None:
            started = time.monotonic()
            got["inbox"] = await call(three, "get_messages", wait_seconds=wait)
            got["took"] = time.monotonic() - started

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_it)
            await until(lambda: waiting(nodes.db, waiter), what=f"{waiter} to wait on node three", interval=0.05)
            await call(one, "publish_message", intent="info", recipient=waiter, content=content)
    assert [(m["sender"], m["content"]) for m in got["inbox"]["messages"]] == [(sender, content)]
    assert got["took"] < wait  # woken, not timed out


async def test_a_message_published_on_node_one_wakes_a_waiter_on_node_three(nodes):
    """A get_messages(wait_seconds=…) on node three returns with the message published on node one, woken
    (NOTIFY, then the waiter's node reads it), not at the end of its wait."""
    await nodes.register("ann", "cid")
    await woken_across(nodes, "ann", "cid", "hello from node one")


async def test_a_lesson_recorded_on_node_two_is_found_by_meaning_on_node_three(nodes):
    """A lesson recorded on node two is indexed into the shared Chroma server and found from node three by a
    query that means the same in other words."""
    await nodes.register("lee", "mo")
    async with nodes.client(1, "lee") as two:
        recorded = await call(
            two,
            "record_lesson",
            problem="The nightly CSV export crashed whenever a customer's name contained an emoji.",
            fix="Open the output file with encoding='utf-8' instead of the platform's default encoding.",
            task_type="etl",
        )
    lesson = recorded["item"]["id"]
    async with nodes.client(2, "mo") as three:
        found = await call(
            three,
            "query_memory",
            query="exporting a spreadsheet breaks on unicode characters in people's names",
            mode="vector",  # by meaning alone: the query shares almost no word with the lesson
            kinds=["lesson"],
            wait_seconds=60,
        )
    assert lesson in [hit["id"] for hit in found["hits"]], found


def cards_without_history(db: str) -> int:
    return query(
        db,
        "SELECT count(*) FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM task_history h WHERE h.task_id = t.id "
        "AND h.action = 'created')",
    )[0][0]


async def test_a_node_killed_mid_review_and_mid_burst_loses_nothing_and_its_review_finishes_once(nodes):
    """The node running a card's review is killed (SIGKILL) while two of four writers write through it:
    another node takes the job when its lease runs out and finishes the round once, and every card any
    node acknowledged is on the board."""
    await nodes.register("ada", "kw0", "kw1", "kw2", "kw3")
    released = threading.Event()

    def slow_judge(body) -> dict:  # the first run of the critic thinks until its node is dead
        released.wait(START_TIMEOUT)
        return critique()

    nodes.fake.script("correctness", slow_judge)
    async with nodes.client(0, "ada") as one:
        card = await call(one, "create_task", title="cache the parsed config", task_type="code")
        claim = await call(one, "claim_task", task_id=card["id"])
        await call(one, "complete_task", task_id=card["id"], token=claim["token"], output="an LRU cache")

    def job() -> tuple[str, str] | None:
        rows = query(nodes.db, "SELECT status, worker FROM reviews WHERE task_id = %s", (card["id"],))
        return rows[0] if rows and rows[0][0] == "running" and nodes.fake.calls("correctness") else None

    _, worker = await until(job, what="a node to run the review's critic", interval=0.05)
    doomed = nodes.node_of(int(worker.split(":")[1]))  # the worker's name is host:pid:…
    others = [(doomed + 1) % 3, (doomed + 2) % 3]

    writers = {"kw0": doomed, "kw1": doomed, "kw2": others[0], "kw3": others[1]}
    acknowledged: dict[str, list[int]] = {name: [] for name in writers}
    lost: dict[str, Exception] = {}  # writers whose node died under them
    stop = anyio.Event()

    async def writer(name: str, n: int) -> None:
        try:
            async with nodes.client(n, name) as c:
                while not stop.is_set():
                    with anyio.fail_after(HANG):
                        card = await call(c, "create_task", title=name, task_type="kill")
                    acknowledged[name].append(card["id"])
        except Exception as exc:  # the node died under it: what it had acknowledged is what counts
            lost[name] = exc

    try:
        async with anyio.create_task_group() as tg:
            for name, n in writers.items():
                tg.start_soon(writer, name, n)
            await until(lambda: all(len(ids) >= 10 for ids in acknowledged.values()) or lost, what="every write")
            nodes.procs[doomed].send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(nodes.procs[doomed].wait)
            released.set()  # the dead node's critic call can end now; nobody reads its answer
            async with nodes.client(others[0], "ada") as c:
                with anyio.fail_after(START_TIMEOUT):
                    trail = await call(c, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT, full=True)
                task = await call(c, "get_task", task_id=card["id"], history=100)
                approvals = await call(c, "get_messages", box="pool", task_id=card["id"], intent="approval")
            stop.set()
    finally:
        released.set()
    assert sorted(lost) == ["kw0", "kw1"], lost  # the survivors' writers never failed

    # the review: one round, finished by a surviving node after the dead one's attempt, judged once
    (round1,) = trail["rounds"]
    assert round1["status"] == "finished" and round1["attempts"] >= 2, round1
    assert [(x["critic"], x["status"]) for x in round1["critiques"]] == [("judge", "ok")]
    finisher = query(nodes.db, "SELECT worker FROM reviews WHERE task_id = %s", (card["id"],))[0][0]
    assert nodes.node_of(int(finisher.split(":")[1])) in others
    assert task["status"] == "done"
    assert [h["action"] for h in task["history"]].count("reviewed round 1") == 1
    assert len(approvals["messages"]) == 1

    # the burst: every acknowledged card is on the board, whole; at most one unanswered per killed writer
    ids = {task_id for (task_id,) in query(nodes.db, "SELECT id FROM tasks WHERE task_type = 'kill'")}
    answered = {task_id for written in acknowledged.values() for task_id in written}
    assert answered <= ids, sorted(answered - ids)
    assert len(ids) - len(answered) <= 2
    assert cards_without_history(nodes.db) == 0


async def test_a_postgresql_restart_mid_burst_costs_clear_errors_and_service_resumes(nodes, postgres):
    """Four clients write through the three nodes while PostgreSQL restarts: a call succeeds or says in one
    sentence that the database is unavailable; the nodes, never restarted, serve writes again; every
    acknowledged card is on the board and no refused one is."""
    writers = {"bw0": 0, "bw1": 1, "bw2": 2, "bw3": 0}
    await nodes.register(*writers, "ann2", "cid2")
    acknowledged: dict[int, str] = {}
    refused: list[tuple[str, str]] = []  # (title, error) of calls that said nothing was written
    unknown: list[tuple[str, str]] = []  # ... that said the commit's fate is unknown
    failures: list[str] = []  # anything else: a traceback, a transport error, a hang
    after_restart = dict.fromkeys(writers, 0)
    restarted, stop = anyio.Event(), anyio.Event()

    async def writer(name: str, n: int) -> None:
        try:
            async with nodes.client(n, name) as c:
                for k in range(100_000):
                    if stop.is_set():
                        return
                    title = f"{name} {k}"
                    try:
                        with anyio.fail_after(HANG):
                            result = await c.call_tool("create_task", {"title": title, "task_type": "burst"})
                    except MCPError as exc:  # refused before any tool ran: the token could not be checked
                        text = exc.message
                    else:
                        if not result.is_error:
                            acknowledged[data(result)["id"]] = title
                            after_restart[name] += restarted.is_set()
                            continue
                        text = result.content[0].text
                    if NOTHING_WRITTEN.match(text):
                        refused.append((title, text))
                    elif WHILE_COMMITTING.match(text):
                        unknown.append((title, text))
                    else:
                        failures.append(f"{name}: {text}")
        except Exception as exc:  # the test fails on it below, with every writer's story
            failures.append(f"{name}: {type(exc).__name__}: {exc}")

    async with anyio.create_task_group() as tg:
        for name, n in writers.items():
            tg.start_soon(writer, name, n)
        await until(lambda: len(acknowledged) >= 40 or failures, what="the burst to be under way")
        await anyio.to_thread.run_sync(postgres.restart)
        restarted.set()
        await until(
            lambda: all(count >= 5 for count in after_restart.values()) or failures,
            what="every writer to write again after the restart",
        )
        stop.set()
    assert not failures, failures
    assert refused or unknown  # the restart was felt, as one sentence
    # every node, never restarted, takes a write from a new client
    for n in range(3):
        async with nodes.client(n, "bw0") as c:
            await patiently(c, "create_task", title=f"after the restart on node {n}", task_type="burst")
    # and a wake-up still crosses nodes: node three's LISTEN connection came back by itself
    await woken_across(nodes, "ann2", "cid2", "hello after the restart", call=patiently)

    rows = dict(query(nodes.db, "SELECT id, title FROM tasks WHERE task_type = 'burst'"))
    assert acknowledged.items() <= rows.items(), sorted(set(acknowledged) - set(rows))
    titles = set(rows.values())
    assert not [(title, error) for title, error in refused if title in titles]  # "nothing was written" held
    assert len(rows) - len(acknowledged) - 3 <= len(unknown)  # only an unknown commit may be there unanswered
    assert cards_without_history(nodes.db) == 0
