"""Runs the author's own pytest tests inside the review sandbox and writes a JSON report to the pipe in
HIVEBOARD_REPORT_FD.

Started as a script (`python -I pytest_runner.py ROOT SRC [pytest args]`) inside the sandbox; the
server never imports it. The submitted files (SRC) go on the import path after the standard library
and the installed packages, so a submitted `pytest.py` or `json.py` cannot stand in for them; ROOT is
pytest's root and the last directory it reads conftest.py files from. The code under test runs in this
same process, so this report is only as good as its author's word: the card creator's tests run in the
trusted judge instead (split_runner.py). A run that ends without a report (e.g. the code called
os._exit) is reported as such by the critic.
"""

import json
import os
import sys

MESSAGE = 600  # characters of a failure's message kept
DETAIL = 2500  # characters of a failure's full report kept
VALUE = 200  # characters of a compared value kept


def _short(value):
    try:
        text = repr(value)
    except Exception:  # a submitted object's __repr__ may raise
        text = f"<{type(value).__name__}>"
    return text if len(text) <= VALUE else text[:VALUE] + "…"


class Report:
    def __init__(self):
        self.tests = {}
        self.collected = 0
        self.current = None
        self.compared = {}  # nodeid -> the first failing comparison: (op, left, right)

    def pytest_runtest_setup(self, item):
        self.current = item.nodeid

    def pytest_assertrepr_compare(self, config, op, left, right):
        # called for a failing `assert left <op> right`; pytest's own explanation still follows (None)
        if self.current is not None:
            self.compared.setdefault(self.current, (op, _short(left), _short(right)))
        return None

    def pytest_collection_finish(self, session):
        self.collected = len(session.items)

    def pytest_collectreport(self, report):
        if report.failed:
            self.tests[report.nodeid or "collection"] = self._entry("error", report)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            outcome = "error" if report.failed and report.when != "call" else report.outcome
            if report.nodeid not in self.tests or self.tests[report.nodeid]["outcome"] == "passed":
                self.tests[report.nodeid] = self._entry(outcome, report)

    def _entry(self, outcome, report):
        entry = {"outcome": outcome}
        if report.nodeid in self.compared:
            op, left, right = self.compared[report.nodeid]
            entry["compared"] = {"op": op, "actual": left, "expected": right}
        if outcome in ("failed", "error"):
            crash = getattr(report.longrepr, "reprcrash", None)
            entry["message"] = (crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
                                if str(report.longrepr).strip() else "")[:MESSAGE]
            text = report.longreprtext or ""
            entry["detail"] = text[-DETAIL:]
        return entry

    def result(self, exitstatus):
        counts = {}
        for entry in self.tests.values():
            counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
        return {"exitstatus": int(exitstatus), "collected": self.collected, "counts": counts, "tests": self.tests}


def main():
    root, src, *args = sys.argv[1:]
    fd = int(os.environ.pop("HIVEBOARD_REPORT_FD"))
    sys.path.append(src)
    import pytest

    report = Report()
    code = pytest.main(["-p", "no:cacheprovider", "--rootdir", root, "--confcutdir", root, *args], plugins=[report])
    with os.fdopen(fd, "w") as out:
        json.dump(report.result(code), out)
    sys.exit(int(code))


if __name__ == "__main__":
    main()
