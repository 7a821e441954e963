"""Latency and throughput of the board tools over streamable HTTP, next to a bare no-op MCP tool; publishing while
the memory indexer embeds.

    .venv/bin/python bench/bench_board.py                      # full run, every section (about 1-2 min on 2 cores)
    .venv/bin/python bench/bench_board.py --quick              # smoke run (under a minute)
    .venv/bin/python bench/bench_board.py --sections tools,race --calls 500 --json out.json
    .venv/bin/python bench/bench_board.py --sections memory    # publishing while the indexer embeds

Each section runs against a server process of its own data directory (bench/_server.py: the real `hiveboard
serve --http` app plus a `noop` tool; the clients are bench/_board_agents.py's, each its own HTTP connection and
agent token). Sections (--sections, default all):

tools
1. For 1 client and for 8 concurrent clients (each its own HTTP connection and agent token), time
   every call of: noop (a bare tool that answers an empty result: the floor), create_task,
   claim_task (claim-next), update_task (a note on a held card), get_task, list_tasks, get_board,
   release_task, complete_task, get_messages (a page of 20 from a 1,000-message inbox) and
   publish_message (direct to another agent). Prints p50/p99 latency, calls/s and the p50 ratio to
   noop at the same client count.
race (on the tools section's server, or a server of its own)
2. A claim race: 300 fresh cards, 16 clients claim-next until the board is empty; counts double
   claims (must be 0) and checks the database agrees.
3. (with tools) For context, the same board operations called in-process on `hiveboard.board.tasks.Board` (no MCP,
   no HTTP) on a separate database.
memory
4. A server that also runs what `hiveboard serve --http` runs beside the app (bench/_server.py --background: the
   memory, whose indexing thread embeds new items, and the review worker). For 1 and 8 clients: noop,
   publish_message to one agent, and publish_message to the pool (no recipient: the message joins the shared
   memory, so the indexer embeds it) in turns, each timed batch starting with BACKLOG memory items (texts of
   bench_memory's corpus, written by this process, as a second server would write them) waiting for the
   indexer, so it has work throughout. Prints the items it embedded meanwhile and the fewest left waiting
   after a batch (> 0: it never ran dry). Its baseline: noop on a server without the memory first, at the same
   client counts, so the table's noop shows what the busy indexer costs a bare call.

Targets (issue): board tools and get_messages within 1.5x of the no-op tool (p50); publish_message
with 8 concurrent senders p99 <= 50 ms; zero double claims; a pool publish_message p50 <= 1.3x a direct one
while the indexer is busy.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import _memory_corpus as corpus
import anyio
from _board_agents import (
    BOARD_OPS,
    HERE,
    MESSAGE_QUOTAS,
    TOOL_OF,
    Agent,
    Row,
    Sample,
    bench_server,
    make_row,
    measure,
    open_agents,
    print_table,
    run_matrix,
    seed,
)
from _harness import (
    bench_parser,
    call,
    finish,
    machine_info,
    machine_line,
    pct,
    scratch,
    timed_raw,
)
from _memory_load import add_items

from hiveboard.board.db import Store
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board

TARGET_RATIO = 1.5
PUBLISH_P99_MS = 50.0  # publish_message with 8 concurrent senders
INBOX = 1_000  # messages in every bench agent's inbox before the run
RACE_CARDS = 300
RACE_CLIENTS = 16
MEMORY_OPS = ("noop", "publish_message", "publish_pool")
POOL_RATIO = 1.3  # target: pool publish p50 <= 1.3x a direct one, with the indexer busy
BACKLOG = 150  # memory items waiting for the indexer at the start of every measured batch
MEMORY_CLIENTS = 8
SECTIONS = ("tools", "race", "memory")


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
class Busy:
    """What the memory server's indexer did while the memory section's calls were timed."""

    embedded: int = 0  # items it embedded and indexed meanwhile
    seconds: float = 0.0  # timed wall time
    min_pending: int | None = None  # fewest items still waiting at the end of a timed batch (> 0: never idle)


@dataclass
class Results:
    machine: dict
    settings: dict
    rows: list[Row] = field(default_factory=list)
    race: Race | None = None
    direct: list[Row] = field(default_factory=list)
    floor: list[Row] = field(default_factory=list)  # noop on the server without the memory
    memory: list[Row] = field(default_factory=list)  # publishing while the indexer embeds
    busy: Busy | None = None
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
            t0 = time.perf_counter()
            lat = timed_raw([fn] * calls)
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


# ----------------------------------------------------------------------------- publishing while the indexer embeds


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
    for clients in sorted({r.clients for r in res.memory}):
        got = {r.op: r for r in res.memory if r.clients == clients}
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
    busy_noop = [(r.clients, r.p50_ms, floor[r.clients]) for r in res.memory if r.op == "noop" and r.clients in floor]
    if busy_noop:
        lines.append(
            "  (info) noop p50 with the indexer busy vs on the server without memory: "
            + ", ".join(f"x{n} {busy:.2f} / {quiet:.2f} ms = {busy / quiet:.2f}x" for n, busy, quiet in busy_noop)
        )
    return lines


def tools_and_race(res: Results, tmp: Path, args, sections: list[str], plan: list[tuple[int, int]]) -> None:
    """The tools section's matrix, the claim race and the in-process rows, on one server."""
    board = Board(Store(tmp / "home" / "hiveboard.db"), lease_seconds=300)
    names = [f"bench-{i:02d}" for i in range(RACE_CLIENTS)]
    tokens = {n: board.agents.new_token(n) for n in names}
    seed(board, args.seed, names[0], "seed card")
    seed_inboxes(board, names, args.inbox)
    try:
        with bench_server(tmp / "home", tmp / "server.log", Path(args.server_script), **MESSAGE_QUOTAS) as server:
            print(f"server: pid {server.proc.pid} at {server.url}")
            if "tools" in sections:
                res.rows = anyio.run(
                    run_matrix, server.url, tokens, plan, 2 if args.quick else 10, args.rounds, server.proc.pid
                )
                print_table(
                    res.rows,
                    "streamable HTTP, one server process. p50/noop: p50 ratio to noop at the same client "
                    "count;\nsrv cpu / cli cpu: CPU ms per call of the server / bench process; bytes: one result "
                    "as JSON",
                )
            if "race" in sections:
                res.race = race(board, server.url, tokens, res.settings["race_cards"], names[0])
    finally:
        board.store.close()
    if "tools" in sections:
        res.direct = direct_rows(tmp, plan[0][1])
        print_table(res.direct, "in-process Board, no MCP/HTTP (context: the SQLite + model work alone)", ratio=False)


def memory_section(res: Results, tmp: Path, args, plan: list[tuple[int, int]]) -> None:
    """noop on a server without the memory (the floor), then the publishes on one with it, its indexer busy."""
    for home, background in ((tmp / "floor", False), (tmp / "memory", True)):
        board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
        tokens = {n: board.agents.new_token(n) for n in (f"bench-{i:02d}" for i in range(MEMORY_CLIENTS))}
        try:
            extra = ("--background",) if background else ()
            with bench_server(home, home.with_suffix(".log"), Path(args.server_script), extra, **MESSAGE_QUOTAS) as s:
                if not background:
                    print(f"\nserver without the memory: pid {s.proc.pid}")
                    res.floor = anyio.run(run_matrix, s.url, tokens, plan, 2, args.rounds, s.proc.pid, ("noop",))
                    continue
                print(f"\nmemory server (indexer and review worker running): pid {s.proc.pid}")
                res.memory, res.busy = anyio.run(run_memory, s.url, tokens, board, plan, args.rounds, s.proc.pid)
        finally:
            board.store.close()
    print_table(res.floor, "noop on the server without the memory (the floor)")
    print_table(
        res.memory,
        f"publishing while the memory indexer embeds (a second server with the memory "
        f"on; {BACKLOG} items waiting at the start of every batch). publish_pool: no recipient, "
        "so the message joins the shared memory",
    )


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(
        __doc__, quick="small counts, for a smoke run", keep="keep the temp directory (databases, server logs)"
    )
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"which sections to run, comma-separated (default all: {','.join(SECTIONS)})",
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
        help="server to run, called as PATH --home DIR --port P [--background] (default bench/_server.py); "
        "for A/B-testing a change, e.g. a copy that patches something before calling _server.main",
    )
    args = p.parse_args(argv)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    calls1 = args.calls or (20 if args.quick else 200)
    calls8 = args.calls8 or max(1, calls1 // 2)
    race_cards = min(args.race_cards, 48) if args.quick and args.race_cards == RACE_CARDS else args.race_cards
    plan = [(1, calls1), (8, calls8)]
    started = time.perf_counter()
    res = Results(
        machine=machine_info("uvicorn"),
        settings=dict(
            sections=sections,
            calls_1_client=calls1,
            calls_per_client_8=calls8,
            rounds=args.rounds,
            seed_cards=args.seed,
            race_cards=race_cards,
            race_clients=RACE_CLIENTS,
            backlog=BACKLOG,
            quick=args.quick,
        ),
    )
    print(machine_line(res.machine))
    print(
        f"plan: 1 client x {calls1} calls/op, 8 clients x {calls8} calls/op each, "
        f"race {RACE_CLIENTS} clients on {race_cards} cards; seed {args.seed} cards; sections {','.join(sections)}"
    )
    with scratch("hiveboard-bench-", args.keep) as tmp:
        if "tools" in sections or "race" in sections:
            tools_and_race(res, tmp, args, sections, plan)
        if "memory" in sections:
            memory_section(res, tmp, args, plan)
    finish(res, started, verdict(res), args.json)
    return 0 if res.race is None or race_ok(res.race) else 1


if __name__ == "__main__":
    sys.exit(main())
