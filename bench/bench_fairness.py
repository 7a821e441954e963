"""Fair share: one agent floods the server; another agent's get_board (or review), quiet and during the flood.

    python bench/bench_fairness.py [--quick] [--floods reads] [--loops 8] [--calls 100] [--reviews 5]

One server process (bench/_server.py --background: the real `hiveboard serve --http` app with its memory and
review worker), a flooding agent in a process
of its own (so its client work does not slow the measuring one), and the measured agent here:
  reads     `loops` loops of get_task(full=true) on a card of ~4 MB (output and 20 artifacts at their limits)
  memory    `loops` loops of remember(50 items of 20,000 characters)
  messages  `loops` loops of publish_message(64,000 characters to everyone)
  reviews   one loop handing in a card whose acceptance test sleeps 10 s, every 0.5 s; here the measured
            agent's review (hand-in of a card with one quick test to its verdict) is timed instead
The flooding process runs at nice 10: on a team each agent's client runs on its own machine, and here its
client work (making 1 MB bodies, reading 100k-character answers) would otherwise take a core of this 2-core
machine from the server and the measured client, which is not what the bench measures.
The server runs with its default quotas (board/quotas.py), as `hiveboard serve` does: a flood of writes is
refused once its agent's share is spent, and the refusals are what keeps coming.
For each flood: the measured agent's get_board p50/p99 quiet, then while the flood runs, in the same run, and
the ratio. Target: during a flood the other agent's get_board p50 (or review time) stays within 2x its quiet
value.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import anyio
from _board_agents import HERE
from _harness import (
    Col,
    LoggedServer,
    bench_parser,
    call,
    http_client,
    machine_info,
    machine_line,
    pct,
    scratch,
    server_env,
    table,
)

from hiveboard.board import Board, NewTask, Store

FLOODS = ("reads", "memory", "messages", "reviews")
SLEEPY = "import time\n\n\ndef test_takes_its_time():\n    time.sleep(10)\n"
QUICK = "def test_adds():\n    assert 1 + 1 == 2\n"
WORK = [{"name": "calc.py", "kind": "code", "content": "def add(a, b):\n    return a + b\n"}]


async def hand_in(c, title: str, tests: str) -> int:
    """A card with acceptance tests, claimed and completed: its review is queued."""
    card = await call(
        c, "create_task", title=title, acceptance_tests={"files": [{"name": "test_a.py", "content": tests}]}
    )
    claim = await call(c, "claim_task", task_id=card["id"])
    await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="add written", artifacts=WORK)
    return card["id"]


def huge_card(board: Board, agent: str) -> int:
    """A card of ~4 MB: its output and 20 artifacts at their limits."""
    from hiveboard.board.models import Artifact

    card = board.create(agent, NewTask(title="a very large hand-in"))
    claim = board.claim(agent, card.id)
    artifacts = [Artifact(name=f"src/part{n}.py", content=f"# {n}\n" + "x" * 199_000) for n in range(20)]
    board.complete(agent, card.id, claim.token, output="z" * 199_000, artifacts=artifacts)
    return card.id


async def _flood(url: str, token: str, kind: str, loops: int, target: int, stop) -> None:
    async def loop() -> None:
        async with http_client(url, token, timeout=120) as c:
            while not stop.is_set():
                if kind == "reads":
                    await call(c, "get_task", task_id=target, full=True)
                elif kind == "memory":
                    items = [{"text": f"note {n}: " + "m" * 19_980} for n in range(50)]
                    await c.call_tool("remember", {"items": items})  # refused once the quota is spent
                elif kind == "messages":
                    await c.call_tool(
                        "publish_message", {"intent": "info", "recipient": "everyone", "content": "b" * 64_000}
                    )

    async def slow_reviews() -> None:
        async with http_client(url, token, timeout=120) as c:
            n = 0
            while not stop.is_set():
                n += 1
                await hand_in(c, f"slow {n}", SLEEPY)
                await anyio.sleep(0.5)  # its backlog grows faster than two workers can take it

    async with anyio.create_task_group() as tg:
        if kind == "reviews":
            tg.start_soon(slow_reviews)
        else:
            for _ in range(loops):
                tg.start_soon(loop)


def flood_process(url: str, token: str, kind: str, loops: int, target: int, stop) -> None:
    sys.path.insert(0, str(HERE))
    os.nice(10)  # its client's own work (1 MB bodies, 100k answers) yields this 2-core machine to the others
    anyio.run(_flood, url, token, kind, loops, target, stop)


async def measure(url: str, token: str, calls: int) -> list[float]:
    lat = []
    async with http_client(url, token) as c:
        for _ in range(5):
            await call(c, "get_board")
        for _ in range(calls):
            started = time.perf_counter()
            await call(c, "get_board")
            lat.append(time.perf_counter() - started)
            await anyio.sleep(0.005)  # an agent between calls, not a flood of its own
    return lat


async def review_times(url: str, token: str, n: int) -> list[float]:
    """The measured agent's review wall times: hand in a card with one quick test, wait for its verdict."""
    lat = []
    async with http_client(url, token, timeout=600) as c:
        for k in range(n):
            started = time.perf_counter()
            task_id = await hand_in(c, f"quick {time.time()} {k}", QUICK)
            trail = await call(c, "get_review", task_id=task_id, wait_seconds=600)
            assert trail["rounds"] and trail["rounds"][-1]["status"] == "finished", trail
            lat.append(time.perf_counter() - started)
    return lat


def main() -> int:
    p = bench_parser(__doc__, quick="fewer calls, for a smoke run")
    p.add_argument("--floods", default=",".join(FLOODS), help="which floods, comma-separated")
    p.add_argument("--loops", type=int, default=8, help="the flooding agent's concurrent loops")
    p.add_argument("--calls", type=int, default=100, help="the measured agent's get_board calls per phase")
    p.add_argument("--reviews", type=int, default=5, help="the measured agent's reviews per phase (reviews flood)")
    args = p.parse_args()
    calls = 20 if args.quick else args.calls
    print(machine_line(machine_info("uvicorn")))
    rows, reviews = [], []
    with scratch("hiveboard-fair-") as tmp:
        home = tmp / "home"
        board = Board(Store(home / "hiveboard.db"))
        try:
            tokens = {name: board.agents.new_token(name) for name in ("flooder", "worker")}
            for n in range(30):
                board.create("worker", NewTask(title=f"card {n}"))
            target = huge_card(board, "flooder")
        finally:
            board.store.close()
        server = LoggedServer(tmp / "server.log", home=home)
        argv = [
            sys.executable,
            str(HERE / "_server.py"),
            "--home",
            str(home),
            "--port",
            str(server.port),
            "--background",
        ]
        with server.start(argv, server_env(home)):
            ctx = multiprocessing.get_context("spawn")
            for kind in args.floods.split(","):
                timed, n = (review_times, args.reviews) if kind == "reviews" else (measure, calls)
                quiet = anyio.run(timed, server.url, tokens["worker"], n)
                stop = ctx.Event()
                flooder = ctx.Process(
                    target=flood_process, args=(server.url, tokens["flooder"], kind, args.loops, target, stop)
                )
                flooder.start()
                try:
                    time.sleep(2 if kind != "reviews" else 8)  # the flood under way (for reviews: a backlog queued)
                    loud = anyio.run(timed, server.url, tokens["worker"], n)
                finally:
                    stop.set()
                    flooder.join(60)
                    if flooder.is_alive():
                        flooder.kill()
                row = (
                    kind,
                    pct(quiet, 50),
                    pct(loud, 50),
                    pct(loud, 50) / pct(quiet, 50),
                    pct(quiet, 99),
                    pct(loud, 99),
                )
                (reviews if kind == "reviews" else rows).append(row)
    cols = [
        Col("flood", 10, left=True),
        Col("quiet p50", 10, ".2f"),
        Col("flood p50", 10, ".2f"),
        Col("ratio", 7, ".2f", suffix="x"),
        Col("quiet p99", 10, ".2f"),
        Col("flood p99", 10, ".2f"),
    ]
    if rows:
        table(cols, rows, f"the other agent's get_board, ms ({args.loops} flooding loops)")
    if reviews:
        print()
        title = "the other agent's review, hand-in to verdict, ms (the flooder hands in a card whose test sleeps "
        table(cols, reviews, title + "10 s every 0.5 s)")
    worst = max(r[3] for r in rows + reviews)
    print(f"\ntarget flood p50 <= 2x quiet: {'met' if worst <= 2 else 'MISSED'} (worst {worst:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
