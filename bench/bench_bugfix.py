"""Review gate on QuixBugs: the default critics on 40 buggy Python programs and their 40 fixes, labelled.

    .venv/bin/python bench/bench_bugfix.py --quixbugs /work/.mirror/jkoppel+QuixBugs/repo               # default config
    .venv/bin/python bench/bench_bugfix.py --quixbugs ~/src/QuixBugs --execute true --json out.json
    .venv/bin/python bench/bench_bugfix.py --quixbugs DIR --only gcd,sqrt,knapsack --no-compare-off     # a few

QuixBugs (github.com/jkoppel/QuixBugs) is read at run time from `--quixbugs PATH`, a bare git directory or a
checkout, never copied into this repository (bench/_mirrors.py: build_cards, build_test). Each program of
python_programs/ (one-line defect) and correct_python_programs/ (fixed) becomes a `code` card with the same
title, description and tests for both versions: `<name>.py`; `test_<name>.py`, QuixBugs' test made
self-contained (its JSON cases embedded, the cases QuixBugs itself skips dropped from both versions); and
`node.py` for the graph programs.

Cards run through a real server built the way `hiveboard serve` builds it: Settings (HIVEBOARD_*
environment; no config file is read), `cli.open_board`, `cli.start_review_worker` (its ReviewEngine and
ReviewWorker threads, memory off) and `build_server(board, Identity(...), review=engine)`; in-process
`mcp.Client`s (`--batch` cards in flight) create, claim and complete each card and wait in `get_review`
for the round-1 verdict. `--execute default` sets nothing, so the review config is the default
ReviewConfig; any other value is passed as HIVEBOARD_REVIEW__EXECUTE after checking it against what
critics/config.py's `execute` field accepts. With `--compare-off` (default) the same cards then run with
execution off (static critics only) in the same process, so the table shows what execution adds.

Printed: per run, FAIL / needs_human / PASS counts per version (buggy FAIL rate), which critic was decisive
for the FAILs, critic errors and timeouts, and review wall time p50/p95; then every correct program that
FAILed with the issues that failed it, every buggy program that PASSed, the cards sent to a human by
reason, and the slowest reviews. Exit code 0 (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import typing
from collections import Counter
from operator import itemgetter
from pathlib import Path

import anyio
from _harness import (
    bench_parser,
    call,
    finished_round,
    hand_in,
    in_process,
    machine_info,
    machine_line,
    pct,
    quiet_loggers,
    scratch,
    serve_settings,
    ts,
    write_json,
)
from _mirrors import (
    VERSIONS,
    Card,
    Dropped,
    QuixBugs,
    build_cards,
    build_test,
    humanevalfix_cards,
    revision,
    short_repr,
)
from pydantic import ValidationError

from hiveboard.critics.config import ReviewConfig
from hiveboard.server import cli
from hiveboard.server.config import Settings

EXECUTE_ENV = "HIVEBOARD_REVIEW__EXECUTE"
CRITICS = ("acceptance", "ruff", "bandit")  # the ones that can FAIL a card by default (ruff-style cannot)
WAIT = 60  # seconds per get_review call; the loop goes on until the round is finished


# ---------------------------------------------------------------- the review execution setting


def execute_accepts() -> list[str]:
    """What ReviewConfig.execute accepts, read from critics/config.py's field (a bool, or literals)."""
    accepted: list[str] = []

    def walk(tp) -> None:
        if tp is bool:
            accepted.extend(["true", "false"])
        elif typing.get_origin(tp) is typing.Literal:
            accepted.extend(str(a).lower() if isinstance(a, bool) else str(a) for a in typing.get_args(tp))
        else:
            for arg in typing.get_args(tp):
                walk(arg)

    walk(ReviewConfig.model_fields["execute"].annotation)
    return list(dict.fromkeys(accepted)) or [str(ReviewConfig.model_fields["execute"].annotation)]


def off_value() -> str:
    """The value that turns execution off: "off" where the field accepts it (a bool field reads "off" as
    false), else "false"."""
    for value in ("off", "false"):
        try:
            ReviewConfig(execute=value)
            return value
        except ValidationError:
            continue
    raise SystemExit(f"review.execute accepts neither 'off' nor 'false' (accepts: {execute_accepts()})")


def make_settings(home: Path, execute: str | None) -> Settings:
    """Settings as `hiveboard serve --home HOME` reads them, with HIVEBOARD_REVIEW__EXECUTE=execute unless None."""
    try:
        return serve_settings(home, **({EXECUTE_ENV: execute} if execute is not None else {}))
    except ValidationError as exc:
        raise SystemExit(
            f"{EXECUTE_ENV}={execute!r} is refused by critics/config.py (review.execute accepts "
            f"{', '.join(execute_accepts())}):\n{exc}"
        ) from None


# ---------------------------------------------------------------- one run: every card through the server


def first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _failed_tests(description: str) -> list[str]:
    """pytest's `FAILED test_x.py::case - why` lines (or errors) from an acceptance issue's output tail."""
    found = re.findall(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$", description, re.MULTILINE)
    return [f"{test}" + (f" - {why[:120]}" if why else "") for test, why in found]


def issue_rows(critique: dict) -> list[dict]:
    """A decisive critique's blocking issues: critic, rule, severity, location, message."""
    rows = []
    for i in critique.get("issues") or []:
        if i["severity"] not in ("critical", "major"):
            continue
        row = dict(
            critic=critique["critic"],
            rule=i.get("rule") or i["category"],
            severity=i["severity"],
            location=i.get("location") or "",
            message=first_line(i["description"]),
        )
        if critique["critic"] == "acceptance":
            row["failed_tests"] = _failed_tests(i["description"])
        rows.append(row)
    if not rows:  # a FAIL verdict without a blocking issue
        rows.append(
            dict(
                critic=critique["critic"],
                rule="",
                severity="",
                location="",
                message=first_line(critique.get("summary") or ""),
            )
        )
    return rows


async def review_card(c, card: Card) -> dict:
    title = f"{card.program}: make test_{card.program}.py pass"
    made = await call(
        c,
        "create_task",
        title=title,
        task_type="code",
        description=f"QuixBugs program `{card.program}`: the function {card.program}() in "
        f"{card.program}.py, checked by test_{card.program}.py.",
        **({"acceptance_tests": {"files": card.spec, "hidden": True}} if card.spec else {}),
    )
    await hand_in(
        c, made["id"], summary=card.program, output=f"{card.program}.py with its tests", artifacts=card.artifacts
    )
    t0 = time.perf_counter()
    last = await finished_round(c, made["id"], WAIT)
    client = time.perf_counter() - t0
    synthesis = last.get("synthesis") or {}
    critiques = {x["critic"]: x for x in last["critiques"]}
    decisive = synthesis.get("decisive") or []
    return dict(
        program=card.program,
        version=card.version,
        task_id=made["id"],
        verdict=last["verdict"],
        outcome=last["outcome"],
        decisive=decisive,
        wall=ts(last["finished_at"]) - ts(last["started_at"]),
        client=client,
        critics={
            n: dict(
                status=x["status"],
                verdict=x.get("verdict"),
                seconds=x.get("seconds"),
                error=x.get("error"),
                summary=x.get("summary"),
            )
            for n, x in critiques.items()
        },
        blocking=[row for n in decisive if n in critiques for row in issue_rows(critiques[n])],
        note=synthesis.get("note"),
        brief_chars=len(synthesis.get("brief") or ""),
    )


async def run_cards(settings: Settings, cards: list[Card], batch: int) -> tuple[list[dict], str]:
    """All cards through one server: `batch` clients, each taking the next card when its last one is reviewed.
    Returns the results and where the engine says tests run."""
    board = cli.open_board(settings)
    worker = cli.start_review_worker(settings, board, None)  # prints the critics it runs, as `serve` does
    if worker is None:
        raise SystemExit("no review worker: review is disabled or HIVEBOARD_REVIEW_WORKERS=0; nothing to measure")
    where = worker.engine.describe().splitlines()[-1]  # its last line: where tests run
    results: list[dict] = []
    queue = list(reversed(cards))

    async def lane() -> None:
        async with in_process(board, review=cli.review_engine(settings, board, None)) as c:
            while queue:
                card = queue.pop()
                results.append(await review_card(c, card))
                done = len(results)
                if done % 10 == 0 or done == len(cards):
                    print(f"    {done}/{len(cards)} reviewed", flush=True)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(max(1, batch)):
                tg.start_soon(lane)
    finally:
        worker.stop()
        board.store.close()
    return results, where


# ---------------------------------------------------------------- report


def failed(r: dict) -> bool:
    """FAILed and sent back to its author (a card sent to a human is counted apart)."""
    return r["verdict"] == "FAIL" and r["outcome"] != "needs_human"


def summarise(label: str, execute: str, where: str, results: list[dict], seconds: float) -> dict:
    by = {v: [r for r in results if r["version"] == v] for v in VERSIONS}
    fails = [r for r in results if failed(r)]
    decisive = Counter(n for r in fails for n in r["decisive"])
    count = {
        f"{v}_{what}": sum(test(r) for r in rs)
        for v, rs in by.items()
        for what, test in (
            ("fail", failed),
            ("human", lambda r: r["outcome"] == "needs_human"),
            ("pass", lambda r: r["verdict"] == "PASS"),
        )
    }
    return dict(
        run=label,
        execute=execute,
        where=where,
        programs=len({r["program"] for r in results}),
        buggy=len(by["buggy"]),
        correct=len(by["correct"]),
        **count,
        decisive={n: decisive.get(n, 0) for n in (*CRITICS, *sorted(set(decisive) - set(CRITICS)))},
        decisive_buggy=dict(Counter(n for r in fails if r["version"] == "buggy" for n in r["decisive"])),
        decisive_correct=dict(Counter(n for r in fails if r["version"] == "correct" for n in r["decisive"])),
        critic_failures=sum(x["status"] in ("error", "timeout") for r in results for x in r["critics"].values()),
        wall_p50=pct([r["wall"] for r in results], 50) / 1000,
        wall_p95=pct([r["wall"] for r in results], 95) / 1000,
        client_p50=pct([r["client"] for r in results], 50) / 1000,
        client_p95=pct([r["client"] for r in results], 95) / 1000,
        seconds=seconds,
        brief_p50=statistics.median([r["brief_chars"] for r in fails]) if fails else 0,
        brief_max=max((r["brief_chars"] for r in fails), default=0),
    )


def print_table(rows: list[dict]) -> None:
    print(
        "\n| run | review.execute | programs | buggy FAIL | buggy FAIL rate | buggy needs_human | buggy PASS | "
        "correct FAIL | correct needs_human | correct PASS | FAIL decided by (buggy / correct) | "
        "critic errors / timeouts | review wall p50 / p95 s | client p50 / p95 s | FAIL brief chars p50 / max | "
        "run s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        names = [n for n in r["decisive"] if r["decisive"][n] or n in CRITICS]
        who = ", ".join(f"{n} {r['decisive_buggy'].get(n, 0)} / {r['decisive_correct'].get(n, 0)}" for n in names)
        print(
            f"| {r['run']} | {r['execute']} | {r['programs']} | {r['buggy_fail']}/{r['buggy']} | "
            f"{r['buggy_fail'] / max(1, r['buggy']):.0%} | {r['buggy_human']} | {r['buggy_pass']} | "
            f"{r['correct_fail']}/{r['correct']} | {r['correct_human']} | {r['correct_pass']} | {who} | "
            f"{r['critic_failures']} | {r['wall_p50']:.2f} / {r['wall_p95']:.2f} | {r['client_p50']:.2f} / {r['client_p95']:.2f} | "
            f"{r['brief_p50']:.0f} / {r['brief_max']} | {r['seconds']:.0f} |"
        )
    for r in rows:
        print(f"- {r['run']}: {r['where']}")


def grouped(issues: list[dict]) -> dict[tuple, list[str]]:
    """One entry per (critic, rule, severity, file, message), with the lines it was found on."""
    out: dict[tuple, list[str]] = {}
    for i in issues:
        path, _, line = i["location"].rpartition(":") if re.search(r":\d+$", i["location"]) else (i["location"], "", "")
        out.setdefault((i["critic"], i["rule"], i["severity"], path, i["message"]), []).extend([line] if line else [])
    return out


def print_listing(label: str, results: list[dict]) -> None:
    print(f"\n### {label}")
    key = itemgetter("program")
    bad = sorted((r for r in results if r["version"] == "correct" and failed(r)), key=key)
    print(f"\nCorrect programs that FAILed: {len(bad)}")
    for r in bad:
        print(f"- {r['program']} (decisive: {', '.join(r['decisive'])})")
        for (critic, rule, severity, path, message), lines in grouped(r["blocking"]).items():
            where = f" at {path}" + (":" + ",".join(lines) if lines else "") if path else ""
            print(f"    - {critic} {rule} [{severity}]{where}: {message}")
        for i in r["blocking"]:
            for t in i.get("failed_tests", [])[:5]:
                print(f"        {t}")
    passed = sorted((r for r in results if r["version"] == "buggy" and r["verdict"] == "PASS"), key=key)
    print(f"\nBuggy programs that PASSed: {len(passed)}")
    for r in passed:
        crit = "; ".join(
            f"{n} {x['status']}" + (f" {x['verdict']}" if x["verdict"] else "") for n, x in sorted(r["critics"].items())
        )
        print(
            f"- {r['program']}: {crit}"
            + (
                f" — acceptance: {r['critics']['acceptance']['summary']}"
                if (r["critics"].get("acceptance") or {}).get("summary")
                else ""
            )
        )
    for version in VERSIONS:
        human = sorted((r for r in results if r["version"] == version and r["outcome"] == "needs_human"), key=key)
        by_note: dict[str, list[str]] = {}
        for r in human:
            by_note.setdefault(r["note"] or "(no note)", []).append(r["program"])
        print(f"\n{version.capitalize()} programs sent to needs_human: {len(human)}")
        for note, names in by_note.items():
            print(f"- {len(names)} because {note!r}: {', '.join(names)}")
    errors: dict[str, list[str]] = {}
    for r in sorted(results, key=key):
        for n, x in sorted(r["critics"].items()):
            if x["status"] in ("error", "timeout"):
                errors.setdefault(f"{n} {x['status']}: {first_line(x['error'])}", []).append(
                    f"{r['program']} ({r['version']})"
                )
    print(f"\nCritic errors and timeouts: {sum(map(len, errors.values()))}")
    for error, cards in errors.items():
        print(f"- {len(cards)} × {error}: {', '.join(cards)}")
    slow = sorted(results, key=lambda r: -r["wall"])[:5]
    print("\nSlowest reviews: " + ", ".join(f"{r['program']} ({r['version']}) {r['wall']:.1f} s" for r in slow))


def load_cards(args, wanted: list[str] | None) -> tuple[list[Card], list[Dropped], str] | None:
    """The cards of the labelled set the command line names (None: --show-test printed a test)."""
    if args.humanevalfix is not None:
        source = args.humanevalfix.expanduser()
        cards = humanevalfix_cards(source, args.tests == "hidden", wanted)
        print(f"HumanEvalFix: {source} at {revision(source)}; {len(cards) // 2} problems, {len(cards)} cards")
        return cards, [], revision(source)
    qb = QuixBugs(args.quixbugs.expanduser())
    programs = qb.programs()
    if args.show_test:
        print(build_test(qb, args.show_test).source)
        return None
    if wanted:
        unknown = sorted(set(wanted) - set(programs))
        if unknown:
            raise SystemExit(f"not QuixBugs programs: {', '.join(unknown)}")
        programs = [n for n in programs if n in wanted]
    print(f"QuixBugs: {qb.path} at {qb.revision()}; {len(programs)} programs, {2 * len(programs)} cards")
    cards, dropped, tests = build_cards(qb, programs, hidden=args.tests == "hidden")
    print(
        f"generated tests: {sum(t.cases or 0 for t in tests.values())} JSON cases embedded in "
        f"{sum(t.cases is not None for t in tests.values())} tests, {sum(t.cases is None for t in tests.values())} "
        f"graph tests ({sum(t.needs_node for t in tests.values())} with node.py); dropped {len(dropped)} case(s):"
    )
    for d in dropped:
        print(f"  - {d.program}: input {short_repr(d.case, 100)} — {d.reason}")
    return cards, dropped, qb.revision()


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    p.add_argument(
        "--quixbugs", type=Path, help="QuixBugs as a bare git directory (e.g. the fetched mirror) or a checkout"
    )
    p.add_argument(
        "--humanevalfix",
        type=Path,
        metavar="GIT_DIR",
        help="instead: HumanEvalFix from a bigcode-project/octopack git directory",
    )
    p.add_argument(
        "--execute",
        default="default",
        help="default: set nothing (ReviewConfig's default); else the value of HIVEBOARD_REVIEW__EXECUTE, "
        f"checked against what review.execute accepts (now: {', '.join(execute_accepts())})",
    )
    p.add_argument(
        "--compare-off",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the same cards with execution off (static critics only), the baseline; default on",
    )
    p.add_argument("--batch", type=int, default=4, help="cards in flight at once (4: 2 review threads busy, 2 queued)")
    p.add_argument(
        "--tests",
        choices=("author", "hidden"),
        default="author",
        help="author: the tests are the author's artifacts; hidden: the creator's hidden tests, run by the judge",
    )
    p.add_argument("--only", help="comma-separated program names (default: all)")
    p.add_argument("--show-test", metavar="PROGRAM", help="print the generated test of PROGRAM and exit")
    args = p.parse_args(argv)
    quiet_loggers()
    if (args.quixbugs is None) == (args.humanevalfix is None):
        raise SystemExit("pass one of --quixbugs DIR or --humanevalfix DIR")
    wanted = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    execute = None if args.execute == "default" else args.execute
    if execute is not None:
        try:
            ReviewConfig(execute=execute)
        except ValidationError:
            raise SystemExit(
                f"--execute {execute}: review.execute in critics/config.py accepts {', '.join(execute_accepts())}"
            ) from None
    info = machine_info("ruff", "bandit", "pytest")
    print(machine_line(info))
    review_env = {k: v for k, v in os.environ.items() if k.startswith("HIVEBOARD_REVIEW")}
    if review_env:
        print(f"environment (applies to every run): {review_env}")
    print(f"tests: {args.tests}")
    loaded = load_cards(args, wanted)
    if loaded is None:
        return 0
    cards, dropped, source = loaded
    runs = [("main", execute)] + ([("execution off", off_value())] if args.compare_off else [])
    out: dict = dict(
        machine=info, source=source, tests=args.tests, dropped=[d.__dict__ for d in dropped], rows=[], results={}
    )
    with scratch("hiveboard-bench-bugfix-", args.keep) as home:
        for label, value in runs:
            settings = make_settings(home / re.sub(r"\W+", "-", label), value)
            shown = f"{settings.review.execute!r}" + (" (default)" if value is None else f" ({EXECUTE_ENV}={value})")
            print(
                f"\nrun '{label}': review.execute = {shown}, {settings.review_workers} review threads, batch {args.batch}",
                flush=True,
            )
            t0 = time.perf_counter()
            results, where = anyio.run(run_cards, settings, cards, args.batch)
            out["rows"].append(summarise(label, shown, where, results, time.perf_counter() - t0))
            out["results"][label] = results
    print_table(out["rows"])
    print(
        "\nreview wall = the round's finished_at - started_at (worker took the job -> verdict); client = "
        "complete_task returned -> get_review returned the verdict (includes waiting for a free review "
        "thread). FAIL = sent back to the author; needs_human = sent to a human (tests could not run, or "
        "critics failed); 'FAIL decided by' counts the synthesis's decisive critics (a FAIL can have several); "
        "critic errors / timeouts counts (card, critic) pairs."
    )
    if len(out["rows"]) == 2:
        a, b = out["rows"]
        print(
            "execution adds (off -> main): "
            + ", ".join(
                f"{v} {what} {b[f'{v}_{key}']} -> {a[f'{v}_{key}']} ({a[f'{v}_{key}'] - b[f'{v}_{key}']:+d})"
                for v in VERSIONS
                for what, key in (("FAIL", "fail"), ("needs_human", "human"), ("PASS", "pass"))
            )
            + f"; review wall p50 {b['wall_p50']:.2f} -> {a['wall_p50']:.2f} s"
        )
    for label, results in out["results"].items():
        print_listing(f"run '{label}'", results)
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
