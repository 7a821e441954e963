"""bench_messages.py's pool and rows: a board bulk-loaded with N messages over 20 agents (one of them, `target`,
with 5% of them in its inbox, 50 unread), the command line of bench_messages.py, and its table.

The load inserts the messages and their inbox rows the way Messages.post would have, in one transaction, with a
realistic mix: direct, role broadcasts, everyone, task-pool messages.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _harness import (
    Col,
    GcWatch,
    finish,
    stats,
    table,
)

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board

TARGET = "target"
GCW = GcWatch()  # installed by each bench for its run; rows say how many full collections landed in them


ROLES = {"engineer": 8, "qa": 4, "research": 4, "lead": 2, "ops": 2}  # 20 agents; target is a lead
CHANNELS = ["api-design", "infra", "release", "standup", "db-migration", "frontend", "security", "perf"]
DIRECT_INTENTS = ["request_help", "answer", "info", "critique", "approval", "test_results", "proposal.feedback"]
ROLE_INTENTS = ["task_assignment", "request_help", "proposal", "info"]
EVERYONE_INTENTS = ["info", "consensus_reached", "proposal"]
POOL_INTENTS = ["status_update", "task_claim", "output.complete", "test_results", "output.updated", "critique"]
WORDS = (
    "the api handler returns a stale cursor when the page is empty so the client loops; "
    "fixed by checking next_cursor before retrying. tests pass on sqlite 3.45 and 3.46, "
    "latency unchanged. please review the migration and the edge case with zero rows. "
).split()


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
            db.execute(
                "INSERT INTO agents (name, role, token_hash, created_at) VALUES (?, ?, ?, ?)",
                [name, role_of[name], f"bench-{name}", t0],
            )
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
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            task_rows,
        )

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
            msg_rows.append(
                (
                    mid,
                    intent,
                    task_id,
                    sender,
                    recipient,
                    thread,
                    reply_to,
                    content[:500],
                    content,
                    rng.choices([0, 1, 2, 3], [10, 70, 15, 5])[0],
                    "{}",
                    ts,
                )
            )
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
            "priority, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            msg_rows,
        )
        db.conn.executemany("INSERT INTO inbox (agent, message_id, read_at, acked_at) VALUES (?, ?, ?, ?)", inbox_rows)

    q = board.store.db.execute
    target_task, task_intent = q(
        "SELECT m.task_id, m.intent FROM inbox i JOIN messages m ON m.id = i.message_id WHERE i.agent = ? AND "
        "m.task_id IS NOT NULL GROUP BY m.task_id, m.intent ORDER BY count(*) DESC LIMIT 1",
        [TARGET],
    ).fetchone()
    rare_intent = q(
        "SELECT m.intent FROM inbox i JOIN messages m ON m.id = i.message_id WHERE i.agent = ? "
        "GROUP BY m.intent ORDER BY count(*) LIMIT 1",
        [TARGET],
    ).fetchone()[0]
    busy_sender = q(
        "SELECT m.sender FROM inbox i JOIN messages m ON m.id = i.message_id WHERE i.agent = ? "
        "GROUP BY m.sender ORDER BY count(*) DESC LIMIT 1",
        [TARGET],
    ).fetchone()[0]
    pool_task = q(
        "SELECT task_id FROM messages WHERE task_id IS NOT NULL AND (recipient IS NULL OR recipient = "
        "'everyone' OR recipient LIKE 'role:%') GROUP BY task_id ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()[0]
    read_ids = [mid for mid in target_ids if mid not in unread]
    return Loaded(
        messages=total,
        inbox_rows=len(inbox_rows),
        agents=names,
        target_messages=len(target_ids),
        target_unread_ids=sorted(unread),
        target_task=target_task,
        target_task_intent=task_intent,
        rare_intent=rare_intent,
        busy_sender=busy_sender,
        pool_task=pool_task,
        mid_read_id=read_ids[len(read_ids) // 2] if read_ids else 0,
        load_s=time.perf_counter() - t_start,
    )


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


def row(section: str, name: str, lat, per_s: float | None = None, note: str = "", gc_since: int | None = None) -> Row:
    """A row of latencies (a Lat's CPU time per call, or per `cpu_per`); with gc_since, the full collections since."""
    if gc_since is not None:
        note = ", ".join(x for x in (note, GCW.note(gc_since)) if x)
    s = stats(lat)
    return Row(section, name, s["n"], s["p50_ms"], s["p99_ms"], per_s=per_s, cpu_ms=s["cpu_ms"], note=note)


def print_rows(rows: list[Row], noop_p50: float) -> None:
    print(
        "\nvs noop: p50 / noop p50. cpu ms: this process's CPU time per call, all threads (client, server and "
        "SQLite\nalike, since all run here); for publish→wake rows per publish (all receivers). Less moved by other "
        "load\non the machine than the latencies are.\n"
    )
    cols = [Col("measurement", 42, left=True, clip=True), Col("n", 6), Col("p50 ms", 8, ".2f"), Col("p99 ms", 8, ".2f")]
    cols += [
        Col("per-second", 11, ".1f", blank=""),
        Col("vs noop", 8, ".1f", suffix="x"),
        Col("cpu ms", 7, ".2f", blank=""),
    ]
    lines: list = []
    section = None
    for r in rows:
        if r.section != section:
            section = r.section
            lines.append(f"[{section}]")
        r.vs_noop = r.p50_ms / noop_p50 if noop_p50 else None
        lines.append((r.measurement, r.n, r.p50_ms, r.p99_ms, r.per_s, r.vs_noop, r.cpu_ms, r.note))
    table(cols, lines)


def add_pool_args(p) -> None:
    """The message bench's own arguments: the bulk load, the seed, the run's GC and planner settings."""
    p.add_argument("--messages", type=int, help="stored messages (100000; --quick 10000)")
    p.add_argument(
        "--target-share", type=float, default=0.05, help="share of the stored messages in the target's inbox (0.05)"
    )
    p.add_argument("--unread", type=int, default=50, help="unread messages in the target's inbox (50)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="skip Store.optimize() (ANALYZE) after the bulk load; the server runs it at open and "
        "every 10k messages, so the default matches a real server (A/B for planner statistics)",
    )
    p.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="skip gc.freeze() once each section's servers and clients are up; `hiveboard serve` "
        "freezes its start-up heap, so the default matches it (A/B for full-GC pauses)",
    )


def loaded_board(home: Path, args, res: Results) -> tuple[Board, Loaded]:
    """A board in `home` bulk-loaded as the arguments say (and ANALYZEd, unless --no-analyze)."""
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    ld = bulk_load(
        board, args.messages or (10_000 if args.quick else 100_000), args.target_share, args.unread, args.seed
    )
    res.load = asdict(ld) | dict(target_unread_ids=len(ld.target_unread_ids))
    print(
        f"loaded {ld.messages} messages, {ld.inbox_rows} inbox rows over {len(ld.agents)} agents in "
        f"{ld.load_s:.1f} s; {TARGET!r} has {ld.target_messages} ({len(ld.target_unread_ids)} unread)"
    )
    if args.analyze:
        t = time.perf_counter()
        board.store.optimize()
        print(f"Store.optimize (ANALYZE) in {(time.perf_counter() - t) * 1000:.0f} ms")
    return board, ld


def judge(res: Results, target: str, r: Row, value: float, limit: float) -> str:
    """One row against a target: recorded in the results, and the line that says PASS or FAIL."""
    ok = value <= limit
    res.targets.append(dict(target=target, measurement=r.measurement, value_ms=value, ok=ok))
    return f"  {'PASS' if ok else 'FAIL'}  {r.measurement.strip(' .')}: {value:.2f} ms"


def report(res: Results, noop_p50: float, verdict: list[str], started: float, json_path: str | None) -> None:
    """The end of a message bench run: the rows, the verdict lines, the total time, the JSON."""
    print_rows(res.rows, noop_p50)
    finish(res, started, verdict, json_path)
