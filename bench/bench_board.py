"""Latency and throughput of the board tools over streamable HTTP, next to a bare no-op MCP tool.

    /work/venv/bin/python bench/bench_board.py            # full run (about 30-60 s on 2 cores)
    /work/venv/bin/python bench/bench_board.py --quick    # smoke run (a few seconds)
    /work/venv/bin/python bench/bench_board.py --calls 500 --json out.json

What it does, in one run against one server process (bench/_server.py: the real `hiveboard serve
--http` app plus a `noop` tool):

1. For 1 client and for 8 concurrent clients (each its own HTTP connection and agent token), time
   every call of: noop (a bare tool that answers an empty result: the floor), create_task,
   claim_task (claim-next), update_task (a note on a held card), get_task, list_tasks, get_board,
   release_task, complete_task, get_messages (a page of 20 from a 1,000-message inbox) and
   publish_message (direct to another agent). Prints p50/p99 latency, calls/s and the p50 ratio to
   noop at the same client count.
2. A claim race: 300 fresh cards, 16 clients claim-next until the board is empty; counts double
   claims (must be 0) and checks the database agrees.
3. Publishing while the memory indexer is busy: a second server process that also runs what `hiveboard
   serve --http` runs beside the app (the memory, whose indexing thread embeds new items, and the review
   worker). noop, publish_message to one agent, and publish_message to the pool (which joins the shared
   memory, so the indexer embeds it) in turns, each timed batch starting with BACKLOG memory items waiting.
4. For context, the same board operations called in-process on `hiveboard.board.Board` (no MCP,
   no HTTP) on a separate database.

Targets (issue): board tools and get_messages within 1.5x of the no-op tool (p50); publish_message
with 8 concurrent senders p99 <= 50 ms; zero double claims; a pool publish_message p50 <= 1.3x a
direct one while the indexer is busy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import _memory_corpus as corpus  # noqa: E402  (bench/ is on sys.path when run as a script)
from _common import (LoggedServer, free_port, machine_info, payload, pct, proc_cpu_seconds,  # noqa: E402
                     remove_unless_kept)

from hiveboard.board import Board, NewTask, Store
from hiveboard.board.messages import NewMessage

HERE = Path(__file__).resolve().parent
OPS = ("noop", "create_task", "claim_task", "update_task", "get_task", "list_tasks", "get_board", "release_task",
       "complete_task", "get_messages", "publish_message")
BOARD_OPS = OPS[1:]
# The memory section: a second server that runs the memory's indexer (and the review worker), as `hiveboard
# serve --http` does. publish_pool is publish_message without a recipient: the message joins the shared memory.
MEMORY_OPS = ("noop", "publish_message", "publish_pool")
TOOL_OF = {"publish_pool": "publish_message"}
POOL_RATIO = 1.3  # target: pool publish p50 <= 1.3x a direct one, with the indexer busy
BACKLOG = 150  # memory items waiting for the indexer at the start of every measured batch
TARGET_RATIO = 1.5
PUBLISH_P99_MS = 50.0  # publish_message with 8 concurrent senders
INBOX = 1_000  # messages in every bench agent's inbox before the run
RACE_CARDS = 300
RACE_CLIENTS = 16


# ----------------------------------------------------------------------------- results


@dataclass
class Row:
    op: str
    clients: int
    calls: int
    wall_s: float
    p50_ms: float
    p99_ms: float
    calls_per_s: float
    ratio_vs_noop: float | None = None
    server_cpu_ms: float | None = None  # server process CPU (user+sys) per call
    client_cpu_ms: float | None = None  # bench (client) process CPU per call
    result_bytes: int | None = None  # size of one CallToolResult (every carrier of its data) as JSON


@dataclass
class Race:
    clients: int
    cards: int
    claimed: int
    unique: int
    double_claims: int
    db_in_progress: int
    db_claim_events_max: int
    wall_s: float
    claims_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass
class Results:
    machine: dict
    settings: dict
    rows: list[Row] = field(default_factory=list)
    race: Race | None = None
    memory: list[Row] = field(default_factory=list)
    busy: Busy | None = None
    direct: list[Row] = field(default_factory=list)
    total_s: float = 0.0


def make_row(op: str, clients: int, lat: list[float], wall: float) -> Row:
    return Row(op=op, clients=clients, calls=len(lat), wall_s=wall, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99),
               calls_per_s=len(lat) / wall if wall > 0 else float("nan"))


# ----------------------------------------------------------------------------- server process


class ServerProcess(LoggedServer):
    """bench/_server.py in its own process; stderr goes to a file shown if something fails."""

    def __init__(self, home: Path, log_path: Path, script: Path = HERE / "_server.py", extra: tuple[str, ...] = ()):
        super().__init__(log_path)
        self.home = home
        self.script = script
        self.extra = list(extra)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> None:
        # the server must use the bench's database whatever HIVEBOARD_* the caller has set
        env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEBOARD_")}
        env.update(HIVEBOARD_LOG_LEVEL="WARNING", HIVEBOARD_CONFIG=str(self.home / "no-config.toml"),
                   PYTHONUNBUFFERED="1")
        self.launch([sys.executable, str(self.script), "--home", str(self.home), "--port", str(self.port),
                     *self.extra], env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bench server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"bench server did not listen on {self.port}:\n{self.log_tail()}")


# ----------------------------------------------------------------------------- clients


class ToolFailed(RuntimeError):
    pass


def connect(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=http))


async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise ToolFailed(f"{tool}({args}) failed: {result.content[0].text if result.content else result}")
    return payload(result)


class Agent:
    """One benchmark client: its own connection and agent identity, and the cards it holds."""

    def __init__(self, name: str, client: Client, peer: str):
        self.name = name
        self.client = client
        self.peer = peer  # who its direct messages go to
        self.held: list[tuple[int, int]] = []  # (task id, fencing token) from its claims
        self.seq = 0
        self.created: int | None = None  # the last card it created (get_task reads it)
        self.last_result = None

    def args_for(self, op: str) -> dict:
        if op == "create_task":
            self.seq += 1
            return dict(title=f"bench card {self.name} #{self.seq}", description="created by bench/bench_board.py",
                        task_type="code", priority="medium", labels=["bench"],
                        acceptance_criteria=["the bench reads it back"])
        if op == "update_task":
            task_id, token = self.held[self.seq % len(self.held)]
            self.seq += 1
            return dict(task_id=task_id, token=token, note="progress: handler written, tests next")
        if op == "get_task":
            return dict(task_id=self.created)
        if op == "release_task":
            task_id, token = self.held.pop(0)
            return dict(task_id=task_id, token=token, reason="bench: giving it back")
        if op == "complete_task":
            task_id, token = self.held.pop(0)
            return dict(task_id=task_id, token=token, output="done by the benchmark", summary="bench")
        if op == "get_messages":
            return dict(unread_only=False)  # the newest 20 of the inbox, read state unchanged
        if op in ("publish_message", "publish_pool"):  # the same message, to one agent or to the pool
            self.seq += 1
            return dict(intent="status_update", content=f"{self.name} #{self.seq}: the login handler is written; "
                        "tests next", **({"recipient": self.peer} if op == "publish_message" else {}))
        return {}  # noop, claim_task (claim-next), list_tasks and get_board (defaults)

    def after(self, op: str, result: dict) -> None:
        if op == "claim_task":
            if not result.get("claimed"):
                raise ToolFailed(f"{self.name}: claim_task found no card ({result.get('message')}); "
                                 "the bench seeds too few cards")
            self.held.append((result["task"]["id"], result["token"]))
        elif op == "create_task":
            self.created = result["id"]
        elif op == "get_messages" and len(result.get("messages", [])) != 20:
            raise ToolFailed(f"{self.name}: get_messages returned {len(result.get('messages', []))} messages, not 20")

    async def prepare(self, op: str, n: int) -> None:
        """Untimed: cards to hold before an op that gives cards back or needs one."""
        need = n if op in ("release_task", "complete_task") else 1 if op == "update_task" else 0
        while len(self.held) < need:
            self.after("claim_task", await call(self.client, "claim_task", {}))

    async def run(self, op: str, n: int, lat: list[float]) -> None:
        for _ in range(n):
            args = self.args_for(op)
            t0 = time.perf_counter()
            result = await self.client.call_tool(TOOL_OF.get(op, op), args)
            lat.append(time.perf_counter() - t0)
            if result.is_error:
                raise ToolFailed(f"{op}({args}) failed: {result.content[0].text if result.content else result}")
            self.after(op, payload(result))
            self.last_result = result


@dataclass
class Sample:
    """What one op accumulated over the rounds: latencies, wall time and CPU seconds."""

    lat: list[float] = field(default_factory=list)
    wall: float = 0.0
    server_cpu: float | None = 0.0
    client_cpu: float = 0.0
    result_bytes: int | None = None

    def row(self, op: str, clients: int) -> Row:
        row = make_row(op, clients, self.lat, self.wall)
        n = len(self.lat) or 1
        row.client_cpu_ms = self.client_cpu / n * 1000
        row.server_cpu_ms = self.server_cpu / n * 1000 if self.server_cpu is not None else None
        row.result_bytes = self.result_bytes
        return row


async def measure(agents: list[Agent], op: str, per_client: int, acc: Sample, server_pid: int | None = None) -> None:
    """All agents call `op` per_client times concurrently; adds latencies, wall time and CPU to acc."""
    async with anyio.create_task_group() as tg:
        for a in agents:
            tg.start_soon(a.prepare, op, per_client)
    s0 = proc_cpu_seconds(server_pid) if server_pid else None
    c0 = time.process_time()
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for a in agents:
            tg.start_soon(a.run, op, per_client, acc.lat)
    acc.wall += time.perf_counter() - t0
    acc.client_cpu += time.process_time() - c0
    s1 = proc_cpu_seconds(server_pid) if server_pid else None
    if s0 is None or s1 is None or acc.server_cpu is None:
        acc.server_cpu = None
    else:
        acc.server_cpu += s1 - s0
    last = agents[0].last_result
    if last is not None:
        acc.result_bytes = len(last.model_dump_json(by_alias=True, exclude_none=True))


async def open_agents(stack, url: str, tokens: dict[str, str]) -> list[Agent]:
    agents = []
    names = list(tokens)
    for i, name in enumerate(names):
        client = await stack.enter_async_context(connect(url, token=tokens[name]))
        agents.append(Agent(name, client, peer=names[(i + 1) % len(names)]))
    return agents


async def warm_up(agents: list[Agent], calls: int) -> None:
    """Connect paths, tool listings (output schemas) and SQLite connections on the server's threads."""
    async def one(a: Agent) -> None:
        for _ in range(calls):
            await call(a.client, "noop", {})
            await call(a.client, "get_board", {})
        for op in BOARD_OPS:
            await a.prepare(op, 1)
            a.after(op, await call(a.client, op, a.args_for(op)))

    async with anyio.create_task_group() as tg:
        for a in agents:
            tg.start_soon(one, a)


async def run_matrix(url: str, tokens: dict[str, str], plan: list[tuple[int, int]], warm: int, rounds: int,
                     server_pid: int | None = None) -> list[Row]:
    """Each op in turn, in `rounds` rounds (so slow drift or other load on the machine hits every op
    alike rather than whichever phase it coincides with); one row per op and client count."""
    from contextlib import AsyncExitStack

    rows: list[Row] = []
    for clients, per_client in plan:
        names = list(tokens)[:clients]
        async with AsyncExitStack() as stack:
            agents = await open_agents(stack, url, {n: tokens[n] for n in names})
            await warm_up(agents, warm)
            acc = {op: Sample() for op in OPS}
            done = 0
            for r in range(rounds):
                n = per_client * (r + 1) // rounds - done  # split per_client calls over the rounds
                done += n
                for op in OPS:
                    if n:
                        await measure(agents, op, n, acc[op], server_pid)
            group = [acc[op].row(op, clients) for op in OPS]
            print("  .. " + ", ".join(f"{r.op} p50 {r.p50_ms:.2f}" for r in group) + f" ms (x{clients})", flush=True)
            noop = group[0].p50_ms
            for row in group:
                row.ratio_vs_noop = row.p50_ms / noop if noop else None
            rows += group
    return rows


async def run_race(url: str, tokens: dict[str, str]) -> tuple[list[tuple[str, int]], list[float], float]:
    from contextlib import AsyncExitStack

    claims: list[tuple[str, int]] = []
    lat: list[float] = []

    async def claimer(a: Agent) -> None:
        while True:
            t0 = time.perf_counter()
            result = await call(a.client, "claim_task", {})
            if not result.get("claimed"):
                return  # the board is empty (this last call is not counted in the latencies)
            lat.append(time.perf_counter() - t0)
            claims.append((a.name, result["task"]["id"]))

    async with AsyncExitStack() as stack:
        agents = await open_agents(stack, url, tokens)
        for a in agents:  # before the start line: connect, list tools, compile claim_task's result validator
            await call(a.client, "noop", {})
            miss = await call(a.client, "claim_task", {"task_type": "no-such-type"})
            assert not miss.get("claimed"), miss
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for a in agents:
                tg.start_soon(claimer, a)
        wall = time.perf_counter() - t0
    return claims, lat, wall


# ----------------------------------------------------------------------------- memory: publishing while indexing


@dataclass
class Busy:
    """What the memory server's indexer did while the memory section's calls were timed."""

    embedded: int = 0  # items it embedded and indexed meanwhile
    seconds: float = 0.0  # timed wall time
    min_pending: int | None = None  # fewest items still waiting at the end of a timed batch (> 0: never idle)


def queue_backlog(board: Board, n: int, counter) -> None:
    """Keep n memory items (lesson, critique and output texts of the memory bench's corpus) waiting for the
    server's indexer; they are written here, another process, as a second server would write them."""
    missing = n - board.knowledge.pending()
    if missing <= 0:
        return
    with board.store.write() as db:
        for _ in range(missing):
            item = corpus.item(11, next(counter))
            board.knowledge.add(db, kind=item.kind, text=item.text, created_by="bench-00", task_type=item.task_type,
                                title=item.title, tags=item.tags)


def embedded_count(board: Board) -> int:
    return board.store.db.execute("SELECT count(*) FROM memory_items WHERE embedding IS NOT NULL").fetchone()[0]


async def run_memory(url: str, tokens: dict[str, str], board: Board, plan: list[tuple[int, int]], rounds: int,
                     server_pid: int | None = None) -> tuple[list[Row], Busy]:
    """noop, a direct publish_message and a pool publish_message (which joins the shared memory) in turns,
    each timed batch starting with BACKLOG items waiting for the indexer, so it embeds throughout."""
    from contextlib import AsyncExitStack
    from itertools import count

    rows: list[Row] = []
    busy = Busy()
    counter = count()
    for clients, per_client in plan:
        names = list(tokens)[:clients]
        async with AsyncExitStack() as stack:
            agents = await open_agents(stack, url, {n: tokens[n] for n in names})
            # the memory opens in the background once the server is up; a search waits for it
            await call(agents[0].client, "query_memory", {"query": "a slow test in the login handler"})
            for a in agents:
                for op in MEMORY_OPS * 3:
                    await call(a.client, TOOL_OF.get(op, op), a.args_for(op))
            acc = {op: Sample() for op in MEMORY_OPS}
            done = 0
            for r in range(rounds):
                n = per_client * (r + 1) // rounds - done
                done += n
                for op in MEMORY_OPS:
                    if not n:
                        continue
                    queue_backlog(board, BACKLOG, counter)
                    before, wall = embedded_count(board), acc[op].wall
                    await measure(agents, op, n, acc[op], server_pid)
                    busy.embedded += embedded_count(board) - before
                    busy.seconds += acc[op].wall - wall
                    pending = board.knowledge.pending()
                    busy.min_pending = pending if busy.min_pending is None else min(busy.min_pending, pending)
            group = [acc[op].row(op, clients) for op in MEMORY_OPS]
            print("  .. " + ", ".join(f"{r.op} p50 {r.p50_ms:.2f}" for r in group) + f" ms (x{clients}, indexer busy)",
                  flush=True)
            for row in group:
                row.ratio_vs_noop = row.p50_ms / group[0].p50_ms if group[0].p50_ms else None
            rows += group
    return rows, busy


# ----------------------------------------------------------------------------- board setup (in the bench process)


def seed(board: Board, n: int, actor: str, title: str, task_type: str = "code") -> None:
    for i in range(n):
        board.create(actor, NewTask(title=f"{title} {i}", description="seeded by bench/bench_board.py",
                                    task_type=task_type, priority="medium", labels=["bench", "seed"]))


def seed_inboxes(board: Board, agents: list[str], n: int) -> None:
    """n messages in each agent's inbox, most of them read, as a working agent's inbox looks: broadcasts
    to everyone, with previews long enough that get_messages cuts them at 280 characters."""
    body = ("The API contract for /login changed: the handler now returns a JWT with a 15 minute expiry and a "
            "refresh token in an httpOnly cookie; clients must send the refresh token to /refresh. ") * 3
    for i in range(n):
        board.messages.publish(agents[i % len(agents)], NewMessage(
            intent=("status_update", "request_help", "answer", "proposal")[i % 4], recipient="everyone",
            content=f"#{i} {body}", thread=f"topic-{i % 7}"))
    with board.store.write() as db:
        db.execute("UPDATE inbox SET read_at = coalesce(read_at, ?)", (time.time(),))
    board.store.optimize()


def park_todo(board: Board) -> int:
    """Block every todo card (through the board, as its creator) so the race sees exactly its own cards."""
    rows = board.store.db.execute("SELECT id, created_by FROM tasks WHERE status = 'todo'").fetchall()
    for task_id, creator in rows:
        board.update(creator, task_id, status="blocked", reason="parked by bench before the claim race")
    return len(rows)


def direct_rows(tmp: Path, calls: int) -> list[Row]:
    """The same board operations in-process on Board (no MCP, no HTTP): what the tools cost at the bottom."""
    board = Board(Store(tmp / "direct.db"), lease_seconds=300)
    try:
        seed(board, 200, "direct", "direct seed")
        rows, held = [], []

        def timed(op: str, fn) -> None:
            lat = []
            t0 = time.perf_counter()
            for _ in range(calls):
                s = time.perf_counter()
                fn()
                lat.append(time.perf_counter() - s)
            rows.append(make_row(op, 1, lat, time.perf_counter() - t0))

        timed("Board.create", lambda: board.create("direct", NewTask(title="direct card", labels=["bench"])))

        def claim() -> None:
            c = board.claim("direct")
            assert c.claimed, c.message
            held.append((c.task.id, c.token))

        timed("Board.claim", claim)

        def complete() -> None:
            task_id, token = held.pop(0)
            board.complete("direct", task_id, token, "done by the benchmark", "bench")

        timed("Board.complete", complete)
        timed("Board.board", lambda: board.board(top=5))
        return rows
    finally:
        board.store.close()


# ----------------------------------------------------------------------------- printing


def print_table(rows: list[Row], title: str, ratio: bool = True) -> None:
    print(f"\n{title}")
    head = f"{'op':<15} {'clients':>7} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>9}"
    if ratio:
        head += f" {'p50/noop':>9} {'srv cpu':>8} {'cli cpu':>8} {'bytes':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        line = f"{r.op:<15} {r.clients:>7} {r.calls:>6} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.calls_per_s:>9.1f}"
        if ratio:
            line += f" {r.ratio_vs_noop:>8.2f}x" if r.ratio_vs_noop is not None else f" {'-':>9}"
            line += "".join(f" {v:>8.2f}" if v is not None else f" {'-':>8}" for v in (r.server_cpu_ms, r.client_cpu_ms))
            line += f" {r.result_bytes:>6}" if r.result_bytes is not None else f" {'-':>6}"
        print(line)


def race_ok(race: Race) -> bool:
    return (race.double_claims == 0 and race.claimed == race.cards and race.db_in_progress == race.cards
            and race.db_claim_events_max == 1)


def verdict(res: Results) -> list[str]:
    lines = []
    worst = max((r for r in res.rows if r.op in BOARD_OPS and r.ratio_vs_noop is not None),
                key=lambda r: r.ratio_vs_noop, default=None)
    if worst is not None:
        ok = worst.ratio_vs_noop <= TARGET_RATIO
        lines.append(f"target board tools p50 <= {TARGET_RATIO}x noop: {'PASS' if ok else 'FAIL'} "
                     f"(worst: {worst.op} x{worst.clients} at {worst.ratio_vs_noop:.2f}x)")
        misses = [f"{r.op} x{r.clients} {r.ratio_vs_noop:.2f}x" for r in res.rows
                  if r.op in BOARD_OPS and r.ratio_vs_noop is not None and r.ratio_vs_noop > TARGET_RATIO]
        if misses:
            lines.append("  over target: " + ", ".join(misses))
    cpu = {(r.op, r.clients): r.server_cpu_ms for r in res.rows if r.server_cpu_ms}
    parts = [f"{op} x{n} {v / cpu[('noop', n)]:.2f}x" for (op, n), v in cpu.items()
             if op in BOARD_OPS and cpu.get(("noop", n))]
    if parts:
        lines.append("  (info) server CPU per call vs noop: " + ", ".join(parts))
    pub = next((r for r in res.rows if r.op == "publish_message" and r.clients == 8), None)
    if pub is not None:
        lines.append(f"target publish_message p99 with 8 concurrent senders <= {PUBLISH_P99_MS:.0f} ms: "
                     f"{'PASS' if pub.p99_ms <= PUBLISH_P99_MS else 'FAIL'} ({pub.p99_ms:.2f} ms)")
    for clients in sorted({r.clients for r in res.memory}):
        got = {r.op: r for r in res.memory if r.clients == clients}
        pool, direct = got.get("publish_pool"), got.get("publish_message")
        if pool is not None and direct is not None and direct.p50_ms:
            ratio = pool.p50_ms / direct.p50_ms
            lines.append(f"target pool publish_message p50 <= {POOL_RATIO}x a direct one, indexer busy, x{clients}: "
                         f"{'PASS' if ratio <= POOL_RATIO else 'FAIL'} ({pool.p50_ms:.2f} / {direct.p50_ms:.2f} ms "
                         f"= {ratio:.2f}x; p99 {pool.p99_ms:.2f} / {direct.p99_ms:.2f} ms)")
    if res.busy is not None and res.busy.seconds:
        b = res.busy
        lines.append(f"  indexer during those calls: {b.embedded} items embedded in {b.seconds:.1f} s "
                     f"({b.embedded / b.seconds:.1f}/s; it embeds at low priority, so a loaded machine starves it); "
                     f"fewest waiting after a batch: {b.min_pending} (> 0: it always had work)")
        floor = {r.clients: r.p50_ms for r in res.rows if r.op == "noop"}
        busy_noop = [(r.clients, r.p50_ms, floor[r.clients]) for r in res.memory if r.op == "noop" and r.clients in floor]
        if busy_noop:
            lines.append("  (info) noop p50 with the indexer busy vs on the server without memory: " + ", ".join(
                f"x{n} {busy:.2f} / {quiet:.2f} ms = {busy / quiet:.2f}x" for n, busy, quiet in busy_noop))
    if res.race is not None:
        ok = race_ok(res.race) and res.race.claimed == res.race.cards
        lines.append(f"target {res.race.clients}-client claims, zero double claims: {'PASS' if ok else 'FAIL'} "
                     f"({res.race.double_claims} double, {res.race.claimed}/{res.race.cards} claimed)")
    return lines


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hiveboard board-tool latency over streamable HTTP vs a no-op tool")
    p.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    p.add_argument("--calls", type=int, help="calls per op for 1 client (8 clients do half this each); "
                   "default 200, --quick 20")
    p.add_argument("--calls8", type=int, help="calls per op per client with 8 clients (default calls/2)")
    p.add_argument("--rounds", type=int, default=4, help="split each op's calls over this many rounds through "
                   "all ops (default 4)")
    p.add_argument("--seed", type=int, default=200, help="cards on the board before the run (default 200)")
    p.add_argument("--inbox", type=int, default=INBOX, help=f"messages in each agent's inbox ({INBOX})")
    p.add_argument("--race-cards", type=int, default=RACE_CARDS, help=f"cards in the claim race ({RACE_CARDS})")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--server-script", default=str(HERE / "_server.py"), metavar="PATH",
                   help="server to run, called as PATH --home DIR --port P (default bench/_server.py); "
                   "for A/B-testing a change, e.g. a copy that patches something before calling _server.main")
    p.add_argument("--no-memory", action="store_true", help="skip the memory section (publishing while the "
                   "indexer embeds)")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (database, server log)")
    args = p.parse_args(argv)

    calls1 = args.calls or (20 if args.quick else 200)
    calls8 = args.calls8 or max(1, calls1 // 2)
    race_cards = min(args.race_cards, 48) if args.quick and args.race_cards == RACE_CARDS else args.race_cards
    warm = 2 if args.quick else 10
    plan = [(1, calls1), (8, calls8)]

    started = time.perf_counter()
    res = Results(machine=machine_info("uvicorn"), settings=dict(calls_1_client=calls1, calls_per_client_8=calls8, rounds=args.rounds,
                                                         seed_cards=args.seed, race_cards=race_cards,
                                                         race_clients=RACE_CLIENTS, quick=args.quick))
    m = res.machine
    print(f"machine: {m['cpu_count']} cpus ({m['usable_cpus']} usable), {m['implementation']} {m['python']}, "
          f"mcp {m['mcp']}, uvicorn {m['uvicorn']}, sqlite {m['sqlite']}, {m['platform']}")
    print(f"plan: 1 client x {calls1} calls/op, 8 clients x {calls8} calls/op each, "
          f"race {RACE_CLIENTS} clients on {race_cards} cards; seed {args.seed} cards")

    tmp = Path(tempfile.mkdtemp(prefix="hiveboard-bench-"))
    home = tmp / "home"
    server = ServerProcess(home, tmp / "server.log", Path(args.server_script))
    try:
        board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
        names = [f"bench-{i:02d}" for i in range(RACE_CLIENTS)]
        tokens = {n: board.agents.new_token(n) for n in names}
        seed(board, args.seed, names[0], "seed card")
        seed_inboxes(board, names, args.inbox)
        server.start()
        print(f"server: pid {server.proc.pid} at {server.url}")

        res.rows = anyio.run(run_matrix, server.url, tokens, plan, warm, args.rounds, server.proc.pid)
        print_table(res.rows, "streamable HTTP, one server process. p50/noop: p50 ratio to noop at the same client "
                    "count;\nsrv cpu / cli cpu: CPU ms per call of the server / bench process; bytes: one result "
                    "as JSON")

        parked = park_todo(board)
        seed(board, race_cards, names[0], "race card", task_type="race")
        claims, lat, wall = anyio.run(run_race, server.url, tokens)
        ids = [task_id for _, task_id in claims]
        in_progress = board.store.db.execute(
            "SELECT count(*) FROM tasks WHERE task_type = 'race' AND status = 'in_progress'").fetchone()[0]
        max_events = board.store.db.execute(
            "SELECT coalesce(max(c), 0) FROM (SELECT count(*) c FROM task_history h JOIN tasks t ON t.id = h.task_id "
            "WHERE t.task_type = 'race' AND h.action = 'claimed' GROUP BY h.task_id)").fetchone()[0]
        res.race = Race(clients=RACE_CLIENTS, cards=race_cards, claimed=len(ids), unique=len(set(ids)),
                        double_claims=len(ids) - len(set(ids)), db_in_progress=in_progress,
                        db_claim_events_max=max_events, wall_s=wall,
                        claims_per_s=len(ids) / wall if wall else float("nan"),
                        p50_ms=pct(lat, 50), p99_ms=pct(lat, 99))
        r = res.race
        per_agent = Counter(name for name, _ in claims)
        print(f"\nclaim race: {r.clients} clients, {r.cards} cards ({parked} leftover todo cards parked first)")
        print(f"  claimed {r.claimed}, unique {r.unique}, double claims {r.double_claims}; "
              f"db: {r.db_in_progress} in_progress, max 'claimed' events per card {r.db_claim_events_max}")
        print(f"  wall {r.wall_s:.2f} s, {r.claims_per_s:.1f} claims/s, claim p50 {r.p50_ms:.2f} ms, "
              f"p99 {r.p99_ms:.2f} ms; per client min {min(per_agent.values(), default=0)} "
              f"max {max(per_agent.values(), default=0)}")
        board.store.close()

        server.stop()
        if not args.no_memory:
            memory_home = tmp / "home-memory"
            mboard = Board(Store(memory_home / "hiveboard.db"), lease_seconds=300)
            mtokens = {n: mboard.agents.new_token(n) for n in names[:8]}
            server = ServerProcess(memory_home, tmp / "server-memory.log", Path(args.server_script),
                                   extra=("--background",))
            server.start()
            print(f"\nmemory server (indexer and review worker running): pid {server.proc.pid}")
            res.memory, res.busy = anyio.run(run_memory, server.url, mtokens, mboard, plan, args.rounds,
                                             server.proc.pid)
            print_table(res.memory, f"publishing while the memory indexer embeds (a second server with the memory "
                        f"on; {BACKLOG} items waiting at the start of every batch). publish_pool: no recipient, "
                        "so the message joins the shared memory")
            mboard.store.close()
            server.stop()
        res.direct = direct_rows(tmp, calls1)
        print_table(res.direct, "in-process Board, no MCP/HTTP (context: the SQLite + model work alone)",
                    ratio=False)

        res.total_s = time.perf_counter() - started
        print()
        for line in verdict(res):
            print(line)
        print(f"total {res.total_s:.1f} s")
        if args.json:
            Path(args.json).write_text(json.dumps(asdict(res), indent=2))
            print(f"wrote {args.json}")
        return 0 if race_ok(res.race) else 1
    except BaseException:
        if server.proc is not None:
            tail = server.log_tail()
            if tail.strip():
                print(f"\n--- server log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        server.stop()
        remove_unless_kept(tmp, args.keep)


if __name__ == "__main__":
    sys.exit(main())
