"""PostgreSQL against SQLite: every board tool's p50 over HTTP with 1, 8 and 32 clients on 1, 2 and 3 nodes;
the store alone in-process; and a wake-up across nodes.

    python bench/bench_postgres.py [--quick] [--nodes 1,2,3] [--clients 1,8,32] [--sections nodes,store,wake]

A throwaway PostgreSQL cluster on loopback (tests/pg_cluster.py) and a SQLite file, measured in the same
run:
  nodes   the real HTTP app (bench/_server.py: `hiveboard serve --http` plus a bare `noop`) as 1, 2 or 3
          node processes on one database (SQLite: processes on one file; PostgreSQL: one database); each
          client its own agent and connection, the clients spread over the nodes in turn, every client
          calling the same tool at once (bench/_board_agents.py, as bench_board.py runs it); p50 per tool.
          Both sets of nodes are up at once and each tool's batch runs on one and then the other, the first
          changing from round to round, so that the machine's drift falls on both alike
  store   each board tool through an in-process MCP client (no HTTP), 1 and 8 clients: what the store
          alone costs, where an in-process SQLite call is a function call and a PostgreSQL one a round trip
  wake    publish_message on one node, the addressee's get_messages(wait_seconds) waiting on another node
          (SQLite: woken by the watcher's poll of data_version; PostgreSQL: by LISTEN/NOTIFY), p50 and p99
Targets: over HTTP, PostgreSQL p50 at most 2x SQLite's for every tool, client count and node count; a
cross-node wake-up p99 within 50 ms.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

import anyio
from _board_agents import HERE, OPS, run_matrices, seed
from _harness import (
    Col,
    LoggedServer,
    bench_parser,
    call,
    from_tests,
    in_process,
    machine_info,
    machine_line,
    pct,
    quiet_loggers,
    server_env,
    table,
)

from hiveboard.board.db import Store
from hiveboard.board.events import Topic
from hiveboard.board.tasks import Board

PostgresCluster = from_tests("pg_cluster").PostgresCluster

TOOLS = ("noop", "create_task", "get_task", "list_tasks", "get_board", "claim_task", "publish_message", "get_messages")


async def one_client(board: Board, agent: str, calls: int, out: dict[str, list[float]]) -> None:
    """Each tool `calls` times through one agent's in-process client; latencies added to `out`."""
    async with in_process(board, agent, with_noop=True) as c:
        ids = []
        for tool in TOOLS:
            for n in range(calls):
                args: dict = {}
                if tool == "create_task":
                    args = {"title": f"{agent} card {n}"}
                elif tool == "get_task":
                    args = {"task_id": ids[n % len(ids)]}
                elif tool == "publish_message":
                    args = {"intent": "info", "recipient": agent, "content": f"note {n}"}
                elif tool == "get_messages":
                    args = {"limit": 20}
                started = time.perf_counter()
                got = await call(c, tool, args)
                out.setdefault(tool, []).append(time.perf_counter() - started)
                if tool == "create_task":
                    ids.append(got["id"])


async def tools(target: str, clients: int, calls: int) -> dict[str, list[float]]:
    board = Board(Store(target))
    out: dict[str, list[float]] = {}
    try:
        for n in range(clients):
            board.agents.ensure(f"agent{n}")
        async with anyio.create_task_group() as tg:
            for n in range(clients):
                tg.start_soon(one_client, board, f"agent{n}", calls, out)
    finally:
        board.store.close()
    return out


def start_nodes(target: str, n: int, root: Path) -> list[LoggedServer]:
    """n bench servers (bench/_server.py) on one database, each with a data directory of its own."""
    nodes = []
    try:
        for i in range(n):
            home = root / f"node{i + 1}"
            home.mkdir(parents=True, exist_ok=True)
            node = LoggedServer(root / f"node{i + 1}.log", home=home)
            argv = [sys.executable, str(HERE / "_server.py"), "--home", str(home), "--port", str(node.port)]
            nodes.append(node.start([*argv, "--db", target], server_env(home)))
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def prepared_nodes(target: str, nodes: int, plan: list[tuple[int, int]], root: Path) -> tuple[list, dict[str, str]]:
    """`nodes` nodes on the database at `target`, its board seeded for the plan's calls; the nodes and the agents'
    tokens."""
    from bench_board import seed_inboxes

    clients = max(c for c, _ in plan)
    board = Board(Store(target), lease_seconds=300)
    try:
        # two agents at least: one's broadcasts fill the other's inbox
        names = [f"bench-{i:02d}" for i in range(max(clients, 2))]
        tokens = {n: board.agents.new_token(n) for n in names}
        # cards for every claim (claim_task, and the cards release and complete give back), the warm-up's too
        seed(board, sum(c * (3 * per + 3) for c, per in plan), names[0], "seed card")
        seed_inboxes(board, names, 40)
    finally:
        board.store.close()
    return start_nodes(target, nodes, root), tokens


def over_nodes(targets: list[str], nodes: int, plan: list[tuple[int, int]], rounds: int, root: Path) -> list[dict]:
    """Every tool's p50 (ms) per client count over HTTP with `nodes` nodes on each database of `targets`, all up
    at once and measured in turn, op by op (`run_matrices`)."""
    sides, started = [], []
    try:
        for n, target in enumerate(targets):
            servers, tokens = prepared_nodes(target, nodes, plan, root / f"side{n}")
            started += servers
            # with one node, its CPU per call too (the capacity model's)
            sides.append(([s.url for s in servers], tokens, servers[0].proc.pid if nodes == 1 else None))
        measured = anyio.run(run_matrices, sides, plan, 2, rounds)
    finally:
        for server in started:
            server.stop()
    return [{(r.op, r.clients): r for r in rows} for rows in measured]


async def wake(target: str, rounds: int) -> list[float]:
    """Publish on node one; bob waits on node two. Latency from the publish's start to the wait's return."""
    one, two = Board(Store(target)), Board(Store(target))
    lat: list[float] = []
    try:
        for board in (one, two):
            board.agents.ensure("alice"), board.agents.ensure("bob")
        async with in_process(one, "alice") as a, in_process(two, "bob") as b, two.store.notifier.watching():
            for n in range(rounds):
                got: dict = {}

                async def waiter() -> None:
                    got["m"] = await call(b, "get_messages", wait_seconds=10)
                    got["t"] = time.perf_counter()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter)
                    while Topic.inbox("bob") not in two.store.notifier.waiting():
                        await anyio.sleep(0.001)
                    started = time.perf_counter()
                    await call(a, "publish_message", intent="info", recipient="bob", content=f"ping {n}")
                assert got["m"]["messages"], "bob was not woken"
                lat.append(got["t"] - started)
    finally:
        one.store.close()
        two.store.close()
    return lat


def main() -> None:
    p = bench_parser(__doc__, quick="a few calls per tool, for a smoke run")
    p.add_argument("--calls", type=int, default=100, help="in-process calls per tool and client (store)")
    p.add_argument("--clients", default="1,8,32", help="client counts over HTTP, comma-separated")
    p.add_argument("--per-client", default="60,20,8", help="calls per tool and client at each client count")
    p.add_argument("--nodes", default="1,2,3", help="node counts, comma-separated")
    p.add_argument("--rounds", type=int, default=4, help="rounds each tool's calls are split over (nodes)")
    p.add_argument("--wakes", type=int, default=100, help="cross-node wake-ups per store")
    p.add_argument("--sections", default="nodes,store,wake,capacity", help="what to run, comma-separated")
    p.add_argument(
        "--pg-settings",
        default="-c synchronous_commit=off",
        help="the cluster's settings; by default a commit is durable against a crash of the process, not of "
        "the machine, as SQLite's synchronous=NORMAL in WAL mode that hiveboard uses ('' for PostgreSQL's "
        "defaults, a flush to disk per commit)",
    )
    args = p.parse_args()
    sections = set(args.sections.split(","))
    clients = [int(c) for c in args.clients.split(",")]
    per = [int(c) for c in args.per_client.split(",")]
    plan = [(c, 2 if args.quick else per[min(i, len(per) - 1)]) for i, c in enumerate(clients)]
    calls, wakes, rounds = (10, 10, 1) if args.quick else (args.calls, args.wakes, args.rounds)
    quiet_loggers()
    print(machine_line(machine_info("psycopg")))
    print(f"PostgreSQL settings: {args.pg_settings or '(its defaults)'}")
    cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="bench-pg-")), args.pg_settings)
    worst: list[tuple[float, str]] = []
    measured: dict = {}
    try:
        if "nodes" in sections:
            measured = nodes_table(cluster, plan, [int(n) for n in args.nodes.split(",")], rounds, worst)
        if "capacity" in sections:
            capacity(cluster, measured, 3 if args.quick else 10)
        if "store" in sections:
            anyio.run(store_table, cluster, calls)
        if "wake" in sections:
            wake_pg = anyio.run(wake_table, cluster, wakes)
    finally:
        cluster.stop()
    if worst:
        ratio, where = max(worst)
        print(
            f"\ntarget over HTTP, PG p50 <= 2x SQLite per tool: {'met' if ratio <= 2 else 'MISSED'} (worst {ratio:.2f}x, {where})"
        )
    if "wake" in sections:
        print(f"target cross-node wake-up p99 <= 50 ms: {'met' if pct(wake_pg, 99) <= 50 else 'MISSED'}")


def nodes_table(cluster: PostgresCluster, plan, node_counts: list[int], rounds: int, worst: list) -> dict:
    """The table over HTTP; returns the PostgreSQL rows of one node (for the capacity model)."""
    cols = [
        Col("tool", 16, left=True),
        Col("nodes", 6),
        Col("clients", 8),
        Col("SQLite p50", 11, ".2f"),
        Col("PG p50", 9, ".2f"),
        Col("PG/SQLite", 10, ".2f", suffix="x"),
        Col("SQLite p99", 11, ".2f"),
        Col("PG p99", 9, ".2f"),
    ]
    rows, one_node = [], {}
    for nodes in node_counts:
        with tempfile.TemporaryDirectory() as root:
            lite, pg = over_nodes(
                [str(Path(root) / "board" / "hiveboard.db"), cluster.database()], nodes, plan, rounds, Path(root)
            )
        if nodes == 1:
            one_node = pg
        for clients, _ in plan:
            for op in OPS:
                a, b = lite[op, clients], pg[op, clients]
                rows.append((op, nodes, clients, a.p50_ms, b.p50_ms, b.p50_ms / a.p50_ms, a.p99_ms, b.p99_ms))
                if op != "noop":
                    worst.append((b.p50_ms / a.p50_ms, f"{op}, {clients} clients, {nodes} nodes"))
    table(cols, rows, "over streamable HTTP, ms per call (each client its own agent; clients spread over the nodes)")
    return one_node


def pgbench(cluster: PostgresCluster, seconds: int, synchronous: str) -> float:
    """PostgreSQL's own commit rate here: pgbench's simple-update transactions (-N), 8 clients, in tps."""
    import re
    import subprocess

    db = cluster.database()
    tool = [*cluster.as_user, str(cluster.bindir / "pgbench")]
    subprocess.run([*tool, "-q", "-i", "-s", "4", db], check=True, capture_output=True)
    done = subprocess.run(
        [*tool, "-N", "-c", "8", "-j", "2", "-T", str(seconds), db],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PGOPTIONS": f"-c synchronous_commit={synchronous}"},
    )
    return float(re.search(r"tps = ([\d.]+)", done.stdout).group(1))


def capacity(cluster: PostgresCluster, one_node: dict, seconds: int) -> None:
    """The inputs of the capacity model in bench/README.md: PostgreSQL's commits/s, and a node's CPU per call
    and the board's serialised write rate, measured in this run."""
    cols = [Col("measured", 58, left=True), Col("value", 10, ".1f")]
    rows = [
        ("PostgreSQL commits/s, pgbench -N, 8 clients, synchronous_commit=off", pgbench(cluster, seconds, "off")),
        ("PostgreSQL commits/s, pgbench -N, 8 clients, synchronous_commit=on", pgbench(cluster, seconds, "on")),
    ]
    if one_node:
        top = max(c for _, c in one_node)
        board = [r for (op, c), r in one_node.items() if c == 1 and op != "noop" and r.server_cpu_ms]
        if board:
            rows.append(
                ("node CPU ms per board call, mean over the tools (1 client)", mean(r.server_cpu_ms for r in board))
            )
        for op in ("create_task", "claim_task", "get_board"):
            if (op, top) in one_node:
                rows.append((f"{op} calls/s, one node, {top} clients", one_node[op, top].calls_per_s))
    table(cols, rows, "capacity inputs (bench/README.md has the model)")


async def store_table(cluster: PostgresCluster, calls: int) -> None:
    cols = [
        Col("tool", 16, left=True),
        Col("clients", 8),
        Col("SQLite p50", 11, ".2f"),
        Col("PG p50", 9, ".2f"),
        Col("PG/SQLite", 10, ".2f", suffix="x"),
        Col("SQLite p99", 11, ".2f"),
        Col("PG p99", 9, ".2f"),
    ]
    rows = []
    for clients in (1, 8):
        with tempfile.TemporaryDirectory() as home:
            lite = await tools(str(Path(home) / "hiveboard.db"), clients, calls)
        pg = await tools(cluster.database(), clients, calls)
        for tool in TOOLS:
            a, b = pct(lite[tool], 50), pct(pg[tool], 50)
            rows.append((tool, clients, a, b, b / a, pct(lite[tool], 99), pct(pg[tool], 99)))
    table(cols, rows, "the store alone: in-process MCP client, no HTTP, ms per call (each client its own agent)")


async def wake_table(cluster: PostgresCluster, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as home:
        lite = await wake(str(Path(home) / "hiveboard.db"), rounds)
    pg = await wake(cluster.database(), rounds)
    wake_cols = [Col("store", 28, left=True), Col("n", 5), Col("p50 ms", 8, ".2f"), Col("p99 ms", 8, ".2f")]
    table(
        wake_cols,
        [
            ("SQLite (data_version poll)", len(lite), pct(lite, 50), pct(lite, 99)),
            ("PostgreSQL (LISTEN/NOTIFY)", len(pg), pct(pg, 50), pct(pg, 99)),
        ],
        "publish on node one -> get_messages waiting on node two returns",
    )
    return pg


if __name__ == "__main__":
    main()
