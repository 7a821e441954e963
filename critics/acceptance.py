"""The acceptance check: run the card's tests against the submitted work, in the sandbox.

What runs, in order:
1. the card creator's acceptance tests (`create_task(acceptance_tests=...)`). pytest over their files, and
   their `$ python …` commands, run in a trusted judge (critics/split_runner.py): the creator's files in
   one sandbox, the submitted code in another, joined by a pipe that carries data; the verdict is the
   judge's, and no trick inside the submitted code's process can write it. Skipped or xfailed creator
   tests fail. Any other creator command (`$ make test`) can only be judged by its exit status; its pass
   says so (`evidence: exit status only`). Hidden tests are reported by id and exception type only;
2. the author's own: acceptance criteria written as `$ <command>` (e.g. `$ python -m pytest -q`), or,
   without one, pytest over the submitted test files (test_*.py, *_test.py or kind "test"). They run in a
   sandbox session of their own, where the creator's files are not.

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

import json
import logging
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from hiveboard.board import Critique, Resolution, ReviewIssue

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
    script: list[str] | None = None  # the judge runs this instead: ["script", PATH, args…], ["code", …], ["module", …]
    spec: bool = False  # the card creator's tests (root: the spec directory)
    hidden: bool = False

    @property
    def judged(self) -> bool:
        """Run by the trusted judge (the creator's pytest tests and python commands)."""
        return self.spec and (self.pytest is not None or self.script is not None)


def _command(text: str) -> list[str] | None:
    text = text.strip().strip("`").strip()
    if not text.startswith("$ "):
        return None
    try:
        argv = shlex.split(text[2:])
    except ValueError:
        return None
    return argv or None


def _as_check(argv: list[str], label: str, spec: bool = False, hidden: bool = False) -> Check:
    """`python -m pytest …` and `pytest …` go through a runner (per-test results); the creator's other
    `python` commands through the judge; anything else runs as written, `python` meaning the server's
    interpreter."""
    if argv[0] in ("python", "python3") and argv[1:3] == ["-m", "pytest"]:
        return Check(label, pytest=argv[3:], spec=spec, hidden=hidden)
    if argv[0] == "pytest":
        return Check(label, pytest=argv[1:], spec=spec, hidden=hidden)
    if spec and argv[0] in ("python", "python3") and len(argv) > 1:
        if argv[1] in ("-c", "-m") and len(argv) > 2:
            return Check(label, script=["code" if argv[1] == "-c" else "module", *argv[2:]], spec=spec, hidden=hidden)
        if not argv[1].startswith("-"):
            return Check(label, script=["script", *argv[1:]], spec=spec, hidden=hidden)
    if argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]
    return Check(label, argv=argv, spec=spec, hidden=hidden)


def repo_check(command: str) -> Check | None:
    """A repository's test command as a check (None: it does not parse as a command line)."""
    argv = _command(f"$ {command}")
    return _as_check(argv, f"{REPO_TESTS} `{shlex.join(argv)}`") if argv else None


def checks(work: Work) -> list[Check]:
    """What to run for this work: a commit's repository tests, the creator's tests, then the author's commands or
    test files."""
    found: list[Check] = []
    repo = repo_check(work.test_command) if work.commit is not None and work.test_command else None
    if repo is not None:
        found.append(repo)
    tests = work.acceptance_tests
    if tests is not None:
        for text in tests.commands:
            argv = _command(text if text.lstrip().startswith("$") else f"$ {text}")
            if argv:
                found.append(
                    _as_check(
                        argv,
                        "the card's acceptance command" + ("" if tests.hidden else f" `{shlex.join(argv)}`"),
                        spec=True,
                        hidden=tests.hidden,
                    )
                )
        if not tests.commands and any(is_test_file(f.name, "code") for f in tests.files):
            found.append(Check("the card's acceptance tests", pytest=[], spec=True, hidden=tests.hidden))
    own = [argv for argv in map(_command, work.acceptance_criteria) if argv]
    found += [_as_check(argv, f"`{shlex.join(argv)}`") for argv in own]
    if not own and repo is None and any(is_test_file(a.name, a.kind) for a in work.artifacts):
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
        # checks (a pytest run, a command) are counted apart from the tests inside each pytest run
        summary = f"{passed} of {_many(len(todo), 'check')} passed {where} ({box.name}): " + "; ".join(results)
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
            if check.pytest is None:
                weak = EXIT_STATUS_ONLY if check.spec else ""
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
            return self._pytest_result(check, out, session)

    def _judge(
        self, box: Box, check: Check, src: Files, spec: dict[str, str], timeout: float
    ) -> tuple[list[ReviewIssue], str]:
        """A creator check in the trusted judge, the submitted code in a sandbox of its own."""
        with box.session({}, spec) as judge, box.session(src, None) as host:
            mode = ["pytest", *(check.pytest or ["-q", judge.spec])] if check.pytest is not None else check.script
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
