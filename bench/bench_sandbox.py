"""The review sandbox's cost: each command and critic in the sandbox against a bare subprocess, in one run.

    .venv/bin/python bench/bench_sandbox.py              # 20 reps per row
    .venv/bin/python bench/bench_sandbox.py --quick      # 5 reps per row
    .venv/bin/python bench/bench_sandbox.py --reps 50 --json out.json

The box is the one `detect()` finds (critics/sandbox.py; bubblewrap here); without one the bench says so and
stops. The baseline is `Bare()`: the same launcher, rlimits and environment, no isolation; and below it the
floor, a plain `subprocess.run`. Bare and boxed alternate rep by rep (and which goes first), so drift on a
shared machine hits both alike. Rows: `python -I -c pass`, `bandit --version`, `ruff --version`, then the ruff
and bandit critics and the acceptance check (10 passing pytest tests) on one card: a 50-line pricing module and
its tests (bench/_review_cards.py). The card's whole default review end to end is bench_review.py's.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from _harness import Col, bench_parser, machine_info, machine_line, pct, quiet_loggers, table, write_json
from _review_cards import PRICING, card_work

from hiveboard.critics.acceptance import AcceptanceCritic
from hiveboard.critics.sandbox import Bare, Box, SandboxLimits, detect
from hiveboard.critics.static import BanditCritic, RuffCritic


def sandbox_rows(box: Box, reps: int, limits: SandboxLimits) -> list[tuple[str, list[float], list[float] | None]]:
    """(label, bare seconds, sandboxed seconds) per measurement. Bare and sandboxed alternate rep by rep
    (and which goes first), so drift on a shared machine hits both alike; one warm-up each, not counted."""
    from ruff.__main__ import find_ruff_bin

    bare = Bare()
    work = card_work()
    py = [sys.executable, "-I"]
    rows: list[tuple[str, list[float], list[float] | None]] = []
    for label, argv in (
        ("python -I -c pass", [*py, "-c", "pass"]),
        ("python -I -m bandit --version", [*py, "-m", "bandit", "--version"]),
        ("ruff --version", [find_ruff_bin(), "--version"]),
    ):
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
        (
            "acceptance: 10 pytest tests",
            critic(lambda b: AcceptanceCritic("acceptance", "tests", b, "", timeout, limits), "PASS"),
        ),
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


def sandbox_table(box: Box, reps: int) -> list[dict]:
    rows = sandbox_rows(box, reps, SandboxLimits())
    cells = []
    for label, bare_s, box_s in rows:
        b50, x50 = pct(bare_s, 50), pct(box_s, 50) if box_s else None
        cells.append(
            [label, b50, pct(bare_s, 95)]
            + ([x50, pct(box_s, 95), f"{x50 - b50:+.1f}", x50 / b50] if box_s else [""] * 4)
        )
    table(
        [Col("measurement", 46, left=True), Col("bare p50", 8, ".1f"), Col("p95", 7, ".1f"), Col("box p50", 8, ".1f")]
        + [Col("p95", 7, ".1f"), Col("+p50 ms", 8), Col("x p50", 6, ".2f")],
        cells,
        f"Sandbox ({box.name}) vs bare subprocess (Bare(): same launcher, rlimits and environment, no isolation), "
        f"same Limits; {reps} reps each, interleaved (after one warm-up). Card: pricing.py "
        f"({PRICING.count(chr(10))} lines) + test_pricing.py (10 tests). ms",
    )
    return [dict(label=label, bare=b, box=x) for label, b, x in rows]


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="5 reps per row", keep=None)
    p.add_argument("--reps", type=int, default=20, help="reps per row, bare and boxed each (plus one warm-up)")
    args = p.parse_args(argv)
    quiet_loggers()
    reps = min(args.reps, 5) if args.quick else args.reps
    info = machine_info("ruff", "bandit", "pytest")
    info["loadavg_start"] = round(os.getloadavg()[0], 2)
    print(machine_line(info))
    sandbox = detect()
    if sandbox.box is None:
        print(f"no sandbox to measure: {sandbox.reason}")
        return 0
    rows = sandbox_table(sandbox.box, reps)
    print(f"\nload average {info['loadavg_start']:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    write_json(args.json, dict(machine=info, rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
