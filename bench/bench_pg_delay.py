"""Nodes on separate machines: hiveboard nodes on one PostgreSQL database, each through a delay proxy that adds the
network a real deployment has, with no delay and with delay measured in one run.

    python bench/bench_pg_delay.py [--quick] [--nodes 3] [--agents 64] [--cards 640] [--messages 8]
                                   [--delays 0,1,2.5]

A throwaway PostgreSQL cluster on loopback (tests/pg_cluster.py). For each delay (ms added each way), a cell: a
fresh database, a delay proxy process with one listener per node (bench/_delay_proxy.py), and `--nodes` real
`hiveboard serve --http` processes, each reaching the database through its own listener only (its pool and its
LISTEN connection alike). Review is off (complete_task moves a card straight to done), so no critic runs. The
agents are MCP clients over streamable HTTP, agent i on node i mod nodes, each its own token and connection:
  claims       `--cards` cards in todo; every agent calls claim_task (claim-next) until none is left. Doubles: a
               card handed to two claims (by the answers, or by two 'claimed' rows in its history); lost: a card
               left in todo, or one whose holder in the database is not the agent its claim answered
  completions  every agent completes the cards it claimed. Doubles: a card with two 'completed' rows; lost: a
               completion answered whose card is not done
  messages     every agent publishes `--messages` direct messages to the next agent (on the next node) while
               every agent waits for its own in get_messages(wait_seconds): published per second until the last
               is received; p50/p95 of publish_message
  events       the same messages seen as the wake-ups that carried them: each waiter is woken by the change feed
               of the node it waits on. Lost: a message never received, or a wait that ran to its end although a
               message for it had been published over WAKE_LATE seconds before (the wake never came); duplicated:
               a message received twice. p50/p95 from publish_message's answer to the waiter's return
Throughput is what the cell did per second of wall time; kept is that over the no-delay cell of the same run.
Target (issue 50): at 2.5 ms each way >= 0.9 of the no-delay throughput kept, at 1 ms >= 0.95; 0 doubles; 0 lost
or duplicated events.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from _board_agents import HERE, MESSAGE_QUOTAS, seed
from _harness import (
    BenchError,
    Col,
    LoggedServer,
    bench_parser,
    call,
    deadline,
    hiveboard_cmd,
    http_client,
    loadavg,
    machine_info,
    machine_line,
    named_causes,
    pct,
    quiet_loggers,
    ratio,
    scratch,
    server_env,
    table,
    write_json,
)

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pg_cluster import PostgresCluster  # noqa: E402  (the tests' throwaway cluster, not a copy)

PHASES = ("claims", "completions", "messages", "events")
TASK_TYPE = "race"
WAIT = 10.0  # seconds a receiver waits in one get_messages call
WAKE_LATE = 2.0  # a wait that ends at its deadline with a message published this long before missed its wake


@dataclass
class Phase:
    """What one phase of one cell measured."""

    phase: str
    delay_ms: float
    count: int = 0
    wall_s: float = 0.0
    lat: list[float] = field(default_factory=list)
    doubles: int = 0
    lost: int = 0
    duplicated: int = 0

    def add(self, other: Phase) -> None:
        """Another round's measurement of the same phase and delay, pooled with this one."""
        self.count += other.count
        self.wall_s += other.wall_s
        self.lat += other.lat
        self.doubles += other.doubles
        self.lost += other.lost
        self.duplicated += other.duplicated

    @property
    def per_s(self) -> float:
        return self.count / self.wall_s if self.wall_s > 0 else float("nan")


# ----------------------------------------------------------------------------- the cell: proxy, database, nodes


@contextmanager
def delay_proxy(pg_port: int, delay_ms: float, listeners: int, stats: list):
    """bench/_delay_proxy.py in its own process (so the load generator's GIL never holds a chunk back): yields the
    ports of its listeners; afterwards `stats` holds how late it sent chunks beyond their delay, per listener."""
    argv = [sys.executable, str(HERE / "_delay_proxy.py"), "--target", f"127.0.0.1:{pg_port}"]
    argv += ["--delay-ms", str(delay_ms), "--listeners", str(listeners)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ports = [int(p) for p in proc.stdout.readline().split()]
        if len(ports) != listeners:
            raise BenchError(f"the delay proxy started {len(ports)} listeners, not {listeners}")
        yield ports
    finally:
        try:
            out, _ = proc.communicate("", timeout=30)  # its stdin closed: it stops and says how late it was
            stats += json.loads(out or "[]")
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            proc.kill()
            proc.wait()


def seed_board(url: str, agents: list[str], cards: int) -> dict[str, str]:
    """The cell's board, written directly (untimed): the agents and their tokens, `cards` cards in todo."""
    board = Board(Store(url), lease_seconds=3600)
    try:
        tokens = {name: board.agents.new_token(name) for name in agents}
        seed(board, cards, agents[0], "race card", task_type=TASK_TYPE)
    finally:
        board.store.close()
    return tokens


def start_node(home: Path, db: str, chroma: str, collection: str) -> LoggedServer:
    """`hiveboard serve --http` on `db` and the Chroma server's `collection` (nodes share the memory as they share
    the board), review off, message quotas raised (a bench agent publishes faster than the defaults allow; each
    publish is still charged)."""
    home.mkdir(parents=True, exist_ok=True)
    node = LoggedServer(home.parent / f"{home.name}.log", home=home)
    argv = hiveboard_cmd("--home", str(home), "serve", "--http", "--port", str(node.port), installed=True)
    env = server_env(
        home,
        HIVEBOARD_DB=db,
        HIVEBOARD_CHROMA_URL=chroma,
        HIVEBOARD_CHROMA_COLLECTION=collection,
        HIVEBOARD_REVIEW__ENABLED="false",
        **MESSAGE_QUOTAS,
    )
    return node.start(argv, env, timeout=120)


def round_trips(url: str, n: int = 30) -> list[float]:
    """`SELECT 1` n times on one connection to `url`: the round trip a node's statement pays (seconds)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        lat = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            lat.append(time.perf_counter() - started)
    return lat


def settle(nodes: list[LoggedServer], quiet: float = 0.05, most: float = 30.0) -> None:
    """Wait until the nodes are idle (each used under `quiet` CPU seconds in half a second): what `serve` starts
    in the background after it listens (the memory) is then not measured as the board's work."""
    end = time.monotonic() + most
    while time.monotonic() < end:
        before = [n.cpu() or 0.0 for n in nodes]
        time.sleep(0.5)
        if all((n.cpu() or 0.0) - b < quiet for n, b in zip(nodes, before)):
            return


@contextmanager
def cell(
    cluster: PostgresCluster, chroma: str, delay_ms: float, n_nodes: int, agents: list[str], cards: int, root: Path
):
    """A fresh database, the proxy and the nodes of one delay: yields (db URL, node URLs, tokens, proxy stats)."""
    db = cluster.database()
    tokens = seed_board(db, agents, cards)
    name = db.rsplit("/", 1)[1]
    stats: list = []
    with delay_proxy(cluster.port, delay_ms, n_nodes, stats) as ports:
        nodes: list[LoggedServer] = []
        try:
            tag = f"{root.name}-{delay_ms:g}ms".replace(".", "_")
            homes = [root / f"{tag}-node{i + 1}" for i in range(n_nodes)]
            urls = [f"postgresql://postgres@127.0.0.1:{port}/{name}" for port in ports]
            rtts = [round_trips(url) for url in urls]  # the delay as a PostgreSQL client sees it, before the load
            with ThreadPoolExecutor(n_nodes) as pool:
                futures = [pool.submit(start_node, h, url, chroma, name) for h, url in zip(homes, urls)]
                for f in futures:  # every started node is stopped below, even when another failed to start
                    try:
                        nodes.append(f.result())
                    except Exception:
                        pass
            if len(nodes) < n_nodes:
                logs = "\n".join((root / f"{h.name}.log").read_text(errors="replace")[-2000:] for h in homes)
                raise BenchError(f"{n_nodes - len(nodes)} node(s) did not start:\n{logs}")
            settle(nodes)
            yield db, [n.url for n in nodes], tokens, stats, rtts
        finally:
            for node in nodes:
                node.stop()


def query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


# ----------------------------------------------------------------------------- the phases


async def each_at_once(clients: dict, agent) -> float:
    """`agent(name, client)` for every client at once; the seconds until the last one ended."""
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for name, client in clients.items():
            tg.start_soon(agent, name, client)
    return time.perf_counter() - started


async def claims(clients: dict, db: str, cards: int, delay_ms: float, held: dict) -> Phase:
    """Every agent calls claim-next until no card is left; `held` gets each agent's (card, token)."""
    out = Phase("claims", delay_ms)
    answered: list[tuple[str, int]] = []

    async def racer(name: str, client) -> None:
        while True:
            started = time.perf_counter()
            got = await call(client, "claim_task", task_type=TASK_TYPE)
            if not got["claimed"]:
                return
            out.lat.append(time.perf_counter() - started)
            held[name].append((got["task"]["id"], got["token"]))
            answered.append((name, got["task"]["id"]))

    out.wall_s = await each_at_once(clients, racer)
    out.count = len(answered)
    twice = {card for card, n in Counter(card for _, card in answered).items() if n > 1}
    rows = query(
        db,
        "SELECT t.id, t.status, t.assignee, (SELECT count(*) FROM task_history h WHERE h.task_id = t.id "
        "AND h.action = 'claimed') FROM tasks t WHERE t.task_type = %s",
        (TASK_TYPE,),
    )
    twice |= {card for card, _, _, n in rows if n > 1}
    holder = {card: assignee for card, _, assignee, _ in rows}
    out.doubles = len(twice)
    out.lost = sum(status == "todo" for _, status, _, _ in rows) + sum(holder.get(c) != a for a, c in answered)
    return out


async def completions(clients: dict, db: str, delay_ms: float, held: dict) -> Phase:
    """Every agent completes the cards it claimed (review off: each goes straight to done)."""
    out = Phase("completions", delay_ms)
    done: list[int] = []

    async def finisher(name: str, client) -> None:
        for card, token in held[name]:
            started = time.perf_counter()
            await call(client, "complete_task", task_id=card, token=token, output="done by bench_pg_delay")
            out.lat.append(time.perf_counter() - started)
            done.append(card)

    out.wall_s = await each_at_once(clients, finisher)
    out.count = len(done)
    rows = query(
        db,
        "SELECT t.id, t.status, (SELECT count(*) FROM task_history h WHERE h.task_id = t.id "
        "AND h.action = 'completed') FROM tasks t WHERE t.task_type = %s",
        (TASK_TYPE,),
    )
    status = {card: s for card, s, _ in rows}
    out.doubles = sum(n > 1 for _, _, n in rows)
    out.lost = sum(status.get(card) != "done" for card in done)
    return out


@dataclass
class Wait:
    """One get_messages(wait_seconds) call of a receiver: when it started and returned, what it got."""

    started: float
    ended: float
    ids: list[int]


async def messages(
    clients: dict, node_of: dict, db: str, per_agent: int, delay_ms: float
) -> tuple[Phase, Phase, list[tuple]]:
    """Every agent publishes `per_agent` messages to the next agent while every agent waits for its own; the
    messages phase, the events phase and the events per node (node, committed, received, missed, duplicated)."""
    names = list(clients)
    peer = {name: names[(i + 1) % len(names)] for i, name in enumerate(names)}
    acked: dict[int, tuple[str, float]] = {}  # message id -> (recipient, when publish_message answered)
    waits: dict[str, list[Wait]] = {name: [] for name in names}
    received: dict[str, list[tuple[int, float]]] = {name: [] for name in names}
    publish = Phase("messages", delay_ms)
    total = per_agent * len(names)
    finished = anyio.Event()
    first_wait = {name: anyio.Event() for name in names}
    last_received = [0.0]

    async def receiver(name: str, client) -> None:
        expected = per_agent  # the agent before it sends it that many
        while len({m for m, _ in received[name]}) < expected and not finished.is_set():
            started = time.perf_counter()
            first_wait[name].set()
            page = await call(client, "get_messages", wait_seconds=WAIT, limit=100)
            ended = time.perf_counter()
            ids = [m["id"] for m in page["messages"]]
            waits[name].append(Wait(started, ended, ids))
            received[name] += [(m, ended) for m in ids]
            if ids:
                last_received[0] = max(last_received[0], ended)

    async def sender(name: str, client) -> None:
        for k in range(per_agent):
            started = time.perf_counter()
            got = await call(
                client, "publish_message", intent="info", recipient=peer[name], content=f"{name} to {peer[name]} #{k}"
            )
            now = time.perf_counter()
            publish.lat.append(now - started)
            acked[got["id"]] = (peer[name], now)

    async with anyio.create_task_group() as tg:
        for name, client in clients.items():
            tg.start_soon(receiver, name, client)
        for event in first_wait.values():
            await event.wait()
        await anyio.sleep(0.5)  # the receivers' first calls are in their waits, not on their way
        started = time.perf_counter()
        async with anyio.create_task_group() as senders:
            for name, client in clients.items():
                senders.start_soon(sender, name, client)
        with anyio.move_on_after(WAIT + 60):  # drain: receivers end once they have theirs
            while sum(len({m for m, _ in r}) for r in received.values()) < total:
                await anyio.sleep(0.05)
        finished.set()
        tg.cancel_scope.cancel()  # a receiver still waiting has lost a message: counted below
    publish.count = len(acked)
    publish.wall_s = (last_received[0] or time.perf_counter()) - started

    committed = dict(query(db, "SELECT agent, count(*) FROM inbox GROUP BY agent"))
    events, per_node = tally(delay_ms, acked, received, waits, node_of, committed)
    events.count, events.wall_s = publish.count, publish.wall_s
    return publish, events, per_node


def tally(
    delay_ms: float,
    acked: dict[int, tuple[str, float]],
    received: dict[str, list[tuple[int, float]]],
    waits: dict[str, list[Wait]],
    node_of: dict[str, int],
    committed: dict[str, int],
) -> tuple[Phase, list[tuple]]:
    """The events phase from what the publishers were answered (`acked`: message id -> recipient, when) and what
    each receiver got (`received`, in `waits`), and its rows per node (delay, node, committed to its waiters,
    received by them, missed wakes, duplicated). A message received twice, or by an agent it was not sent to,
    is duplicated; lost, one never received by its recipient, and each wait that ran to its end with a message
    in it published over WAKE_LATE seconds before (the wake that should have ended it never came)."""
    events = Phase("events", delay_ms)
    got_once: dict[int, float] = {}
    dup = dict.fromkeys(received, 0)
    for name, got in received.items():
        for m, at in got:
            if m in got_once or acked.get(m, (name,))[0] != name:
                dup[name] += 1
            else:
                got_once[m] = at
    events.lat = [got_once[m] - at for m, (_, at) in acked.items() if m in got_once]
    missed = dict.fromkeys(received, 0)
    for name, calls in waits.items():
        for w in calls:
            ran_out = w.ended - w.started >= WAIT - 0.05
            if ran_out and any(acked.get(m, ("", w.ended))[1] < w.ended - WAKE_LATE for m in w.ids):
                missed[name] += 1
    events.duplicated = sum(dup.values())
    events.lost = sum(m not in got_once for m in acked) + sum(missed.values())
    per_node = []
    for node in sorted(set(node_of.values())):
        mine = [n for n in received if node_of[n] == node]
        per_node.append(
            (
                delay_ms,
                node + 1,
                sum(committed.get(n, 0) for n in mine),
                len({m for n in mine for m, _ in received[n] if m in got_once and acked[m][0] == n}),
                sum(missed[n] for n in mine),
                sum(dup[n] for n in mine),
            )
        )
    return events, per_node


async def run_cell(urls: list[str], tokens: dict, db: str, cards: int, per_agent: int, delay_ms: float):
    names = list(tokens)
    node_of = {name: i % len(urls) for i, name in enumerate(names)}
    async with AsyncExitStack() as stack:
        clients = {}
        for name in names:
            clients[name] = await stack.enter_async_context(http_client(urls[node_of[name]], tokens[name]))
        async with anyio.create_task_group() as tg:  # warm: every session and node pool used once, untimed
            for client in clients.values():
                tg.start_soon(call, client, "get_task", {"task_id": 1})
        held: dict[str, list[tuple[int, int]]] = {name: [] for name in names}
        a = await claims(clients, db, cards, delay_ms, held)
        b = await completions(clients, db, delay_ms, held)
        c, d, per_node = await messages(clients, node_of, db, per_agent, delay_ms)
    return [a, b, c, d], per_node


def measure(cluster, chroma: str, delay_ms: float, args, root: Path) -> tuple[list[Phase], list[tuple], list]:
    agents = [f"agent-{i:02d}" for i in range(args.agents)]
    with cell(cluster, chroma, delay_ms, args.nodes, agents, args.cards, root) as (db, urls, tokens, stats, rtts):
        try:
            phases, per_node = anyio.run(run_cell, urls, tokens, db, args.cards, args.messages, delay_ms)
        except BaseExceptionGroup as group:
            raise named_causes(group, f"the cell at {delay_ms:g} ms") from None
    for listener, lat in zip(stats, rtts):  # the proxy's figures come when it stops, after the cell
        listener["select1_p50_ms"] = pct(lat, 50)
    return phases, per_node, stats


# ----------------------------------------------------------------------------- output


def report(measured: dict[float, list[Phase]], per_node: list[tuple], proxies: dict[float, list], nodes: int) -> None:
    cols = [
        Col("phase", 12, left=True),
        Col("delay ms", 9, "g"),
        Col("n", 6),
        Col("per s", 8, ".1f"),
        Col("kept", 6, ".2f"),
        Col("p50 ms", 8, ".1f"),
        Col("p95 ms", 8, ".1f"),
        Col("doubles", 8),
        Col("lost", 5),
        Col("dup", 4),
    ]
    rows = []
    base = measured[min(measured)]
    for i, name in enumerate(PHASES):
        rows.append(f"{name}:")
        for delay, phases in measured.items():
            p = phases[i]
            kept = ratio(p.per_s, base[i].per_s)
            doubles = p.doubles if name in ("claims", "completions") else None
            dup = p.duplicated if name == "events" else None
            rows.append((name, delay, p.count, p.per_s, kept, pct(p.lat, 50), pct(p.lat, 95), doubles, p.lost, dup))
    table(cols, rows, "per phase and delay (ms added each way between each node and PostgreSQL)")
    node_cols = [
        Col("delay ms", 9, "g"),
        Col("node", 5),
        Col("committed", 10),
        Col("received", 9),
        Col("missed wakes", 13),
        Col("dup", 4),
    ]
    table(node_cols, per_node, "events per node: messages committed to its waiters' inboxes, received by them")
    proxy_cols = [Col("delay ms", 9, "g"), Col("round/node", 11), Col("conns", 6), Col("chunks", 8)]
    proxy_cols += [Col("late p50 ms", 12, ".3f"), Col("late p99 ms", 12, ".3f"), Col("SELECT 1 p50 ms", 16, ".2f")]
    rows = [
        (
            d,
            f"{i // nodes + 1}/{i % nodes + 1}",
            s["connections"],
            s["chunks"],
            s["late_p50_ms"],
            s["late_p99_ms"],
            s.get("select1_p50_ms"),
        )
        for d, listeners in proxies.items()
        for i, s in enumerate(listeners)
    ]
    table(
        proxy_cols,
        rows,
        "the proxy: how late it sent chunks beyond their delay (its own error), and a SELECT 1's round trip through "
        "it before the load",
    )


def verdict(measured: dict[float, list[Phase]]) -> None:
    base = measured[min(measured)]
    print()
    for delay, phases in measured.items():
        if delay == min(measured):
            continue
        floor = 0.95 if delay <= 1 else 0.9 if delay <= 2.5 else None
        kept = {p.phase: ratio(p.per_s, b.per_s) for p, b in zip(phases, base) if p.phase != "events"}
        if floor is not None:
            worst = min(kept, key=lambda k: kept[k] or 0)
            met = all((k or 0) >= floor for k in kept.values())
            print(
                f"target at {delay:g} ms each way, >= {floor} kept: {'met' if met else 'MISSED'} "
                f"(worst {worst} {kept[worst]:.2f})"
            )
    bad = sum(p.doubles + p.lost + p.duplicated for phases in measured.values() for p in phases)
    print(f"target 0 doubles, 0 lost, 0 duplicated: {'met' if bad == 0 else 'MISSED'} ({bad} in all)")


def main() -> None:
    p = bench_parser(__doc__, quick="2 agents per node, 30 cards, 3 messages each: a smoke run")
    p.add_argument("--nodes", type=int, default=3, help="hiveboard serve processes on the database")
    p.add_argument("--agents", type=int, default=64, help="MCP clients, spread over the nodes")
    p.add_argument("--cards", type=int, default=640, help="cards the agents race to claim (and then complete)")
    p.add_argument("--messages", type=int, default=8, help="direct messages each agent publishes")
    p.add_argument("--delays", default="0,1,2.5", help="ms added each way, comma-separated; the smallest is the base")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="cells per delay, the order of the delays turned by one each round (drift falls on all); pooled",
    )
    p.add_argument(
        "--pg-settings",
        default="-c synchronous_commit=off",
        help="the cluster's settings (as bench_postgres.py: a commit durable against a crash of the process)",
    )
    args = p.parse_args()
    try:
        delays = sorted({float(d) for d in args.delays.split(",")})
    except ValueError:
        p.error(f"--delays takes milliseconds separated by commas, like 0,1,2.5; got {args.delays!r}")
    if delays[0] < 0:
        p.error(f"--delays are milliseconds added each way, 0 or more; got {delays[0]:g}")
    if args.quick:
        args.agents, args.cards, args.messages = 2 * args.nodes, 30, 3
    if min(args.nodes, args.agents, args.cards, args.messages, args.rounds) < 1:
        p.error("--nodes, --agents, --cards, --messages and --rounds must each be at least 1")
    quiet_loggers()
    print(machine_line(machine_info("psycopg")))
    print(f"load before: {loadavg()}")
    print(
        f"{args.nodes} nodes, {args.agents} agents, {args.cards} cards, {args.messages} messages per agent, "
        f"delays {', '.join(f'{d:g}' for d in delays)} ms each way, {args.rounds} round(s); "
        f"PostgreSQL {args.pg_settings or '(defaults)'}"
    )
    measured: dict[float, list[Phase]] = {}
    per_node: dict[tuple, list] = {}  # (delay, node) -> committed, received, missed, duplicated
    proxies: dict[float, list] = {d: [] for d in delays}
    with (
        scratch("bench-pg-delay-", args.keep) as root,
        ExitStack() as stack,
        deadline(1800 * args.rounds, "bench_pg_delay"),
    ):
        from bench_retrieval import chroma_server  # (imports the memory: here, not at the start of every run)

        chroma = chroma_server(stack, root)
        cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="bench-pg-", dir=root)), args.pg_settings)
        try:
            for r in range(args.rounds):
                for delay in delays[r % len(delays) :] + delays[: r % len(delays)]:
                    started = time.perf_counter()
                    here = root / f"round{r + 1}"
                    here.mkdir(exist_ok=True)
                    phases, nodes, proxies_here = measure(cluster, chroma, delay, args, here)
                    for mine, more in zip(measured.setdefault(delay, phases), phases):
                        if mine is not more:
                            mine.add(more)
                    for delay_, node, *counts in nodes:
                        total = per_node.setdefault((delay_, node), [0] * len(counts))
                        total[:] = [a + b for a, b in zip(total, counts)]
                    proxies[delay] += proxies_here
                    took = time.perf_counter() - started
                    print(f"round {r + 1}, cell {delay:g} ms each way: {took:.0f} s", flush=True)
        finally:
            cluster.stop()
    print(f"load after: {loadavg()}")
    measured = dict(sorted(measured.items()))
    report(measured, [(*key, *counts) for key, counts in sorted(per_node.items())], proxies, args.nodes)
    verdict(measured)
    write_json(args.json, {"measured": measured, "per_node": list(per_node.items()), "proxies": proxies})


if __name__ == "__main__":
    main()
