"""The acceptance check: run the card's acceptance command or tests against its artifacts.

This executes submitted code, so it runs only when the operator set `review.execute = true`. It runs
in a fresh temporary directory holding the artifacts, with a timeout, a minimal environment (no API
keys or tokens from the server's environment) and the directory as HOME. It is not a sandbox: enable
it only for agents you trust as much as yourself.

Commands: an acceptance criterion written as `$ <command>` (e.g. `$ python -m pytest -q`). Without
one, test artifacts (test_*.py, *_test.py or kind "test") are run with pytest.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hiveboard.board import Critique, ReviewIssue, Resolution

from .base import Critic, CriticFailed, Skipped, Work, unique_paths, write_tree

TAIL = 3000


def commands(work: Work) -> list[list[str]]:
    """The commands to run: `$ …` acceptance criteria, else pytest when there are test artifacts."""
    found = []
    for criterion in work.acceptance_criteria:
        text = criterion.strip().strip("`").strip()
        if text.startswith("$ "):
            argv = shlex.split(text[2:])
            if argv and argv[0] in ("python", "python3"):
                argv[0] = sys.executable  # the server's interpreter, whatever it is called here
            if argv:
                found.append(argv)
    if not found and any(Path(a.name).name.startswith("test_") or a.name.endswith("_test.py") or a.kind == "test"
                         for a in work.artifacts):
        found.append([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    return found


def run_bounded(argv: list[str], cwd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run a command in its own process group and kill the whole group if it overruns, so nothing
    it started outlives the check."""
    if os.name == "nt":  # no process groups to kill there: the command alone is stopped
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


class AcceptanceCritic(Critic):
    backend = "acceptance"

    def __init__(self, name: str, lens: str, enabled: bool, timeout: float):
        super().__init__(name, lens)
        self.enabled = enabled
        self.timeout = timeout

    def review(self, work: Work, earlier: list[ReviewIssue]) -> Critique:
        argvs = commands(work)
        if not argvs:
            raise Skipped("no acceptance command (an acceptance criterion like '$ python -m pytest -q') and no "
                          "test artifact to run")
        if not self.enabled:
            raise Skipped("execution is disabled; the operator can enable it with review.execute = true "
                          "(HIVEBOARD_REVIEW__EXECUTE=true)")
        issues = []
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="hiveboard-accept-") as tmp:
            write_tree(Path(tmp), unique_paths([(a.name, a.content) for a in work.artifacts if a.kind != "link"]))
            env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "PYTHONPATH": tmp, "PYTHONDONTWRITEBYTECODE": "1",
                   "LANG": "C.UTF-8"}
            for argv in argvs:
                shown = shlex.join([Path(argv[0]).name if argv[0] == sys.executable else argv[0], *argv[1:]])
                try:
                    # one budget for all the commands, so the critic's deadline holds
                    done = run_bounded(argv, tmp, env, max(1.0, self.timeout - (time.monotonic() - started)))
                except subprocess.TimeoutExpired:
                    issues.append(ReviewIssue(
                        severity="critical", category="acceptance-timeout", rule=shown,
                        description=f"`{shown}` did not finish within the acceptance check's {self.timeout:.0f} s",
                        suggestion="make the tests finish (a hang or an endless loop?)"))
                    continue
                except OSError as exc:
                    raise CriticFailed(f"could not start `{shown}`: {exc}") from exc
                if done.returncode != 0:
                    tail = (done.stdout + done.stderr)[-TAIL:]
                    issues.append(ReviewIssue(
                        severity="critical", category="acceptance-failed", rule=shown,
                        description=f"`{shown}` exited with {done.returncode}:\n{tail}",
                        suggestion="make the acceptance tests pass; run the same command locally"))
        failed = {i.rule for i in issues}
        verdict = "FAIL" if issues else "PASS"
        summary = (f"{len(argvs) - len(failed)} of {len(argvs)} acceptance command(s) passed: "
                   + ", ".join(shlex.join(a[1:]) if a[0] == sys.executable else shlex.join(a) for a in argvs))
        return Critique(verdict=verdict, score=2 if issues else 10, summary=summary, issues=issues,
                        resolutions=[Resolution(ref=i.ref or "", status="not_addressed" if i.rule in failed
                                                else "resolved", note="") for i in earlier])
