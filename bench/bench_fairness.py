"""Fair share: one agent floods the server; another agent's get_board (or review, or update_task), quiet and during
the flood.

    python bench/bench_fairness.py [--quick] [--floods reads] [--loops 8] [--calls 100] [--reviews 5]
    python bench/bench_fairness.py --floods tasks,worktrees,reserve,usage   # the caps of issue 48

One server process (bench/_server.py --background: the real `hiveboard serve --http` app with its memory and
review worker), a flooding agent in a process
of its own (so its client work does not slow the measuring one), and the measured agent here:
  reads     `loops` loops of get_task(full=true) on a card of ~4 MB (output and 20 artifacts at their limits)
  memory    `loops` loops of remember(50 items of 20,000 characters)
  messages  `loops` loops of publish_message(64,000 characters to everyone)
  reviews   one loop handing in a card whose acceptance test sleeps 10 s, every 0.5 s; here the measured
            agent's review (hand-in of a card with one quick test to its verdict) is timed instead
The surfaces outside the write quotas (issue 48), each flooded by an agent of its own; the measured agent's
update_task (its lease renewed, token alone: a write) is timed, and the database's size is shown against its
ceiling after the flood:
  tasks     `loops` loops starting wait_for_work as MCP tasks (io.modelcontextprotocol/tasks), 1,500 in all
  worktrees `loops` loops claiming cards of a real repository (a clone of this one) with worktree=true
  reserve   `loops` loops of reserve_paths(["**"], a week) with no card, and of a directory without a card; after
            it the measured agent reserves a file there for a card of the repository and commits it through
            the git guard (`hiveboard guard check`): a reservation granted whose commit the guard refuses is
            the check and the guard disagreeing
  usage     `loops` loops posting 50 token-usage rows to the hook endpoint (/hooks/view/record-usage)
The flooding process runs at nice 10: on a team each agent's client runs on its own machine, and here its
client work (making 1 MB bodies, reading 100k-character answers) would otherwise take a core of this 2-core
machine from the server and the measured client, which is not what the bench measures.
The server runs with its default quotas (board/quotas.py), as `hiveboard serve` does: a flood of writes is
refused once its agent's share is spent, and the refusals are what keeps coming.
For each flood: the measured agent's p50 and tail quiet, then while the flood runs, in the same run, and the
ratio. Target: during a flood the other agent's p50 (or review time) stays within 2x its quiet value.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
from _board_agents import HERE
from _harness import (
    Col,
    LoggedServer,
    bench_parser,
    call,
    clean_env,
    from_tests,
    hand_in,
    hiveboard_cmd,
    http_client,
    machine_info,
    machine_line,
    pct,
    scratch,
    server_env,
    table,
)

from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.quotas import QuotaConfig
from hiveboard.board.tasks import Board

FLOODS = ("reads", "memory", "messages", "reviews")
CAPS = ("tasks", "worktrees", "reserve", "usage")  # the surfaces of issue 48: the measured agent's update_task
TASKS = 1500  # MCP tasks the tasks flood starts in all
RENEW_PERIOD = 10  # seconds between two renewals of a running task's lease (server/task_ext.py RENEW)
WEEK = 7 * 86_400
REPO = "app"  # the name the clone of this repository is registered under
SLEEPY = "import time\n\n\ndef test_takes_its_time():\n    time.sleep(10)\n"
QUICK = "def test_adds():\n    assert 1 + 1 == 2\n"
WORK = [{"name": "calc.py", "kind": "code", "content": "def add(a, b):\n    return a + b\n"}]


async def queued_review(c, title: str, tests: str) -> int:
    """A card with acceptance tests, claimed and completed: its review is queued."""
    card = await call(
        c, "create_task", title=title, acceptance_tests={"files": [{"name": "test_a.py", "content": tests}]}
    )
    await hand_in(c, card["id"], output="add written", artifacts=WORK)
    return card["id"]


def huge_card(board: Board, agent: str) -> int:
    """A card of ~4 MB: its output and 20 artifacts at their limits."""
    from hiveboard.board.models import Artifact

    card = board.create(agent, NewTask(title="a very large hand-in"))
    claim = board.claim(agent, card.id)
    artifacts = [Artifact(name=f"src/part{n}.py", content=f"# {n}\n" + "x" * 199_000) for n in range(20)]
    board.complete(agent, card.id, claim.token, output="z" * 199_000, artifacts=artifacts)
    return card.id


async def _cap_flood(url: str, token: str, kind: str, loops: int, cards: list[int], stop, counts) -> None:
    """One of the CAPS floods; `counts`: [calls, refused] shared with the bench."""
    started = [0]

    def tally(refused: bool) -> None:
        with counts.get_lock():
            counts[0] += 1
            counts[1] += int(refused)

    async def tasks() -> None:
        TasksClient = from_tests("tasks_client").TasksClient

        async with http_client(url, token, timeout=120, extensions=[TasksClient()]) as c:
            while not stop.is_set() and started[0] < TASKS:
                started[0] += 1
                waiting = {"types": ["nothing"], "wait_seconds": 3600}  # no such card: each runs on for an hour
                got = await c.session.call_tool("wait_for_work", waiting, allow_claimed=True)
                tally(bool(getattr(got, "is_error", False)))

    async def worktrees() -> None:
        async with http_client(url, token, timeout=300) as c:
            while not stop.is_set():  # round the cards: those past the caps are refused each time
                cards.append(cards.pop(0))
                got = await c.call_tool("claim_task", {"task_id": cards[-1], "worktree": True})
                tally(got.is_error)

    async def reserve() -> None:
        async with http_client(url, token, timeout=120) as c:
            while not stop.is_set():
                for paths, ttl in ((["**"], WEEK), (["bench/**"], WEEK), (["bench/**"], 3600)):
                    got = await c.call_tool("reserve_paths", {"paths": paths, "ttl_seconds": ttl})
                    tally(got.is_error)

    async def usage() -> None:
        row = {"task_id": None, "model": "claude-sonnet-4-5", "input_tokens": 1000, "output_tokens": 500, "messages": 1}
        base = url.removesuffix("/mcp")
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            while not stop.is_set():
                got = await http.post(f"{base}/hooks/view/record-usage", json={"session_id": "s", "rows": [row] * 50})
                tally(got.status_code != 200)

    async with anyio.create_task_group() as tg:
        for _ in range(loops):
            tg.start_soon({"tasks": tasks, "worktrees": worktrees, "reserve": reserve, "usage": usage}[kind])


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
                await queued_review(c, f"slow {n}", SLEEPY)
                await anyio.sleep(0.5)  # its backlog grows faster than two workers can take it

    async with anyio.create_task_group() as tg:
        if kind == "reviews":
            tg.start_soon(slow_reviews)
        else:
            for _ in range(loops):
                tg.start_soon(loop)


def flood_process(url: str, token: str, kind: str, loops: int, target, stop, counts=None) -> None:
    sys.path.insert(0, str(HERE))
    os.nice(10)  # its client's own work (1 MB bodies, 100k answers) yields this 2-core machine to the others
    if kind in CAPS:
        anyio.run(_cap_flood, url, token, kind, loops, list(target), stop, counts)
    else:
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


async def updates(url: str, token: str, calls: int, card: tuple[int, int]) -> list[float]:
    """The measured agent's update_task on the card it holds (its lease renewed, token alone): a write."""
    task_id, claim = card
    lat = []
    async with http_client(url, token) as c:
        for _ in range(5):
            await call(c, "update_task", task_id=task_id, token=claim)
        for _ in range(calls):
            started = time.perf_counter()
            await call(c, "update_task", task_id=task_id, token=claim)
            lat.append(time.perf_counter() - started)
            await anyio.sleep(0.005)
    return lat


def clone(tmp: Path) -> Path:
    """A clone of this repository (its main branch): the real repository the worktrees flood checks out."""
    top = HERE.parent
    repo = tmp / "repo"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", "--branch", "main", "--single-branch", str(top), str(repo)],
        check=True,
        env=clean_env(GIT_CONFIG_NOSYSTEM="1"),
    )
    return repo


def tracked_mb(repo: Path) -> float:
    listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-l", "HEAD"], capture_output=True, text=True)
    return sum(int(line.split()[3]) for line in listing.stdout.splitlines() if line.split()[1] == "blob") / 1e6


async def guarded_commit(url: str, token: str, home: Path, repo: Path, card: tuple[int, int]) -> tuple[bool, bool]:
    """The measured agent reserves a file of the repository for its card there and commits it through the git
    guard: (reservation granted, commit refused)."""
    async with http_client(url, token) as c:
        await call(c, "update_task", task_id=card[0], token=card[1])  # its lease, however long the floods took
        got = await c.call_tool("reserve_paths", {"paths": ["bench/README.md"], "task_id": card[0]})
    (repo / "bench" / "README.md").write_text("changed by the measured agent\n")
    subprocess.run(["git", "-C", str(repo), "add", "bench/README.md"], check=True)
    env = clean_env(
        HIVEBOARD_HOME=str(home),
        HIVEBOARD_CONFIG=str(home / "no-config.toml"),
        HIVEBOARD_AGENT="worker",
        HIVEBOARD_GUARD_REPO=REPO,
        PYTHONPATH=os.environ.get("PYTHONPATH", ""),
    )
    checked = subprocess.run(hiveboard_cmd("guard", "check"), cwd=repo, env=env, capture_output=True, text=True)
    subprocess.run(["git", "-C", str(repo), "reset", "-q", "--hard"], check=True)
    return not got.is_error, checked.returncode == 1


def db_mb(home: Path) -> float:
    """The board's SQLite file and its write-ahead log, in MB (10^6 bytes, as the ceiling)."""
    return sum(p.stat().st_size for p in home.glob("hiveboard.db*") if p.is_file()) / 1e6


async def review_times(url: str, token: str, n: int) -> list[float]:
    """The measured agent's review wall times: hand in a card with one quick test, wait for its verdict."""
    lat = []
    async with http_client(url, token, timeout=600) as c:
        for k in range(n):
            started = time.perf_counter()
            task_id = await queued_review(c, f"quick {time.time()} {k}", QUICK)
            trail = await call(c, "get_review", task_id=task_id, wait_seconds=600)
            assert trail["rounds"] and trail["rounds"][-1]["status"] == "finished", trail
            lat.append(time.perf_counter() - started)
    return lat


def main() -> int:
    p = bench_parser(__doc__, quick="fewer calls, for a smoke run")
    p.add_argument(
        "--floods", default=",".join(FLOODS), help=f"which floods, comma-separated: {', '.join(FLOODS + CAPS)}"
    )
    p.add_argument("--loops", type=int, default=8, help="the flooding agent's concurrent loops")
    p.add_argument("--calls", type=int, default=100, help="the measured agent's get_board calls per phase")
    p.add_argument("--reviews", type=int, default=5, help="the measured agent's reviews per phase (reviews flood)")
    p.add_argument(
        "--running-tasks-cap",
        type=int,
        help="the server's RUNNING_TASKS_PER_AGENT (0: none, so that the tasks flood runs all its tasks at once)",
    )
    args = p.parse_args()
    kinds = args.floods.split(",")
    unknown = [k for k in kinds if k not in FLOODS + CAPS]
    if unknown:
        p.error(f"unknown flood {unknown[0]!r}; one of {', '.join(FLOODS + CAPS)}")
    calls = 20 if args.quick else args.calls
    print(machine_line(machine_info("uvicorn")))
    rows, reviews, capped, guard = [], [], [], None
    with scratch("hiveboard-fair-") as tmp:
        home = tmp / "home"
        board = Board(Store(home / "hiveboard.db"))
        try:
            tokens = {name: board.agents.new_token(name) for name in ("flooder", "worker")}
            tokens.update({kind: board.agents.new_token(f"flooder-{kind}") for kind in CAPS})
            for n in range(30):
                board.create("worker", NewTask(title=f"card {n}"))
            target = huge_card(board, "flooder")
            repo = None
            if any(k in CAPS for k in kinds):
                repo = clone(tmp)
                board.repos.add(REPO, str(repo), str(repo / ".git"), "main", None, "auto", "operator")
                held = board.create("worker", NewTask(title="the measured agent's card"))
                mine = (held.id, board.claim("worker", held.id).token)
                there = board.create("worker", NewTask(title="a fix in the repository", repo=REPO))
                guarded = (there.id, board.claim("worker", there.id).token)
                checkouts = [
                    board.create("flooder-worktrees", NewTask(title=f"checkout {n}", repo=REPO)).id for n in range(40)
                ]
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
        ceiling = QuotaConfig().max_db_mb
        caps = (
            {}
            if args.running_tasks_cap is None
            else {"HIVEBOARD_QUOTAS__RUNNING_TASKS_PER_AGENT": str(args.running_tasks_cap)}
        )
        with server.start(argv, server_env(home, **caps)):
            ctx = multiprocessing.get_context("spawn")
            for kind in kinds:
                if kind == "reviews":
                    timed, timed_args = review_times, (args.reviews,)
                elif kind in CAPS:
                    timed, timed_args = updates, (calls, mine)
                else:
                    timed, timed_args = measure, (calls,)
                quiet = anyio.run(timed, server.url, tokens["worker"], *timed_args)
                stop = ctx.Event()
                counts = ctx.Array("i", 2)
                flood_target = checkouts if kind == "worktrees" else [target]
                who = tokens[kind] if kind in CAPS else tokens["flooder"]
                flooder = ctx.Process(
                    target=flood_process, args=(server.url, who, kind, args.loops, flood_target, stop, counts)
                )
                flooder.start()
                try:
                    if kind in CAPS:  # its first call answered: the process has started (imports take seconds here)
                        # (tasks: all TASKS started, and every running one renewed since, before the timing)
                        waited, enough = time.monotonic() + 300, TASKS if kind == "tasks" else 1
                        while counts[0] < enough and flooder.is_alive() and time.monotonic() < waited:
                            time.sleep(0.1)
                        if kind == "tasks":
                            time.sleep(RENEW_PERIOD + 2)
                    time.sleep(2 if kind != "reviews" else 8)  # the flood under way (for reviews: a backlog queued)
                    loud = anyio.run(timed, server.url, tokens["worker"], *timed_args)
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
                    pct(quiet, 95 if kind in CAPS else 99),
                    pct(loud, 95 if kind in CAPS else 99),
                )
                if kind in CAPS:
                    capped.append((*row, counts[0], counts[1], db_mb(home), ceiling))
                    if kind == "reserve":
                        guard = anyio.run(guarded_commit, server.url, tokens["worker"], home, repo, guarded)
                else:
                    (reviews if kind == "reviews" else rows).append(row)
            live = sorted((home.parent / "repo" / ".hiveboard" / "worktrees").glob("*")) if repo else []
            checkout_mb = tracked_mb(repo) if repo else 0.0
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
    if capped:
        print()
        cap_cols = [
            *cols[:4],
            Col("quiet p95", 10, ".2f"),
            Col("flood p95", 10, ".2f"),
            Col("flood calls", 12),
            Col("refused", 8),
            Col("db MB", 8, ".1f"),
            Col("ceiling MB", 11, ".0f"),
        ]
        title = f"the other agent's update_task, ms ({args.loops} flooding loops; the database after each flood)"
        table(cap_cols, capped, title)
        if "worktrees" in kinds:
            print(f"worktrees left on disk: {len(live)} checkouts of {checkout_mb:.1f} MB of tracked files each")
        if guard is not None:
            granted, refused = guard
            agree = "they agree" if not (granted and refused) else "THE CHECK GRANTED WHAT THE GUARD REFUSED"
            print(
                f"after the reserve flood: the measured agent's reservation {'granted' if granted else 'refused'}, "
                f"its commit {'refused' if refused else 'let through'} by the guard: {agree}"
            )
    worst = max(r[3] for r in rows + reviews + capped)
    print(f"\ntarget flood p50 <= 2x quiet: {'met' if worst <= 2 else 'MISSED'} (worst {worst:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
