"""Latency and throughput of the board tools over streamable HTTP, next to a bare no-op MCP tool.

    .venv/bin/python bench/bench_board.py            # full run (about 30-60 s on 2 cores)
    .venv/bin/python bench/bench_board.py --quick    # smoke run (a few seconds)
    .venv/bin/python bench/bench_board.py --calls 500 --json out.json

What it does, in one run against one server process (bench/_server.py: the real `hiveboard serve
--http` app plus a `noop` tool; the clients are bench/_board_agents.py's):

1. For 1 client and for 8 concurrent clients (each its own HTTP connection and agent token), time
   every call of: noop (a bare tool that answers an empty result: the floor), create_task,
   claim_task (claim-next), update_task (a note on a held card), get_task, list_tasks, get_board,
   release_task, complete_task, get_messages (a page of 20 from a 1,000-message inbox) and
   publish_message (direct to another agent). Prints p50/p99 latency, calls/s and the p50 ratio to
   noop at the same client count.
2. A claim race: 300 fresh cards, 16 clients claim-next until the board is empty; counts double
   claims (must be 0) and checks the database agrees.
3. For context, the same board operations called in-process on `hiveboard.board.Board` (no MCP,
   no HTTP) on a separate database.

Publishing while the memory indexer embeds (a second server that runs the memory and the review worker) is
bench_board_memory.py's.

Targets (issue): board tools and get_messages within 1.5x of the no-op tool (p50); publish_message
with 8 concurrent senders p99 <= 50 ms; zero double claims.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from _board_agents import (
    BOARD_OPS,
    HERE,
    MESSAGE_QUOTAS,
    Agent,
    Row,
    bench_server,
    make_row,
    open_agents,
    print_table,
    run_matrix,
    seed,
)
from _harness import bench_parser, call, machine_info, machine_line, pct, scratch, write_json

from hiveboard.board.db import Store
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board

TARGET_RATIO = 1.5
PUBLISH_P99_MS = 50.0  # publish_message with 8 concurrent senders
INBOX = 1_000  # messages in every bench agent's inbox before the run
RACE_CARDS = 300
RACE_CLIENTS = 16


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
    direct: list[Row] = field(default_factory=list)
    total_s: float = 0.0


# ----------------------------------------------------------------------------- the claim race


async def run_race(url: str, tokens: dict[str, str]) -> tuple[list[tuple[str, int]], list[float], float]:
    claims: list[tuple[str, int]] = []
    lat: list[float] = []

    async def claimer(a: Agent) -> None:
        while True:
            t0 = time.perf_counter()
            result = await call(a.client, "claim_task")
            if not result.get("claimed"):
                return  # the board is empty (this last call is not counted in the latencies)
            lat.append(time.perf_counter() - t0)
            claims.append((a.name, result["task"]["id"]))

    async with AsyncExitStack() as stack:
        agents = await open_agents(stack, url, tokens)
        for a in agents:  # before the start line: connect, list tools, compile claim_task's result validator
            await call(a.client, "noop")
            miss = await call(a.client, "claim_task", task_type="no-such-type")
            assert not miss.get("claimed"), miss
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for a in agents:
                tg.start_soon(claimer, a)
        wall = time.perf_counter() - t0
    return claims, lat, wall


def race(board: Board, url: str, tokens: dict[str, str], cards: int, creator: str) -> Race:
    """The claim race on `cards` fresh cards, checked against the database; printed."""
    parked = park_todo(board)
    seed(board, cards, creator, "race card", task_type="race")
    claims, lat, wall = anyio.run(run_race, url, tokens)
    ids = [task_id for _, task_id in claims]
    in_progress = board.store.db.execute(
        "SELECT count(*) FROM tasks WHERE task_type = 'race' AND status = 'in_progress'"
    ).fetchone()[0]
    max_events = board.store.db.execute(
        "SELECT coalesce(max(c), 0) FROM (SELECT count(*) c FROM task_history h JOIN tasks t ON t.id = h.task_id "
        "WHERE t.task_type = 'race' AND h.action = 'claimed' GROUP BY h.task_id)"
    ).fetchone()[0]
    r = Race(
        clients=len(tokens),
        cards=cards,
        claimed=len(ids),
        unique=len(set(ids)),
        double_claims=len(ids) - len(set(ids)),
        db_in_progress=in_progress,
        db_claim_events_max=max_events,
        wall_s=wall,
        claims_per_s=len(ids) / wall if wall else float("nan"),
        p50_ms=pct(lat, 50),
        p99_ms=pct(lat, 99),
    )
    per_agent = Counter(name for name, _ in claims)
    print(f"\nclaim race: {r.clients} clients, {r.cards} cards ({parked} leftover todo cards parked first)")
    print(
        f"  claimed {r.claimed}, unique {r.unique}, double claims {r.double_claims}; "
        f"db: {r.db_in_progress} in_progress, max 'claimed' events per card {r.db_claim_events_max}"
    )
    print(
        f"  wall {r.wall_s:.2f} s, {r.claims_per_s:.1f} claims/s, claim p50 {r.p50_ms:.2f} ms, "
        f"p99 {r.p99_ms:.2f} ms; per client min {min(per_agent.values(), default=0)} "
        f"max {max(per_agent.values(), default=0)}"
    )
    return r


def park_todo(board: Board) -> int:
    """Block every todo card (through the board, as its creator) so the race sees exactly its own cards."""
    rows = board.store.db.execute("SELECT id, created_by FROM tasks WHERE status = 'todo'").fetchall()
    for task_id, creator in rows:
        board.update(creator, task_id, status="blocked", reason="parked by bench before the claim race")
    return len(rows)


def race_ok(race: Race) -> bool:
    return (
        race.double_claims == 0
        and race.claimed == race.cards
        and race.db_in_progress == race.cards
        and race.db_claim_events_max == 1
    )


# ----------------------------------------------------------------------------- board setup and the in-process rows


def seed_inboxes(board: Board, agents: list[str], n: int) -> None:
    """n messages in each agent's inbox, most of them read, as a working agent's inbox looks: broadcasts
    to everyone, with previews long enough that get_messages cuts them at 280 characters."""
    body = (
        "The API contract for /login changed: the handler now returns a JWT with a 15 minute expiry and a "
        "refresh token in an httpOnly cookie; clients must send the refresh token to /refresh. "
    ) * 3
    for i in range(n):
        board.messages.publish(
            agents[i % len(agents)],
            NewMessage(
                intent=("status_update", "request_help", "answer", "proposal")[i % 4],
                recipient="everyone",
                content=f"#{i} {body}",
                thread=f"topic-{i % 7}",
            ),
        )
    with board.store.write() as db:
        db.execute("UPDATE inbox SET read_at = coalesce(read_at, ?)", (time.time(),))
    board.store.optimize()


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


def verdict(res: Results) -> list[str]:
    lines = []
    over = [r for r in res.rows if r.op in BOARD_OPS and r.ratio_vs_noop is not None]
    worst = max(over, key=lambda r: r.ratio_vs_noop, default=None)
    if worst is not None:
        ok = worst.ratio_vs_noop <= TARGET_RATIO
        lines.append(
            f"target board tools p50 <= {TARGET_RATIO}x noop: {'PASS' if ok else 'FAIL'} "
            f"(worst: {worst.op} x{worst.clients} at {worst.ratio_vs_noop:.2f}x)"
        )
        misses = [f"{r.op} x{r.clients} {r.ratio_vs_noop:.2f}x" for r in over if r.ratio_vs_noop > TARGET_RATIO]
        if misses:
            lines.append("  over target: " + ", ".join(misses))
    cpu = {(r.op, r.clients): r.server_cpu_ms for r in res.rows if r.server_cpu_ms}
    parts = [
        f"{op} x{n} {v / cpu[('noop', n)]:.2f}x"
        for (op, n), v in cpu.items()
        if op in BOARD_OPS and cpu.get(("noop", n))
    ]
    if parts:
        lines.append("  (info) server CPU per call vs noop: " + ", ".join(parts))
    pub = next((r for r in res.rows if r.op == "publish_message" and r.clients == 8), None)
    if pub is not None:
        lines.append(
            f"target publish_message p99 with 8 concurrent senders <= {PUBLISH_P99_MS:.0f} ms: "
            f"{'PASS' if pub.p99_ms <= PUBLISH_P99_MS else 'FAIL'} ({pub.p99_ms:.2f} ms)"
        )
    if res.race is not None:
        lines.append(
            f"target {res.race.clients}-client claims, zero double claims: {'PASS' if race_ok(res.race) else 'FAIL'} "
            f"({res.race.double_claims} double, {res.race.claimed}/{res.race.cards} claimed)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(
        __doc__, quick="small counts, for a smoke run", keep="keep the temp directory (database, server log)"
    )
    p.add_argument(
        "--calls", type=int, help="calls per op for 1 client (8 clients do half this each); default 200, --quick 20"
    )
    p.add_argument("--calls8", type=int, help="calls per op per client with 8 clients (default calls/2)")
    p.add_argument(
        "--rounds", type=int, default=4, help="split each op's calls over this many rounds through all ops (4)"
    )
    p.add_argument("--seed", type=int, default=200, help="cards on the board before the run (default 200)")
    p.add_argument("--inbox", type=int, default=INBOX, help=f"messages in each agent's inbox ({INBOX})")
    p.add_argument("--race-cards", type=int, default=RACE_CARDS, help=f"cards in the claim race ({RACE_CARDS})")
    p.add_argument(
        "--server-script",
        default=str(HERE / "_server.py"),
        metavar="PATH",
        help="server to run, called as PATH --home DIR --port P (default bench/_server.py); "
        "for A/B-testing a change, e.g. a copy that patches something before calling _server.main",
    )
    args = p.parse_args(argv)
    calls1 = args.calls or (20 if args.quick else 200)
    calls8 = args.calls8 or max(1, calls1 // 2)
    race_cards = min(args.race_cards, 48) if args.quick and args.race_cards == RACE_CARDS else args.race_cards
    plan = [(1, calls1), (8, calls8)]
    started = time.perf_counter()
    res = Results(
        machine=machine_info("uvicorn"),
        settings=dict(
            calls_1_client=calls1,
            calls_per_client_8=calls8,
            rounds=args.rounds,
            seed_cards=args.seed,
            race_cards=race_cards,
            race_clients=RACE_CLIENTS,
            quick=args.quick,
        ),
    )
    print(machine_line(res.machine))
    print(
        f"plan: 1 client x {calls1} calls/op, 8 clients x {calls8} calls/op each, "
        f"race {RACE_CLIENTS} clients on {race_cards} cards; seed {args.seed} cards"
    )
    with scratch("hiveboard-bench-", args.keep) as tmp:
        board = Board(Store(tmp / "home" / "hiveboard.db"), lease_seconds=300)
        names = [f"bench-{i:02d}" for i in range(RACE_CLIENTS)]
        tokens = {n: board.agents.new_token(n) for n in names}
        seed(board, args.seed, names[0], "seed card")
        seed_inboxes(board, names, args.inbox)
        try:
            with bench_server(tmp / "home", tmp / "server.log", Path(args.server_script), **MESSAGE_QUOTAS) as server:
                print(f"server: pid {server.proc.pid} at {server.url}")
                res.rows = anyio.run(
                    run_matrix, server.url, tokens, plan, 2 if args.quick else 10, args.rounds, server.proc.pid
                )
                print_table(
                    res.rows,
                    "streamable HTTP, one server process. p50/noop: p50 ratio to noop at the same client "
                    "count;\nsrv cpu / cli cpu: CPU ms per call of the server / bench process; bytes: one result "
                    "as JSON",
                )
                res.race = race(board, server.url, tokens, race_cards, names[0])
        finally:
            board.store.close()
        res.direct = direct_rows(tmp, calls1)
    print_table(res.direct, "in-process Board, no MCP/HTTP (context: the SQLite + model work alone)", ratio=False)
    res.total_s = time.perf_counter() - started
    print()
    for line in verdict(res):
        print(line)
    print(f"total {res.total_s:.1f} s")
    write_json(args.json, res)
    return 0 if race_ok(res.race) else 1


if __name__ == "__main__":
    sys.exit(main())
