"""PostgreSQL against SQLite: the board tools' p50 on each store, and a wake-up across nodes.

    python bench/bench_postgres.py [--quick] [--calls 200] [--clients 1,8]

A throwaway PostgreSQL cluster on loopback (tests/pg_cluster.py) and a SQLite file, measured in the same
run, one after the other:
  tools   each board tool through an in-process MCP client, p50 and p99 per call, with 1 and 8 clients
          calling at once (each client its own agent); the noop tool on the same server is the floor
  wake    publish_message on one node, the addressee's get_messages(wait_seconds) waiting on another node
          (two stores on one database: on SQLite two processes' worth of stores on one file, woken by the
          watcher's poll of data_version; on PostgreSQL by LISTEN/NOTIFY), p50 and p99
Target: PostgreSQL p50 at most 2x SQLite's per tool; a cross-node wake-up p99 within 50 ms.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anyio
from _harness import Col, bench_parser, call, in_process, machine_info, machine_line, pct, quiet_loggers, table

from hiveboard.board import Board, Store
from hiveboard.board.events import Topic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pg_cluster import PostgresCluster  # noqa: E402  (the tests' throwaway cluster, not a copy)

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


async def main() -> None:
    p = bench_parser(__doc__, quick="a few calls per tool, for a smoke run")
    p.add_argument("--calls", type=int, default=200, help="calls per tool and client")
    p.add_argument("--clients", default="1,8", help="client counts, comma-separated")
    p.add_argument("--rounds", type=int, default=100, help="cross-node wake-ups per store")
    args = p.parse_args()
    calls, rounds = (10, 10) if args.quick else (args.calls, args.rounds)
    quiet_loggers()
    print(machine_line(machine_info("psycopg")))
    cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="bench-pg-")))
    try:
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
        for clients in [int(c) for c in args.clients.split(",")]:
            with tempfile.TemporaryDirectory() as home:
                lite = await tools(str(Path(home) / "hiveboard.db"), clients, calls)
            pg = await tools(cluster.database(), clients, calls)
            for tool in TOOLS:
                a, b = pct(lite[tool], 50), pct(pg[tool], 50)
                rows.append((tool, clients, a, b, b / a, pct(lite[tool], 99), pct(pg[tool], 99)))
        table(cols, rows, "board tools, ms per call (each client its own agent, all calling at once)")
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
        worst = max(r[4] for r in rows if r[0] != "noop")
        print(f"\ntarget PG p50 <= 2x SQLite per tool: {'met' if worst <= 2 else 'MISSED'} (worst {worst:.2f}x)")
        print(f"target cross-node wake-up p99 <= 50 ms: {'met' if pct(pg, 99) <= 50 else 'MISSED'}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    anyio.run(main)
