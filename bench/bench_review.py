"""Critic review parallelism: review wall time ÷ slowest critic for 1-6 LLM critics of fixed delay.

    .venv/bin/python bench/bench_review.py            # full run, about 1-2 min on 2 cores
    .venv/bin/python bench/bench_review.py --quick    # smoke run, a few seconds per N

One process, one temp directory (removed at the end). Every LLM critic talks to the fake
OpenAI-compatible server of the tests (tests/fake_llm.py) through the real `openai` client; the
fake sleeps a fixed `--delay` per request. For N = 1..6 critics, each on its own lens, a fresh
Board, ReviewEngine and ReviewWorker (2 threads, as `hiveboard serve` runs) and
`build_server(board, ..., review=engine)`; an in-process `mcp.Client` creates, claims and completes
a card, then waits in get_review until the round is finished. The built-in offline critics are off
and agent critics are not asked, so only the N LLM critics run.

Target (issue 5, 2 cores): review wall time ÷ slowest critic ≤ 1.2 for 1-6 critics. PASS/FAIL is
printed per delay; a missed target is reported, never fatal (no timing asserts).
A second table times the offline default review (bandit + ruff, no LLM) of one ~50-line Python file.

The pricing card (skipped, with a note, where `detect()` finds no sandbox): a 50-line pricing module and its
10 tests, its whole default review end to end (ReviewEngine with the default ReviewConfig, acceptance in the
sandbox, through MCP), complete_task -> verdict. Target (issue, 2 cores): <= 1 s p50. What the sandbox itself
costs against a bare subprocess is bench_sandbox.py's.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import openai
from _harness import (
    Col,
    bench_parser,
    call,
    finished_round,
    from_tests,
    hand_in,
    header,
    in_process,
    line,
    machine_info,
    machine_line,
    noop,
    pct,
    quiet_loggers,
    scratch,
    table,
    ts,
    write_json,
)
from _review_cards import ARTIFACT, CARD
from mcp import Client
from mcp.server.mcpserver import MCPServer

FakeLLM = from_tests("fake_llm").FakeLLM

from hiveboard.board.db import Store  # noqa: E402
from hiveboard.board.tasks import Board  # noqa: E402
from hiveboard.critics.config import CriticConfig, ReviewConfig  # noqa: E402
from hiveboard.critics.engine import ReviewEngine, ReviewWorker  # noqa: E402
from hiveboard.critics.sandbox import Box, detect  # noqa: E402

TARGET = 1.2
CARD_TARGET = 1.0  # seconds, p50 of complete_task -> verdict for the pricing card's default review (issue, 2 cores)
LENSES = ("security", "correctness", "performance", "tests", "docs", "style")
OFF = {
    name: CriticConfig(lens=lens, backend=backend, enabled=False)
    for name, lens, backend in (
        ("bandit", "security", "bandit"),
        ("ruff", "correctness", "ruff"),
        ("ruff-style", "style", "ruff"),
        ("acceptance", "tests", "acceptance"),
    )
}


def phases(board: Board, review_id: int) -> dict:
    """Where the round's time went, from the raw timestamps (seconds): worker pickup, before the
    first critic started, critic span, after the last critic finished (wait loop, synthesis)."""
    db = board.store.db
    created, started, finished = db.execute(
        "SELECT created_at, started_at, finished_at FROM reviews WHERE id = ?", [review_id]
    ).fetchone()
    c0, c1 = db.execute(
        "SELECT min(started_at), max(finished_at) FROM critiques WHERE review_id = ?", [review_id]
    ).fetchone()
    return dict(pickup=started - created, pre=c0 - started, span=c1 - c0, post=finished - c1)


async def one_review(c: Client, board: Board, n: int, artifacts: list[dict] | None = None) -> dict:
    card = await call(
        c,
        "create_task",
        title=f"bench card {n}",
        task_type="bench",
        description="review me",
        acceptance_criteria=["it works"],
    )
    await hand_in(
        c,
        card["id"],
        output="done; see artifact",
        summary="inventory module",
        artifacts=artifacts or [{"name": "inventory.py", "kind": "code", "content": ARTIFACT}],
    )
    t0 = time.perf_counter()
    last = await finished_round(c, card["id"], 60)
    client = time.perf_counter() - t0
    crit = {x["critic"]: x["seconds"] for x in last["critiques"]}
    bad = [x["critic"] for x in last["critiques"] if x["status"] != "ok" and x["status"] != "skipped"]
    if bad:
        print(f"  warning: critics {bad} did not finish ok: {[x['error'] for x in last['critiques']]}")
    return dict(
        wall=ts(last["finished_at"]) - ts(last["started_at"]),
        client=client,
        slowest=max(s for s in crit.values() if s is not None),
        crit=crit,
        status={x["critic"]: x["status"] for x in last["critiques"]},
        verdict=last.get("verdict"),
        **phases(board, last["review_id"]),
    )


async def run_config(home: Path, config: ReviewConfig, reps: int, artifacts: list[dict] | None = None) -> list[dict]:
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    engine = ReviewEngine(board, config)
    worker = ReviewWorker(engine, threads=2).start()
    try:
        async with in_process(board, review=engine) as c:
            await one_review(c, board, 0, artifacts)  # warm-up: first connections, imports, first SQLite pages
            return [await one_review(c, board, i + 1, artifacts) for i in range(reps)]
    finally:
        worker.stop()
        board.store.close()


def baselines(fake: FakeLLM, reps: int) -> tuple[list[float], list[float]]:
    client = openai.OpenAI(base_url=fake.url, api_key="not-needed", max_retries=0)
    msgs = [{"role": "system", "content": "You are the security critic."}, {"role": "user", "content": "x"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": {}}}
    llm = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        client.chat.completions.create(model="fake", messages=msgs, temperature=0, response_format=fmt)
        llm.append(time.perf_counter() - t0)

    async def noop_calls() -> list[float]:
        server = MCPServer("bench-noop")
        server.add_tool(noop, name="noop")
        out = []
        async with Client(server) as c:
            for _ in range(201):
                t0 = time.perf_counter()
                await c.call_tool("noop", {})
                out.append(time.perf_counter() - t0)
        return out[1:]

    return llm[1:], anyio.run(noop_calls)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def code_config(config: ReviewConfig) -> ReviewConfig:
    """The config with the `bench` task type reviewed by the lenses of task_type `code`."""
    return config.model_copy(update={"task_types": {"bench": config.lenses_for("code")}})


LLM_COLS = [
    Col("delay", 5, "g"),
    Col("N", 2),
    Col("wall s", 7, ".3f"),
    Col("slowest", 7, ".3f"),
    Col("ratio", 6, ".3f"),
    Col("worst", 6, ".3f"),
    Col("client", 7, ".3f"),
    Col("cl/slow", 7, ".3f"),
    Col("pickup", 6, ".1f"),
    Col("pre", 5, ".1f"),
    Col("span", 6, ".1f"),
    Col("post", 5, ".1f"),
]


def llm_table(fake: FakeLLM, delays: list[float], max_critics: int, reps: int, home: Path) -> list[dict]:
    """Review wall time over the slowest critic for 1..max_critics LLM critics, per fake-LLM delay."""
    print(
        f"\nLLM critics only, {reps} reviews per row (after one warm-up). wall = round finished_at - "
        "started_at; slowest = max critic seconds; client = complete_task returned -> get_review verdict."
    )
    print(
        "Phases (median ms): pickup = queued -> worker took it; pre = took -> first critic started; "
        "span = first critic start -> last critic end; post = last critic end -> verdict."
    )
    header(LLM_COLS)
    rows = []
    for delay in delays:
        fake.delay["*"] = delay
        for n in range(1, max_critics + 1):
            lenses = list(LENSES[:n])
            critics = {
                f"llm-{lens}": CriticConfig(
                    lens=lens, backend="llm", model=f"fake-{lens}", base_url=fake.url, api_key_env=None
                )
                for lens in lenses
            }
            config = ReviewConfig(
                critics={**OFF, **critics}, task_types={"bench": lenses}, agent_deadline=0, poll_seconds=0.05
            )
            runs = anyio.run(run_config, home / f"d{delay}-n{n}", config, reps)
            ratios = [r["wall"] / r["slowest"] for r in runs]
            row = dict(
                delay=delay,
                critics=n,
                wall=med([r["wall"] for r in runs]),
                slowest=med([r["slowest"] for r in runs]),
                ratio=med(ratios),
                worst=max(ratios),
                client=med([r["client"] for r in runs]),
                client_ratio=med([r["client"] / r["slowest"] for r in runs]),
                **{k: med([r[k] for r in runs]) for k in ("pickup", "pre", "span", "post")},
                runs=runs,
            )
            rows.append(row)
            line(
                LLM_COLS,
                [delay, n, *(row[k] for k in ("wall", "slowest", "ratio", "worst", "client", "client_ratio"))]
                + [row[k] * 1000 for k in ("pickup", "pre", "span", "post")],
            )
        runs = [r for row in rows if row["delay"] == delay for r in row["runs"]]
        worst = max(r["wall"] / r["slowest"] for r in runs)
        gap, pre, post = (
            med([r["client"] - r["wall"] for r in runs]),
            max(r["pre"] for r in runs),
            max(r["post"] for r in runs),
        )
        print(
            f"  (info) client - wall: median {gap * 1000:.0f} ms (get_review wakes on the "
            f"review's commits); longest pre {pre * 1000:.0f} ms, longest post {post * 1000:.0f} ms"
        )
        print(
            f"target wall/slowest <= {TARGET} for 1-{max_critics} critics at delay {delay:g} s: "
            f"{'PASS' if worst <= TARGET else 'FAIL'} (worst single review {worst:.3f})"
        )
    return rows


def critic_names(runs: list[dict]) -> list[str]:
    return sorted({k for r in runs for k, v in r["crit"].items() if v is not None})


def offline_table(reps: int, home: Path) -> list[dict]:
    """The offline default review (built-in bandit + ruff, execution off) of the inventory module."""
    runs = anyio.run(run_config, home / "offline", code_config(ReviewConfig(agent_deadline=0, poll_seconds=0.05)), reps)
    series = [
        ("review wall (engine)", [r["wall"] for r in runs]),
        ("client (complete->verdict)", [r["client"] for r in runs]),
        *(
            (
                f"critic {name}" + (" (skipped)" if runs[-1]["status"][name] == "skipped" else ""),
                [r["crit"][name] for r in runs],
            )
            for name in critic_names(runs)
        ),
    ]
    ratios = [r["wall"] / r["slowest"] for r in runs]
    table(
        [Col("measurement", 28, left=True), Col("median", 8, ".1f"), Col("worst", 8, ".1f")],
        [(label, med(xs) * 1000, max(xs) * 1000) for label, xs in series]
        + [("wall / slowest critic", f"{med(ratios):.3f}", f"{max(ratios):.3f}")],
        f"Offline default review (task_type code lenses, built-in critics, no LLM), one "
        f"{ARTIFACT.count(chr(10))}-line Python artifact, {len(runs)} reviews: median / worst ms",
    )
    return runs


def card_table(box: Box, reps: int, home: Path) -> list[dict]:
    """The pricing card's default review end to end: bandit, ruff, ruff-style, acceptance in the sandbox."""
    runs = anyio.run(run_config, home / "card", code_config(ReviewConfig()), reps, CARD)
    ok = all(r["status"].get("acceptance") == "ok" for r in runs)
    verdicts = ", ".join(f"{v} {n}" for v, n in Counter(str(r["verdict"]) for r in runs).most_common())
    series = [
        ("client: complete_task -> verdict", [r["client"] for r in runs]),
        ("review wall (engine)", [r["wall"] for r in runs]),
        *((f"critic {name}", [r["crit"][name] for r in runs]) for name in critic_names(runs)),
    ]
    table(
        [Col("measurement", 34, left=True), Col("p50", 8, ".1f"), Col("p95", 8, ".1f"), Col("max", 8, ".1f")],
        [(label, pct(xs, 50), pct(xs, 95), max(xs) * 1000) for label, xs in series],
        f"Default review of the pricing card end to end (ReviewConfig(), task_type code lenses, critics in "
        f"parallel, acceptance in {box.name}; in-process MCP client): {len(runs)} reviews "
        f"(verdicts: {verdicts}), ms" + ("" if ok else "  WARNING: acceptance did not run ok in each"),
    )
    p50 = pct([r["client"] for r in runs], 50) / 1000
    print(
        f"target complete_task -> verdict p50 <= {CARD_TARGET:g} s (2 cores): "
        f"{'PASS' if p50 <= CARD_TARGET else 'FAIL'} (p50 {p50:.3f} s)"
    )
    return runs


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="2 reps, one delay, 3 offline reps, 5 card reps")
    p.add_argument("--delay", type=float, default=1.0, help="fake LLM seconds per request (default 1.0)")
    p.add_argument("--also-delay", type=float, default=0.25, help="a second, smaller delay in the same table (0: skip)")
    p.add_argument("--max-critics", type=int, default=6)
    p.add_argument("--reps", type=int, default=5, help="reviews per row (plus one warm-up)")
    p.add_argument("--offline-reps", type=int, default=5, help="offline default reviews (0: skip the table)")
    p.add_argument("--card-reps", type=int, default=20, help="default reviews of the pricing card (0: skip)")
    args = p.parse_args(argv)
    quiet_loggers()
    if args.quick:
        args.reps, args.also_delay, args.offline_reps = 2, 0, min(args.offline_reps, 3)
        args.card_reps = min(args.card_reps, 5)
    info = machine_info("openai", "ruff", "bandit", "pytest")
    info["loadavg_start"] = round(os.getloadavg()[0], 2)
    print(machine_line(info))
    fake = FakeLLM()
    out: dict = {"machine": info, "rows": [], "offline": None, "card": None}
    try:
        with scratch("hiveboard-bench-review-", args.keep) as home:
            fake.delay["*"] = args.delay
            llm, noop_lat = baselines(fake, 3)
            print(
                f"baselines: one fake-LLM call through the openai client at delay {args.delay:g} s: "
                f"median {med(llm) * 1000:.1f} ms (floor of every critic); MCP noop round trip in-process: "
                f"p50 {pct(noop_lat, 50):.2f} ms, p99 {pct(noop_lat, 99):.2f} ms"
            )
            delays = [d for d in (args.delay, args.also_delay) if d > 0] if args.max_critics else []
            if delays:
                out["rows"] = llm_table(fake, delays, args.max_critics, args.reps, home)
            if args.offline_reps:
                out["offline"] = offline_table(args.offline_reps, home)
            sandbox = detect() if args.card_reps else None
            if sandbox is not None and sandbox.box is None:
                print(f"\npricing card skipped: {sandbox.reason}")
            elif sandbox is not None:
                out["card"] = card_table(sandbox.box, args.card_reps, home)
    finally:
        fake.close()
    info["loadavg_end"] = round(os.getloadavg()[0], 2)
    print(f"\nload average {info['loadavg_start']:.2f} at start, {info['loadavg_end']:.2f} at end")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
