"""The acceptance check: run the card's tests against the submitted work, in the sandbox.

What runs, in order:
1. the card creator's checks: its acceptance tests (`create_task(acceptance_tests=...)`), then its acceptance
   criteria written as `$ <command>`. Both take one path (`_check`): pytest over the creator's files and any
   check that is Python code (`$ python -c …`, a here-document, a script or module of the creator's files)
   run in a trusted judge (critics/split_runner.py): the creator's files (a command's code among them, as a
   file) in one sandbox, the submitted code in another, joined by a pipe that carries data; the verdict is
   the judge's, and no trick inside the submitted code's process can write it or read what it expects.
   Skipped or xfailed creator tests fail. Any other creator command (`$ make test`, `$ python tool.py` of
   the work, `$ python -m pytest -q` over the work's own tests) can only be judged by its exit status, in
   the work's process; its result says so (`evidence: exit status only`), and so does the card. Hidden tests
   are reported by id and exception type only;
2. without `$` criteria, pytest over the submitted test files (test_*.py, *_test.py or kind "test"), in a
   sandbox session of its own, where the creator's files are not.

Work handed in as a commit (complete_task ref=) is the commit's whole tree, not artifacts: every check runs
against it, and its repository's own test command (`hiveboard repo add --test`) runs first, as a check of
its own whose red tests block like any other.

pytest runs report how many tests ended each way and which did not pass (the first ones in full, the
rest by id while they fit), so a run of any size has its report; a run that ends without it, or collects
no test, fails. So does a run the kernel stopped at the sandbox's memory budget, whatever its tests said.
Where no sandbox works and the operator did not choose `review.execute = "unsafe"`, nothing runs and the
critic says why (`Unverified`).
"""

from __future__ import annotations

import ast
import json
import logging
import posixpath
import re
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from hiveboard.board.review_models import Critique, Resolution, ReviewIssue

from .base import Critic, Skipped, Unverified, Work, is_test_file, unique_paths
from .sandbox import Box, Files, RunResult, SandboxLimits, Session
from .split_runner import EXCEPTIONS, FROM_CODE, CodeUnderTestEnded

log = logging.getLogger("hiveboard.critics")
TAIL = 3000
SPLIT = Path(__file__).with_name("split_runner.py")
SHOWN_FAILURES = 12
EXIT_STATUS_ONLY = "evidence: exit status only"
REPO_TESTS = "the repository's tests"
# what a hidden test's failure may say about itself: the judge's fixed list (critics/split_runner.py)
HIDDEN_EXCEPTIONS = frozenset(EXCEPTIONS) | {CodeUnderTestEnded.__name__, FROM_CODE}
NOT_PASSED = {
    "skipped": "was skipped",
    "xfailed": "was marked as an expected failure",
    "xpassed": "passed while marked as an expected failure",
}
# a run's tests by outcome, in this order; every test is counted once, so the parts add up to the total
OUTCOMES = {
    "passed": "passed",
    "failed": "failed",
    "error": "errored",
    "skipped": "skipped",
    "xfailed": "xfailed",
    "xpassed": "xpassed",
}


@dataclass
class Check:
    """One thing the acceptance check runs."""

    label: str
    argv: list[str] = field(default_factory=list)  # a `$` command, with `python` as this interpreter
    pytest: list[str] | None = None  # pytest arguments, run through a runner instead of argv
    # the judge runs this instead: ["script", PATH, args…], ["module", NAME, args…], ["code", ARGV0, args…]
    script: list[str] | None = None
    code: str = ""  # a ["code", …] check's source: a file of the creator's in the judge, never on a command line
    spec: bool = False  # run from the card creator's test files (root: the spec directory)
    creator: bool = False  # the card's creator wrote it (an acceptance criterion or test): it says what decided it
    hidden: bool = False

    @property
    def judged(self) -> bool:
        """Run by the trusted judge (the creator's pytest files and python code)."""
        return self.script is not None or (self.spec and self.pytest is not None)

    @property
    def exit_status_only(self) -> bool:
        """A creator's check the judge cannot run: decided in the work's own process, so its pass says so."""
        return self.creator and not self.judged


@dataclass
class Command:
    """A `$ …` line: its arguments, and the code a here-document feeds it (`$ python - <<EOF`)."""

    argv: list[str]
    shown: str  # as the label shows it
    text: str  # as written, without the `$ `
    stdin: str | None = None
    shell: bool = False  # it has a pipe, a `&&`, a redirection…: only a shell runs it as written


HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2\s*$")
PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
SHELL_OPERATORS = frozenset("();<>|&")
# code that starts a process runs the work in it, where the judge cannot serve the work's modules
PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "pty", "pexpect", "plumbum"})
PROCESS_CALLS = re.compile(r"system|popen|fork\w*|exec[lv]\w*|spawn\w*|posix_spawn\w*")


def _command(text: str) -> Command | None:
    text = text.strip().strip("`").strip()
    if not text.startswith("$ "):
        return None
    text = text[2:]
    first, _, body = text.partition("\n")
    here = HEREDOC.search(first)
    if here and body:
        lines = body.split("\n")
        ends = [n for n, line in enumerate(lines) if (line.lstrip("\t") if here[1] else line).rstrip() == here[3]]
        if ends and not any(line.strip() for line in lines[ends[0] + 1 :]):
            try:
                argv = shlex.split(first[: here.start()])
            except ValueError:
                return None
            code = "\n".join(line.lstrip("\t") if here[1] else line for line in lines[: ends[0]]) + "\n"
            return Command(argv, f"{first.strip()} …", text, code) if argv else None
    try:
        argv = shlex.split(text)
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        shell = any(set(token) <= SHELL_OPERATORS for token in lexer)
    except ValueError:
        return None
    if shell:
        return Command(argv, first.strip() + (" …" if body.strip() else ""), text, shell=True) if argv else None
    return Command(argv, shlex.join(argv), text) if argv else None


def _python(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """A Python command line as (how, what, its arguments): ("-c", CODE, …), ("-m", MODULE, …), ("script",
    PATH, …) or ("-", "", …) for code read from stdin. None: not the interpreter (`python3.11`,
    `/usr/bin/python3` and `env python3` are), or an option the judge does not take (`--version`)."""
    start = 1 if PurePosixPath(argv[0]).name == "env" and len(argv) > 1 else 0
    if not PYTHON.fullmatch(PurePosixPath(argv[start]).name):
        return None
    rest = argv[start + 1 :]
    at = 0
    while at < len(rest):
        arg = rest[at]
        if arg == "-" or not arg.startswith("-"):
            return ("-", "", rest[at + 1 :]) if arg == "-" else ("script", arg, rest[at + 1 :])
        if arg.startswith("--"):
            return None
        for n, flag in enumerate(arg[1:], 1):  # -I -B -u -E -s -S -O …, several in one (-Ic CODE)
            if flag in "cmWX":
                value, at = (
                    (arg[n + 1 :], at) if arg[n + 1 :] else (rest[at + 1] if at + 1 < len(rest) else None, at + 1)
                )
                if value is None:
                    return None
                if flag in "cm":
                    return f"-{flag}", value, rest[at + 1 :]
                break
        at += 1
    return "-", "", []  # no script: python reads its code from stdin


def _runs_processes(code: str) -> bool:
    """The code starts processes of its own (subprocess, os.system…): a process it starts to run the work
    would find no work in the judge, so the command runs beside the work instead."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # the judge reports the error
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in PROCESS_MODULES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (
            (node.module or "").split(".")[0] in PROCESS_MODULES
            or (node.module == "os" and any(PROCESS_CALLS.fullmatch(a.name) for a in node.names))
        ):
            return True
        if isinstance(node, ast.Attribute) and PROCESS_CALLS.fullmatch(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                return True
        if isinstance(node, ast.Constant) and node.value in PROCESS_MODULES:  # __import__("subprocess")
            return True
    return False


def _check(
    command: Command,
    label: str,
    *,
    creator: bool = False,
    files: Sequence[str] = (),
    spec: bool = False,
    hidden: bool = False,
) -> Check:
    """One path for every command: the creator's Python code (`-c`, a here-document, a script or module of the
    creator's files) runs in the judge, with its imports of the work served over the pipe; `python -m pytest`
    and `pytest` through a runner (the judge's for the creator's files, else the work's own); anything else
    as written (through `sh` when it has shell syntax), `python` meaning the server's interpreter, where only
    its exit status can decide."""
    argv = command.argv
    base = {"label": label, "spec": spec, "creator": creator, "hidden": hidden}
    if command.shell:  # `python -c "print(add(2, 3))" | grep -x 5`: the judge would drop what follows the code
        return Check(argv=["sh", "-c", command.text], **base)
    python = _python(argv)
    if argv[0] == "pytest":
        return Check(pytest=argv[1:], **base)
    if python is not None and python[:2] == ("-m", "pytest"):
        return Check(pytest=python[2], **base)
    if creator and python is not None:
        how, what, args = python
        if how == "-" and command.stdin is not None:
            how, what, args = "-c", command.stdin, ["-", *args]
        elif how == "-c":
            args = ["-c", *args]
        if how == "-c" and not _runs_processes(what):
            return Check(script=["code", *args], code=what, **base)
        if how == "-m" and what.split(".")[0] in module_names(list(files)):
            return Check(script=["module", what, *args], **base)
        if how == "script" and posixpath.normpath(what) in {posixpath.normpath(f) for f in files}:
            return Check(script=["script", what, *args], **base)
        if how in ("script", "-m"):  # the work's own script or module: run from the work, beside it
            base["spec"] = False
    if command.stdin is not None:  # a here-document needs the shell
        argv = ["sh", "-c", command.text]
    elif argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]
    return Check(argv=argv, **base)


def repo_check(command: str) -> Check | None:
    """A repository's test command as a check (None: it does not parse as a command line)."""
    parsed = _command(f"$ {command}")
    return _check(parsed, f"{REPO_TESTS} `{parsed.shown}`") if parsed else None


def checks(work: Work) -> list[Check]:
    """What to run for this work: a commit's repository tests, the creator's tests and `$` criteria, or else the
    author's test files."""
    found: list[Check] = []
    repo = repo_check(work.test_command) if work.commit is not None and work.test_command else None
    if repo is not None:
        found.append(repo)
    tests = work.acceptance_tests
    if tests is not None:
        files = [f.name for f in tests.files]
        for text in tests.commands:
            command = _command(text if text.lstrip().startswith("$") else f"$ {text}")
            if command:
                label = "the card's acceptance command" + ("" if tests.hidden else f" `{command.shown}`")
                found.append(_check(command, label, creator=True, files=files, spec=True, hidden=tests.hidden))
        if not tests.commands and any(is_test_file(f.name, "code") for f in tests.files):
            found.append(Check("the card's acceptance tests", pytest=[], spec=True, creator=True, hidden=tests.hidden))
    criteria = [c for c in map(_command, work.acceptance_criteria) if c]
    found += [_check(c, f"`{c.shown}`", creator=True) for c in criteria]
    if not criteria and repo is None and any(is_test_file(a.name, a.kind) for a in work.artifacts):
        found.append(Check("pytest over the " + ("repository" if work.commit else "submitted tests"), pytest=[]))
    return found


def top_names(src: Files) -> list[str]:
    """The submitted files' paths, as far as module_names reads them: a tree's top-level entries."""
    if isinstance(src, Path):
        return [f"{entry.name}/-" if entry.is_dir() else entry.name for entry in src.iterdir()]
    return list(src)


def module_names(paths: list[str]) -> list[str]:
    """The top-level module names the submitted files can be imported as (`slug.py` → slug, `pkg/x.py` → pkg)."""
    names = set()
    for path in paths:
        parts = PurePosixPath(path).parts
        first = (
            parts[0].removesuffix(".py")
            if len(parts) == 1 and parts[0].endswith(".py")
            else parts[0]
            if len(parts) > 1
            else ""
        )
        if first.isidentifier():
            names.add(first)
    return sorted(names)


class AcceptanceCritic(Critic):
    backend = "acceptance"
    reads_tests = True

    def __init__(self, name: str, lens: str, box: Box | None, why_not: str, timeout: float, limits: SandboxLimits):
        super().__init__(name, lens)
        self.box = box  # None: execution is off or impossible here, for the reason in why_not
        self.why_not = why_not
        self.timeout = timeout
        self.limits = limits

    def review(self, work: Work, earlier: list[ReviewIssue]) -> Critique:
        todo = checks(work)
        if not todo:
            raise Skipped(
                "no acceptance command (an acceptance criterion like '$ python -m pytest -q'), no test "
                "artifact and no acceptance tests on the card to run"
            )
        if self.box is None:
            raise Unverified(f"{_many(len(todo), 'check')} could not run: {self.why_not}")
        box = self.box
        src: Files = (
            Path(work.tree)
            if work.tree
            else unique_paths([(a.name, a.content) for a in work.artifacts if a.kind != "link"])
        )
        spec = unique_paths([(f.name, f.content) for f in work.acceptance_tests.files]) if work.acceptance_tests else {}
        issues: list[ReviewIssue] = []
        results: list[str] = []
        passed = 0
        started = time.monotonic()
        for check in todo:
            left = max(1.0, self.timeout - (time.monotonic() - started))  # one budget for all the runs
            found, detail = self._run(box, check, src, spec, left)
            if check.hidden:  # which hidden tests failed, and how, is for the card's creator and people only
                found = [i.model_copy(update={"hidden": True}) for i in found]
            issues += found
            passed += not found
            results.append(f"{check.label}: {'failed' if found else 'passed'}" + (f" ({detail})" if detail else ""))
        failed = {i.rule for i in issues}  # a check's issues carry its label (cut to a rule's length)
        where = "in the sandbox" if box.isolated else 'WITHOUT a sandbox (review.execute = "unsafe")'
        if not box.isolated:
            log.warning('task %s: acceptance tests ran without a sandbox (review.execute = "unsafe")', work.task_id)
        # runs (a pytest run, a command) are counted apart from the tests inside each pytest run, and by the
        # word of the verdict: "0 of 1 run passed … 1 passed" would read as a contradiction
        failed_runs = len(todo) - passed
        head = (
            f"{failed_runs} of {_many(len(todo), 'run')} failed"
            if failed_runs
            else f"{passed} of {_many(len(todo), 'run')} passed"
        )
        summary = f"{head} {where} ({box.name}): " + "; ".join(results)
        return Critique(
            verdict="FAIL" if issues else "PASS",
            score=2 if issues else 10,
            summary=summary,
            issues=issues,
            resolutions=[
                Resolution(ref=i.ref or "", status="not_addressed" if i.rule in failed else "resolved", note="")
                for i in earlier
            ],
            hidden=any(check.hidden for check in todo),  # its summary counts the hidden tests' results
        )

    def run_tests(self, tree: Path, command: str) -> tuple[list[ReviewIssue], str]:
        """A repository's test command against a tree (the merge queue's run on a merge result): (issues, what it
        counted). Unverified when nothing can run here."""
        check = repo_check(command)
        if check is None:
            raise Unverified(f"the repository's test command {command[:200]!r} does not parse as a command line")
        if self.box is None:
            raise Unverified(f"{check.label} could not run: {self.why_not}")
        return self._run(self.box, check, tree, {}, self.timeout)

    def _run(
        self, box: Box, check: Check, src: Files, spec: dict[str, str], timeout: float
    ) -> tuple[list[ReviewIssue], str]:
        """Run one check in sessions of its own; (issues, what it counted or how it ended, in a few words:
        failed when there are issues, else passed). The creator's files are in a
        session only for the creator's checks, and the submitted code is beside them only for a creator
        command the judge cannot run (judged by its exit status)."""
        if check.judged:
            return self._judge(box, check, src, spec, timeout)
        with box.session(src, spec if check.spec else None) as session:
            # the creator's commands run from their (read-only) files, the author's from the writable copy
            root = session.spec if check.spec else session.src
            if check.pytest is not None:  # the author's own tests: one process, its own word (split_runner `own`)
                runner = box.expose(session, SPLIT)
                argv = [
                    sys.executable,
                    "-I",
                    "-B",
                    runner,
                    "own",
                    root,
                    session.src,
                    "--",
                    *(check.pytest or ["-q", root]),
                ]
                out = box.run(session, argv, limits=self.limits, timeout=timeout, cwd=root, writable=True, report=True)
            else:
                out = box.run(
                    session,
                    check.argv,
                    limits=self.limits,
                    timeout=timeout,
                    cwd=root,
                    writable=True,
                    env={"PYTHONPATH": session.src, "HIVEBOARD_WORK": session.src},
                )
            # a pytest run reports each test itself; any other command is judged by its exit and its output
            limit = out.stopped(self.limits, timeout) if check.pytest is not None else out.why(self.limits, timeout)
            if limit:
                return [self._limit_issue(check, limit, out, session)], limit
            weak = EXIT_STATUS_ONLY if check.exit_status_only else ""
            if check.pytest is None:
                if out.returncode == 0:
                    return [], weak
                return [
                    self._issue(
                        check,
                        "acceptance-failed",
                        f"{check.label} exited with {out.returncode}.",
                        out,
                        "make the acceptance command succeed; run it locally the same way",
                        session=session,
                    )
                ], "; ".join(x for x in (f"exit status {out.returncode}", weak) if x)
            # the creator's `pytest` over the work's own tests: their report comes from the work's process
            issues, tally = self._pytest_result(check, out, session)
            return issues, "; ".join(x for x in (tally, weak) if x)

    def _judge(
        self, box: Box, check: Check, src: Files, spec: dict[str, str], timeout: float
    ) -> tuple[list[ReviewIssue], str]:
        """A creator check in the trusted judge, the submitted code in a sandbox of its own. A command's code
        (`-c CODE`, a here-document) is a file of the creator's there: on no command line, and its imports
        learned as the files' are."""
        files = dict(spec) if check.spec else {}
        name, n = "__command__.py", 0
        while name in files:
            n += 1
            name = f"__command_{n}__.py"
        if check.code:
            files[name] = check.code
        with box.session({}, files) as judge, box.session(src, None) as host:
            mode = ["pytest", *(check.pytest or ["-q", judge.spec])] if check.pytest is not None else check.script
            if check.code:
                mode = ["code", f"{judge.spec}/{name}", *mode[1:]]
            argv = [
                sys.executable,
                "-I",
                "-B",
                box.expose(judge, SPLIT),
                "judge",
                judge.spec,
                f"{max(1.0, timeout - 3):.1f}",
                ",".join(module_names(top_names(src))),
                "--",
                *mode,
            ]
            out, code_out = box.run_pair(
                judge,
                argv,
                host,
                [sys.executable, "-I", "-B", box.expose(host, SPLIT), "host"],
                limits=self.limits,
                timeout=timeout,
                judge_env={
                    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                    **({"HIVEBOARD_HIDDEN": "1"} if check.hidden else {}),
                },
            )
            if code_out.out_of_memory:  # the code's sandbox at its memory budget fails the run, whatever the tests say
                out = replace(out, out_of_memory=True)
            limit = out.stopped(self.limits, timeout)
            if limit:
                return [self._limit_issue(check, limit, out, judge)], limit
            try:
                report = json.loads(out.report)
            except ValueError:
                report = None
            if not isinstance(report, dict):
                return [
                    self._issue(
                        check,
                        "acceptance-failed",
                        f"{check.label} ended without a report (exit {out.returncode}): the test runner itself failed",
                        out,
                        "check that the card's tests run on their own; ask the card's creator",
                        session=judge,
                    )
                ], "no report"
            weak = report.get("decided_by_code") or 0
            note = f"{_many(weak, 'comparison')} decided by the code's own objects" if weak else ""
            if "script" in report:
                return self._script_result(check, report["script"], out, judge, note)
            issues, tally = self._pytest_result(check, out, judge, report)
            if not issues:  # a pass is every collected test passed and pytest ending well, nothing less
                passed = report.get("counts", {}).get("passed")
                status, collected = report.get("exitstatus"), report.get("collected")
                if status != 0 or passed != collected:
                    tally = _tally(report.get("counts", {}), collected)
                    issues = [
                        self._issue(
                            check,
                            "acceptance-failed",
                            f"{check.label} did not run to its end ({tally}): pytest ended with status {status}",
                            out,
                            "make every test run and pass; the code under "
                            "test must not stop the test run (e.g. from a __repr__)",
                            session=judge,
                        )
                    ]
            return issues, "; ".join(x for x in (tally, note) if x)

    def _script_result(
        self, check: Check, script: dict, out: RunResult, session: Session, note: str
    ) -> tuple[list[ReviewIssue], str]:
        if script.get("outcome") == "passed":
            return [], note
        kind = _kind(script.get("exception"))
        if check.hidden:
            text = f"{check.label} failed: {kind}."
        else:
            text = f"{check.label} failed: {script.get('message') or kind}\n{script.get('detail') or ''}"
        return [
            self._issue(
                check,
                "acceptance-failed",
                text,
                out,
                "make the card's acceptance command succeed (it is the card's own check; it cannot be changed)",
                session=session,
            )
        ], "; ".join(x for x in (kind, note) if x)

    def _limit_issue(self, check: Check, limit: str, out: RunResult, session: Session) -> ReviewIssue:
        return self._issue(
            check,
            "acceptance-timeout" if out.timed_out and not out.out_of_memory else "acceptance-limit",
            f"{check.label} {limit}.",
            out,
            "make the tests finish within the limits (an endless loop, a fork bomb, a huge allocation or output?)",
            session=session,
        )

    def _pytest_result(
        self, check: Check, out: RunResult, session: Session, report: dict | None = None
    ) -> tuple[list[ReviewIssue], str]:
        try:
            report = json.loads(out.report) if report is None else report
            counts, tests = dict(report["counts"]), dict(report["tests"])
        except (ValueError, KeyError, TypeError):
            hint = out.hint(self.limits)
            return [
                self._issue(
                    check,
                    "acceptance-failed",
                    f"{check.label} ended (exit {out.returncode}) without "
                    "a test report: "
                    + (f"it {hint}" if hint else "the run crashed, or the code under test ended the process"),
                    out,
                    "do not exit or kill the process from the code under test; make the tests importable and runnable",
                    session=session,
                )
            ], "no report"
        tally = _tally(counts)
        # the creator's tests must all pass: skipped and expected failures count as failures there
        bad_outcomes = ("failed", "error", *(NOT_PASSED if check.spec else ()))
        bad = [(node, t) for node, t in tests.items() if isinstance(t, dict) and t.get("outcome") in bad_outcomes]
        # the report lists only so many tests that did not pass; its counts hold them all
        not_passed = max(len(bad), sum(n for k, n in counts.items() if k in bad_outcomes and isinstance(n, int)))
        if not not_passed and out.returncode == 0 and counts.get("passed"):
            return [], tally
        if not not_passed:
            why = "collected no test" if not counts else f"exited with {out.returncode} ({tally})"
            return [
                self._issue(
                    check,
                    "acceptance-failed",
                    f"{check.label} {why}.",
                    out,
                    "add tests that pytest collects (test_*.py files with test_ functions)",
                    session=session,
                )
            ], tally
        issues = []
        for node, t in bad[:SHOWN_FAILURES]:
            issues.append(
                ReviewIssue(
                    severity="critical",
                    category="test-failed" if t.get("outcome") != "error" else "test-error",
                    rule=check.label[:40],
                    location=str(node)[:300],
                    description=self.scrub(_failure(t, check.hidden), session),
                    suggestion="make this test pass"
                    + ("" if not check.spec else " (it is the card's own acceptance test; it cannot be changed)"),
                )
            )
        shown = len(issues)
        if not_passed > shown:
            names = ", ".join(str(node) for node, _ in bad[shown:])
            unnamed = not_passed - len(bad)
            what = f"{_many(not_passed - shown, 'more test')} of {check.label} did not pass, besides the {shown} above"
            if not shown:
                what = f"{_many(not_passed, 'test')} of {check.label} did not pass"
            issues.append(
                ReviewIssue(
                    severity="critical",
                    category="test-failed",
                    rule=check.label[:40],
                    # nothing else holds their failures: the ids are all there is to point to
                    description=self.scrub(
                        f"{what} ({tally})"
                        + (": " + (names if len(names) <= 3000 else names[:2999] + "…") if names else "")
                        + (f"; {unnamed} more not named (too many for the report)" if unnamed else ""),
                        session,
                    ),
                    suggestion="make these tests pass too; run them locally to see each failure",
                )
            )
        return issues, tally

    def _issue(
        self, check: Check, category: str, text: str, out: RunResult, suggestion: str, session: Session | None = None
    ) -> ReviewIssue:
        tail = "" if check.hidden else (out.stdout + out.stderr)[-TAIL:]
        return ReviewIssue(
            severity="critical",
            category=category,
            rule=check.label[:40],
            description=self.scrub((text + (f"\n{tail}" if tail.strip() else ""))[:4000], session),
            suggestion=suggestion,
        )

    @staticmethod
    def scrub(text: str, session: Session | None) -> str:
        """No sandbox or temporary paths in what the author reads: paths are relative to the work."""
        if session is None:
            return text
        for root in sorted({session.src, session.spec, session.run, str(session.host)}, key=len, reverse=True):
            text = text.replace(root + "/", "").replace(root, ".")
        return text


def _many(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _tally(counts: dict, collected: object = None) -> str:
    """A pytest run's tests, each counted once: "4 tests: 2 passed, 2 failed". Tests pytest collected but
    never reported (the run ended early) are counted as not run, so the parts always add up to the total."""
    known = {k: n for k, n in counts.items() if isinstance(n, int) and n > 0}
    parts = [(OUTCOMES.get(k, k), known[k]) for k in [*OUTCOMES, *sorted(set(known) - set(OUTCOMES))] if k in known]
    total = sum(n for _, n in parts)
    if isinstance(collected, int) and collected > total:
        parts.append(("did not run", collected - total))
        total = collected
    if not total:
        return "no tests"
    return f"{_many(total, 'test')}: " + ", ".join(f"{n} {word}" for word, n in parts)


def _kind(name: object) -> str:
    """An exception type a hidden test's failure may name: one of the judge's fixed list."""
    return str(name) if name in HIDDEN_EXCEPTIONS else "Exception"


def _failure(test: dict, hidden: bool) -> str:
    """One failing test in a few lines, without its id (the issue's location holds it): how it ended,
    expected against actual when an assert compared two values, the failing line and the error; a hidden
    test shows the type of failure only."""
    outcome = str(test.get("outcome"))
    if outcome in NOT_PASSED:
        return f"{NOT_PASSED[outcome]}: the card's own tests must pass, not be skipped"
    message = str(test.get("message") or "").strip()
    if hidden:  # the test's code, values and messages stay hidden: its id and a type from a fixed list
        return f"{outcome}: {_kind(test.get('exception'))}"
    lines = [outcome]
    compared = test.get("compared")
    if compared and compared.get("op") == "==":
        lines[0] += f": expected {compared['expected']}, got {compared['actual']}"
    elif message:
        lines[0] += f": {message.splitlines()[0][:300]}"
    # the failing statement (">") and the error lines ("E"), as pytest marks them, without the traceback
    detail = [line.rstrip() for line in str(test.get("detail") or "").splitlines() if line.startswith((">", "E "))]
    shown = "\n".join(detail[-8:])
    return "\n".join([*lines, shown[-600:]] if shown else lines)
