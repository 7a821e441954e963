"""Integrity lens: how many correct programs it flags, and how many test-gaming attacks it catches.

    .venv/bin/python bench/bench_integrity.py                        # mirrors under /work/.mirror/OWNER+NAME/repo
    .venv/bin/python bench/bench_integrity.py --mirrors DIR --workers 4 --show 20 --json out.json

The critic is critics/integrity.py's IntegrityCritic, built as the review engine builds it (default config,
the sandbox `detect()` finds, else a bare subprocess), and called with a Work per program, as a review
round calls it; the scanner runs in the box like every review. Correct programs are read at run time from
bare git mirrors (`--mirrors DIR`, laid out DIR/OWNER+NAME/repo as the `fetch` tool leaves them); nothing
third-party is copied into this repository, and a set whose mirror is missing is listed as not found.

Correct sets (every flagged program is a false positive; target: at most 1 % per set):
- quixbugs: jkoppel/QuixBugs correct_python_programs/, each with its test made self-contained by
  _mirrors.build_test (the JSON cases embedded) as the card's acceptance tests, so copied-expected
  compares against real expected values;
- quixbugs-tests: QuixBugs' python_testcases/*.py as the work's own test files (test code may use pytest);
- humaneval: openai/human-eval, each prompt + canonical solution, its `check` function as the acceptance tests;
- boltons, more-itertools: every top-level function and class of the libraries' modules, each a program of
  its own (the module's imports put in front, so names resolve as in the module);
- thealgorithms: TheAlgorithms/Python, every non-test .py file as written (scripts with `__main__` blocks,
  doctests, CLI code).

Attacks (each counts as caught when the critic reports the rule it targets as blocking):
- attacks: ATTACKS in bench/_integrity_sets.py, our own variants of each rule's attack (at least two per rule, some the rule's
  docs do not list);
- humaneval-lookup: for each HumanEval problem whose tests hold `candidate(<literals>) == <literal>`, a
  function that looks its answer up in a table of exactly those cases (lookups()), against the same tests.

Baseline, measured in the same run: `grep`, a context-free regex for the same names (TOKENS) over the same
files, the check one would write without an AST: no aliases, no test code, no `__main__` blocks.
Printed: a table (set, programs, flagged, rate, the grep baseline, seconds, programs flagged per rule),
every flagged correct program with its findings (up to --show), and every attack missed. Exit code 0 (a
measurement, not a test).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from _harness import bench_parser, machine_info, machine_line, write_json
from _integrity_sets import ATTACKS, LOADERS, Program, lookups

from hiveboard.board.models import AcceptanceTests, TestFile
from hiveboard.critics.base import CriticFailed, Skipped, Work
from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.integrity import IntegrityCritic
from hiveboard.critics.integrity_scan import RULES, spec_cases
from hiveboard.critics.sandbox import Bare, detect

ATTACK_SETS = ("attacks", "humaneval-lookup")  # the other sets are correct programs
BATCH = 40  # programs without tests of their own are reviewed this many to a Work (one file each)
TOKENS = re.compile(
    r"_pytest|pluggy|pytest\.(?:skip|xfail|exit)|SkipTest|gc\.get_(?:objects|referrers)|_getframe|"
    r"inspect\.(?:stack|currentframe|getouterframes)|f_back|f_locals|f_globals|tb_frame|linecache|"
    r"sys\.modules\[|builtins|meta_path|path_hooks|settrace|setprofile|excepthook|atexit|"
    r"os\._exit|sys\.exit|\bexit\(|\bquit\(|os\.kill|signal\.|os\.write|os\.fdopen|/proc|os\.dup2|"
    r"def __eq__|__eq__ ="
)


@dataclass
class Outcome:
    program: Program
    rules: Counter
    findings: list[str]
    grep: bool
    error: str | None = None


# ---------------------------------------------------------------- running


def work_of(programs: list[Program]) -> Work:
    files = {path: text for p in programs for path, text in p.files.items()}
    spec = {path: text for p in programs for path, text in p.spec.items()}
    kinds = {path for p in programs for path in p.tests}
    tests = (
        AcceptanceTests(
            files=[TestFile(name=n, content=t) for n, t in spec.items()], hidden=any(p.hidden for p in programs)
        )
        if spec
        else None
    )
    return Work(
        id=1,
        task_id=1,
        round=1,
        agent="bench",
        fencing_token=1,
        task_type="code",
        title="bench",
        description="",
        acceptance_criteria=[],
        acceptance_tests=tests,
        output="",
        summary=None,
        artifacts=[{"name": n, "kind": "test" if n in kinds else "code", "content": t} for n, t in files.items()],
        attempts=1,
    )


def review(critic: IntegrityCritic, programs: list[Program]) -> list[Outcome]:
    """One Work for the programs (their file names are distinct); each program's blocking findings."""
    try:
        critique = critic.review(work_of(programs), [])
    except (CriticFailed, Skipped) as exc:  # recorded, and the bench goes on
        return [Outcome(p, Counter(), [], False, f"{type(exc).__name__}: {exc}") for p in programs]
    out = []
    for p in programs:
        mine = [
            i
            for i in critique.issues
            if i.location.rsplit(":", 1)[0] in p.files and i.severity in ("critical", "major")
        ]
        grep = any(TOKENS.search(text) for path, text in p.files.items() if path not in p.tests)
        out.append(
            Outcome(
                p,
                Counter(i.category.removeprefix("integrity-") for i in mine),
                [f"{i.location} {i.rule}: {i.description}" for i in mine],
                grep,
            )
        )
    return out


def batches(programs: list[Program]) -> list[list[Program]]:
    """Programs with acceptance tests alone; the others BATCH at a time, no two with the same file name."""
    alone = [[p] for p in programs if p.spec]
    rest = [p for p in programs if not p.spec]
    out, current, names = [], [], set()
    for p in rest:
        if len(current) >= BATCH or names & set(p.files):
            out.append(current)
            current, names = [], set()
        current.append(p)
        names |= set(p.files)
    return alone + out + ([current] if current else [])


def run_set(critic: IntegrityCritic, programs: list[Program], workers: int) -> list[Outcome]:
    with ThreadPoolExecutor(workers) as pool:
        return [o for chunk in pool.map(lambda b: review(critic, b), batches(programs)) for o in chunk]


def per_rule(outcomes: list[Outcome]) -> Counter:
    """Programs each rule flagged (a program counts once per rule)."""
    return Counter(rule for o in outcomes for rule in o.rules)


def rules_text(counts: Counter) -> str:
    return " ".join(f"{RULES[r].code}:{n}" for r, n in sorted(counts.items(), key=lambda kv: RULES[kv[0]].code)) or "-"


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, keep=None)
    p.add_argument(
        "--mirrors",
        type=Path,
        default=Path(os.environ.get("HIVEBOARD_BENCH_MIRRORS", "/work/.mirror")),
        help="directory of bare git mirrors, OWNER+NAME/repo (default $HIVEBOARD_BENCH_MIRRORS or /work/.mirror)",
    )
    p.add_argument("--workers", type=int, default=4, help="reviews in flight at once")
    p.add_argument("--show", type=int, default=25, help="flagged correct programs to list")
    args = p.parse_args(argv)

    found = detect()
    box = found.box or Bare()
    critic = IntegrityCritic("integrity", "integrity", 300, box, ReviewConfig().limits, ReviewConfig().integrity)
    print(f"# integrity lens — {time.strftime('%Y-%m-%d %H:%M')}; box: {box.name} ({found.reason})")
    print(f"# {machine_line(machine_info())}")

    sets: dict[str, list[Program]] = {}
    sources: dict[str, str] = {}
    for name, (mirror, load) in LOADERS.items():
        path = args.mirrors / mirror / "repo"
        if not (path / "HEAD").is_file():
            sources[name] = f"not found: fetch github.com/{mirror.replace('+', '/')} to {path}"
            continue
        loaded = load(path)
        if name == "quixbugs":
            sets["quixbugs"], sets["quixbugs-tests"], rev = loaded
            sources["quixbugs-tests"] = f"{mirror.replace('+', '/')}@{rev} python_testcases/"
        else:
            sets[name], rev = loaded
        sources[name] = f"{mirror.replace('+', '/')}@{rev}"
    sets["attacks"] = ATTACKS
    sources["attacks"] = "ATTACKS in bench/_integrity_sets.py"
    if "humaneval" in sets:
        sets["humaneval-lookup"] = lookups(sets["humaneval"])
        sources["humaneval-lookup"] = "generated from humaneval's tests (lookups())"

    results: dict[str, list[Outcome]] = {}
    seconds: dict[str, float] = {}
    for name, programs in sets.items():
        started = time.monotonic()
        results[name] = run_set(critic, programs, args.workers)
        seconds[name] = time.monotonic() - started

    print(f"\n{'set':<16}{'programs':>9}{'flagged':>9}{'rate':>8}  {'grep':>12}  {'s':>6}  per rule")
    print("-" * 100)
    for name, outcomes in results.items():
        n = len(outcomes)
        if name in ATTACK_SETS:
            hit = sum(o.rules[o.program.expect] > 0 for o in outcomes)
            grep = sum(o.grep for o in outcomes)
            label = "caught"
        else:
            hit = sum(bool(o.rules) for o in outcomes)
            grep = sum(o.grep for o in outcomes)
            label = ""
        per = rules_text(per_rule(outcomes))
        errors = sum(o.error is not None for o in outcomes)
        print(
            f"{name:<16}{n:>9}{hit:>9}{100 * hit / max(n, 1):>7.1f}%  {grep:>5} {100 * grep / max(n, 1):>5.1f}%"
            f"  {seconds[name]:>6.1f}  {per}{' ' + label if label else ''}{f' ({errors} errors)' if errors else ''}"
        )
    correct = [o for name, outcomes in results.items() if name not in ATTACK_SETS for o in outcomes]
    hit, grep = sum(bool(o.rules) for o in correct), sum(o.grep for o in correct)
    print(
        f"{'all correct':<16}{len(correct):>9}{hit:>9}{100 * hit / max(len(correct), 1):>7.1f}%  {grep:>5} "
        f"{100 * grep / max(len(correct), 1):>5.1f}%  {sum(v for k, v in seconds.items() if k != 'attacks'):>6.1f}  "
        f"{rules_text(per_rule(correct))}"
    )
    for name, why in sources.items():
        if name not in results:
            print(f"{name:<16} {why}")
    print("\nsources: " + "; ".join(f"{k} {v}" for k, v in sources.items() if k in results))
    cases = {
        name: sum(len(spec_cases(n, t)) for p in programs for n, t in p.spec.items())
        for name, programs in sets.items()
        if any(p.spec for p in programs)
    }
    print(
        "(input, expected) cases copied-expected compared with, from the acceptance tests: "
        + ", ".join(f"{name} {n}" for name, n in cases.items())
    )

    attacks = results["attacks"]
    by_rule: dict[str, list[Outcome]] = {}
    for o in attacks:
        by_rule.setdefault(o.program.expect, []).append(o)
    print("\nattacks caught by the rule they target:")
    for rule, outcomes in by_rule.items():
        caught = sum(o.rules[rule] > 0 for o in outcomes)
        print(f"  {RULES[rule].code} {rule:<22} {caught}/{len(outcomes)}")
    missed = [o for o in attacks if not o.rules[o.program.expect]]
    for o in missed:
        print(f"  MISSED {o.program.name}: {o.error or rules_text(o.rules)}")

    flagged = [(name, o) for name, outcomes in results.items() if name not in ATTACK_SETS for o in outcomes if o.rules]
    print(f"\nflagged correct programs ({len(flagged)}; the first {min(len(flagged), args.show)}):")
    for name, o in flagged[: args.show]:
        print(f"  [{name}] {o.program.name}")
        for f in o.findings[:3]:
            print(f"      {f[:200]}")
    errors = [(name, o) for name, outcomes in results.items() for o in outcomes if o.error]
    for name, o in errors[:10]:
        print(f"  ERROR [{name}] {o.program.name}: {o.error[:300]}")
    write_json(
        args.json,
        {
            name: [
                dict(program=o.program.name, rules=dict(o.rules), findings=o.findings, grep=o.grep, error=o.error)
                for o in outcomes
            ]
            for name, outcomes in results.items()
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
