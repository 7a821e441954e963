"""The board benches' load: one agent per HTTP connection and token, the arguments each board tool gets, timed
concurrent batches with the server's and this process's CPU, the bench server process, and the table they print.

bench_board.py, bench_postgres.py, bench_memory_path.py, bench_claim_floor.py and bench_fairness.py run these
against bench/_server.py (the real `hiveboard serve --http` app plus a bare `noop` tool, the floor every op is
compared with).
"""

from __future__ import annotations

import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from _harness import (
    BenchError,
    Col,
    LoggedServer,
    call,
    failure,
    http_client,
    payload,
    pct,
    proc_cpu_seconds,
    server_env,
    table,
)

from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board

HERE = Path(__file__).resolve().parent
OPS = (
    "noop",
    "create_task",
    "claim_task",
    "update_task",
    "get_task",
    "list_tasks",
    "get_board",
    "release_task",
    "complete_task",
    "get_messages",
    "publish_message",
)
BOARD_OPS = OPS[1:]
TOOL_OF = {"publish_pool": "publish_message"}  # publish_pool: publish_message without a recipient (the pool)


# a bench agent sends hundreds of messages a minute, past the default message quotas; raised, the quota is still
# checked (and charged) on each publish, as in production
MESSAGE_QUOTAS = dict(
    HIVEBOARD_QUOTAS__MESSAGES_PER_MINUTE="1000000",
    HIVEBOARD_QUOTAS__MESSAGES_PER_HOUR="1000000",
    HIVEBOARD_QUOTAS__MESSAGE_MB_PER_HOUR="100000",
)


def bench_server(
    home: Path, log: Path, script: Path = HERE / "_server.py", extra: tuple[str, ...] = (), **variables: str
) -> LoggedServer:
    """bench/_server.py (or an A/B copy of it) serving `home` in its own process, so it does not share a GIL with
    the load generator; started and listening. `variables`: HIVEBOARD_* settings of the server process."""
    server = LoggedServer(log)
    argv = [sys.executable, str(script), "--home", str(home), "--port", str(server.port), *extra]
    return server.start(argv, server_env(home, **variables))


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


def make_row(op: str, clients: int, lat: list[float], wall: float) -> Row:
    return Row(
        op=op,
        clients=clients,
        calls=len(lat),
        wall_s=wall,
        p50_ms=pct(lat, 50),
        p99_ms=pct(lat, 99),
        calls_per_s=len(lat) / wall if wall > 0 else float("nan"),
    )


class Agent:
    """One benchmark client: its own connection and agent identity, and the cards it holds."""

    def __init__(self, name: str, client, peer: str):
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
            return dict(
                title=f"bench card {self.name} #{self.seq}",
                description="created by bench/bench_board.py",
                task_type="code",
                priority="medium",
                labels=["bench"],
                acceptance_criteria=["the bench reads it back"],
            )
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
            return dict(
                intent="status_update",
                content=f"{self.name} #{self.seq}: the login handler is written; tests next",
                **({"recipient": self.peer} if op == "publish_message" else {}),
            )
        return {}  # noop, claim_task (claim-next), list_tasks and get_board (defaults)

    def after(self, op: str, result: dict) -> None:
        if op == "claim_task":
            if not result.get("claimed"):
                raise BenchError(
                    f"{self.name}: claim_task found no card ({result.get('message')}); the bench seeds too few cards"
                )
            self.held.append((result["task"]["id"], result["token"]))
        elif op == "create_task":
            self.created = result["id"]
        elif op == "get_messages" and len(result.get("messages", [])) != 20:
            raise BenchError(f"{self.name}: get_messages returned {len(result.get('messages', []))} messages, not 20")

    async def prepare(self, op: str, n: int) -> None:
        """Untimed: cards to hold before an op that gives cards back or needs one."""
        need = n if op in ("release_task", "complete_task") else 1 if op == "update_task" else 0
        while len(self.held) < need:
            self.after("claim_task", await call(self.client, "claim_task"))

    async def run(self, op: str, n: int, lat: list[float]) -> None:
        for _ in range(n):
            args = self.args_for(op)
            t0 = time.perf_counter()
            result = await self.client.call_tool(TOOL_OF.get(op, op), args)
            lat.append(time.perf_counter() - t0)
            if result.is_error:
                raise failure(op, args, result)
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


async def open_agents(
    stack, url: str | list[str], tokens: dict[str, str], agent_class: type[Agent] = Agent
) -> list[Agent]:
    """One client per agent (an `agent_class`); with several URLs (nodes), the agents spread over them in turn."""
    agents = []
    names = list(tokens)
    urls = [url] if isinstance(url, str) else url
    for i, name in enumerate(names):
        client = await stack.enter_async_context(http_client(urls[i % len(urls)], tokens[name]))
        agents.append(agent_class(name, client, peer=names[(i + 1) % len(names)]))
    return agents


async def warm_up(agents: list[Agent], calls: int, ops: tuple[str, ...] = BOARD_OPS) -> None:
    """Connect paths, tool listings (output schemas) and SQLite connections on the server's threads; then each
    board op of `ops` once."""

    async def one(a: Agent) -> None:
        for _ in range(calls):
            await call(a.client, "noop")
            await call(a.client, "get_board")
        for op in (op for op in ops if op in BOARD_OPS):
            await a.prepare(op, 1)
            a.after(op, await call(a.client, op, a.args_for(op)))

    async with anyio.create_task_group() as tg:
        for a in agents:
            tg.start_soon(one, a)


async def run_matrix(
    url: str | list[str],
    tokens: dict[str, str],
    plan: list[tuple[int, int]],
    warm: int,
    rounds: int,
    server_pid: int | None = None,
    ops: tuple[str, ...] = OPS,
) -> list[Row]:
    """Each op in turn, in `rounds` rounds (so slow drift or other load on the machine hits every op
    alike rather than whichever phase it coincides with); one row per op and client count."""
    (rows,) = await run_matrices([(url, tokens, server_pid)], plan, warm, rounds, ops)
    return rows


async def run_matrices(
    sides: list[tuple[str | list[str], dict[str, str], int | None]],
    plan: list[tuple[int, int]],
    warm: int,
    rounds: int,
    ops: tuple[str, ...] = OPS,
) -> list[list[Row]]:
    """`run_matrix` on several servers (or sets of nodes) at once, each side a (url or urls, tokens, server pid):
    each op's batch measured on every side in turn, the side that goes first changing from round to round, so that
    the machine's drift and passing load fall on the sides alike instead of on whichever ran in that minute. The
    rows of each side."""
    rows: list[list[Row]] = [[] for _ in sides]
    for clients, per_client in plan:
        async with AsyncExitStack() as stack:
            agents = []
            for url, tokens, _ in sides:
                names = list(tokens)[:clients]
                agents.append(await open_agents(stack, url, {n: tokens[n] for n in names}))
            for side in agents:
                await warm_up(side, warm, ops)
            acc = [{op: Sample() for op in ops} for _ in sides]
            done = 0
            for r in range(rounds):
                n = per_client * (r + 1) // rounds - done  # split per_client calls over the rounds
                done += n
                if not n:
                    continue
                order = list(range(len(sides)))
                order = order[r % len(order) :] + order[: r % len(order)]
                for op in ops:
                    for i in order:
                        await measure(agents[i], op, n, acc[i][op], sides[i][2])
            for i in range(len(sides)):
                group = [acc[i][op].row(op, clients) for op in ops]
                print(
                    "  .. " + ", ".join(f"{r.op} p50 {r.p50_ms:.2f}" for r in group) + f" ms (x{clients})", flush=True
                )
                noop = group[0].p50_ms
                for row in group:
                    row.ratio_vs_noop = row.p50_ms / noop if noop else None
                rows[i] += group
    return rows


def seed(board: Board, n: int, actor: str, title: str, task_type: str = "code") -> None:
    for i in range(n):
        board.create(
            actor,
            NewTask(
                title=f"{title} {i}",
                description="seeded by bench/bench_board.py",
                task_type=task_type,
                priority="medium",
                labels=["bench", "seed"],
            ),
        )


def print_table(rows: list[Row], title: str, ratio: bool = True) -> None:
    cols = [
        Col("op", 15, left=True),
        Col("clients", 7),
        Col("calls", 6),
        Col("p50 ms", 8, ".2f"),
        Col("p99 ms", 8, ".2f"),
    ]
    cols.append(Col("calls/s", 9, ".1f"))
    if ratio:
        cols += [
            Col("p50/noop", 9, ".2f", suffix="x"),
            Col("srv cpu", 8, ".2f"),
            Col("cli cpu", 8, ".2f"),
            Col("bytes", 6),
        ]
    table(
        cols,
        [
            (r.op, r.clients, r.calls, r.p50_ms, r.p99_ms, r.calls_per_s)
            + ((r.ratio_vs_noop, r.server_cpu_ms, r.client_cpu_ms, r.result_bytes) if ratio else ())
            for r in rows
        ],
        title,
    )
