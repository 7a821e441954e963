"""What waiting costs: CPU of a server while many agents wait in get_review or get_messages.

    python bench/bench_waiters.py [--waiters 300] [--window 10]

One process: a board, one MCP server, N in-process clients (one agent each). Each row measures the
process's CPU time over the same window once everything has settled:
  baseline       N connected clients, nobody waiting (the floor, measured in the same run)
  get_review     N clients in get_review(task_id, wait_seconds=600) on N cards whose review never starts
  get_messages   N clients in get_messages(wait_seconds=300) on empty inboxes
Waiters sleep on the notifier (board/events.py) until an event of their topic; nothing re-reads a table
on a timer, so a waiting call should cost about what an idle connection costs. Target: 300 waiting
get_review calls < 5% of a core.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from _harness import bench_parser, call, in_process, machine_info, machine_line, quiet_loggers

from hiveboard.board.db import Store
from hiveboard.board.events import Topic
from hiveboard.board.tasks import Board


async def cpu_over(window: float) -> float:
    """Share of one core this process used over `window` seconds."""
    c0, t0 = time.process_time(), time.perf_counter()
    await anyio.sleep(window)
    return (time.process_time() - c0) / (time.perf_counter() - t0)


async def settle(board: Board, topics: int, prefix: str) -> None:
    with anyio.fail_after(300):
        while sum(t.startswith(prefix) for t in board.store.notifier.waiting()) < topics:
            await anyio.sleep(0.05)
    await anyio.sleep(1)  # let the last calls' bookkeeping finish


async def run(waiters: int, window: float) -> list[tuple[str, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as home:
        board = Board(Store(Path(home) / "hiveboard.db"))
        async with AsyncExitStack() as stack:
            clients = []
            for n in range(waiters):
                client = in_process(board, f"agent-{n}", wants_review=lambda task: True)
                clients.append(await stack.enter_async_context(client))
            cards = []
            for client in clients:  # each agent hands in a card whose review never starts (no worker)
                task_id = (await call(client, "create_task", title="wait on me"))["id"]
                token = (await call(client, "claim_task", task_id=task_id))["token"]
                await call(client, "complete_task", task_id=task_id, token=token, output="done")
                cards.append(task_id)
            await anyio.sleep(1)
            rows.append(("baseline: connected, nobody waiting", await cpu_over(window)))
            async with anyio.create_task_group() as tg:
                for client, task_id in zip(clients, cards):
                    tg.start_soon(functools.partial(call, client, "get_review", task_id=task_id, wait_seconds=600))
                await settle(board, waiters, Topic.review(""))  # the prefix of every review topic
                rows.append((f"{waiters} waiting in get_review", await cpu_over(window)))
                tg.cancel_scope.cancel()
            async with anyio.create_task_group() as tg:
                for client in clients:
                    tg.start_soon(functools.partial(call, client, "get_messages", wait_seconds=300))
                await settle(board, waiters, Topic.inbox(""))
                rows.append((f"{waiters} waiting in get_messages", await cpu_over(window)))
                tg.cancel_scope.cancel()
        board.store.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, keep=None, json=False)
    parser.add_argument("--waiters", type=int, default=300)
    parser.add_argument("--window", type=float, default=10.0, help="seconds of CPU measured per row")
    args = parser.parse_args(argv)
    quiet_loggers()
    print(machine_line(machine_info()))
    rows = asyncio.run(run(args.waiters, args.window))
    base = rows[0][1]
    print("\n| what | CPU (share of one core) | over the baseline |\n|---|---:|---:|")
    for name, share in rows:
        print(f"| {name} | {share:.1%} | {share - base:+.1%} |")
    review = rows[1][1]
    print(
        f"\ntarget: {args.waiters} waiting get_review < 5% of a core: {'met' if review < 0.05 else 'MISSED'} "
        f"({review:.1%})"
    )


if __name__ == "__main__":
    main()
