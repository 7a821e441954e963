"""The memory on the request path: claim_task with 0 and 10,000 lessons, pool vs direct publish_message (steady and
in the first seconds after a start), how soon a pool message is found by meaning, and the server's memory.

    .venv/bin/python bench/bench_memory_path.py            # full run (~2.5 minutes on the 2-core VM)
    .venv/bin/python bench/bench_memory_path.py --quick    # smoke run (~40 s)
    .venv/bin/python bench/bench_memory_path.py --lessons 10k --claims 200 --json out.json

    # another commit's code, with this bench: its packages exported under DIR/hiveboard
    mkdir -p DIR/hiveboard && git archive COMMIT board critics memory server | tar -x -C DIR/hiveboard
    PYTHONPATH=DIR .venv/bin/python bench/bench_memory_path.py   # the second line printed names the code run

A server process as `hiveboard serve --http` runs it (bench/_server.py --background: the app, the memory with
its indexing worker, the digester and the review worker), driven by bench/_board_agents.py's agents (one HTTP
connection and token each). Every op is timed in small batches (BATCH calls per client) in turn with the bare
`noop` tool on the same server, so drift and other load hit the op and its floor alike.

  [claim]      claim_task(task_id) of a fresh card (created beforehand, of a task type that has lessons; the
               server's work on them finished first), one client, on a board whose memory holds 0 lessons, then
               on one holding --lessons lessons (bench/_memory_corpus.py's, five task types) written through
               Knowledge.add from this process, as a second server would, and embedded by the server's indexer:
               timed only once its outbox is empty, no digest is due and its CPU is idle. Releasing the cards
               is not timed.
  [publish]    publish_message to one agent (direct) and to the pool (no recipient: the message joins the
               shared memory and the indexer embeds it), 1 and 8 clients, on the second board, with no other
               indexing work than these pool messages. Texts: the corpus's critiques, outputs, messages and
               notes (50-400 chars). Back to back (--think 0), the calls leave the low-priority indexer little
               CPU: the table's notes say how many pool messages it embedded while calls were timed.
  [fresh]      the same, from the moment a new server on a new data directory listens, for --fresh-seconds
               (a new server per client count): the memory opens and its model loads meanwhile.
  [freshness]  a pool message every --spacing seconds; from its publish answer until query_memory(mode="vector",
               query=its text, k=5) on another agent's connection, polled every 20 ms, lists it (the hit whose
               message_id is the message's id).
  [rss]        the server process's peak resident set (VmHWM), and over it and the processes it starts: the
               sum of their peaks and the largest sum of their resident sets at one time (sampled every 0.25 s).

The message quotas are raised (HIVEBOARD_QUOTAS__MESSAGES_*): one bench agent sends hundreds of messages a minute;
the quota check still runs on every publish.

Baseline in the same run: `noop` on the same server, in turn with every op.

Targets (issue): claim_task p50 <= 1.25x noop with 10,000 lessons; a pool publish_message p50 <= 1.25x a direct
one, at 1 and 8 clients, steady and in the first 10 s after a start; a pool message found by a vector search
within 2 s at p99.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path

import _memory_corpus as corpus
import anyio
from _board_agents import HERE, MESSAGE_QUOTAS, Agent, Row, Sample, bench_server, measure, open_agents, print_table
from _harness import (
    BenchError,
    Col,
    LoggedServer,
    RssSampler,
    bench_parser,
    call,
    count_label,
    deadline,
    finish,
    http_client,
    loadavg,
    machine_info,
    machine_line,
    parse_count,
    pct,
    proc_cpu_seconds,
    process_tree,
    scratch,
    status_mb,
    table,
)
from _memory_load import add_items

from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board
from hiveboard.memory.digests import Digester

CLAIM_RATIO = 1.25  # target: claim_task p50 <= 1.25x noop, 10,000 lessons in the memory
POOL_RATIO = 1.25  # target: pool publish_message p50 <= 1.25x a direct one
FOUND_P99_S = 2.0  # target: a pool message found by a vector search within 2 s at p99
BATCH = 5  # calls per client of one op before the next op's turn
CLIENTS = 8
LEAD, PUBLISHER, WATCHER = "bench-lead", "bench-pub", "bench-watch"
INTENTS = ("status_update", "request_help", "answer", "heads_up", "proposal")
PUBLISH_OPS = ("noop", "publish_message", "publish_pool")
SEED = 5
STATUS_TEXT = "the login test is flaky again; looking"  # what a claims' agent publishes, when its turns publish


# ----------------------------------------------------------------------------- what the agents write


def clip(text: str, most: int = 400) -> str:
    return text if len(text) <= most else text[: most - 1].rsplit(" ", 1)[0] + "…"


def message_texts(seed: int, n: int) -> list[str]:
    """n team messages of 50-400 characters: the corpus's critiques, outputs, messages and notes (its lessons
    are recorded, not posted)."""
    out, i = [], 0
    while len(out) < n:
        it = corpus.item(seed, i)
        i += 1
        if it.kind != "lesson" and len(it.text) >= 50:
            out.append(clip(it.text))
    return out


def lesson_items(seed: int, n: int) -> list[corpus.Item]:
    """The corpus's first n lessons ("Problem: …\\nFix: …", five task types)."""
    out, i = [], 0
    while len(out) < n:
        it = corpus.item(seed, i)
        i += 1
        if it.kind == "lesson":
            out.append(it)
    return out


def new_cards(seed: int, n: int) -> list[NewTask]:
    """n cards as a lead writes them: a paraphrased problem as the title, a report of it as the description, the
    task type of its pattern (the type most of its lessons have)."""
    reports: dict[int, list[str]] = {}
    for i in range(3000):
        it = corpus.item(seed + 1, i)
        reports.setdefault(it.pattern, []).append(it.text)
    cards = []
    for k, q in enumerate(corpus.query_pool(seed, n)):
        texts = reports.get(q.pattern) or ["Reported by a user; the logs are attached to the issue."]
        cards.append(
            NewTask(
                title=(q.text[:1].upper() + q.text[1:])[:200],
                description=texts[k % len(texts)],
                task_type=q.task_type,
                priority="medium",
                labels=["bench"],
                acceptance_criteria=["a regression test covers the reported case", "CI is green"],
            )
        )
    return cards


class PathAgent(Agent):
    """An agent of this bench: claims the cards it is handed by id, posts the corpus's messages, and counts what
    its claims brought."""

    def __init__(self, name: str, client, peer: str):
        super().__init__(name, client, peer)
        self.cards: list[int] = []
        self.texts = cycle([""])
        self.think = 0.0  # seconds between its calls (not timed)
        self.claims = self.lessons = self.digests = 0

    def args_for(self, op: str) -> dict:
        if op == "claim_task":
            return dict(task_id=self.cards.pop(0))
        if op in ("publish_message", "publish_pool"):
            self.seq += 1
            return dict(
                intent=INTENTS[self.seq % len(INTENTS)],
                content=next(self.texts),
                **({"recipient": self.peer} if op == "publish_message" else {}),
            )
        return super().args_for(op)

    async def run(self, op: str, n: int, lat: list[float]) -> None:
        for _ in range(n):
            await super().run(op, 1, lat)
            if self.think:
                await anyio.sleep(self.think)

    def after(self, op: str, result: dict) -> None:
        super().after(op, result)
        if op == "claim_task":
            self.claims += 1
            self.lessons += len(result.get("lessons") or [])
            self.digests += result.get("digest") is not None


async def path_agents(
    stack, url: str, tokens: dict[str, str], clients: int, texts: list[str], think: float
) -> list[PathAgent]:
    """`clients` agents, each sending direct messages to the next bench agent (never to itself) and its own
    share of `texts` to the pool, `think` seconds between its calls."""
    names = [f"bench-{i:02d}" for i in range(CLIENTS)]
    agents = await open_agents(stack, url, {n: tokens[n] for n in names[:clients]}, PathAgent)
    for i, a in enumerate(agents):
        a.peer = names[(i + 1) % CLIENTS]
        a.texts = cycle(texts[i::clients])
        a.think = think
    return agents


@contextmanager
def served(
    home: Path, log: Path, script: Path = HERE / "_server.py", extra: tuple[str, ...] = ()
) -> Iterator[tuple[LoggedServer, Board, dict[str, str], TreeMemory]]:
    """A new board on `home` with the bench's agents, and the server process on it (its memory watched); `script`
    and `extra`: the server script and more arguments of it (bench_claim_floor.py's cut-down claims)."""
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    names = [f"bench-{i:02d}" for i in range(CLIENTS)] + [LEAD, PUBLISHER, WATCHER]
    tokens = {n: board.agents.new_token(n) for n in names}
    try:
        with (
            bench_server(home, log, script, (*extra, "--background"), **MESSAGE_QUOTAS) as s,
            TreeMemory(s.proc.pid) as mem,
        ):
            yield s, board, tokens, mem
    finally:
        board.store.close()


async def memory_open(url: str, tokens: dict[str, str]) -> None:
    """Return once the server's memory has opened (a search waits for it)."""
    async with http_client(url, tokens[WATCHER]) as client:
        await call(client, "query_memory", query="a slow test in the login handler")


# ----------------------------------------------------------------------------- the server at rest


def tree_cpu(pid: int) -> float:
    return sum(proc_cpu_seconds(p) or 0.0 for p in process_tree(pid))


def settle(board: Board, pid: int, extra: float = 1.0, timeout: float = 900.0, quiet: float = 0.1) -> float:
    """Wait until the server has no work left: its indexing outbox empty, no digest due, and its processes
    using under `quiet` of a core for half a second; then `extra` seconds more. The seconds it took."""
    digester = Digester(board, None)  # only asked what is due, with the server's defaults
    t0 = time.perf_counter()
    while True:
        done = board.knowledge.pending() == 0 and not digester.due()
        if done:
            c0 = tree_cpu(pid)
            time.sleep(0.5)
            if tree_cpu(pid) - c0 < 0.5 * quiet:
                break
        if time.perf_counter() - t0 > timeout:
            raise BenchError(
                f"the server did not settle within {timeout:.0f} s: {board.knowledge.pending()} items waiting "
                f"for the indexer, digests due {digester.due()}" + ("" if not done else ", its CPU never idle")
            )
        if not done:
            time.sleep(0.2)
    time.sleep(extra)
    return time.perf_counter() - t0


class TreeMemory:
    """The memory of a process and the processes it starts, read by RssSampler every 0.25 s: each one's peak
    resident set (VmHWM, the last reading while it lived) and the sum of their resident sets (RssSampler's peak)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.hwm: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.sampler = RssSampler(read=self.read, every=0.25)

    def read(self) -> float:
        total = 0.0
        for p in process_tree(self.pid):
            try:
                hwm, rss = status_mb(p, "VmHWM"), status_mb(p, "VmRSS")
                self.names.setdefault(p, Path(f"/proc/{p}/comm").read_text().strip())
            except OSError:
                continue
            if hwm == hwm and rss == rss:  # NaN: a zombie
                self.hwm[p] = max(self.hwm.get(p, 0.0), hwm)
                total += rss
        return total

    def __enter__(self) -> TreeMemory:
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.read()  # the last word before the server stops
        self.sampler.__exit__(*exc)

    def result(self, server: str) -> dict:
        children = sorted({self.names[p] for p in self.hwm if p != self.pid})
        return dict(
            server=server,
            processes=len(self.hwm),
            server_hwm_mb=self.hwm.get(self.pid),
            tree_hwm_mb=sum(self.hwm.values()),
            tree_rss_peak_mb=self.sampler.peak,
            children=", ".join(children) or "none",
        )


# ----------------------------------------------------------------------------- timed turns


async def alternate(
    agents: list[Agent], ops: tuple[str, ...], per_client: int, pid: int, until: float | None = None, each=None
) -> dict[str, Sample]:
    """`ops` in turn, BATCH calls per client each, until every op has per_client calls per client (with `until`:
    until that perf_counter time has passed); `each()` after every turn of all ops."""
    acc = {op: Sample() for op in ops}
    done = 0
    while done < per_client if until is None else time.perf_counter() < until:
        n = BATCH if until is not None else min(BATCH, per_client - done)
        for op in ops:
            await measure(agents, op, n, acc[op], pid)
        done += n
        if each is not None:
            each()
    return acc


def rows_of(acc: dict[str, Sample], clients: int) -> list[Row]:
    rows = [acc[op].row(op, clients) for op in acc]
    for row in rows:
        row.ratio_vs_noop = row.p50_ms / rows[0].p50_ms if rows[0].p50_ms else None
    return rows


def progress(rows: list[Row], what: str) -> None:
    print("  .. " + ", ".join(f"{r.op} p50 {r.p50_ms:.2f}" for r in rows) + f" ms ({what})", flush=True)


# ----------------------------------------------------------------------------- the sections


@dataclass
class ClaimPhase:
    lessons: int  # lessons in the memory
    rows: list[Row]
    lessons_per_claim: float
    claims_with_digest: int
    settle_s: float


async def claims_in_turn(
    url: str, tokens: dict[str, str], board: Board, seed: int, n: int, pid: int, think: float, ops: tuple[str, ...]
) -> tuple[dict[str, Sample], PathAgent, float]:
    """n claims of fresh cards (and 3 untimed first), in turn with the other `ops`, one client, once the server
    settled; the cards released after (not timed; a card handed twice, once). The samples, the agent (with what its
    timed claims brought) and the seconds the server took to settle."""
    warm = 3
    ids = [board.create(LEAD, card).id for card in new_cards(seed, n + warm)]
    async with AsyncExitStack() as stack:
        (agent,) = await path_agents(stack, url, tokens, 1, [STATUS_TEXT], think)
        agent.cards = ids
        for _ in range(warm):
            await call(agent.client, "noop")
            agent.after("claim_task", await call(agent.client, "claim_task", agent.args_for("claim_task")))
        agent.claims = agent.lessons = agent.digests = 0
        settle_s = await anyio.to_thread.run_sync(settle, board, pid)
        acc = await alternate([agent], ops, n, pid)
        agent.held = list(dict.fromkeys(agent.held))
        await agent.run("release_task", len(agent.held), [])
    return acc, agent, settle_s


async def claim_phase(
    url: str, tokens: dict[str, str], board: Board, pid: int, lessons: int, n: int, think: float
) -> ClaimPhase:
    """n claims of fresh cards (and 3 untimed first), in turn with noop, one client; the cards released after."""
    acc, agent, settle_s = await claims_in_turn(
        url, tokens, board, SEED + lessons, n, pid, think, ("noop", "claim_task")
    )
    rows = rows_of(acc, 1)
    progress(rows, f"{lessons} lessons")
    return ClaimPhase(lessons, rows, agent.lessons / max(1, agent.claims), agent.digests, settle_s)


@dataclass
class Load:
    lessons: int
    write_s: float  # Knowledge.add of all of them, from this process
    indexed_s: float  # from the first write until the outbox was empty (the server's indexer)
    settled_s: float  # until digests were written and the server idle too


def load_lessons(board: Board, pid: int, n: int) -> Load:
    """n lessons into the memory through Knowledge.add (as a second server writes them); the server's indexer
    embeds them. Returns once everything is indexed and the server is idle."""
    items = lesson_items(SEED, n)
    t0 = time.perf_counter()
    add_items(board, items, created_by=LEAD, batch=1_000)
    write_s = time.perf_counter() - t0
    print(f"  {n} lessons written in {write_s:.1f} s; the server's indexer embeds them…", flush=True)
    last = time.perf_counter()
    while pending := board.knowledge.pending():
        if time.perf_counter() - last > 15:
            last = time.perf_counter()
            print(f"     {n - pending}/{n} indexed after {last - t0:.0f} s", flush=True)
        time.sleep(0.1)
    indexed_s = time.perf_counter() - t0
    settle(board, pid, extra=0)
    settled_s = time.perf_counter() - t0
    print(f"  indexed after {indexed_s:.1f} s, digests written and the server idle after {settled_s:.1f} s", flush=True)
    return Load(n, write_s, indexed_s, settled_s)


@dataclass
class Indexing:
    """What the indexer did while a publish phase's calls were timed."""

    pool_messages: int = 0
    most_waiting: int = 0  # most items waiting for the indexer after a turn
    waiting_at_end: int = 0


async def publish_phase(
    url: str,
    tokens: dict[str, str],
    board: Board,
    pid: int,
    clients: int,
    per_client: int,
    texts: list[str],
    think: float,
) -> tuple[list[Row], Indexing]:
    """noop, direct and pool publish_message in turns, `clients` agents, after the server settled."""
    info = Indexing()

    def note() -> None:
        info.most_waiting = max(info.most_waiting, board.knowledge.pending())

    async with AsyncExitStack() as stack:
        agents = await path_agents(stack, url, tokens, clients, texts, think)
        for a in agents:
            for op in PUBLISH_OPS * 2:
                await call(a.client, op if op != "publish_pool" else "publish_message", a.args_for(op))
        await anyio.to_thread.run_sync(settle, board, pid)
        acc = await alternate(agents, PUBLISH_OPS, per_client, pid, each=note)
    info.pool_messages = len(acc["publish_pool"].lat)
    info.waiting_at_end = board.knowledge.pending()
    rows = rows_of(acc, clients)
    progress(rows, f"x{clients}, steady")
    return rows, info


async def fresh_phase(
    home: Path, log: Path, clients: int, seconds: float, texts: list[str], think: float
) -> tuple[list[Row], Indexing, dict]:
    """A new server on a new data directory; noop, direct and pool publish_message in turns from the moment it
    listens, for `seconds`."""
    info = Indexing()
    with served(home, log) as (s, board, tokens, mem):
        until = time.perf_counter() + seconds

        def note() -> None:
            info.most_waiting = max(info.most_waiting, board.knowledge.pending())

        async with AsyncExitStack() as stack:
            agents = await path_agents(stack, s.url, tokens, clients, texts, think)
            acc = await alternate(agents, PUBLISH_OPS, 0, s.proc.pid, until=until, each=note)
        info.pool_messages = len(acc["publish_pool"].lat)
        info.waiting_at_end = board.knowledge.pending()
    rows = rows_of(acc, clients)
    progress(rows, f"x{clients}, first {seconds:.0f} s")
    return rows, info, mem.result(f"fresh start, x{clients}")


@dataclass
class Found:
    n: int
    spacing_s: float
    lat: list[float] = field(default_factory=list)  # publish answer -> a vector search lists it, seconds
    missed: int = 0  # not listed within the timeout
    queries: int = 0
    query_lat: list[float] = field(default_factory=list)


async def freshness(url: str, tokens: dict[str, str], n: int, spacing: float, texts: list[str]) -> Found:
    """n pool messages, `spacing` apart: each one's time from its publish answer until a vector search for its
    text, polled every 20 ms on another agent's connection, lists it."""
    poll, timeout = 0.02, 10.0
    out = Found(n, spacing)
    async with http_client(url, tokens[PUBLISHER]) as pub, http_client(url, tokens[WATCHER]) as watch:
        await call(watch, "query_memory", query="warm up the search path", mode="vector")
        for i in range(n):
            started = time.perf_counter()
            message = await call(pub, "publish_message", intent="status_update", content=texts[i])
            answered = tick = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                found = await call(watch, "query_memory", query=texts[i], mode="vector", k=5)
                now = time.perf_counter()
                out.queries += 1
                out.query_lat.append(now - t0)
                if any(hit.get("message_id") == message["id"] for hit in found["hits"]):
                    out.lat.append(now - answered)
                    break
                if now - answered > timeout:
                    out.missed += 1
                    break
                tick += poll
                await anyio.sleep(max(0.0, tick - time.perf_counter()))
            await anyio.sleep(max(0.0, started + spacing - time.perf_counter()))
    print(f"  .. found p50 {pct(out.lat, 50):.0f} ms, p99 {pct(out.lat, 99):.0f} ms, missed {out.missed}", flush=True)
    return out


# ----------------------------------------------------------------------------- the run


@dataclass
class Results:
    machine: dict
    settings: dict
    claims: list[ClaimPhase] = field(default_factory=list)
    load: Load | None = None
    publish: list[Row] = field(default_factory=list)
    publish_indexing: dict[int, Indexing] = field(default_factory=dict)
    fresh: list[Row] = field(default_factory=list)
    fresh_indexing: dict[int, Indexing] = field(default_factory=dict)
    found: Found | None = None
    rss: list[dict] = field(default_factory=list)
    code: str = ""
    load_before: str = ""
    load_after: str = ""
    total_s: float = 0.0


async def main_server(url: str, tokens: dict[str, str], board: Board, pid: int, res: Results) -> None:
    """What is measured on the server whose memory holds the lessons, in order."""
    cfg = res.settings
    await memory_open(url, tokens)
    res.load = await anyio.to_thread.run_sync(load_lessons, board, pid, cfg["lessons"])
    async with http_client(url, tokens[WATCHER]) as check:
        found = await call(check, "query_memory", query="rate limiting", mode="vector")
        if found.get("unindexed"):
            raise BenchError(f"query_memory says {found['unindexed']} items are not indexed yet")
    res.claims.append(await claim_phase(url, tokens, board, pid, cfg["lessons"], cfg["claims"], cfg["think"]))
    print("\n[publish] direct vs pool, steady", flush=True)
    texts = message_texts(SEED + 1, 4000)
    for clients, per_client in cfg["plan"]:
        rows, res.publish_indexing[clients] = await publish_phase(
            url, tokens, board, pid, clients, per_client, texts, cfg["think"]
        )
        res.publish += rows
    print("\n[freshness] pool message -> listed by a vector search", flush=True)
    await anyio.to_thread.run_sync(settle, board, pid)
    res.found = await freshness(url, tokens, cfg["found"], cfg["spacing"], message_texts(SEED + 2, cfg["found"]))


async def empty_server(url: str, tokens: dict[str, str], board: Board, pid: int, res: Results) -> None:
    await memory_open(url, tokens)
    res.claims.append(await claim_phase(url, tokens, board, pid, 0, res.settings["claims"], res.settings["think"]))


def run(res: Results, tmp: Path) -> None:
    cfg = res.settings
    print("\n[claim] 0 lessons (a board of its own)", flush=True)
    with served(tmp / "empty", tmp / "empty.log") as (s, board, tokens, mem):
        anyio.run(empty_server, s.url, tokens, board, s.proc.pid, res)
    res.rss.append(mem.result("0 lessons"))
    print(f"\n[claim] {cfg['lessons']} lessons (the server that also serves [publish] and [freshness])", flush=True)
    with served(tmp / "main", tmp / "main.log") as (s, board, tokens, mem):
        print(f"  server pid {s.proc.pid}", flush=True)
        anyio.run(main_server, s.url, tokens, board, s.proc.pid, res)
    res.rss.append(mem.result(f"{count_label(cfg['lessons'])} lessons + messages"))
    print(f"\n[fresh] direct vs pool in the first {cfg['fresh_seconds']:.0f} s of a new server", flush=True)
    texts = message_texts(SEED + 3, 4000)
    for clients, _ in cfg["plan"]:
        rows, res.fresh_indexing[clients], rss = anyio.run(
            fresh_phase,
            tmp / f"fresh-{clients}",
            tmp / f"fresh-{clients}.log",
            clients,
            cfg["fresh_seconds"],
            texts,
            cfg["think"],
        )
        res.fresh += rows
        res.rss.append(rss)


# ----------------------------------------------------------------------------- report


def ratio_line(what: str, rows: list[Row], clients: int, target: float) -> str:
    got = {r.op: r for r in rows if r.clients == clients}
    pool, direct = got["publish_pool"], got["publish_message"]
    r = pool.p50_ms / direct.p50_ms
    return (
        f"target pool publish_message p50 <= {target}x direct, {what}, x{clients}: {'ok' if r <= target else 'MISSED'} "
        f"({pool.p50_ms:.2f} / {direct.p50_ms:.2f} ms = {r:.2f}x; p99 {pool.p99_ms:.2f} / {direct.p99_ms:.2f} ms)"
    )


def code_line() -> str:
    """Where the server's code comes from (PYTHONPATH may point the bench at another tree, e.g. a snapshot of a
    commit), and that checkout's `git describe --dirty` when it is one."""
    import subprocess

    import hiveboard.board

    where = Path(hiveboard.board.__file__).resolve().parent.parent
    out = subprocess.run(["git", "-C", str(where), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return f"hiveboard code: {where} ({out.stdout.strip() or 'not a git checkout'})"


def verdict(res: Results) -> list[str]:
    floor = [f"claim phase {p.lessons} lessons x1 {p.rows[0].p50_ms:.2f} / {p.rows[0].p99_ms:.2f}" for p in res.claims]
    for what, rows in (("steady", res.publish), ("fresh", res.fresh)):
        floor += [f"{what} x{r.clients} {r.p50_ms:.2f} / {r.p99_ms:.2f}" for r in rows if r.op == "noop"]
    lines = ["floor: noop p50 / p99 ms: " + "; ".join(floor)]
    for phase in res.claims:
        noop, claim = phase.rows
        r = claim.p50_ms / noop.p50_ms
        lines.append(
            f"target claim_task p50 <= {CLAIM_RATIO}x noop, {phase.lessons} lessons: "
            f"{'ok' if r <= CLAIM_RATIO else 'MISSED'} ({claim.p50_ms:.2f} / {noop.p50_ms:.2f} ms = {r:.2f}x; "
            f"p99 {claim.p99_ms:.2f} / {noop.p99_ms:.2f} ms; {phase.lessons_per_claim:.1f} lessons per claim, "
            f"{phase.claims_with_digest}/{claim.calls} with a digest)"
        )
    for clients in sorted({r.clients for r in res.publish}):
        lines.append(ratio_line("steady", res.publish, clients, POOL_RATIO))
    for clients in sorted({r.clients for r in res.fresh}):
        lines.append(ratio_line(f"first {res.settings['fresh_seconds']:.0f} s", res.fresh, clients, POOL_RATIO))
    f = res.found
    if f is not None:
        p99 = pct(f.lat, 99) / 1000 if f.lat else float("inf")
        ok = p99 <= FOUND_P99_S and not f.missed
        lines.append(
            f"target pool message listed by a vector search within {FOUND_P99_S:.0f} s at p99: "
            f"{'ok' if ok else 'MISSED'} (p50 {pct(f.lat, 50):.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"{f.missed} of {f.n} not listed within 10 s)"
        )
    return lines


def report(res: Results) -> None:
    for phase in res.claims:
        print_table(
            phase.rows,
            f"[claim] claim_task(task_id) of a fresh card, one client, {phase.lessons} lessons in the memory "
            f"(in turn with noop; {phase.lessons_per_claim:.1f} lessons handed per claim)",
        )
    if res.load:
        ld = res.load
        print(
            f"\n[load] {ld.lessons} lessons written in {ld.write_s:.1f} s (Knowledge.add from this process); the "
            f"server's indexer had embedded them all after {ld.indexed_s:.1f} s "
            f"({ld.lessons / ld.indexed_s:.0f} items/s); digests written and server idle after {ld.settled_s:.1f} s"
        )
    print_table(
        res.publish,
        "[publish] steady: direct = to one agent, publish_pool = no recipient (joins the memory, embedded by the "
        "indexer; no other indexing work)",
    )
    for clients, info in res.publish_indexing.items():
        print(
            f"  x{clients}: {info.pool_messages} pool messages, {info.pool_messages - info.waiting_at_end} of them "
            f"embedded while calls were timed; at most {info.most_waiting} waiting for the indexer after a turn"
        )
    print_table(
        res.fresh,
        f"[fresh] the first {res.settings['fresh_seconds']:.0f} s after a new server listens (a server per row "
        "group; connecting the clients included)",
    )
    for clients, info in res.fresh_indexing.items():
        print(
            f"  x{clients}: {info.pool_messages} pool messages; at most {info.most_waiting} waiting for the "
            f"indexer after a turn, {info.waiting_at_end} at the end of the window"
        )
    f = res.found
    if f is not None:
        table(
            [
                Col("measurement", 44, left=True),
                Col("n", 5),
                Col("p50 ms", 8, ".0f"),
                Col("p99 ms", 8, ".0f"),
                Col("max ms", 8, ".0f"),
                Col("missed", 7),
            ],
            [
                _latency_row("publish answer -> listed by vector search", len(f.lat), f.lat, f.missed),
                _latency_row("query_memory(mode=vector, k=5) while polling", f.queries, f.query_lat, None),
            ],
            f"[freshness] {f.n} pool messages, {f.spacing_s * 1000:.0f} ms apart, polled every 20 ms",
        )
    table(
        [
            Col("server", 24, left=True),
            Col("procs", 5),
            Col("VmHWM MB", 9, ".0f"),
            Col("sum VmHWM", 10, ".0f"),
            Col("peak sum RSS", 13, ".0f"),
            Col("child processes", 30, left=True, clip=True),
        ],
        [
            (r["server"], r["processes"], r["server_hwm_mb"], r["tree_hwm_mb"], r["tree_rss_peak_mb"], r["children"])
            for r in res.rss
        ],
        "[rss] the server process's peak; over it and its children: the sum of their peaks, the largest sum at one time",
    )


def _latency_row(label: str, n: int, lat: list[float], missed: int | None) -> tuple:
    """A freshness table row: label, count, p50/p99/max in ms, misses."""
    return (label, n, pct(lat, 50), pct(lat, 99), max(lat, default=float("nan")) * 1000, missed)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(
        __doc__, quick="small counts, 1,000 lessons, 5 s windows: a smoke run", keep="keep the temp directory"
    )
    p.add_argument("--lessons", help="lessons in the memory for the second claim phase (10k; --quick 1k)")
    p.add_argument("--claims", type=int, help="timed claims per phase (200; --quick 20)")
    p.add_argument("--calls", type=int, help="calls per op with 1 client; 8 clients make half as many each (200; 20)")
    p.add_argument("--found", type=int, help="pool messages whose freshness is timed (50; --quick 10)")
    p.add_argument("--spacing", type=float, default=0.2, help="seconds between those messages (0.2)")
    p.add_argument("--fresh-seconds", type=float, help="the window after a new server listens (10; --quick 5)")
    p.add_argument(
        "--think",
        type=float,
        default=0.0,
        metavar="MS",
        help="each client waits this long between its calls (0: back to back, which leaves the low-priority indexer "
        "little CPU while calls are timed)",
    )
    args = p.parse_args(argv)
    q = args.quick
    calls = args.calls or (20 if q else 200)
    settings = dict(
        lessons=parse_count(args.lessons or ("1k" if q else "10k")),
        claims=args.claims or (20 if q else 200),
        plan=[(1, calls), (CLIENTS, max(BATCH, calls // 2))],
        found=args.found or (10 if q else 50),
        spacing=args.spacing,
        fresh_seconds=args.fresh_seconds or (5.0 if q else 10.0),
        batch=BATCH,
        think=args.think / 1000,
    )
    res = Results(machine=machine_info("uvicorn", "chromadb", "onnxruntime"), settings=settings)
    res.code = code_line()
    print(machine_line(res.machine))
    print(res.code)
    res.load_before = loadavg()
    print(f"load: {res.load_before}")
    started = time.perf_counter()
    with scratch("hiveboard-bench-path-", args.keep) as tmp, deadline(300 if q else 1500, "bench_memory_path"):
        run(res, tmp)
    report(res)
    finish(res, started, verdict(res), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
