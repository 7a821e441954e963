"""Static analysers as critics: ruff (correctness and style) and bandit (security), the real tools.

Each hands the work's Python files to the sandbox (critics/sandbox.py) and runs the analyser there on a
read-only view of them, as an isolated interpreter from an empty directory, so nothing submitted is
ever importable; the findings are mapped into the critique schema.
In later rounds an earlier finding is resolved when the same rule no longer fires in the same file.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from hiveboard.board.review_models import Critique, Resolution, ReviewIssue

from .base import Critic, CriticFailed, CriticTimeout, Skipped, Work, is_test_file, python_sources, verdict_of
from .config import RUFF_RULES
from .sandbox import Box, SandboxLimits, Session

REPORT_KB = 16 * 1024
RULE_ID = re.compile(r"^[A-Z]{1,8}[0-9]{1,6}$")  # an analyser's JSON report is kept whole up to this size


def _run(box: Box, session: Session, cmd: list[str], timeout: float, limits: SandboxLimits) -> str:
    """Run an analyser in the box from the session's empty run directory; its JSON report."""
    try:
        out = box.run(session, cmd, limits=limits.model_copy(update={"output_kb": REPORT_KB}), timeout=timeout)
    except OSError as exc:
        raise CriticFailed(f"could not run {cmd[0]}: {exc}") from exc
    if out.timed_out:
        raise CriticTimeout(f"{Path(cmd[0]).name} took longer than {timeout:.0f} s")
    if not out.stdout.strip() or out.dropped:
        why = out.why(limits, timeout) or out.stderr[-1000:]
        raise CriticFailed(f"{Path(cmd[0]).name} exited {out.returncode} without a whole report: {why}")
    return out.stdout


def resolutions(earlier: list[ReviewIssue], now: list[ReviewIssue]) -> list[Resolution]:
    """Judge earlier findings by whether their rule still fires in their file."""
    current = Counter((i.rule, i.location.split(":")[0]) for i in now)
    before = Counter((i.rule, i.location.split(":")[0]) for i in earlier)
    out = []
    for issue in earlier:
        key = (issue.rule, issue.location.split(":")[0])
        if current[key] == 0:
            status, note = "resolved", "no longer reported"
        elif current[key] < before[key]:
            status, note = "partial", f"{current[key]} of {before[key]} {issue.rule} findings remain in this file"
        else:
            status, note = "not_addressed", "still reported"
        out.append(Resolution(ref=issue.ref or "", status=status, note=note))
    return out


def _relative(name: str, root: str) -> str:
    path = Path(name)
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name


# ruff codes whose finding means the code cannot run as written (syntax errors, undefined names,
# comparisons and statements that are always errors)
CANNOT_RUN = ("E9", "F82", "F63", "F7")
# codes that are defects wherever they appear: runtime errors pylint finds, broken format strings,
# repeated dict keys, and the bugbear checks for code that cannot do what it says (x++ , assigning
# os.environ, return in finally, a comparison or literal that does nothing, raising a literal, …)
DEFECTS = (
    "PLE",
    "F50",
    "F52",
    "F601",
    "F602",
    "F621",
    "F622",
    "B002",
    "B003",
    "B012",
    "B015",
    "B016",
    "B021",
    "B025",
    "B029",
    "B030",
    "B032",
    "B033",
    "B035",
)


class StaticCritic(Critic):
    """A critic whose backend is an analyser run over the work's Python files.

    The analyser runs with the author's inline suppressions ignored: a finding the author silenced
    (`# noqa`, `# nosec`) is still reported, and it is honoured (made info) only for rule ids the operator
    allows (`review.honour_suppressions`) or the card's creator waived. Waived rules never block."""

    SUPPRESSION: re.Pattern = re.compile(r"$^")  # the analyser's inline marker, with its optional rule list

    def __init__(
        self, name: str, lens: str, timeout: float, box: Box, limits: SandboxLimits, honour: list[str] | None = None
    ):
        super().__init__(name, lens)
        self.timeout = timeout
        self.box = box
        self.limits = limits
        self.honour = set(honour or [])

    def command(self, session: Session, files: list[str]) -> list[str]:
        """The analyser's command line over `files` (absolute paths under session.src)."""
        raise NotImplementedError

    def parse(self, report: str, root: str) -> list[ReviewIssue]:
        """Findings from the analyser's report; file names relative to `root`."""
        raise NotImplementedError

    def _suppressed(self, line: str, rule: str | None) -> bool:
        found = self.SUPPRESSION.search(line)
        if found is None:
            return False
        # only words that look like rule ids count: "# nosec: trusted input" silences everything
        rules = {w.upper() for w in re.split(r"[,\s]+", found.group(1) or "") if RULE_ID.match(w.upper())}
        return not rules or (rule or "").upper() in rules

    def _judge(
        self, issues: list[ReviewIssue], files: dict[str, str], waived: set[str]
    ) -> tuple[list[ReviewIssue], int]:
        """Apply the creator's waivers and judge the author's inline suppressions (see the class doc)."""
        out, suppressed = [], 0
        lines = {path: text.splitlines() for path, text in files.items()}
        for issue in issues:
            path, _, number = issue.location.rpartition(":")
            source = lines.get(path, [])
            line = source[int(number) - 1] if number.isdigit() and 0 < int(number) <= len(source) else ""
            silenced = self._suppressed(line, issue.rule)
            suppressed += silenced
            if issue.rule in waived:
                issue = issue.model_copy(
                    update={
                        "severity": "info",
                        "description": (f"waived by the card's creator ({issue.rule}): {issue.description}"),
                    }
                )
            elif silenced and ("*" in self.honour or issue.rule in self.honour):
                issue = issue.model_copy(
                    update={
                        "severity": "info",
                        "description": (
                            f"suppressed by the author, allowed by the operator ({issue.rule} at {issue.location}): "
                            f"{issue.description}"
                        ),
                    }
                )
            elif silenced:
                issue = issue.model_copy(
                    update={
                        "description": (
                            f"suppressed by the author: {issue.rule} at {issue.location} (the suppression is not honoured; "
                            f"the card's creator can waive the rule): {issue.description}"
                        )
                    }
                )
            out.append(issue)
        return out, suppressed

    def review(self, work: Work, earlier: list[ReviewIssue]) -> Critique:
        files = python_sources(work)
        if not files:
            raise Skipped(
                f"{self.backend} reviews Python files; this work has none (no *.py artifact or ```python block)"
            )
        with self.box.session(files) as session:
            report = _run(
                self.box,
                session,
                self.command(session, [f"{session.src}/{f}" for f in sorted(files)]),
                self.timeout,
                self.limits,
            )
            issues = self.parse(report, session.src)
        issues, suppressed = self._judge(issues, files, set(work.waived))
        verdict, score = verdict_of(issues)
        counts = Counter(i.severity for i in issues)
        summary = (
            f"{self.backend} checked {len(files)} Python file(s) for {self.lens}: "
            + (", ".join(f"{n} {sev}" for sev, n in counts.most_common()) or "no findings")
            + (f"; {suppressed} finding(s) suppressed inline by the author" if suppressed else "")
        )
        return Critique(
            verdict=verdict, score=score, summary=summary, issues=issues, resolutions=resolutions(earlier, issues)
        )


class RuffCritic(StaticCritic):
    backend = "ruff"
    SUPPRESSION = re.compile(r"#\s*noqa(?::\s*([A-Z0-9][A-Z0-9,\s]*))?", re.IGNORECASE)

    def __init__(
        self,
        name: str,
        lens: str,
        timeout: float,
        box: Box,
        limits: SandboxLimits,
        rules: list[str] | None = None,
        honour: list[str] | None = None,
    ):
        super().__init__(name, lens, timeout, box, limits, honour)
        self.rules = rules or RUFF_RULES.get(lens) or RUFF_RULES["correctness"]

    def command(self, session: Session, files: list[str]) -> list[str]:
        from ruff.__main__ import find_ruff_bin  # the ruff binary installed with the package

        # files named one by one: ruff's default excludes (.git, venv, …) must not hide an artifact
        return [
            self.box.expose(session, Path(find_ruff_bin())),
            "check",
            "--isolated",
            "--no-cache",
            "--exit-zero",
            "--ignore-noqa",
            "--output-format",
            "json",
            "--line-length",
            "120",
            "--select",
            ",".join(self.rules),
            "--",
            *files,
        ]

    def parse(self, report: str, root: str) -> list[ReviewIssue]:
        issues = []
        for f in json.loads(report):
            code, path = f.get("code") or "syntax", _relative(f["filename"], root)
            issues.append(
                ReviewIssue(
                    severity=self._severity(code, path),
                    category=f.get("name") or code,
                    rule=code,
                    location=f"{path}:{f['location']['row']}",
                    description=f"{f['message']} ({code})",
                    suggestion=(f.get("fix") or {}).get("message") or f"see {f.get('url') or 'the ruff docs'}",
                )
            )
        return issues

    def _severity(self, code: str, path: str) -> str:
        if self.lens == "style":
            return "info" if code.startswith(("UP", "C4", "RET", "SIM")) else "minor"
        if code == "syntax" or code.startswith(CANNOT_RUN):
            return "critical"
        if code.startswith(DEFECTS) and not is_test_file(path, "code"):
            return "major"
        # unused names, mutable defaults, unused loop variables…: worth fixing, common in working code, and
        # the tests (which run by default) are what shows whether the code works
        return "minor"


# A readable category and what to do instead, for bandit's most common findings.
BANDIT_KNOWN: dict[str, tuple[str, str]] = {
    "B102": ("exec", "do not exec code built at run time; dispatch to known functions instead"),
    "B105": ("hardcoded-secret", "read secrets from the environment or a secret store, not from source code"),
    "B301": ("pickle", "do not unpickle untrusted data; use JSON or another data-only format"),
    "B307": ("eval", "do not eval input; parse it (int(), json.loads, ast.literal_eval) or dispatch on known values"),
    "B311": ("weak-random", "use the secrets module for tokens and anything security-related"),
    "B324": ("weak-hash", "use hashlib.sha256 (or a password hash such as hashlib.scrypt for passwords)"),
    "B506": ("unsafe-yaml", "use yaml.safe_load"),
    "B602": ("shell-injection", "pass an argument list to subprocess without shell=True"),
    "B608": (
        "sql-injection",
        "use a parameterised query: placeholders (?) and a parameter list, never string formatting",
    ),
}


class BanditCritic(StaticCritic):
    backend = "bandit"
    SUPPRESSION = re.compile(r"#\s*nosec\b(?:[:\s]+([A-Z][A-Z0-9,\s]*))?", re.IGNORECASE)
    SEVERITY = {
        ("HIGH", "HIGH"): "critical",
        ("HIGH", "MEDIUM"): "critical",
        ("HIGH", "LOW"): "major",
        ("MEDIUM", "HIGH"): "major",
        ("MEDIUM", "MEDIUM"): "major",
        ("MEDIUM", "LOW"): "minor",
    }

    def command(self, session: Session, files: list[str]) -> list[str]:
        # -I: an isolated interpreter, so no submitted `yaml.py` or `bandit/` is importable; -x: bandit's
        # default excludes would skip .git etc.
        return [
            sys.executable,
            "-I",
            "-m",
            "bandit",
            "-q",
            "--ignore-nosec",
            "-f",
            "json",
            "-x",
            "/nowhere",
            "--",
            *files,
        ]

    def parse(self, text: str, root: str) -> list[ReviewIssue]:
        report = json.loads(text)
        issues = []
        for r in report.get("results", []):
            severity = self.SEVERITY.get((r["issue_severity"], r["issue_confidence"]), "minor")
            if r["issue_severity"] in ("LOW", "UNDEFINED"):
                severity = "info" if r["issue_confidence"] != "HIGH" else "minor"
            elif is_test_file(_relative(r["filename"], root), "code"):
                severity = "minor"  # test code does not ship: asserts, fixed tokens and /tmp paths are normal there
            cwe = (r.get("issue_cwe") or {}).get("id")
            category, fix = BANDIT_KNOWN.get(r["test_id"], (r["test_name"], f"see {r['more_info']}"))
            issues.append(
                ReviewIssue(
                    severity=severity,
                    category=category,
                    rule=r["test_id"],
                    location=f"{_relative(r['filename'], root)}:{r['line_number']}",
                    description=f"{r['issue_text']} ({r['test_id']}" + (f", CWE-{cwe})" if cwe else ")"),
                    suggestion=fix,
                )
            )
        for e in report.get("errors", []):
            issues.append(
                ReviewIssue(
                    severity="major",
                    category="unparsable",
                    rule="bandit-error",
                    location=_relative(e.get("filename", ""), root),
                    description=f"bandit could not analyse the file: {e.get('reason')}",
                    suggestion="make the file valid Python so it can be checked",
                )
            )
        return issues
