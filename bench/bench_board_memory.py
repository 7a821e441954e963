"""Publishing while the memory indexer embeds: publish_message to one agent and to the pool, next to a no-op tool.

    .venv/bin/python bench/bench_board_memory.py            # full run
    .venv/bin/python bench/bench_board_memory.py --quick    # smoke run
    .venv/bin/python bench/bench_board_memory.py --calls 500 --json out.json

A server process that also runs what `hiveboard serve --http` runs beside the app (bench/_server.py
--background: the memory, whose indexing thread embeds new items, and the review worker). For 1 and 8 clients
(bench/_board_agents.py's, each its own HTTP connection and token): noop, publish_message to one agent, and
publish_message to the pool (no recipient: the message joins the shared memory, so the indexer embeds it) in
turns, each timed batch starting with BACKLOG memory items (texts of bench_memory's corpus, written by this
process, as a second server would write them) waiting for the indexer, so it has work throughout. Prints the
items it embedded meanwhile and the fewest left waiting after a batch (> 0: it never ran dry).

Baseline in the same run: noop on a server without the memory (bench/_server.py alone) first, at the same
client counts, so the table's noop shows what the busy indexer costs a bare call.

Target (issue): a pool publish_message p50 <= 1.3x a direct one while the indexer is busy.
"""

from __future__ import annotations

import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import _memory_corpus as corpus
import anyio
from _board_agents import (
    HERE,
    MESSAGE_QUOTAS,
    TOOL_OF,
    Row,
    Sample,
    bench_server,
    measure,
    open_agents,
    print_table,
    run_matrix,
)
from _harness import bench_parser, call, machine_info, machine_line, scratch, write_json
from _memory_load import add_items

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board

MEMORY_OPS = ("noop", "publish_message", "publish_pool")
POOL_RATIO = 1.3  # target: pool publish p50 <= 1.3x a direct one, with the indexer busy
BACKLOG = 150  # memory items waiting for the indexer at the start of every measured batch
CLIENTS = 8


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
    if missing > 0:
        items = [corpus.item(11, next(counter)) for _ in range(missing)]
        add_items(board, items, created_by="bench-00", batch=missing, refresh_stats=False)


def embedded_count(board: Board) -> int:
    return board.store.db.execute("SELECT count(*) FROM memory_items WHERE embedding IS NOT NULL").fetchone()[0]


async def run_memory(
    url: str,
    tokens: dict[str, str],
    board: Board,
    plan: list[tuple[int, int]],
    rounds: int,
    server_pid: int | None = None,
) -> tuple[list[Row], Busy]:
    """noop, a direct publish_message and a pool publish_message (which joins the shared memory) in turns,
    each timed batch starting with BACKLOG items waiting for the indexer, so it embeds throughout."""
    rows: list[Row] = []
    busy = Busy()
    counter = count()
    for clients, per_client in plan:
        names = list(tokens)[:clients]
        async with AsyncExitStack() as stack:
            agents = await open_agents(stack, url, {n: tokens[n] for n in names})
            # the memory opens in the background once the server is up; a search waits for it
            await call(agents[0].client, "query_memory", query="a slow test in the login handler")
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
            print(
                "  .. " + ", ".join(f"{r.op} p50 {r.p50_ms:.2f}" for r in group) + f" ms (x{clients}, indexer busy)",
                flush=True,
            )
            for row in group:
                row.ratio_vs_noop = row.p50_ms / group[0].p50_ms if group[0].p50_ms else None
            rows += group
    return rows, busy


@dataclass
class Results:
    machine: dict
    settings: dict
    floor: list[Row] = field(default_factory=list)  # noop on the server without the memory
    rows: list[Row] = field(default_factory=list)
    busy: Busy | None = None
    total_s: float = 0.0


def verdict(res: Results) -> list[str]:
    lines = []
    for clients in sorted({r.clients for r in res.rows}):
        got = {r.op: r for r in res.rows if r.clients == clients}
        pool, direct = got.get("publish_pool"), got.get("publish_message")
        if pool is not None and direct is not None and direct.p50_ms:
            ratio = pool.p50_ms / direct.p50_ms
            lines.append(
                f"target pool publish_message p50 <= {POOL_RATIO}x a direct one, indexer busy, x{clients}: "
                f"{'PASS' if ratio <= POOL_RATIO else 'FAIL'} ({pool.p50_ms:.2f} / {direct.p50_ms:.2f} ms "
                f"= {ratio:.2f}x; p99 {pool.p99_ms:.2f} / {direct.p99_ms:.2f} ms)"
            )
    b = res.busy
    if b is not None and b.seconds:
        lines.append(
            f"  indexer during those calls: {b.embedded} items embedded in {b.seconds:.1f} s "
            f"({b.embedded / b.seconds:.1f}/s; it embeds at low priority, so a loaded machine starves it); "
            f"fewest waiting after a batch: {b.min_pending} (> 0: it always had work)"
        )
    floor = {r.clients: r.p50_ms for r in res.floor}
    busy_noop = [(r.clients, r.p50_ms, floor[r.clients]) for r in res.rows if r.op == "noop" and r.clients in floor]
    if busy_noop:
        lines.append(
            "  (info) noop p50 with the indexer busy vs on the server without memory: "
            + ", ".join(f"x{n} {busy:.2f} / {quiet:.2f} ms = {busy / quiet:.2f}x" for n, busy, quiet in busy_noop)
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(
        __doc__, quick="small counts, for a smoke run", keep="keep the temp directory (databases, server logs)"
    )
    p.add_argument(
        "--calls", type=int, help="calls per op for 1 client (8 clients do half this each); default 200, --quick 20"
    )
    p.add_argument("--calls8", type=int, help="calls per op per client with 8 clients (default calls/2)")
    p.add_argument(
        "--rounds", type=int, default=4, help="split each op's calls over this many rounds through all ops (4)"
    )
    p.add_argument(
        "--server-script",
        default=str(HERE / "_server.py"),
        metavar="PATH",
        help="server to run, called as PATH --home DIR --port P [--background] (default bench/_server.py)",
    )
    args = p.parse_args(argv)
    calls1 = args.calls or (20 if args.quick else 200)
    plan = [(1, calls1), (8, args.calls8 or max(1, calls1 // 2))]
    started = time.perf_counter()
    res = Results(machine=machine_info("uvicorn"), settings=dict(plan=plan, rounds=args.rounds, backlog=BACKLOG))
    print(machine_line(res.machine))
    script = Path(args.server_script)
    with scratch("hiveboard-bench-", args.keep) as tmp:
        for home, background in ((tmp / "home", False), (tmp / "home-memory", True)):
            board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
            tokens = {n: board.agents.new_token(n) for n in (f"bench-{i:02d}" for i in range(CLIENTS))}
            try:
                extra = ("--background",) if background else ()
                with bench_server(home, home.with_suffix(".log"), script, extra, **MESSAGE_QUOTAS) as s:
                    if not background:
                        print(f"server without the memory: pid {s.proc.pid}")
                        res.floor = anyio.run(run_matrix, s.url, tokens, plan, 2, args.rounds, s.proc.pid, ("noop",))
                        continue
                    print(f"\nmemory server (indexer and review worker running): pid {s.proc.pid}")
                    res.rows, res.busy = anyio.run(run_memory, s.url, tokens, board, plan, args.rounds, s.proc.pid)
            finally:
                board.store.close()
    print_table(res.floor, "noop on the server without the memory (the floor)")
    print_table(
        res.rows,
        f"publishing while the memory indexer embeds (a second server with the memory "
        f"on; {BACKLOG} items waiting at the start of every batch). publish_pool: no recipient, "
        "so the message joins the shared memory",
    )
    res.total_s = time.perf_counter() - started
    print()
    for line in verdict(res):
        print(line)
    print(f"total {res.total_s:.1f} s")
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
