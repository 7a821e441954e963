"""The message pool under load: publish→wake latency, publish throughput, inbox fetch at 100k messages.

    /work/venv/bin/python bench/bench_messages.py            # full run (about 1-2 min on 2 cores)
    /work/venv/bin/python bench/bench_messages.py --quick    # smoke run (10k messages, a few seconds)
    /work/venv/bin/python bench/bench_messages.py --json out.json

Everything runs in one process on one temp SQLite file (removed at the end), through in-process MCP
clients (`mcp.Client(server)`), one `build_server(board, Identity(..., agent=name))` per agent over
the same Board, the way the tests connect. A bare `noop` tool registered on one of those servers is
the baseline every row is compared to ("vs noop" = row p50 / noop p50).

1. Bulk-load N stored messages (default 100k; SQL inserts mirroring Messages.post, one transaction)
   over 20 agents with a realistic mix: direct, role broadcasts, everyone, task-pool messages. One
   agent, `target`, has 5% of them (5k) in its inbox, 50 unread.
2. Inbox fetch as `target` through MCP and raw (Messages.inbox): unread path (marks read; the
   marks are undone by SQL between repetitions, outside the timed region), browse
   (unread_only=False: first page, a page of read history, a page from the middle), filtered
   (task_id+intent, a rare intent, sender) and the pool of one task.
3. publish→wake in one process: receivers wait in get_messages(wait_seconds=30); the time from just
   before publish_message until the waiting call returns (1 receiver; 8 receivers, direct to one
   of them; 8 receivers, one role broadcast to all of them).
4. Publish throughput: publish_message through MCP with 1 and 4 concurrent senders, and
   Messages.publish called directly (no MCP) as the SQLite baseline.
5. publish→wake across processes: two `hiveboard serve` stdio processes on the same file, the
   waiter on one, the publisher on the other (woken by the PRAGMA data_version watcher).

Targets (issue, on 2 cores): p99 publish→wake <= 50 ms in one process; inbox fetch at 100k messages
<= 10 ms p50. PASS/FAIL is printed; the exit code is 1 only when something is wrong (a wait that did
not return the message just published, a page with the wrong messages), not for a missed target.

Besides latency, each row shows this process's CPU per call ("cpu ms"), steadier than latency when
something else runs on the machine, and how many full garbage collections landed in it, with the
longest pause. The run matches a real server: gc.freeze() once the servers are up (as `hiveboard
serve` does) and Store.optimize() after the load (the server runs ANALYZE at open and every 10k
messages); --no-gc-freeze and --no-analyze switch either off for an A/B.
--sections runs a subset, e.g. --sections wake.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from _common import Lat, machine_info, payload, pct, remove_unless_kept  # noqa: E402  (bench/ is on sys.path when run as a script)

from hiveboard.board import Board, Store
from hiveboard.board.messages import NewMessage, _cursor
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity

TARGET_WAKE_P99_MS = 50.0
TARGET_FETCH_P50_MS = 10.0
TARGET = "target"
GC_FREEZE = False  # --gc-freeze: gc.freeze() once a section's servers and clients are up (A/B for GC pauses)


class GcWatch:
    """Times the collector's pauses (gc.callbacks), so a row can say how many full collections hit it."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._t0))

    def mark(self) -> int:
        return len(self.pauses)

    def note(self, since: int) -> str:
        full = [d for g, d in self.pauses[since:] if g == 2]
        return f"{len(full)} full GC, max {max(full) * 1000:.0f} ms" if full else ""


GCW = GcWatch()


def settle_heap() -> None:
    """With --gc-freeze, move everything alive now out of the collector's view (what a server could do
    after startup), so later full collections scan only new objects."""
    if GC_FREEZE:
        gc.collect()
        gc.freeze()


# ----------------------------------------------------------------------------- results


@dataclass
class Row:
    section: str
    measurement: str
    n: int
    p50_ms: float
    p99_ms: float
    per_s: float | None = None  # messages (or calls) per second, where it means something
    cpu_ms: float | None = None  # this process's CPU (all threads) per call; per publish for wake rows
    vs_noop: float | None = None
    note: str = ""


@dataclass
class Results:
    machine: dict
    settings: dict
    load: dict = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    targets: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    total_s: float = 0.0


def row(section: str, name: str, lat: list[float], per_s: float | None = None, note: str = "",
        gc_since: int | None = None) -> Row:
    if gc_since is not None:
        note = ", ".join(x for x in (note, GCW.note(gc_since)) if x)
    cpu_s = getattr(lat, "cpu_s", None)
    cpu_ms = cpu_s / (getattr(lat, "cpu_per", None) or len(lat)) * 1000 if cpu_s is not None and lat else None
    return Row(section=section, measurement=name, n=len(lat), p50_ms=pct(lat, 50), p99_ms=pct(lat, 99),
               per_s=per_s, cpu_ms=cpu_ms, note=note)


class BenchError(RuntimeError):
    """Something the bench checks came out wrong (not a slow number: a wrong answer)."""


# ----------------------------------------------------------------------------- MCP plumbing


def noop() -> str:
    """Do nothing (benchmark baseline)."""
    return "ok"


def in_process(board: Board, agent: str, with_noop: bool = False) -> Client:
    server = build_server(board, Identity(board.agents, "memory", agent=agent))
    if with_noop:
        server.add_tool(noop, name="noop")
    return Client(server)


async def call(client: Client, tool: str, args: dict | None = None) -> dict:
    result = await client.call_tool(tool, args or {})
    if result.is_error:
        raise BenchError(f"{tool}({args}) failed: {result.content[0].text if result.content else result}")
    return payload(result)


async def timed_calls(client: Client, tool: str, args: dict, n: int, before=None, check=None) -> Lat:
    """n calls, each timed alone; `before` (untimed) runs first each time, `check` looks at each result."""
    lat = Lat()
    for _ in range(n):
        if before is not None:
            before()
        with lat.timing():
            out = await call(client, tool, args)
        if check is not None:
            check(out)
    return lat


def timed_raw(fn, n: int, before=None, check=None) -> Lat:
    lat = Lat()
    for _ in range(n):
        if before is not None:
            before()
        with lat.timing():
            out = fn()
        if check is not None:
            check(out)
    return lat


# ----------------------------------------------------------------------------- bulk load

ROLES = {"engineer": 8, "qa": 4, "research": 4, "lead": 2, "ops": 2}  # 20 agents; target is a lead
CHANNELS = ["api-design", "infra", "release", "standup", "db-migration", "frontend", "security", "perf"]
DIRECT_INTENTS = ["request_help", "answer", "info", "critique", "approval", "test_results", "proposal.feedback"]
ROLE_INTENTS = ["task_assignment", "request_help", "proposal", "info"]
EVERYONE_INTENTS = ["info", "consensus_reached", "proposal"]
POOL_INTENTS = ["status_update", "task_claim", "output.complete", "test_results", "output.updated", "critique"]
WORDS = ("the api handler returns a stale cursor when the page is empty so the client loops; "
         "fixed by checking next_cursor before retrying. tests pass on sqlite 3.45 and 3.46, "
         "latency unchanged. please review the migration and the edge case with zero rows. ").split()


@dataclass
class Loaded:
    messages: int
    inbox_rows: int
    agents: list[str]
    target_messages: int
    target_unread_ids: list[int]
    target_task: int  # the task with most messages in target's inbox
    target_task_intent: str  # the commonest intent of that task in target's inbox
    rare_intent: str  # an intent target has few messages of
    busy_sender: str  # the agent that sent target the most messages
    pool_task: int  # the task with the most pool messages
    mid_read_id: int  # a read message in the middle of target's history
    load_s: float


def bulk_load(board: Board, total: int, target_share: float, target_unread: int, seed: int) -> Loaded:
    """Insert `total` messages and their inbox rows the way Messages.post would have, in one transaction.

    Recipients follow Messages._recipients: a name → that agent; role:<r> → its members; everyone → all;
    the pool (no recipient) → the task's creator and assignee; always minus the sender. The target's
    share is an exact slice (direct, its role, everyone, its tasks); the rest never reach the target.
    """
    rng = random.Random(seed)
    t_start = time.perf_counter()
    names: list[str] = []
    role_of: dict[str, str] = {}
    members: dict[str, list[str]] = {r: [] for r in ROLES}
    i = 0
    for role, count in ROLES.items():
        for _ in range(count):
            name = TARGET if role == "lead" and TARGET not in names else f"ag{i:02d}"
            i += name != TARGET
            names.append(name)
            role_of[name] = role
            members[role].append(name)
    others = [n for n in names if n != TARGET]
    t0 = time.time() - 7 * 86400
    n_tasks = max(50, total // 100)
    texts = []
    for _ in range(64):
        n = rng.randint(12, 90)
        start = rng.randrange(len(WORDS))
        texts.append(" ".join(WORDS[(start + k) % len(WORDS)] for k in range(n)))

    with board.store.write() as db:
        for name in names:
            db.execute("INSERT INTO agents (name, role, token_hash, created_at) VALUES (?, ?, ?, ?)",
                       [name, role_of[name], f"bench-{name}", t0])
        task_rows, task_people = [], {}
        target_tasks, other_tasks = [], []
        first_task = (db.execute("SELECT coalesce(max(id), 0) FROM tasks").fetchone()[0]) + 1
        for k in range(n_tasks):
            tid = first_task + k
            if k < 2 or rng.random() < 0.08:  # the target created or holds ~8% of the cards
                creator, assignee = (TARGET, rng.choice(others)) if rng.random() < 0.5 else (rng.choice(others), TARGET)
                target_tasks.append(tid)
            else:
                creator, assignee = rng.choice(others), rng.choice(others + [None])
                other_tasks.append(tid)
            task_people[tid] = (creator, assignee)
            status = "done" if assignee and rng.random() < 0.6 else ("in_progress" if assignee else "todo")
            task_rows.append((tid, f"bench card {tid}", "", "code", 1, status, assignee, creator, t0, t0))
        db.conn.executemany(
            "INSERT INTO tasks (id, title, description, task_type, priority, status, assignee, created_by, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", task_rows)

        first_id = (db.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]) + 1
        n_target = int(total * target_share)
        target_slots = set(rng.sample(range(total), n_target))
        msg_rows, inbox_rows = [], []
        target_ids: list[int] = []
        for k in range(total):
            mid = first_id + k
            ts = t0 + k * (7 * 86400 / total)
            task_id = thread = recipient = reply_to = None
            if k in target_slots:
                kind = rng.choices(["direct", "role", "everyone", "pool"], [55, 15, 10, 20])[0]
                sender = rng.choice(others)
                if kind == "direct":
                    recipient, to = TARGET, {TARGET}
                elif kind == "role":
                    recipient, to = "role:lead", set(members["lead"])
                elif kind == "everyone":
                    recipient, to = "everyone", set(names)
                else:
                    task_id = rng.choice(target_tasks)
                    to = {p for p in task_people[task_id] if p}
                    if TARGET not in to - {sender}:
                        sender = next(p for p in others if p not in to)
            else:
                kind = rng.choices(["direct", "role", "pool"], [55, 20, 25])[0]
                sender = rng.choice(names)
                if kind == "direct":
                    recipient = rng.choice([n for n in others if n != sender])
                    to = {recipient}
                elif kind == "role":
                    role = rng.choice(["engineer", "qa", "research", "ops"])
                    recipient, to = f"role:{role}", set(members[role])
                else:
                    task_id = rng.choice(other_tasks)
                    to = {p for p in task_people[task_id] if p}
            to.discard(sender)
            if kind == "direct":
                intent = rng.choice(DIRECT_INTENTS)
                if rng.random() < 0.4:
                    task_id = rng.choice(target_tasks if recipient == TARGET and rng.random() < 0.5 else other_tasks)
                if intent == "answer" and k > 0:
                    reply_to = mid - rng.randint(1, min(k, 50))
            elif kind == "role":
                intent = rng.choice(ROLE_INTENTS)
                if rng.random() < 0.5:
                    thread = rng.choice(CHANNELS)
            elif kind == "everyone":
                intent = rng.choice(EVERYONE_INTENTS)
                thread = rng.choice(CHANNELS)
            else:
                intent = rng.choice(POOL_INTENTS)
            if thread is None:
                thread = f"task-{task_id}" if task_id is not None else f"msg-{mid}"
            content = texts[k % len(texts)]
            msg_rows.append((mid, intent, task_id, sender, recipient, thread, reply_to, content[:500], content,
                             rng.choices([0, 1, 2, 3], [10, 70, 15, 5])[0], "{}", ts))
            for agent in sorted(to):
                inbox_rows.append([agent, mid, ts + 60, ts + 120 if rng.random() < 0.3 else None])
                if agent == TARGET:
                    target_ids.append(mid)
        # unread: the target's newest `target_unread`, ~2% of everyone else's
        unread = set(target_ids[-target_unread:]) if target_unread else set()
        for r in inbox_rows:
            if (r[0] == TARGET and r[1] in unread) or (r[0] != TARGET and rng.random() < 0.02):
                r[2] = r[3] = None
        db.conn.executemany(
            "INSERT INTO messages (id, intent, task_id, sender, recipient, thread, reply_to, summary, content, "
            "priority, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", msg_rows)
        db.conn.executemany("INSERT INTO inbox (agent, message_id, read_at, acked_at) VALUES (?, ?, ?, ?)",
                            inbox_rows)

    q = board.store.db.execute
    target_task, task_intent = q(
        "SELECT m.task_id, m.intent FROM inbox i JOIN messages m ON m.id = i.message_id WHERE i.agent = ? AND "
        "m.task_id IS NOT NULL GROUP BY m.task_id, m.intent ORDER BY count(*) DESC LIMIT 1", [TARGET]).fetchone()
    rare_intent = q("SELECT m.intent FROM inbox i JOIN messages m ON m.id = i.message_id WHERE i.agent = ? "
                    "GROUP BY m.intent ORDER BY count(*) LIMIT 1", [TARGET]).fetchone()[0]
    busy_sender = q("SELECT m.sender FROM inbox i JOIN messages m ON m.id = i.message_id WHERE i.agent = ? "
                    "GROUP BY m.sender ORDER BY count(*) DESC LIMIT 1", [TARGET]).fetchone()[0]
    pool_task = q("SELECT task_id FROM messages WHERE task_id IS NOT NULL AND (recipient IS NULL OR recipient = "
                  "'everyone' OR recipient LIKE 'role:%') GROUP BY task_id ORDER BY count(*) DESC LIMIT 1"
                  ).fetchone()[0]
    read_ids = [mid for mid in target_ids if mid not in unread]
    return Loaded(messages=total, inbox_rows=len(inbox_rows), agents=names, target_messages=len(target_ids),
                  target_unread_ids=sorted(unread), target_task=target_task, target_task_intent=task_intent,
                  rare_intent=rare_intent, busy_sender=busy_sender, pool_task=pool_task,
                  mid_read_id=read_ids[len(read_ids) // 2] if read_ids else 0,
                  load_s=time.perf_counter() - t_start)


# ----------------------------------------------------------------------------- 2. inbox fetch


async def fetch_section(board: Board, ld: Loaded, reps: int, noop_calls: int, res: Results, fetch: bool = True
                        ) -> float:
    """noop, then (unless fetch=False) inbox/pool fetches as `target`; returns noop p50 (ms)."""
    sec = "fetch"
    unread_ids = ld.target_unread_ids
    marks = ",".join("?" * len(unread_ids))

    def reset_unread() -> None:  # undo the previous repetition's read marks (outside the timed region)
        with board.store.write() as db:
            db.execute(f"UPDATE inbox SET read_at = NULL WHERE agent = ? AND message_id IN ({marks})",
                       [TARGET, *unread_ids])

    first_unread = unread_ids[:20]

    def check_unread(page) -> None:
        page = page if isinstance(page, dict) else page.model_dump()
        got = [m["id"] for m in page["messages"]]
        if got != first_unread or page["unread"] != len(unread_ids):
            raise BenchError(f"unread fetch returned {got[:5]}… unread={page['unread']}, expected "
                             f"{first_unread[:5]}… unread={len(unread_ids)}")

    def check_nonempty(page) -> None:
        page = page if isinstance(page, dict) else page.model_dump()
        if not page["messages"]:
            raise BenchError("a fetch that should find messages returned none")

    read_cursor = _cursor((1, 0))  # phase 1 (read, newest first) from the top
    mid_cursor = _cursor((1, ld.mid_read_id))  # a page from the middle of the read history
    browse = [
        ("inbox browse, first page", dict(unread_only=False)),
        ("inbox browse, read page 1", dict(unread_only=False, cursor=read_cursor)),
        ("inbox browse, mid history", dict(unread_only=False, cursor=mid_cursor)),
        ("inbox task_id+intent", dict(unread_only=False, task_id=ld.target_task, intent=ld.target_task_intent)),
        (f"inbox intent={ld.rare_intent} (rare)", dict(unread_only=False, intent=ld.rare_intent)),
        ("inbox sender=", dict(unread_only=False, sender=ld.busy_sender)),
        ("pool one task", dict(box="pool", task_id=ld.pool_task)),
    ]
    async with in_process(board, TARGET, with_noop=True) as client:
        # warm up: tool listing, worker threads' SQLite connections, page cache
        for _ in range(20):
            await call(client, "noop")
            await call(client, "get_messages", dict(unread_only=False))
        settle_heap()
        g = GCW.mark()
        lat = await timed_calls(client, "noop", {}, noop_calls)
        noop_row = row(sec, "noop (bare MCP tool)", lat, per_s=len(lat) / sum(lat), gc_since=g)
        noop_p50 = noop_row.p50_ms
        res.rows.append(noop_row)
        print(f"  .. noop p50 {noop_p50:.2f} ms", flush=True)
        if not fetch:
            return noop_p50

        g = GCW.mark()
        lat = await timed_calls(client, "get_messages", {}, reps, before=reset_unread, check=check_unread)
        res.rows.append(row(sec, "inbox unread (marks 20 read)", lat, gc_since=g))
        for name, args in browse:
            g = GCW.mark()
            lat = await timed_calls(client, "get_messages", args, reps, check=check_nonempty)
            res.rows.append(row(sec, name, lat, gc_since=g))
        # The Python MCP client checks every structured result against the tool's output schema with
        # jsonschema (session.validate_tool_result); most of a get_messages call's time is that check.
        # The same calls with the check switched off for get_messages show the server's share.
        schemas = getattr(client.session, "_tool_output_schemas", None)
        if isinstance(schemas, dict) and schemas.get("get_messages"):  # full profile only
            saved = schemas["get_messages"]
            schemas["get_messages"] = None
            try:
                g = GCW.mark()
                lat = await timed_calls(client, "get_messages", {}, reps, before=reset_unread, check=check_unread)
                res.rows.append(row(sec, "inbox unread, no client schema check", lat, gc_since=g))
                g = GCW.mark()
                lat = await timed_calls(client, "get_messages", browse[0][1], reps, check=check_nonempty)
                res.rows.append(row(sec, "browse first page, no client schema chk", lat, gc_since=g))
            finally:
                schemas["get_messages"] = saved
        # raw: Messages.inbox / Messages.pool in this thread, no MCP
        m = board.messages
        g = GCW.mark()
        lat = timed_raw(lambda: m.inbox(TARGET), reps, before=reset_unread, check=check_unread)
        res.rows.append(row(sec, "raw Messages.inbox unread", lat, gc_since=g))
        for name, args in browse:
            args = dict(args)
            if args.pop("box", "inbox") == "pool":
                fn = lambda a=args: m.pool(**a)  # noqa: E731
            else:
                fn = lambda a=args: m.inbox(TARGET, **a)  # noqa: E731
            g = GCW.mark()
            lat = timed_raw(fn, reps, check=check_nonempty)
            res.rows.append(row(sec, "raw " + name, lat, gc_since=g))
        lat = timed_raw(lambda: m.unread_count(TARGET), reps)
        res.rows.append(row(sec, "raw unread_count", lat))
        reset_unread()
    for r in res.rows:
        if r.section == sec:
            print(f"  .. {r.measurement:<38} p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms", flush=True)
    return noop_p50


# ----------------------------------------------------------------------------- 3. publish→wake in one process


def waiting_agents(board: Board) -> set[str]:
    """Agents with a get_messages currently waiting on their inbox in this process."""
    return {topic.split(":", 1)[1] for topic in board.store.notifier.waiting() if topic.startswith("inbox:")}


async def until_waiting(board: Board, names: list[str], timeout: float = 10.0) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        now_waiting = waiting_agents(board)
        if all(n in now_waiting for n in names):
            return
        if time.perf_counter() > deadline:
            raise BenchError(f"receivers {sorted(set(names) - now_waiting)} never started waiting")
        await anyio.sleep(0.0005)


async def wake_scenario(board: Board, receivers: list[str], rounds: int, broadcast: bool, gap_s: float,
                        rng: random.Random) -> tuple[list[float], list[float], list[float]]:
    """Receivers loop in get_messages(wait_seconds=30); the sender publishes, round after round.

    Returns (publish→wake per woken receiver, publish→last receiver woken per round, publish call).
    """
    sender = "tx-wake"
    board.agents.ensure(sender)
    for name in receivers:
        board.agents.ensure(name, "listener")
    wake_lat, last_lat, pub_lat = Lat(), Lat(), Lat()
    streams = {n: anyio.create_memory_object_stream[tuple[float, list[int], list[str]]](100) for n in receivers}

    async def receiver(name: str, client: Client) -> None:
        send = streams[name][0]
        while True:
            page = await call(client, "get_messages", dict(wait_seconds=30))
            t = time.perf_counter()
            ids = [m["id"] for m in page["messages"]]
            intents = [m["intent"] for m in page["messages"]]
            await send.send((t, ids, intents))
            if "bench.stop" in intents:
                return

    async with AsyncExitStack() as stack:
        tx = await stack.enter_async_context(in_process(board, sender))
        rx = {n: await stack.enter_async_context(in_process(board, n)) for n in receivers}
        for c in [tx, *rx.values()]:
            await call(c, "whoami")
        settle_heap()
        async with anyio.create_task_group() as tg:
            for n, c in rx.items():
                tg.start_soon(receiver, n, c)
            c0 = time.process_time()
            for k in range(rounds):
                targets = receivers if broadcast else [receivers[k % len(receivers)]]
                await until_waiting(board, targets)
                args = dict(intent="info", content=f"wake round {k}",
                            recipient="role:listener" if broadcast else targets[0])
                t0 = time.perf_counter()
                out = await call(tx, "publish_message", args)
                pub_lat.append(time.perf_counter() - t0)
                last = 0.0
                for n in targets:
                    with anyio.fail_after(10):
                        t, ids, _ = await streams[n][1].receive()
                    if ids != [out["id"]]:
                        raise BenchError(f"{n} woke with messages {ids}, expected [{out['id']}]")
                    wake_lat.append(t - t0)
                    last = max(last, t - t0)
                last_lat.append(last)
                if gap_s:
                    await anyio.sleep(rng.uniform(0, 2 * gap_s))
            wake_lat.cpu_s, wake_lat.cpu_per = time.process_time() - c0, rounds  # per publish, all receivers
            for n in receivers:  # let them go
                await call(tx, "publish_message", dict(intent="bench.stop", content="stop", recipient=n))
            with anyio.fail_after(10):
                for n in receivers:
                    while "bench.stop" not in (await streams[n][1].receive())[2]:
                        pass
    return wake_lat, last_lat, pub_lat


async def wake_section(board: Board, rounds: int, gap_s: float, res: Results, seed: int) -> None:
    sec = "wake"
    rng = random.Random(seed)
    scenarios = [
        ("publish→wake, 1 waiting, direct", [f"rx{i}" for i in range(1)], False),
        ("publish→wake, 8 waiting, direct to 1", [f"rx{i}" for i in range(8)], False),
        ("publish→wake, 8 waiting, role broadcast", [f"rx{i}" for i in range(8)], True),
    ]
    for name, receivers, broadcast in scenarios:
        g = GCW.mark()
        wake, last, pub = await wake_scenario(board, receivers, rounds, broadcast, gap_s, rng)
        res.rows.append(row(sec, name, wake, gc_since=g))
        if broadcast:
            res.rows.append(row(sec, "  ...last of the 8 woken", last))
        res.rows.append(row(sec, "  ...publish_message call itself", pub))
        print(f"  .. {name:<38} p50 {pct(wake, 50):7.2f} ms  p99 {pct(wake, 99):7.2f} ms", flush=True)


# ----------------------------------------------------------------------------- 4. publish throughput


async def throughput_section(board: Board, total: int, raw_total: int, res: Results) -> None:
    sec = "publish"
    board.agents.ensure("sink")
    for senders in (1, 4):
        names = [f"tx{i}" for i in range(senders)]
        per = max(1, total // senders)
        lat = Lat()
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(in_process(board, n)) for n in names]
            for c in clients:  # warm up
                for _ in range(5):
                    await call(c, "publish_message", dict(intent="info", content="warm-up", recipient="sink"))
            settle_heap()

            async def send(c: Client, who: str) -> None:
                for k in range(per):
                    t = time.perf_counter()
                    await call(c, "publish_message", dict(intent="status_update", recipient="sink",
                                                           content=f"progress {who} {k}: 40% done, tests green"))
                    lat.append(time.perf_counter() - t)

            g = GCW.mark()
            c0, t0 = time.process_time(), time.perf_counter()
            async with anyio.create_task_group() as tg:
                for c, n in zip(clients, names):
                    tg.start_soon(send, c, n)
            wall = time.perf_counter() - t0
            lat.cpu_s = time.process_time() - c0
        res.rows.append(row(sec, f"publish_message, {senders} sender{'s' * (senders > 1)}", lat,
                            per_s=len(lat) / wall, gc_since=g))
        print(f"  .. {senders} sender(s): {len(lat) / wall:8.1f} msg/s", flush=True)
    m = board.messages
    msg = NewMessage(intent="status_update", recipient="sink", content="progress raw: 40% done, tests green")
    for _ in range(20):
        m.publish("tx0", msg)
    g = GCW.mark()
    t0 = time.perf_counter()
    lat = timed_raw(lambda: m.publish("tx0", msg), raw_total)
    wall = time.perf_counter() - t0
    res.rows.append(row(sec, "raw Messages.publish (no MCP)", lat, per_s=len(lat) / wall, gc_since=g))
    print(f"  .. raw: {len(lat) / wall:8.1f} msg/s", flush=True)


# ----------------------------------------------------------------------------- 5. publish→wake across processes


def stdio_server(home: Path, agent: str, errlog) -> Client:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEBOARD_")}
    env.update(HIVEBOARD_AGENT=agent, HIVEBOARD_LOG_LEVEL="WARNING", HIVEBOARD_CONFIG=str(home / "no-config.toml"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "hiveboard.server", "--home", str(home),
                                                                 "serve"], env=env)
    return Client(stdio_client(params, errlog=errlog))


async def cross_section(home: Path, rounds: int, calls: int, res: Results, seed: int, errlog) -> None:
    sec = "cross-process"
    rng = random.Random(seed)
    lat, early = [], 0
    async with stdio_server(home, "xa", errlog) as a, stdio_server(home, "xb", errlog) as b:
        await call(a, "whoami")
        await call(b, "whoami")
        whoami = await timed_calls(b, "whoami", {}, calls)
        for k in range(rounds):
            got: list = []

            async def wait() -> None:
                started = time.perf_counter()
                page = await call(a, "get_messages", dict(wait_seconds=30))
                got.append((time.perf_counter(), started, [m["id"] for m in page["messages"]]))

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                pause = rng.uniform(0.04, 0.08)  # time for xa's call to reach the wait; random vs the 20 ms poll
                await anyio.sleep(pause)
                t0 = time.perf_counter()
                out = await call(b, "publish_message", dict(intent="info", recipient="xa", content=f"x {k}"))
                with anyio.fail_after(10):
                    while not got:
                        await anyio.sleep(0.0002)
            t, started, ids = got[0]
            if ids != [out["id"]]:
                raise BenchError(f"xa woke with {ids}, expected [{out['id']}]")
            if t - started < pause:  # returned before the publish: it never waited (should not happen)
                early += 1
            lat.append(t - t0)
    res.rows.append(row(sec, "whoami over stdio (transport baseline)", whoami, per_s=len(whoami) / sum(whoami)))
    res.rows.append(row(sec, "publish→wake, 2 stdio processes", lat,
                        note=f"{early} returned early" if early else ""))
    print(f"  .. cross-process p50 {pct(lat, 50):.2f} ms p99 {pct(lat, 99):.2f} ms", flush=True)


# ----------------------------------------------------------------------------- printing


def print_table(res: Results, noop_p50: float) -> None:
    print("\nvs noop: p50 / noop p50. cpu ms: this process's CPU time per call, all threads (client, server and "
          "SQLite\nalike, since all run here); for publish→wake rows per publish (all receivers). Less moved by other "
          "load\non the machine than the latencies are.")
    head = (f"{'measurement':<42} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'per-second':>11} {'vs noop':>8} "
            f"{'cpu ms':>7}")
    print()
    print(head)
    print("-" * len(head))
    section = None
    for r in res.rows:
        if r.section != section:
            section = r.section
            print(f"[{section}]")
        r.vs_noop = r.p50_ms / noop_p50 if noop_p50 else None
        per_s = f"{r.per_s:>11.1f}" if r.per_s is not None else f"{'':>11}"
        vs = f"{r.vs_noop:>7.1f}x" if r.vs_noop is not None else f"{'-':>8}"
        cpu = f"{r.cpu_ms:>7.2f}" if r.cpu_ms is not None else f"{'':>7}"
        note = f"  {r.note}" if r.note else ""
        print(f"{r.measurement[:42]:<42} {r.n:>6} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {per_s} {vs} {cpu}{note}")


def verdict(res: Results) -> list[str]:
    """PASS/FAIL per target. Wake: every in-process scenario, judged on its own. Fetch: the default
    get_messages call (unread, marks read) and the browse call through MCP; the other fetch rows are
    listed as information."""
    lines = []
    n_msgs = res.load.get("messages")

    def judge(target: str, r: Row, value: float, limit: float) -> str:
        ok = value <= limit
        res.targets.append(dict(target=target, measurement=r.measurement, value_ms=value, ok=ok))
        return f"  {'PASS' if ok else 'FAIL'}  {r.measurement.strip(' .')}: {value:.2f} ms"

    wake = [r for r in res.rows if r.section == "wake" and r.measurement.startswith("publish→wake")]
    if wake:
        target = f"p99 publish→wake <= {TARGET_WAKE_P99_MS:g} ms in one process"
        lines.append(f"target {target}:")
        lines += [judge(target, r, r.p99_ms, TARGET_WAKE_P99_MS) for r in wake]
    main = [r for r in res.rows if r.section == "fetch" and r.measurement in ("inbox unread (marks 20 read)",
                                                                            "inbox browse, first page")]
    if main:
        target = f"inbox fetch p50 <= {TARGET_FETCH_P50_MS:g} ms at {n_msgs} stored messages"
        lines.append(f"target {target} (through MCP):")
        lines += [judge(target, r, r.p50_ms, TARGET_FETCH_P50_MS) for r in main]
        rest = [r for r in res.rows if r.section == "fetch" and r not in main
                and not r.measurement.startswith(("raw", "noop")) and r.p50_ms > TARGET_FETCH_P50_MS]
        if rest:
            lines.append("  (info) other fetches over it: " + ", ".join(f"{r.measurement} {r.p50_ms:.2f} ms"
                                                                        for r in rest))
        raw = [r for r in res.rows if r.section == "fetch" and r.measurement.startswith("raw")]
        worst = max(raw, key=lambda r: r.p50_ms, default=None)
        if worst is not None:
            lines.append(f"  (info) slowest raw Messages call (SQLite + models, no MCP): {worst.measurement} "
                         f"{worst.p50_ms:.2f} ms")
    return lines


# ----------------------------------------------------------------------------- main


async def run_all(board: Board, home: Path, ld: Loaded, cfg: dict, res: Results, errlog) -> float:
    sections = cfg["sections"]
    print(f"\n[fetch] as {TARGET!r}: {cfg['fetch_reps']} repetitions each", flush=True)
    noop_p50 = await fetch_section(board, ld, cfg["fetch_reps"], cfg["noop_calls"], res, fetch="fetch" in sections)
    if "wake" in sections:
        print(f"\n[wake] {cfg['wake_rounds']} rounds per scenario", flush=True)
        await wake_section(board, cfg["wake_rounds"], cfg["gap_ms"] / 1000, res, cfg["seed"])
    if "publish" in sections:
        print(f"\n[publish] {cfg['publish']} messages through MCP, {cfg['raw_publish']} raw", flush=True)
        await throughput_section(board, cfg["publish"], cfg["raw_publish"], res)
    if cfg["cross_rounds"] and "cross" in sections:
        print(f"\n[cross-process] 2 stdio server processes, {cfg['cross_rounds']} rounds", flush=True)
        await cross_section(home, cfg["cross_rounds"], cfg["noop_calls"] // 2, res, cfg["seed"], errlog)
    return noop_p50


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hiveboard message pool: publish→wake, throughput, inbox fetch at scale")
    p.add_argument("--quick", action="store_true", help="small counts, for a smoke run (10k messages)")
    p.add_argument("--messages", type=int, help="stored messages before the fetch section (100000; --quick 10000)")
    p.add_argument("--target-share", type=float, default=0.05,
                   help="share of the stored messages in the target agent's inbox (0.05: 5k of 100k)")
    p.add_argument("--unread", type=int, default=50, help="unread messages in the target's inbox (50)")
    p.add_argument("--rounds", type=int, help="publish→wake rounds per in-process scenario (200; --quick 30)")
    p.add_argument("--cross-rounds", type=int, help="cross-process publish→wake rounds (50; --quick 10; 0 skips)")
    p.add_argument("--gap-ms", type=float, default=10.0,
                   help="mean random pause between wake rounds, ms (10); random so rounds do not lock in "
                   "phase with the 20 ms cross-process watcher")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (database, stdio server log)")
    p.add_argument("--sections", default="fetch,wake,publish,cross",
                   help="which sections to run, comma-separated (default all: fetch,wake,publish,cross); "
                   "the bulk load and the noop baseline always run")
    p.add_argument("--no-analyze", dest="analyze", action="store_false",
                   help="skip Store.optimize() (ANALYZE) after the bulk load; the server runs it at open and "
                   "every 10k messages, so the default matches a real server (A/B for planner statistics)")
    p.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                   help="skip gc.freeze() once each section's servers and clients are up; `hiveboard serve` "
                   "freezes its start-up heap, so the default matches it (A/B for full-GC pauses)")
    args = p.parse_args(argv)
    global GC_FREEZE
    GC_FREEZE = args.gc_freeze

    q = args.quick
    cfg = dict(
        messages=args.messages or (10_000 if q else 100_000),
        target_share=args.target_share, unread=args.unread,
        wake_rounds=args.rounds or (30 if q else 200),
        cross_rounds=args.cross_rounds if args.cross_rounds is not None else (10 if q else 50),
        fetch_reps=50 if q else 300, noop_calls=100 if q else 500,
        publish=200 if q else 1000, raw_publish=500 if q else 3000,
        gap_ms=args.gap_ms, seed=args.seed, quick=q, gc_freeze=args.gc_freeze, analyze=args.analyze,
        sections=[x.strip() for x in args.sections.split(",") if x.strip()])
    unknown = set(cfg["sections"]) - {"fetch", "wake", "publish", "cross"}
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from fetch, wake, publish, cross")

    gc.callbacks.append(GCW)
    started = time.perf_counter()
    res = Results(machine=machine_info(), settings=cfg)
    m = res.machine
    print(f"machine: {m['cpu_count']} cpus ({m['usable_cpus']} usable), {m['implementation']} {m['python']}, "
          f"mcp {m['mcp']}, sqlite {m['sqlite']}, {m['platform']}")

    tmp = Path(tempfile.mkdtemp(prefix="hiveboard-bench-msg-"))
    home = tmp / "home"
    errlog = open(tmp / "stdio-servers.log", "w")
    board = None
    code = 0
    try:
        board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
        ld = bulk_load(board, cfg["messages"], cfg["target_share"], cfg["unread"], cfg["seed"])
        res.load = asdict(ld) | dict(target_unread_ids=len(ld.target_unread_ids))
        print(f"loaded {ld.messages} messages, {ld.inbox_rows} inbox rows over {len(ld.agents)} agents in "
              f"{ld.load_s:.1f} s; {TARGET!r} has {ld.target_messages} ({len(ld.target_unread_ids)} unread)")
        if args.analyze:
            t = time.perf_counter()
            board.store.optimize()
            print(f"Store.optimize (ANALYZE) in {(time.perf_counter() - t) * 1000:.0f} ms")
        try:
            noop_p50 = anyio.run(run_all, board, home, ld, cfg, res, errlog)
        except BenchError as exc:
            res.problems.append(str(exc))
            print(f"\nPROBLEM: {exc}", file=sys.stderr)
            noop_p50 = next((r.p50_ms for r in res.rows if r.measurement.startswith("noop")), 0.0)
            code = 1
        print_table(res, noop_p50)
        print()
        for line in verdict(res):
            print(line)
        res.total_s = time.perf_counter() - started
        print(f"total {res.total_s:.1f} s")
        if args.json:
            Path(args.json).write_text(json.dumps(asdict(res), indent=2, ensure_ascii=False))
            print(f"wrote {args.json}")
        return code
    except BaseException:
        errlog.flush()
        tail = (tmp / "stdio-servers.log").read_text(errors="replace")[-3000:]
        if tail.strip():
            print(f"\n--- stdio server log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        gc.callbacks.remove(GCW)
        if board is not None:
            board.store.close()
        errlog.close()
        remove_unless_kept(tmp, args.keep)


if __name__ == "__main__":
    sys.exit(main())
