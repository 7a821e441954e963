"""Critic review parallelism: review wall time ÷ slowest critic for 1-6 LLM critics of fixed delay.

    /work/venv/bin/python bench/bench_review.py            # full run, about 1-2 min on 2 cores
    /work/venv/bin/python bench/bench_review.py --quick    # smoke run, a few seconds per N

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

Sandbox tables (skipped, with a note, where `detect()` finds no sandbox): the cost of the review sandbox
(critics/sandbox.py) against a bare subprocess (`Bare()`: same launcher, rlimits and environment, no
isolation), interleaved rep by rep in the same run: `python -I -c pass`, `bandit --version`,
`ruff --version`, the ruff and bandit critics and the acceptance check (10 passing pytest tests) on one card
(a 50-line pricing module + its tests); then that card's whole default review end to end (ReviewEngine with
the default ReviewConfig, through MCP), complete_task -> verdict. Target (issue, 2 cores): <= 1 s p50.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio
import openai
from mcp import Client
from mcp.server.mcpserver import MCPServer

from _common import call, machine_info, pct, quiet_loggers, remove_unless_kept, ts  # noqa: E402  (bench/ is on sys.path when run as a script)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_llm import FakeLLM  # noqa: E402  (the tests' fake OpenAI-compatible server, not a copy)

from hiveboard.board import Artifact, Board, Store  # noqa: E402
from hiveboard.critics.acceptance import AcceptanceCritic  # noqa: E402
from hiveboard.critics.base import Work  # noqa: E402
from hiveboard.critics.config import CriticConfig, ReviewConfig  # noqa: E402
from hiveboard.critics.engine import ReviewEngine, ReviewWorker  # noqa: E402
from hiveboard.critics.sandbox import Bare, Box, Limits, detect  # noqa: E402
from hiveboard.critics.static import BanditCritic, RuffCritic  # noqa: E402
from hiveboard.server.app import build_server  # noqa: E402
from hiveboard.server.identity import Identity  # noqa: E402

TARGET = 1.2
LENSES = ("security", "correctness", "performance", "tests", "docs", "style")
OFF = {name: CriticConfig(lens=lens, backend=backend, enabled=False) for name, lens, backend in (
    ("bandit", "security", "bandit"), ("ruff", "correctness", "ruff"), ("ruff-style", "style", "ruff"),
    ("acceptance", "tests", "acceptance"))}
ARTIFACT = '"""Inventory: items, stock levels and a reorder report."""\n\nfrom __future__ import annotations\n\n' \
    'from dataclasses import dataclass, field\n\n\n@dataclass\nclass Item:\n    sku: str\n    name: str\n' \
    '    stock: int = 0\n    reorder_at: int = 5\n\n    def needs_reorder(self) -> bool:\n' \
    '        return self.stock <= self.reorder_at\n\n\n@dataclass\nclass Inventory:\n' \
    '    items: dict[str, Item] = field(default_factory=dict)\n\n    def add(self, item: Item) -> None:\n' \
    '        if item.sku in self.items:\n            raise ValueError(f"duplicate sku {item.sku}")\n' \
    '        self.items[item.sku] = item\n\n    def receive(self, sku: str, count: int) -> int:\n' \
    '        if count <= 0:\n            raise ValueError("count must be positive")\n' \
    '        item = self.items[sku]\n        item.stock += count\n        return item.stock\n\n' \
    '    def ship(self, sku: str, count: int) -> int:\n        item = self.items[sku]\n' \
    '        if count > item.stock:\n            raise ValueError(f"only {item.stock} of {sku} in stock")\n' \
    '        item.stock -= count\n        return item.stock\n\n    def reorder_report(self) -> list[str]:\n' \
    '        low = sorted((i for i in self.items.values() if i.needs_reorder()), key=lambda i: i.stock)\n' \
    '        return [f"{i.sku} {i.name}: {i.stock} left" for i in low]\n\n\n' \
    'def total_stock(inventory: Inventory) -> int:\n    return sum(i.stock for i in inventory.items.values())\n'

CARD_TARGET = 1.0  # seconds, p50 of complete_task -> verdict for the pricing card's default review (issue, 2 cores)
PRICING = '''\"\"\"Pricing: unit prices, volume discounts, tax and a priced order.\"\"\"

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
TIERS = ((100, Decimal("0.10")), (50, Decimal("0.05")), (10, Decimal("0.02")))


@dataclass(frozen=True)
class Line:
    sku: str
    unit_price: Decimal
    quantity: int


def to_money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def discount_rate(quantity: int) -> Decimal:
    \"\"\"The volume discount for this many units: the highest tier reached.\"\"\"
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    return next((rate for floor, rate in TIERS if quantity >= floor), Decimal("0"))


def line_total(line: Line) -> Decimal:
    gross = line.unit_price * line.quantity
    return to_money(gross * (1 - discount_rate(line.quantity)))


def add_tax(amount: Decimal, rate: Decimal) -> Decimal:
    if not Decimal("0") <= rate < Decimal("1"):
        raise ValueError(f"tax rate {rate} out of range")
    return to_money(amount * (1 + rate))


def order_total(lines: list[Line], tax_rate: Decimal = Decimal("0.20")) -> Decimal:
    return add_tax(sum((line_total(line) for line in lines), Decimal("0")), tax_rate)


def parse_line(text: str) -> Line:
    \"\"\"A line from "sku, unit price, quantity".\"\"\"
    sku, price, quantity = (part.strip() for part in text.split(","))
    if not sku:
        raise ValueError("empty sku")
    return Line(sku, Decimal(price), int(quantity))
'''
PRICING_TESTS = '''from decimal import Decimal

import pytest

from pricing import Line, add_tax, discount_rate, line_total, order_total, parse_line, to_money


def test_to_money_rounds_half_up():
    assert to_money(Decimal("1.005")) == Decimal("1.01")


def test_no_discount_below_ten():
    assert discount_rate(9) == Decimal("0")


def test_discount_tiers():
    assert [discount_rate(q) for q in (10, 50, 100)] == [Decimal("0.02"), Decimal("0.05"), Decimal("0.10")]


def test_negative_quantity_rejected():
    with pytest.raises(ValueError):
        discount_rate(-1)


def test_line_total_applies_discount():
    assert line_total(Line("A1", Decimal("2.00"), 50)) == Decimal("95.00")


def test_add_tax():
    assert add_tax(Decimal("10.00"), Decimal("0.20")) == Decimal("12.00")


def test_add_tax_rejects_bad_rate():
    with pytest.raises(ValueError):
        add_tax(Decimal("10.00"), Decimal("1.5"))


def test_order_total():
    lines = [Line("A1", Decimal("2.00"), 5), Line("B2", Decimal("1.00"), 10)]
    assert order_total(lines) == Decimal("23.76")


def test_parse_line():
    assert parse_line(" C3, 4.50 , 3") == Line("C3", Decimal("4.50"), 3)


def test_parse_line_needs_sku():
    with pytest.raises(ValueError):
        parse_line(" , 1.00, 1")
'''
CARD = [{"name": "pricing.py", "kind": "code", "content": PRICING},
        {"name": "test_pricing.py", "kind": "test", "content": PRICING_TESTS}]


def phases(board: Board, review_id: int) -> dict:
    """Where the round's time went, from the raw timestamps (seconds): worker pickup, before the
    first critic started, critic span, after the last critic finished (wait loop, synthesis)."""
    db = board.store.db
    created, started, finished = db.execute("SELECT created_at, started_at, finished_at FROM reviews WHERE id = ?",
                                            [review_id]).fetchone()
    c0, c1 = db.execute("SELECT min(started_at), max(finished_at) FROM critiques WHERE review_id = ?",
                        [review_id]).fetchone()
    return dict(pickup=started - created, pre=c0 - started, span=c1 - c0, post=finished - c1)


async def one_review(c: Client, board: Board, n: int, artifacts: list[dict] | None = None) -> dict:
    card = await call(c, "create_task", title=f"bench card {n}", task_type="bench", description="review me",
                      acceptance_criteria=["it works"])
    claim = await call(c, "claim_task", task_id=card["id"])
    await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="done; see artifact",
               summary="inventory module", artifacts=artifacts or [{"name": "inventory.py", "kind": "code",
                                                                    "content": ARTIFACT}])
    t0 = time.perf_counter()
    while True:
        trail = await call(c, "get_review", task_id=card["id"], wait_seconds=60, full=True)
        last = trail["rounds"][-1]
        if last["status"] == "finished":
            break
    client = time.perf_counter() - t0
    crit = {x["critic"]: x["seconds"] for x in last["critiques"]}
    bad = [x["critic"] for x in last["critiques"] if x["status"] != "ok" and x["status"] != "skipped"]
    if bad:
        print(f"  warning: critics {bad} did not finish ok: {[x['error'] for x in last['critiques']]}")
    wall = ts(last["finished_at"]) - ts(last["started_at"])
    slowest = max(s for s in crit.values() if s is not None)
    status = {x["critic"]: x["status"] for x in last["critiques"]}
    return dict(wall=wall, client=client, slowest=slowest, crit=crit, status=status, verdict=last.get("verdict"),
                **phases(board, last["review_id"]))


async def run_config(home: Path, config: ReviewConfig, reps: int, artifacts: list[dict] | None = None) -> list[dict]:
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    engine = ReviewEngine(board, config)
    worker = ReviewWorker(engine, threads=2).start()
    try:
        async with Client(build_server(board, Identity(board.agents, "memory", agent="bench"), review=engine)) as c:
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
        server.add_tool(lambda: "ok", name="noop", description="Do nothing (benchmark baseline).")
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


def card_work() -> Work:
    """The pricing card as a critic sees it (what the engine hands each critic)."""
    return Work(id=0, task_id=0, round=1, agent="bench", fencing_token=1, task_type="code", title="pricing module",
                description="review me", acceptance_criteria=["it works"], output="done; see artifacts",
                summary="pricing module", artifacts=[Artifact(**a) for a in CARD], attempts=0)


def sandbox_rows(box: Box, reps: int, limits: Limits) -> list[tuple[str, list[float], list[float] | None]]:
    """(label, bare seconds, sandboxed seconds) per measurement. Bare and sandboxed alternate rep by rep
    (and which goes first), so drift on a shared machine hits both alike; one warm-up each, not counted."""
    from ruff.__main__ import find_ruff_bin

    bare = Bare()
    work = card_work()
    py = [sys.executable, "-I"]
    rows: list[tuple[str, list[float], list[float] | None]] = []
    for label, argv in (("python -I -c pass", [*py, "-c", "pass"]), ("python -I -m bandit --version",
                        [*py, "-m", "bandit", "--version"]), ("ruff --version", [find_ruff_bin(), "--version"])):
        raw: list[float] = []
        for _ in range(reps + 1):  # the floor: a plain subprocess.run, no launcher, no box
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            raw.append(time.perf_counter() - t0)
        rows.append((f"{label} (subprocess.run)", raw[1:], None))

    def start(argv: list[str], expect: str):
        def one(b: Box) -> float:
            with b.session({}) as session:
                cmd = [b.expose(session, Path(argv[0])), *argv[1:]] if argv[0] != sys.executable else argv
                out = b.run(session, cmd, limits=limits, timeout=60)
            if out.returncode != 0 or expect not in out.stdout + out.stderr:
                raise RuntimeError(f"{argv} in {b.name}: exit {out.returncode}: {out.stderr[-300:]}")
            return out.seconds
        return one

    def critic(make, verdict: str | None = None):
        def one(b: Box) -> float:
            c = make(b)
            t0 = time.perf_counter()
            result = c.review(work, [])
            seconds = time.perf_counter() - t0
            if verdict and (result.verdict != verdict or "10 passed" not in result.summary):
                raise RuntimeError(f"{c.name} in {b.name}: {result.verdict}: {result.summary}")
            return seconds
        return one

    timeout = 120.0
    cases = [
        ("python -I -c pass (box.run)", start([*py, "-c", "pass"], "")),
        ("python -I -m bandit --version (box.run)", start([*py, "-m", "bandit", "--version"], "python version")),
        ("ruff --version (box.run)", start([find_ruff_bin(), "--version"], "ruff")),
        ("ruff critic (correctness)", critic(lambda b: RuffCritic("ruff", "correctness", timeout, b, limits))),
        ("bandit critic (security)", critic(lambda b: BanditCritic("bandit", "security", timeout, b, limits))),
        ("acceptance: 10 pytest tests",
         critic(lambda b: AcceptanceCritic("acceptance", "tests", b, "", timeout, limits), "PASS")),
    ]
    quiet = logging.getLogger("hiveboard.critics")
    level, quiet.level = quiet.level, logging.ERROR  # the acceptance check warns on every run without a sandbox
    try:
        for label, one in cases:
            xs: dict[str, list[float]] = {"bare": [], "box": []}
            for i in range(reps + 1):
                order = (("bare", bare), ("box", box)) if i % 2 else (("box", box), ("bare", bare))
                for key, b in order:
                    xs[key].append(one(b))
            rows.append((label, xs["bare"][1:], xs["box"][1:]))
    finally:
        quiet.level = level
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay", type=float, default=1.0, help="fake LLM seconds per request (default 1.0)")
    p.add_argument("--also-delay", type=float, default=0.25, help="a second, smaller delay in the same table (0: skip)")
    p.add_argument("--max-critics", type=int, default=6)
    p.add_argument("--reps", type=int, default=5, help="reviews per row (plus one warm-up)")
    p.add_argument("--offline-reps", type=int, default=5, help="offline default reviews (0: skip the table)")
    p.add_argument("--sandbox-reps", type=int, default=20, help="reps per sandbox-vs-bare row (0: skip the table)")
    p.add_argument("--card-reps", type=int, default=20, help="default reviews of the pricing card (0: skip)")
    p.add_argument("--quick", action="store_true", help="2 reps, one delay, 3 offline reps, 5 sandbox and card reps")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = p.parse_args(argv)
    quiet_loggers()
    if args.quick:
        args.reps, args.also_delay, args.offline_reps = 2, 0, min(args.offline_reps, 3)
        args.sandbox_reps, args.card_reps = min(args.sandbox_reps, 5), min(args.card_reps, 5)
    info = machine_info("openai", "ruff", "bandit", "pytest")
    info["loadavg_start"] = round(os.getloadavg()[0], 2)
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    home = Path(tempfile.mkdtemp(prefix="hiveboard-bench-review-"))
    fake = FakeLLM()
    out: dict = {"machine": info, "rows": [], "offline": None, "sandbox": None, "card": None}
    try:
        delays = [d for d in (args.delay, args.also_delay) if d > 0] if args.max_critics else []
        fake.delay["*"] = args.delay
        llm, noop = baselines(fake, 3)
        print(f"baselines: one fake-LLM call through the openai client at delay {args.delay:g} s: "
              f"median {med(llm) * 1000:.1f} ms (floor of every critic); MCP noop round trip in-process: "
              f"p50 {pct(noop, 50):.2f} ms, p99 {pct(noop, 99):.2f} ms")
        if delays:
            print(f"\nLLM critics only, {args.reps} reviews per row (after one warm-up). wall = round finished_at - "
                  "started_at; slowest = max critic seconds; client = complete_task returned -> get_review verdict.")
            print("Phases (median ms): pickup = queued -> worker took it; pre = took -> first critic started; "
                  "span = first critic start -> last critic end; post = last critic end -> verdict.")
            head = (f"{'delay':>5} {'N':>2} {'wall s':>7} {'slowest':>7} {'ratio':>6} {'worst':>6} {'client':>7} "
                    f"{'cl/slow':>7} {'pickup':>6} {'pre':>5} {'span':>6} {'post':>5}")
            print(head + "\n" + "-" * len(head))
        for delay in delays:
            fake.delay["*"] = delay
            ratios_all = []
            for n in range(1, args.max_critics + 1):
                lenses = list(LENSES[:n])
                critics = {f"llm-{lens}": CriticConfig(lens=lens, backend="llm", model=f"fake-{lens}",
                                                       base_url=fake.url, api_key_env=None) for lens in lenses}
                config = ReviewConfig(critics={**OFF, **critics}, task_types={"bench": lenses}, agent_deadline=0,
                                      poll_seconds=0.05)
                runs = anyio.run(run_config, home / f"d{delay}-n{n}", config, args.reps)
                ratios = [r["wall"] / r["slowest"] for r in runs]
                ratios_all += ratios
                row = dict(delay=delay, critics=n, wall=med([r["wall"] for r in runs]),
                           slowest=med([r["slowest"] for r in runs]), ratio=med(ratios), worst=max(ratios),
                           client=med([r["client"] for r in runs]),
                           client_ratio=med([r["client"] / r["slowest"] for r in runs]),
                           **{k: med([r[k] for r in runs]) for k in ("pickup", "pre", "span", "post")}, runs=runs)
                out["rows"].append(row)
                print(f"{delay:>5g} {n:>2} {row['wall']:>7.3f} {row['slowest']:>7.3f} {row['ratio']:>6.3f} "
                      f"{row['worst']:>6.3f} {row['client']:>7.3f} {row['client_ratio']:>7.3f} "
                      f"{row['pickup'] * 1000:>6.1f} {row['pre'] * 1000:>5.1f} {row['span'] * 1000:>6.1f} "
                      f"{row['post'] * 1000:>5.1f}")
            worst = max(ratios_all)
            runs = [r for row in out["rows"] if row["delay"] == delay for r in row["runs"]]
            gap, pre, post = (med([r["client"] - r["wall"] for r in runs]), max(r["pre"] for r in runs),
                              max(r["post"] for r in runs))
            print(f"  (info) client - wall: median {gap * 1000:.0f} ms (get_review wakes on the "
                  f"review's commits); longest pre {pre * 1000:.0f} ms, longest post {post * 1000:.0f} ms")
            print(f"target wall/slowest <= {TARGET} for 1-{args.max_critics} critics at delay {delay:g} s: "
                  f"{'PASS' if worst <= TARGET else 'FAIL'} (worst single review {worst:.3f})")
        if args.offline_reps:
            config = ReviewConfig(agent_deadline=0, poll_seconds=0.05)  # built-in bandit + ruff, execution off
            cfg = config.model_copy(update={"task_types": {"bench": config.lenses_for("code")}})
            runs = anyio.run(run_config, home / "offline", cfg, args.offline_reps)
            names = sorted({k for r in runs for k, v in r["crit"].items() if v is not None})
            print(f"\nOffline default review (task_type code lenses, built-in critics, no LLM), one "
                  f"{ARTIFACT.count(chr(10))}-line Python artifact, {len(runs)} reviews: median / worst ms")
            head = f"{'measurement':<28} {'median':>8} {'worst':>8}"
            print(head + "\n" + "-" * len(head))
            series = [("review wall (engine)", [r["wall"] for r in runs]),
                      ("client (complete->verdict)", [r["client"] for r in runs]),
                      *((f"critic {name}" + (" (skipped)" if runs[-1]["status"][name] == "skipped" else ""),
                        [r["crit"][name] for r in runs]) for name in names),
                      ("wall / slowest critic", [r["wall"] / r["slowest"] for r in runs])]
            for label, xs in series:
                ms = not label.startswith("wall /")
                cells = (f"{x * 1000:>8.1f}" if ms else f"{x:>8.3f}" for x in (med(xs), max(xs)))
                print(f"{label:<28} " + " ".join(cells))
            out["offline"] = runs
        if args.sandbox_reps or args.card_reps:
            sandbox = detect()
            if sandbox.box is None:
                print(f"\nsandbox rows skipped: {sandbox.reason}")
        if args.sandbox_reps and sandbox.box is not None:
            limits = Limits()
            rows = sandbox_rows(sandbox.box, args.sandbox_reps, limits)
            print(f"\nSandbox ({sandbox.box.name}) vs bare subprocess (Bare(): same launcher, rlimits and environment, "
                  f"no isolation), same Limits; {args.sandbox_reps} reps each, interleaved (after one warm-up). Card: "
                  f"pricing.py ({PRICING.count(chr(10))} lines) + test_pricing.py (10 tests). ms")
            head = (f"{'measurement':<46} {'bare p50':>8} {'p95':>7} {'box p50':>8} {'p95':>7} {'+p50 ms':>8} "
                    f"{'x p50':>6}")
            print(head + "\n" + "-" * len(head))
            for label, bare_s, box_s in rows:
                cells = f"{pct(bare_s, 50):>8.1f} {pct(bare_s, 95):>7.1f}"
                if box_s:
                    b50, x50 = pct(bare_s, 50), pct(box_s, 50)
                    cells += f" {x50:>8.1f} {pct(box_s, 95):>7.1f} {x50 - b50:>+8.1f} {x50 / b50:>6.2f}"
                print(f"{label:<46} {cells}")
            out["sandbox"] = [dict(label=label, bare=b, box=x) for label, b, x in rows]
        if args.card_reps and sandbox.box is not None:
            config = ReviewConfig()  # the default: bandit, ruff, ruff-style, acceptance in the sandbox
            cfg = config.model_copy(update={"task_types": {"bench": config.lenses_for("code")}})
            runs = anyio.run(run_config, home / "card", cfg, args.card_reps, CARD)
            names = sorted({k for r in runs for k, v in r["crit"].items() if v is not None})
            ok = all(r["status"].get("acceptance") == "ok" for r in runs)
            verdicts = ", ".join(f"{v} {n}" for v, n in Counter(str(r["verdict"]) for r in runs).most_common())
            print(f"\nDefault review of the pricing card end to end (ReviewConfig(), task_type code lenses, critics in "
                  f"parallel, acceptance in {sandbox.box.name}; in-process MCP client): {len(runs)} reviews "
                  f"(verdicts: {verdicts}), ms" + ("" if ok else "  WARNING: acceptance did not run ok in each"))
            head = f"{'measurement':<34} {'p50':>8} {'p95':>8} {'max':>8}"
            print(head + "\n" + "-" * len(head))
            series = [("client: complete_task -> verdict", [r["client"] for r in runs]),
                      ("review wall (engine)", [r["wall"] for r in runs]),
                      *((f"critic {name}", [r["crit"][name] for r in runs]) for name in names)]
            for label, xs in series:
                print(f"{label:<34} {pct(xs, 50):>8.1f} {pct(xs, 95):>8.1f} {max(xs) * 1000:>8.1f}")
            p50 = pct([r["client"] for r in runs], 50) / 1000
            print(f"target complete_task -> verdict p50 <= {CARD_TARGET:g} s (2 cores): "
                  f"{'PASS' if p50 <= CARD_TARGET else 'FAIL'} (p50 {p50:.3f} s)")
            out["card"] = runs
        info["loadavg_end"] = round(os.getloadavg()[0], 2)
        print(f"\nload average {info['loadavg_start']:.2f} at start, {info['loadavg_end']:.2f} at end")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    finally:
        fake.close()
        remove_unless_kept(home, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
