"""Review gate on QuixBugs: the default critics on 40 buggy Python programs and their 40 fixes, labelled.

    .venv/bin/python bench/bench_bugfix.py --quixbugs /work/.mirror/jkoppel+QuixBugs/repo               # default config
    .venv/bin/python bench/bench_bugfix.py --quixbugs ~/src/QuixBugs --execute true --json out.json
    .venv/bin/python bench/bench_bugfix.py --quixbugs DIR --only gcd,sqrt,knapsack --no-compare-off     # a few

QuixBugs (https://github.com/jkoppel/QuixBugs) is read at run time from `--quixbugs PATH`, a bare git
directory (read at HEAD with `git show`) or a checkout, and is never copied into this repository. Every
program of python_programs/ (one-line defect) and correct_python_programs/ (fixed) becomes one card of
task_type `code` with the same title, description and tests for both versions:

- `<name>.py` (kind code): the program;
- `test_<name>.py` (kind test): QuixBugs' python_testcases/test_<name>.py made self-contained: the
  buggy/correct switch on `pytest.use_correct` becomes `from <name> import <name>`, the cases of
  json_testcases/<name>.json are embedded in place of `load_json_testcases`, and the cases QuixBugs itself
  skips (too slow, or never finishing, even on the fixed program) are dropped from both versions;
- `node.py` (kind test): QuixBugs' python_testcases/node.py, for the graph programs whose tests build Node
  objects (`from node import Node`).

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
import ast
import json
import os
import pprint
import re
import subprocess
import sys
import tempfile
import textwrap
import statistics
import time
import typing
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

import anyio
from mcp import Client
from pydantic import ValidationError

from _common import call, machine_info, pct, quiet_loggers, remove_unless_kept, ts  # bench/ is on sys.path when run as a script
from hiveboard.critics.config import ReviewConfig
from hiveboard.server import cli
from hiveboard.server.app import build_server
from hiveboard.server.config import Settings
from hiveboard.server.identity import Identity

EXECUTE_ENV = "HIVEBOARD_REVIEW__EXECUTE"
VERSIONS = {"buggy": "python_programs", "correct": "correct_python_programs"}
CRITICS = ("acceptance", "ruff", "bandit")  # the ones that can FAIL a card by default (ruff-style cannot)
WAIT = 60  # seconds per get_review call; the loop goes on until the round is finished


# ---------------------------------------------------------------- QuixBugs, read at run time

class QuixBugs:
    """QuixBugs files from a bare git directory (at HEAD) or a checkout directory."""

    def __init__(self, path: Path):
        self.path = path
        self.git = (path / "HEAD").is_file() and (path / "objects").is_dir()
        if not self.git and not (path / "python_testcases").is_dir():
            raise SystemExit(f"{path} is neither a QuixBugs git directory nor a checkout (no python_testcases/): "
                             "fetch github.com/jkoppel/QuixBugs and pass its git directory or checkout")

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", f"--git-dir={self.path}", *args], capture_output=True, text=True,
                              check=True).stdout

    def read(self, path: str) -> str:
        return self._git("show", f"HEAD:{path}") if self.git else (self.path / path).read_text(encoding="utf-8")

    def names(self, folder: str) -> list[str]:
        """File names (not paths) in one folder."""
        if self.git:
            return [Path(p).name for p in self._git("ls-tree", "--name-only", "HEAD", f"{folder}/").split()]
        return sorted(p.name for p in (self.path / folder).iterdir() if p.is_file())

    def revision(self) -> str:
        if self.git:
            return self._git("rev-parse", "HEAD").strip()
        try:
            return subprocess.run(["git", "-C", str(self.path), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown (not a git checkout)"

    def programs(self) -> list[str]:
        """Programs present in both the buggy and the fixed folder, with a test file."""
        buggy, fixed = ({n[:-3] for n in self.names(d) if n.endswith(".py") and not n.endswith("_test.py")}
                        for d in VERSIONS.values())
        tests = {n[len("test_"):-3] for n in self.names("python_testcases") if n.startswith("test_")}
        return sorted((buggy & fixed & tests) - {"node"})


# ---------------------------------------------------------------- the generated, self-contained test

@dataclass
class Dropped:
    program: str
    case: object
    reason: str


@dataclass
class GeneratedTest:
    source: str
    cases: int | None  # embedded JSON cases (None: a hand-written graph test)
    needs_node: bool
    dropped: list[Dropped] = field(default_factory=list)


def _dotted(node: ast.AST) -> str:
    return ast.unparse(node) if isinstance(node, (ast.Name, ast.Attribute)) else ""


def _skips(tree: ast.Module, program: str) -> list[tuple[ast.If, Dropped]]:
    """`if <condition on input_data>: pytest.skip(reason)` blocks in the test functions: the case they
    skip and why. Any other use of skip is refused, so a QuixBugs change cannot slip a skip through."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and _dotted(c.func) == "pytest.skip"]
        if not calls:
            continue
        inputs = [c.comparators[0] for c in ast.walk(node.test) if isinstance(c, ast.Compare)
                  and _dotted(c.left) == "input_data" and len(c.ops) == 1 and isinstance(c.ops[0], ast.Eq)]
        if len(inputs) != 1 or len(node.body) != 1:
            raise SystemExit(f"test_{program}.py: a skip this script does not understand at line {node.lineno}")
        slow = any(_dotted(a) == "pytest.run_slow" for a in ast.walk(node.test))
        reason = ast.literal_eval(calls[0].args[0]) if calls[0].args else "skipped"
        reason = f"QuixBugs skips it{' unless --runslow' if slow else ' always'}: {reason!r}"
        found.append((node, Dropped(program, ast.literal_eval(inputs[0]), reason)))
    return found


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _literal(cases: list) -> str:
    """The cases as a Python list literal, one case per line, lines within 120 characters."""
    rows = (textwrap.indent(pprint.pformat(case, width=112, compact=True), "    ") + "," for case in cases)
    return "[\n" + "\n".join(rows) + "\n]"


def build_test(qb: QuixBugs, program: str) -> GeneratedTest:
    """test_<program>.py, self-contained: no conftest.py, load_testdata.py or package layout needed."""
    name = f"test_{program}.py"
    source = qb.read(f"python_testcases/{name}")
    tree = ast.parse(source)
    lines = source.splitlines()
    edits: list[tuple[int, int, list[str]]] = []  # (first line, last line, replacement), 1-based inclusive
    cases, dropped = None, []
    skips = _skips(tree, program)
    if source.count("skip") != len(skips):
        raise SystemExit(f"{name}: a skip this script does not understand")
    for node, drop in skips:
        edits.append((node.lineno, node.end_lineno, []))
        dropped.append(drop)
    for node in tree.body:
        if isinstance(node, ast.If) and _dotted(node.test) == "pytest.use_correct":
            chosen = node.body[0]
            if not (isinstance(chosen, ast.ImportFrom) and chosen.module.endswith(f".{program}")):
                raise SystemExit(f"{name}: unexpected import switch at line {node.lineno}")
            imported = ", ".join(a.name for a in chosen.names)
            edits.append((node.lineno, node.end_lineno, [f"from {program} import {imported}"]))
        elif isinstance(node, ast.ImportFrom) and node.module == "load_testdata":
            edits.append((node.lineno, node.end_lineno, []))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                _dotted(node.value.func) == "load_json_testcases":
            text = qb.read(f"json_testcases/{program}.json")
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
            gone = [d.case for d in dropped]
            kept = [case for case in data if case[0] not in gone]
            if len(data) - len(kept) != len(gone):
                raise SystemExit(f"{name}: a skipped case is not among json_testcases/{program}.json's cases")
            cases = len(kept)
            target = ast.unparse(node.targets[0])
            edits.append((node.lineno, node.end_lineno, f"{target} = {_literal(kept)}".splitlines()))
    if not any(e[2] and e[2][0].startswith(f"from {program} import") for e in edits):
        raise SystemExit(f"{name}: no `if pytest.use_correct:` import switch found")
    if dropped and cases is None:
        raise SystemExit(f"{name}: skips outside a JSON-driven test")
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1:last] = new
    body = "\n".join(lines)
    if not re.search(r"\bpytest\.", body):  # only the import switch used it
        body = re.sub(r"^import pytest\n", "", body, count=1, flags=re.MULTILINE)
    body = re.sub(r"^(\s*def .*:\n)\n+", r"\1", body, flags=re.MULTILINE)  # a skip removed from a function's top
    origin = f"python_testcases/{name}" + (f" and json_testcases/{program}.json" if cases is not None else "")
    doc = [f"Tests of {program}, generated from QuixBugs' {origin}."]
    doc += [f"Dropped: the case with input {_short(d.case)}, as {d.reason}" for d in dropped]
    head = '"""' + "\n\n".join(textwrap.fill(d, 110) for d in doc) + '\n"""\n\n'
    body = head + re.sub(r"\n{4,}", "\n\n\n", body.strip() + "\n")
    needs_node = any(isinstance(n, ast.ImportFrom) and n.module == "node" for n in tree.body)
    return GeneratedTest(body, cases, needs_node, dropped)


@dataclass
class Card:
    program: str
    version: str  # buggy | correct
    artifacts: list[dict]
    spec: list[dict] = field(default_factory=list)  # --tests hidden: the creator's hidden acceptance test files


def build_cards(qb: QuixBugs, programs: list[str], hidden: bool = False
                ) -> tuple[list[Card], list[Dropped], dict[str, GeneratedTest]]:
    """Cards of both versions; the test (and node.py) as the author's artifacts, or with `hidden` as the card
    creator's hidden acceptance tests (run by the trusted judge, the program in a sandbox of its own)."""
    cards, dropped, tests = [], [], {}
    node = qb.read("python_testcases/node.py")
    for program in programs:
        test = tests[program] = build_test(qb, program)
        dropped += test.dropped
        for version, folder in VERSIONS.items():
            program_file = {"name": f"{program}.py", "kind": "code", "content": qb.read(f"{folder}/{program}.py")}
            test_files = [{"name": f"test_{program}.py", "kind": "test", "content": test.source}]
            if test.needs_node:
                test_files.append({"name": "node.py", "kind": "test", "content": node})
            if hidden:
                cards.append(Card(program, version, [program_file], [{"name": f["name"], "content": f["content"]}
                                                                     for f in test_files]))
            else:
                cards.append(Card(program, version, [program_file, *test_files]))
    return cards, dropped, tests


# ---------------------------------------------------------------- HumanEvalFix, the second labelled set

HUMANEVALFIX = "evaluation/create/humaneval-x/data/python/data/humanevalpack.jsonl"


def humanevalfix_cards(path: Path, hidden: bool, only: list[str] | None = None) -> list[Card]:
    """HumanEvalFix (HumanEvalPack's Python fix set, github.com/bigcode-project/octopack, read at run time from
    its git directory): 164 problems, each with a human-written buggy solution and the canonical one, and the
    problem's `check(candidate)` test. One card per version: `<entry_point>.py` is the prompt (signature and
    docstring) with the solution; `test_<entry_point>.py` imports its names and calls check."""
    text = subprocess.run(["git", f"--git-dir={path}", "show", f"HEAD:{HUMANEVALFIX}"], capture_output=True, text=True,
                          check=True).stdout
    cards = []
    for line in text.splitlines():
        row = json.loads(line)
        entry = row["entry_point"]
        name = f"he{row['task_id'].split('/')[1]}_{entry}"
        if only and name not in only and entry not in only:
            continue
        # `check` may use the module's other functions (find_zero's poly): the module's names, as HumanEval's harness
        test = (f"from {name} import *  # noqa: F403\n\n\n{row['test'].strip()}\n\n\ndef test_{entry}():\n"
                f"    check({entry})  # noqa: F405\n")
        for version, solution in (("buggy", row["buggy_solution"]), ("correct", row["canonical_solution"])):
            program = {"name": f"{name}.py", "kind": "code", "content": row["prompt"] + solution}
            spec = [{"name": f"test_{name}.py", "content": test}]
            cards.append(Card(name, version, [program], spec) if hidden else
                         Card(name, version, [program, {**spec[0], "kind": "test"}]))
    return cards


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
    """Settings as `hiveboard serve --home HOME` reads them, with HIVEBOARD_REVIEW__EXECUTE=execute unless
    None. HIVEBOARD_HOME points at the scratch home, so no user config.toml is read."""
    saved = {k: os.environ.get(k) for k in ("HIVEBOARD_HOME", "HIVEBOARD_CONFIG", EXECUTE_ENV)}
    os.environ["HIVEBOARD_HOME"] = str(home)
    os.environ.pop("HIVEBOARD_CONFIG", None)
    if execute is not None:
        os.environ[EXECUTE_ENV] = execute
    try:
        return Settings(home=home, db=home / "hiveboard.db", log_level="WARNING")
    except ValidationError as exc:
        raise SystemExit(f"{EXECUTE_ENV}={execute!r} is refused by critics/config.py (review.execute accepts "
                         f"{', '.join(execute_accepts())}):\n{exc}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------- one run: every card through the server

def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


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
        row = dict(critic=critique["critic"], rule=i.get("rule") or i["category"], severity=i["severity"],
                   location=i.get("location") or "", message=_first_line(i["description"]))
        if critique["critic"] == "acceptance":
            row["failed_tests"] = _failed_tests(i["description"])
        rows.append(row)
    if not rows:  # a FAIL verdict without a blocking issue
        rows.append(dict(critic=critique["critic"], rule="", severity="", location="",
                         message=_first_line(critique.get("summary") or "")))
    return rows


async def review_card(c: Client, card: Card) -> dict:
    title = f"{card.program}: make test_{card.program}.py pass"
    made = await call(c, "create_task", title=title, task_type="code",
                      description=f"QuixBugs program `{card.program}`: the function {card.program}() in "
                                  f"{card.program}.py, checked by test_{card.program}.py.",
                      **({"acceptance_tests": {"files": card.spec, "hidden": True}} if card.spec else {}))
    claim = await call(c, "claim_task", task_id=made["id"])
    await call(c, "complete_task", task_id=made["id"], token=claim["token"], summary=card.program,
               output=f"{card.program}.py with its tests", artifacts=card.artifacts)
    t0 = time.perf_counter()
    while True:
        trail = await call(c, "get_review", task_id=made["id"], wait_seconds=WAIT, full=True)
        last = trail["rounds"][-1] if trail["rounds"] else {}
        if last.get("status") == "finished":
            break
    client = time.perf_counter() - t0
    synthesis = last.get("synthesis") or {}
    critiques = {x["critic"]: x for x in last["critiques"]}
    decisive = synthesis.get("decisive") or []
    return dict(
        program=card.program, version=card.version, task_id=made["id"], verdict=last["verdict"],
        outcome=last["outcome"], decisive=decisive, wall=ts(last["finished_at"]) - ts(last["started_at"]),
        client=client,
        critics={n: dict(status=x["status"], verdict=x.get("verdict"), seconds=x.get("seconds"),
                         error=x.get("error"), summary=x.get("summary")) for n, x in critiques.items()},
        blocking=[row for n in decisive if n in critiques for row in issue_rows(critiques[n])],
        note=synthesis.get("note"), brief_chars=len(synthesis.get("brief") or ""))


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
        server = build_server(board, Identity(board.agents, "memory", agent="bench"),
                              review=cli.review_engine(settings, board, None))
        async with Client(server) as c:
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
    count = {f"{v}_{what}": sum(test(r) for r in rs) for v, rs in by.items() for what, test in (
        ("fail", failed), ("human", lambda r: r["outcome"] == "needs_human"),
        ("pass", lambda r: r["verdict"] == "PASS"))}
    return dict(
        run=label, execute=execute, where=where, programs=len({r["program"] for r in results}),
        buggy=len(by["buggy"]), correct=len(by["correct"]), **count,
        decisive={n: decisive.get(n, 0) for n in (*CRITICS, *sorted(set(decisive) - set(CRITICS)))},
        decisive_buggy=dict(Counter(n for r in fails if r["version"] == "buggy" for n in r["decisive"])),
        decisive_correct=dict(Counter(n for r in fails if r["version"] == "correct" for n in r["decisive"])),
        critic_failures=sum(x["status"] in ("error", "timeout") for r in results for x in r["critics"].values()),
        wall_p50=pct([r["wall"] for r in results], 50) / 1000, wall_p95=pct([r["wall"] for r in results], 95) / 1000,
        client_p50=pct([r["client"] for r in results], 50) / 1000,
        client_p95=pct([r["client"] for r in results], 95) / 1000, seconds=seconds,
        brief_p50=statistics.median([r["brief_chars"] for r in fails]) if fails else 0,
        brief_max=max((r["brief_chars"] for r in fails), default=0))


def print_table(rows: list[dict]) -> None:
    print("\n| run | review.execute | programs | buggy FAIL | buggy FAIL rate | buggy needs_human | buggy PASS | "
          "correct FAIL | correct needs_human | correct PASS | FAIL decided by (buggy / correct) | "
          "critic errors / timeouts | review wall p50 / p95 s | client p50 / p95 s | FAIL brief chars p50 / max | "
          "run s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        names = [n for n in r["decisive"] if r["decisive"][n] or n in CRITICS]
        who = ", ".join(f"{n} {r['decisive_buggy'].get(n, 0)} / {r['decisive_correct'].get(n, 0)}" for n in names)
        print(f"| {r['run']} | {r['execute']} | {r['programs']} | {r['buggy_fail']}/{r['buggy']} | "
              f"{r['buggy_fail'] / max(1, r['buggy']):.0%} | {r['buggy_human']} | {r['buggy_pass']} | "
              f"{r['correct_fail']}/{r['correct']} | {r['correct_human']} | {r['correct_pass']} | {who} | "
              f"{r['critic_failures']} | {r['wall_p50']:.2f} / {r['wall_p95']:.2f} | {r['client_p50']:.2f} / {r['client_p95']:.2f} | "
              f"{r['brief_p50']:.0f} / {r['brief_max']} | {r['seconds']:.0f} |")
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
        crit = "; ".join(f"{n} {x['status']}" + (f" {x['verdict']}" if x["verdict"] else "")
                         for n, x in sorted(r["critics"].items()))
        print(f"- {r['program']}: {crit}" + (f" — acceptance: {r['critics']['acceptance']['summary']}"
                                              if (r["critics"].get("acceptance") or {}).get("summary") else ""))
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
                errors.setdefault(f"{n} {x['status']}: {_first_line(x['error'])}", []).append(
                    f"{r['program']} ({r['version']})")
    print(f"\nCritic errors and timeouts: {sum(map(len, errors.values()))}")
    for error, cards in errors.items():
        print(f"- {len(cards)} × {error}: {', '.join(cards)}")
    slow = sorted(results, key=lambda r: -r["wall"])[:5]
    print("\nSlowest reviews: " + ", ".join(f"{r['program']} ({r['version']}) {r['wall']:.1f} s" for r in slow))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--humanevalfix", type=Path, metavar="OCTOPACK_GIT_DIR",
                   help="instead of QuixBugs: HumanEvalFix from a bigcode-project/octopack git directory")
    p.add_argument("--quixbugs", type=Path,
                   help="QuixBugs as a bare git directory (e.g. the fetched mirror) or a checkout")
    p.add_argument("--execute", default="default",
                   help="default: set nothing (ReviewConfig's default); else the value of HIVEBOARD_REVIEW__EXECUTE, "
                        "checked against what review.execute accepts (now: "
                        f"{', '.join(execute_accepts())}; e.g. true, off, sandbox, unsafe)")
    p.add_argument("--compare-off", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the same cards with execution off (static critics only); default on")
    p.add_argument("--batch", type=int, default=4, help="cards in flight at once (default 4: 2 review threads "
                   "busy, 2 queued)")
    p.add_argument("--tests", choices=("author", "hidden"), default="author",
                   help="author: the tests are the author's artifacts; hidden: the card creator's hidden acceptance "
                        "tests, run by the trusted judge")
    p.add_argument("--only", help="comma-separated program names (default: all)")
    p.add_argument("--show-test", metavar="PROGRAM", help="print the generated test of PROGRAM and exit")
    p.add_argument("--json", help="write the rows and every card's result here")
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
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
            raise SystemExit(f"--execute {execute}: review.execute in critics/config.py accepts "
                             f"{', '.join(execute_accepts())}") from None
    info = machine_info("ruff", "bandit", "pytest")
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    review_env = {k: v for k, v in os.environ.items() if k.startswith("HIVEBOARD_REVIEW")}
    if review_env:
        print(f"environment (applies to every run): {review_env}")
    print(f"tests: {args.tests}")
    dropped: list[Dropped] = []
    if args.humanevalfix is not None:
        source = args.humanevalfix.expanduser()
        cards = humanevalfix_cards(source, args.tests == "hidden", wanted)
        revision = subprocess.run(["git", f"--git-dir={source}", "rev-parse", "HEAD"], capture_output=True, text=True,
                                  check=True).stdout.strip()
        print(f"HumanEvalFix: {source} at {revision}; {len(cards) // 2} problems, {len(cards)} cards")
    else:
        qb = QuixBugs(args.quixbugs.expanduser())
        programs = qb.programs()
        if args.show_test:
            print(build_test(qb, args.show_test).source)
            return 0
        if wanted:
            unknown = sorted(set(wanted) - set(programs))
            if unknown:
                raise SystemExit(f"not QuixBugs programs: {', '.join(unknown)}")
            programs = [n for n in programs if n in wanted]
        revision = qb.revision()
        print(f"QuixBugs: {qb.path} at {revision}; {len(programs)} programs, {2 * len(programs)} cards")
        cards, dropped, tests = build_cards(qb, programs, hidden=args.tests == "hidden")
        print(f"generated tests: {sum(t.cases or 0 for t in tests.values())} JSON cases embedded in "
              f"{sum(t.cases is not None for t in tests.values())} tests, {sum(t.cases is None for t in tests.values())} "
              f"graph tests ({sum(t.needs_node for t in tests.values())} with node.py); dropped {len(dropped)} case(s):")
        for d in dropped:
            print(f"  - {d.program}: input {_short(d.case, 100)} — {d.reason}")

    runs = [("main", execute)] + ([("execution off", off_value())] if args.compare_off else [])
    home = Path(tempfile.mkdtemp(prefix="hiveboard-bench-bugfix-"))
    out: dict = {"machine": info, "source": revision, "tests": args.tests, "dropped": [d.__dict__ for d in dropped],
                 "rows": [], "results": {}}
    try:
        for label, value in runs:
            settings = make_settings(home / re.sub(r"\W+", "-", label), value)
            shown = f"{settings.review.execute!r}" + (" (default)" if value is None else f" ({EXECUTE_ENV}={value})")
            print(f"\nrun '{label}': review.execute = {shown}, {settings.review_workers} review threads, "
                  f"batch {args.batch}", flush=True)
            t0 = time.perf_counter()
            results, where = anyio.run(run_cards, settings, cards, args.batch)
            row = summarise(label, shown, where, results, time.perf_counter() - t0)
            out["rows"].append(row)
            out["results"][label] = results
        print_table(out["rows"])
        print("\nreview wall = the round's finished_at - started_at (worker took the job -> verdict); client = "
              "complete_task returned -> get_review returned the verdict (includes waiting for a free review "
              "thread). FAIL = sent back to the author; needs_human = sent to a human (tests could not run, or "
              "critics failed); 'FAIL decided by' counts the synthesis's decisive critics (a FAIL can have several); "
              "critic errors / timeouts counts (card, critic) pairs.")
        if len(out["rows"]) == 2:
            a, b = out["rows"]
            print("execution adds (off -> main): " + ", ".join(
                f"{v} {what} {b[f'{v}_{key}']} -> {a[f'{v}_{key}']} ({a[f'{v}_{key}'] - b[f'{v}_{key}']:+d})"
                for v in VERSIONS for what, key in (("FAIL", "fail"), ("needs_human", "human"), ("PASS", "pass")))
                + f"; review wall p50 {b['wall_p50']:.2f} -> {a['wall_p50']:.2f} s")
        for label, results in out["results"].items():
            print_listing(f"run '{label}'", results)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    finally:
        remove_unless_kept(home, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
