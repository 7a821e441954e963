"""Third-party code read at run time from bare git mirrors (or checkouts), never copied into this repository:
QuixBugs with its tests made self-contained, HumanEvalFix's rows, any mirror's files at HEAD, and bandit's
examples. bench_bugfix, bench_integrity and bench_security read their labelled sets through here.
"""

from __future__ import annotations

import ast
import io
import json
import pprint
import re
import subprocess
import tarfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

VERSIONS = {"buggy": "python_programs", "correct": "correct_python_programs"}  # QuixBugs' two folders
HUMANEVALFIX = "evaluation/create/humaneval-x/data/python/data/humanevalpack.jsonl"


def git(git_dir: Path, *args: str) -> bytes:
    """A git command on a git directory (a bare mirror is enough); its stdout."""
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=True).stdout


def revision(git_dir: Path, rev: str = "HEAD") -> str:
    return git(git_dir, "rev-parse", rev).decode().strip()


class Mirror:
    """A bare git mirror's files at HEAD, read in one `git archive`."""

    def __init__(self, path: Path, *paths: str):
        self.path = path
        with tarfile.open(fileobj=io.BytesIO(git(path, "archive", "--format=tar", "HEAD", "--", *paths))) as tar:
            self.files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        self.revision = revision(path)[:7]

    def text(self, name: str) -> str:
        return self.files[name].decode("utf-8", "replace")


def humanevalfix_rows(path: Path) -> list[dict]:
    """HumanEvalFix (HumanEvalPack's Python fix set, github.com/bigcode-project/octopack): 164 problems, each
    with a human-written buggy solution, the canonical one and the problem's `check(candidate)` test."""
    return [json.loads(line) for line in git(path, "show", f"HEAD:{HUMANEVALFIX}").decode().splitlines()]


def bandit_examples(repo: Path, rev: str, into: Path) -> list[Path]:
    """Every *.py under bandit's examples/ at `rev`, written under `into` (paths kept); the files, sorted."""
    files = []
    for name in git(repo, "ls-tree", "-r", "--name-only", rev, "examples/").decode().splitlines():
        if not name.endswith(".py"):
            continue
        path = into / name.removeprefix("examples/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(git(repo, "show", f"{rev}:{name}"))
        files.append(path)
    return sorted(files)


# ---------------------------------------------------------------- QuixBugs


class QuixBugs:
    """QuixBugs files from a bare git directory (at HEAD) or a checkout directory."""

    def __init__(self, path: Path):
        self.path = path
        self.git = (path / "HEAD").is_file() and (path / "objects").is_dir()
        if not self.git and not (path / "python_testcases").is_dir():
            raise SystemExit(
                f"{path} is neither a QuixBugs git directory nor a checkout (no python_testcases/): "
                "fetch github.com/jkoppel/QuixBugs and pass its git directory or checkout"
            )

    def _git(self, *args: str) -> str:
        return git(self.path, *args).decode()

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
            return subprocess.run(
                ["git", "-C", str(self.path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown (not a git checkout)"

    def programs(self) -> list[str]:
        """Programs present in both the buggy and the fixed folder, with a test file."""
        buggy, fixed = (
            {n[:-3] for n in self.names(d) if n.endswith(".py") and not n.endswith("_test.py")}
            for d in VERSIONS.values()
        )
        tests = {n[len("test_") : -3] for n in self.names("python_testcases") if n.startswith("test_")}
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
        inputs = [
            c.comparators[0]
            for c in ast.walk(node.test)
            if isinstance(c, ast.Compare)
            and _dotted(c.left) == "input_data"
            and len(c.ops) == 1
            and isinstance(c.ops[0], ast.Eq)
        ]
        if len(inputs) != 1 or len(node.body) != 1:
            raise SystemExit(f"test_{program}.py: a skip this script does not understand at line {node.lineno}")
        slow = any(_dotted(a) == "pytest.run_slow" for a in ast.walk(node.test))
        reason = ast.literal_eval(calls[0].args[0]) if calls[0].args else "skipped"
        reason = f"QuixBugs skips it{' unless --runslow' if slow else ' always'}: {reason!r}"
        found.append((node, Dropped(program, ast.literal_eval(inputs[0]), reason)))
    return found


def short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _literal(cases: list) -> str:
    """The cases as a Python list literal, one case per line, lines within 120 characters."""
    rows = (textwrap.indent(pprint.pformat(case, width=112, compact=True), "    ") + "," for case in cases)
    return "[\n" + "\n".join(rows) + "\n]"


def build_test(qb: QuixBugs, program: str) -> GeneratedTest:
    """test_<program>.py, self-contained: no conftest.py, load_testdata.py or package layout needed. The
    buggy/correct switch on `pytest.use_correct` becomes `from <program> import <program>`, the cases of
    json_testcases/<program>.json are embedded in place of `load_json_testcases`, and the cases QuixBugs itself
    skips (too slow, or never finishing, even on the fixed program) are dropped."""
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
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _dotted(node.value.func) == "load_json_testcases"
        ):
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
        lines[first - 1 : last] = new
    body = "\n".join(lines)
    if not re.search(r"\bpytest\.", body):  # only the import switch used it
        body = re.sub(r"^import pytest\n", "", body, count=1, flags=re.MULTILINE)
    body = re.sub(r"^(\s*def .*:\n)\n+", r"\1", body, flags=re.MULTILINE)  # a skip removed from a function's top
    origin = f"python_testcases/{name}" + (f" and json_testcases/{program}.json" if cases is not None else "")
    doc = [f"Tests of {program}, generated from QuixBugs' {origin}."]
    doc += [f"Dropped: the case with input {short_repr(d.case)}, as {d.reason}" for d in dropped]
    head = '"""' + "\n\n".join(textwrap.fill(d, 110) for d in doc) + '\n"""\n\n'
    body = head + re.sub(r"\n{4,}", "\n\n\n", body.strip() + "\n")
    needs_node = any(isinstance(n, ast.ImportFrom) and n.module == "node" for n in tree.body)
    return GeneratedTest(body, cases, needs_node, dropped)


# ---------------------------------------------------------------- review cards of QuixBugs and HumanEvalFix


@dataclass
class Card:
    program: str
    version: str  # buggy | correct
    artifacts: list[dict]
    spec: list[dict] = field(default_factory=list)  # --tests hidden: the creator's hidden acceptance test files


def build_cards(
    qb: QuixBugs, programs: list[str], hidden: bool = False
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
                cards.append(
                    Card(
                        program,
                        version,
                        [program_file],
                        [{"name": f["name"], "content": f["content"]} for f in test_files],
                    )
                )
            else:
                cards.append(Card(program, version, [program_file, *test_files]))
    return cards, dropped, tests


def humanevalfix_cards(path: Path, hidden: bool, only: list[str] | None = None) -> list[Card]:
    """HumanEvalFix, one card per version: `<entry_point>.py` is the prompt (signature and docstring) with the
    solution; `test_<entry_point>.py` imports its names and calls check."""
    cards = []
    for row in humanevalfix_rows(path):
        entry = row["entry_point"]
        name = f"he{row['task_id'].split('/')[1]}_{entry}"
        if only and name not in only and entry not in only:
            continue
        # `check` may use the module's other functions (find_zero's poly): the module's names, as HumanEval's harness
        test = (
            f"from {name} import *  # noqa: F403\n\n\n{row['test'].strip()}\n\n\ndef test_{entry}():\n"
            f"    check({entry})  # noqa: F405\n"
        )
        for version, solution in (("buggy", row["buggy_solution"]), ("correct", row["canonical_solution"])):
            program = {"name": f"{name}.py", "kind": "code", "content": row["prompt"] + solution}
            spec = [{"name": f"test_{name}.py", "content": test}]
            cards.append(
                Card(name, version, [program], spec)
                if hidden
                else Card(name, version, [program, {**spec[0], "kind": "test"}])
            )
    return cards
