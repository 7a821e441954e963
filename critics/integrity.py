"""The integrity lens: code that passes its tests by attacking the test machinery instead of working.

Reward-hacking agents patch pytest, end the run with os._exit before a failure is reported, return objects
equal to anything, read the expected value out of the test's frame, or return the tests' own answers. The
analyser is `integrity_scan.py`, a stdlib-only script run in the sandbox over a read-only view of the work's
Python files and the card creator's tests (exactly like bandit: an isolated interpreter from an empty
directory); the server never imports, runs or parses what was submitted. Its rules and their ids are
integrity_scan.RULES.

Every finding is critical, so it blocks, unless the operator demotes or ignores the rule
(`[review.integrity]`) or the card's creator waived its id. The author's inline markers (`# noqa`) are never
honoured here: silencing this check is what the check is about.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from hiveboard.board.review_models import Critique, ReviewIssue

from .base import CriticFailed, Skipped, Work, is_test_file, python_sources, safe_path, unique_paths, verdict_of
from .config import IntegrityConfig
from .integrity_scan import RULES
from .sandbox import Box, SandboxLimits, Session
from .static import StaticCritic, _relative, _run, resolutions

SCANNER = Path(__file__).with_name("integrity_scan.py")
NAMES = {rule.code: name for name, rule in RULES.items()}


class IntegrityCritic(StaticCritic):
    backend = "integrity"
    reads_tests = True

    def __init__(
        self,
        name: str,
        lens: str,
        timeout: float,
        box: Box,
        limits: SandboxLimits,
        config: IntegrityConfig | None = None,
    ):
        super().__init__(name, lens, timeout, box, limits, honour=[])
        config = config or IntegrityConfig()
        self.ignore = {RULES[n].code for n in config.rule_names(config.ignore)}
        self.demote = {RULES[n].code for n in config.rule_names(config.demote)}

    def command(self, session: Session, files: list[str], tests: list[str] = (), hidden: bool = False) -> list[str]:
        # -I: an isolated interpreter, so nothing submitted is importable; -B: no bytecode written
        return [
            sys.executable,
            "-I",
            "-B",
            self.box.expose(session, SCANNER),
            "--spec",
            session.spec,
            *(arg for test in tests for arg in ("--test", test)),
            *(["--hidden"] if hidden else []),
            "--",
            *files,
        ]

    def parse(self, report: str, root: str) -> list[ReviewIssue]:
        try:
            found = json.loads(report)
        except ValueError as exc:
            raise CriticFailed(f"the integrity scan answered something that is not JSON: {exc}") from exc
        issues = []
        for f in found.get("findings", []):
            name = f.get("rule")
            rule = RULES.get(name)
            if rule is None or rule.code in self.ignore:
                continue
            issues.append(
                ReviewIssue(
                    severity="minor" if rule.code in self.demote else "critical",
                    category=f"integrity-{name}",
                    rule=rule.code,
                    location=f"{_relative(f['path'], root)}:{f['line']}",
                    description=f"This code {rule.sentence}: {f.get('what', '')} ({rule.code}).",
                    suggestion=rule.suggestion,
                    hidden=bool(f.get("hidden")),
                )
            )
        return issues

    def review(self, work: Work, earlier: list[ReviewIssue]) -> Critique:
        files = python_sources(work)
        if not files:
            raise Skipped(
                "the integrity scan reviews Python files; this work has none (no *.py artifact or ```python block)"
            )
        tests = work.acceptance_tests
        spec = unique_paths([(f.name, f.content) for f in tests.files]) if tests else {}
        hidden = bool(tests and tests.hidden)
        kinds = {safe_path(a.name): a.kind for a in work.artifacts}
        support = {p for p in files if is_test_file(p, kinds.get(p, "code")) or Path(p).name == "conftest.py"}
        with self.box.session(files, spec) as session:
            cmd = self.command(
                session,
                [f"{session.src}/{f}" for f in sorted(files)],
                [f"{session.src}/{f}" for f in sorted(support)],
                hidden,
            )
            report = _run(self.box, session, cmd, self.timeout, self.limits)
            issues = self.parse(report, session.src)
            unparsed = len(json.loads(report).get("errors", []))
        issues, _ = self._judge(issues, files, set(work.waived))
        verdict, score = verdict_of(issues)
        counts = Counter(i.rule for i in issues if i.severity in ("critical", "major"))
        summary = (
            f"integrity scan of {len(files)} Python file(s) ({len(support)} of them tests)"
            + (f" against {len(spec)} acceptance test file(s)" if spec else "")
            + ": "
            + (", ".join(f"{n} {NAMES[rule]}" for rule, n in counts.most_common()) or "no blocking findings")
            + (f"; {len(issues) - counts.total()} demoted or waived" if len(issues) > counts.total() else "")
            + (f"; {unparsed} file(s) could not be parsed (see the correctness lens)" if unparsed else "")
        )
        # read against hidden tests, the critique is theirs to shape: seen whole by the card's creator and people only
        return Critique(
            verdict=verdict,
            score=score,
            summary=summary,
            issues=issues,
            resolutions=resolutions(earlier, issues),
            hidden=hidden and bool(spec),
        )
