"""The web benches' board: a data directory seeded with 1,000 cards over the six columns (types, priorities,
labels on most, dependencies on some todo cards, a card with a long history and thread), tokens the operator's
way (`hiveboard agent add`), one real `hiveboard serve --http` on it, a person's session, and 8 MCP agents
working on their own cards (create → claim → note → complete) for the live benches.

The server runs with review off (HIVEBOARD_REVIEW__ENABLED=false, so complete_task moves a card to done at once;
the memory is on, as a plain `serve` has it) at its default log level (WARNING): at INFO uvicorn logs every
request, which would be in the measured server CPU, so the bench picks a free port itself.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from pathlib import Path

from _harness import LoggedServer, call, hiveboard_cmd, server_env


def web_env(home: Path) -> dict:
    return server_env(home, HIVEBOARD_REVIEW__ENABLED="false")


def agent_tokens(home: Path, person: str, names: list[str]) -> dict[str, str]:
    """Tokens the operator's way, `hiveboard agent add NAME` (the person with --role human); the first
    alone (it creates the database), the rest side by side (each is an interpreter start)."""

    def run(name: str, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            hiveboard_cmd("--home", str(home), "agent", "add", name, *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=web_env(home),
        )

    tokens = {}
    first = run(person, "--role", "human")
    out, err = first.communicate(timeout=120)
    if first.returncode:
        raise RuntimeError(f"hiveboard agent add {person} failed: {err}")
    tokens[person] = out.strip()
    procs = {n: run(n) for n in names}
    for n, p in procs.items():
        out, err = p.communicate(timeout=120)
        if p.returncode:
            raise RuntimeError(f"hiveboard agent add {n} failed: {err}")
        tokens[n] = out.strip()
    return tokens


def start_server(home: Path, log: Path, timeout: float = 180.0) -> LoggedServer:
    """`hiveboard serve --http` on a free loopback port, up once GET /health answers."""
    server = LoggedServer(log, stop_timeout=15.0, home=home)
    argv = hiveboard_cmd("--home", str(home), "serve", "--http", "--port", str(server.port))
    return server.start(argv, web_env(home), timeout=timeout, health=True)


def login(server: LoggedServer, token: str) -> str:
    """A person's session cookie: POST /login with their token, as the login form sends it."""
    import httpx

    answer = httpx.post(server.base + "/login", data={"token": token, "next": "/board"}, timeout=30)
    cookie = answer.cookies.get("hiveboard_session")
    if answer.status_code != 303 or not cookie:
        raise RuntimeError(f"login answered {answer.status_code}: {answer.text[:300]}")
    return cookie


def seeded(home: Path, cards: int, rng: random.Random) -> dict:
    """Tokens for a person (lee), 8 agents and a probe, then `cards` cards seeded through the board; what the
    benches need of it (ids by status, the history card, the todo column's second page)."""
    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board

    names = [f"agent-{i}" for i in range(8)]
    t0 = time.perf_counter()
    tokens = agent_tokens(home, "lee", [*names, "probe"])
    print(f"tokens: `hiveboard agent add` x{len(tokens)} in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    board = Board(Store(home / "hiveboard.db"), lease_seconds=86_400)  # seeded leases outlive the run
    try:
        out = seed(board, names, cards - 1, rng)
        out["history_card"] = seed_history_card(board, names)
        with board.store.write() as db:
            # the seed's outputs would be embedded by the server at start; the benches measure later work
            db.execute("DELETE FROM memory_outbox")
        board.store.optimize()
        out["counts"] = board.views.counts()
        out["todo_after"] = board.views.column("todo").next_after
        print(
            f"seeded {sum(out['counts'].values())} cards in {time.perf_counter() - t0:.1f} s: "
            + ", ".join(f"{k} {v}" for k, v in out["counts"].items())
        )
        return dict(out, tokens=tokens, board=board)
    except BaseException:
        board.store.close()
        raise


MIX = {"todo": 0.30, "in_progress": 0.12, "review": 0.08, "done": 0.38, "blocked": 0.07, "needs_human": 0.05}
TYPES = ("code", "code", "code", "test", "bug", "docs", "refactor", "research", "ops", "design")
LABELS = ("api", "ui", "db", "auth", "perf", "infra", "flaky", "docs", "security", "mobile", "billing", "search")
VERBS = ("Add", "Fix", "Refactor", "Document", "Test", "Speed up", "Remove", "Migrate", "Review", "Split")
NOUNS = (
    "the login handler",
    "rate limiting on /api",
    "the <billing> export & CSV",
    "search ranking",
    "the flaky upload test",
    "session cookies",
    "the migration to v2 schema",
    "error pages",
    'the admin\'s "bulk edit"',
    "cache invalidation",
    "the onboarding docs",
    "retry with backoff",
)


def seed(board, agents: list[str], n: int, rng: random.Random) -> dict:
    """n cards over the columns, through the board as agents use it; returns what the bench needs."""
    from hiveboard.board.models import NewTask

    statuses = [s for s, frac in MIX.items() for _ in range(round(n * frac))]
    statuses = (statuses + ["todo"] * n)[:n]
    rng.shuffle(statuses)
    ids, by_status = [], {s: [] for s in MIX}
    for i, status in enumerate(statuses):
        creator, worker = agents[i % len(agents)], agents[(i + 3) % len(agents)]
        labels = rng.sample(LABELS, rng.choice((0, 0, 1, 1, 2, 3)))
        deps = rng.sample(ids, rng.randint(1, 2)) if status == "todo" and len(ids) > 2 and rng.random() < 0.3 else []
        new = NewTask(
            title=f"{rng.choice(VERBS)} {rng.choice(NOUNS)} ({i})",
            task_type=rng.choice(TYPES),
            description="Seeded by bench/bench_web.py. " * rng.randint(1, 6),
            priority=rng.choices(("low", "medium", "high", "critical"), (2, 5, 3, 1))[0],
            labels=labels,
            depends_on=deps,
            acceptance_criteria=[f"criterion {k}" for k in range(rng.randint(0, 3))],
        )
        card = board.create(creator, new)
        ids.append(card.id)
        by_status[status].append(card.id)
        if status == "todo":
            continue
        claim = board.claim(worker, card.id)
        assert claim.claimed, claim.message
        if status == "in_progress":
            if rng.random() < 0.5:
                board.update(worker, card.id, token=claim.token, note="progress: handler written, tests next")
        elif status in ("review", "done"):
            board.complete(
                worker,
                card.id,
                claim.token,
                "done by the seed: " + "the work. " * 20,
                "seeded output",
                to_status=status,
            )
        else:
            board.update(
                worker,
                card.id,
                token=claim.token,
                status=status,
                reason="waiting on the API owner to confirm the contract for the v2 endpoint",
            )
    return {"ids": ids, "by_status": by_status}


def seed_history_card(board, agents: list[str]) -> int:
    """One card with a long history (claims, notes, blocks, a release) and a thread of 20 messages."""
    from hiveboard.board.messages import NewMessage
    from hiveboard.board.models import NewTask

    a, b = agents[0], agents[1]
    card = board.create(
        a,
        NewTask(
            title="Card with a long history & thread",
            task_type="code",
            labels=["api", "perf"],
            description="The card page bench reads this one.\n" * 10,
            acceptance_criteria=["p99 under 50 ms", "no N+1 queries", "documented"],
        ),
    )
    claim = board.claim(b, card.id)
    for k in range(3):
        board.update(b, card.id, token=claim.token, status="blocked", reason=f"waiting for review of design {k}")
        board.update(b, card.id, token=claim.token, status="in_progress")
    for k in range(25):
        board.update(b, card.id, token=claim.token, note=f"progress {k}: step {k} of the migration is done")
    board.release(b, card.id, claim.token, "handing over to a colleague")
    claim = board.claim(a, card.id)
    for k in range(10):
        board.update(a, card.id, token=claim.token, note=f"progress after hand-over {k}")
    for k in range(20):
        board.messages.publish(
            agents[k % len(agents)],
            NewMessage(
                intent=("comment", "question", "answer", "status_update")[k % 4],
                task_id=card.id,
                content=f"Thread message {k}: the <endpoint> returns 502 under load & retries make it worse. " * 2,
            ),
        )
    return card.id


# ----------------------------------------------------------------------------- agents at work


class WindowOver(Exception):
    """An agent's window has ended: no further tool call is started."""


async def work(
    client, name: str, stop_at: float, pace: float | None, stop: asyncio.Event | None = None, phase: float = 0.0
) -> int:
    """One agent's loop on its own cards: create → claim → note → complete; ops done (none started after
    stop_at). pace: tool calls per second (None: flat out); phase: this agent's offset into the pace's
    period (fraction), so paced agents do not all call at the same instant."""
    ops, seq = 0, 0
    next_at = time.monotonic() + (phase / pace if pace else 0.0) - (1 / pace if pace else 0.0)

    async def op(tool: str, **args):
        nonlocal ops, next_at
        if pace:
            next_at += 1 / pace
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if time.monotonic() >= stop_at or (stop is not None and stop.is_set()):
            raise WindowOver
        result = await call(client, tool, **args)
        ops += 1
        return result

    try:
        while True:
            seq += 1
            card = await op(
                "create_task",
                title=f"{name} cycle {seq}",
                task_type="ops",
                labels=["bench"],
                description="made by bench/bench_web.py",
                priority="medium",
            )
            claim = await op("claim_task", task_id=card["id"])
            await op(
                "update_task", task_id=card["id"], token=claim["token"], note="progress: handler written, tests next"
            )
            await op(
                "complete_task",
                task_id=card["id"],
                token=claim["token"],
                output="done by the bench: the work",
                summary="bench cycle",
            )
    except WindowOver:
        return ops


async def run_agents(
    agents: dict, seconds: float, pace: float | None, stop: asyncio.Event | None = None
) -> tuple[int, float]:
    stop_at = time.monotonic() + seconds
    t0 = time.perf_counter()
    counts = await asyncio.gather(
        *(work(c, n, stop_at, pace, stop, phase=k / len(agents)) for k, (n, c) in enumerate(agents.items()))
    )
    return sum(counts), time.perf_counter() - t0


def outbox_size(db_path: Path) -> int:
    import sqlite3

    with sqlite3.connect(db_path, timeout=30) as db:
        return db.execute("SELECT count(*) FROM memory_outbox").fetchone()[0]


async def settle(db_path: Path, limit: float = 90.0, server: LoggedServer | None = None) -> None:
    """Wait until the server's memory indexer has embedded what the last window queued, so one window's
    leftover background work does not land in the next window's server CPU."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and await asyncio.to_thread(outbox_size, db_path):
        await asyncio.sleep(0.25)
    if server is not None:  # and until the server is quiet: requests still in flight, the index's own work
        quiet_by = time.monotonic() + 15
        while time.monotonic() < quiet_by:
            c0 = server.cpu()
            await asyncio.sleep(0.5)
            if server.cpu() - c0 <= 0.03:  # at most 6% of a core over half a second
                break
    await asyncio.sleep(0.3)


def live_pages(server: LoggedServer, cookie: str) -> int:
    """How many live pages the server streams to: /health says it to a person (and nothing to anyone else)."""
    import httpx

    answer = httpx.get(server.base + "/health", headers={"cookie": f"hiveboard_session={cookie}"}, timeout=10)
    return answer.json()["live_pages"]
