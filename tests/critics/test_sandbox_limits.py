"""The sandbox's budget: each sandboxed command in a cgroup of its own (memory of its processes and its
temporary files together, a process cap), and a test report that holds a run of any size."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import SANDBOX, needs_sandbox
from reviewing import critic, hand_in, verdict

from hiveboard.board.models import AcceptanceTests, Artifact
from hiveboard.board.models import TestFile as SpecFile  # not a test class
from hiveboard.critics import sandbox_cgroup
from hiveboard.critics.acceptance import AcceptanceCritic
from hiveboard.critics.base import Work
from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.sandbox import SandboxLimits, limits_line

CGROUPS = sandbox_cgroup.find()
if isinstance(CGROUPS, str) and SANDBOX.box is not None and os.environ.get("HIVEBOARD_REQUIRE_SANDBOX"):
    raise RuntimeError(f"HIVEBOARD_REQUIRE_SANDBOX is set but no cgroup can be made here: {CGROUPS}")
needs_cgroups = pytest.mark.skipif(isinstance(CGROUPS, str), reason=f"no writable cgroup here: {CGROUPS}")
pytestmark = needs_sandbox

BUDGET_MB = 512
# the runs below ask for 400 MB at a time, each within the budget, three or four times together
ASKED_MB = 3 * 400
# MemAvailable moves with everything else on the machine: the budget plus this much is allowed
MARGIN_MB = 600
BUDGET = SandboxLimits(memory_total_mb=BUDGET_MB)
OVER_BUDGET = "used more than the sandbox's 512 MiB memory budget (processes and temporary files together)"
# 50 MB at a time: a single file may not pass the sandbox's 64 MB file limit
FILL = """
import os

def fill(folder, mb):
    for n in range(mb // 50):
        with open(os.path.join(folder, f"fill-{n}"), "wb") as f:
            f.write(b"x" * (50 << 20))
"""


def available_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


@contextmanager
def lowest_available():
    """{"before": MemAvailable at the start, "lowest": the lowest seen while the block ran} in MB."""
    seen = {"before": available_mb()}
    seen["lowest"] = seen["before"]
    done = threading.Event()

    def sample():
        while not done.is_set():
            seen["lowest"] = min(seen["lowest"], available_mb())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()


def our_groups() -> list[Path]:
    return [d for parent in CGROUPS.parents for d in parent.glob(f"{sandbox_cgroup.PREFIX}{os.getpid()}-*")]


def in_our_groups() -> list[int]:
    """Processes anywhere on the machine in a group this test process made."""
    mark = f"/{sandbox_cgroup.PREFIX}{os.getpid()}-"
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cgroup").read_text():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def assert_nothing_left() -> None:
    assert our_groups() == [] and in_our_groups() == []


def card(spec: str, code: str, name: str = "test_spec.py") -> Work:
    """A card whose creator's tests are `spec` and whose submitted work is `code` (as work.py)."""
    return Work(
        id=0,
        task_id=0,
        round=1,
        agent="alice",
        fencing_token=1,
        task_type="code",
        title="the work",
        description="",
        acceptance_criteria=[],
        acceptance_tests=AcceptanceTests(files=[SpecFile(name=name, content=spec)]),
        output="done",
        summary="done",
        artifacts=[Artifact(name="work.py", kind="code", content=code)],
        attempts=0,
    )


def accept(work: Work, limits: SandboxLimits | None = None, timeout: float = 120):
    critic = AcceptanceCritic("acceptance", "tests", SANDBOX.box, "", timeout, limits or SandboxLimits())
    return critic.review(work, [])


# ---------------------------------------------------------------- the memory budget


@needs_cgroups
@pytest.mark.anyio
async def test_temporary_files_count_against_the_memory_budget(connect, reviewer):
    """The author's own test writes 400 MB to each of /tmp, HOME and the work directory (each a tmpfs in
    RAM, each within its size and within the budget): the run is stopped at the budget, and the review says
    so in a sentence the author can act on."""
    test = FILL + (
        "\n\ndef test_fill():\n    for folder in ('/tmp', os.environ['HOME'], '.'):\n        fill(folder, 400)\n"
    )
    engine = reviewer(ReviewConfig(limits=BUDGET))
    with lowest_available() as memory:
        async with connect("alice", review=engine) as c:
            done = await hand_in(c, artifacts=[{"name": "test_fill.py", "kind": "test", "content": test}])
            round1 = (await verdict(c, done["id"]))["rounds"][0]
    acceptance = critic(round1, "acceptance")
    assert round1["verdict"] == "FAIL" and acceptance["verdict"] == "FAIL"
    issue = acceptance["issues"][0]
    assert issue["category"] == "acceptance-limit"
    assert f"pytest over the submitted tests {OVER_BUDGET} and was stopped; make it use less" in issue["description"]
    drop = memory["before"] - memory["lowest"]
    assert drop < BUDGET_MB + MARGIN_MB < ASKED_MB, memory
    assert_nothing_left()


@needs_cgroups
def test_processes_of_the_code_share_the_memory_budget():
    """The submitted code starts four processes of 400 MB each (every one within the budget and the
    per-process limit), and the creator's test passes whatever they do: the run still fails, for its
    memory."""
    code = (
        "import subprocess, sys\n\n\ndef spread():\n"
        "    hog = 'import time; x = b\"x\" * (400 << 20); time.sleep(3)'\n"
        "    procs = [subprocess.Popen([sys.executable, '-c', hog]) for _ in range(4)]\n"
        "    return [p.wait() for p in procs]\n"
    )
    spec = "from work import spread\n\n\ndef test_spread():\n    assert len(spread()) == 4\n"
    with lowest_available() as memory:
        critique = accept(card(spec, code), BUDGET)
    assert critique.verdict == "FAIL", critique.summary
    [issue] = critique.issues
    assert issue.category == "acceptance-limit"
    assert issue.description.startswith(f"the card's acceptance tests {OVER_BUDGET} and was stopped")
    drop = memory["before"] - memory["lowest"]
    assert drop < BUDGET_MB + MARGIN_MB < ASKED_MB, memory
    assert_nothing_left()


@needs_cgroups
def test_a_fork_bomb_stops_at_the_process_limit():
    box = SANDBOX.box
    limits = SandboxLimits(processes=32)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    most = [0]
    done = threading.Event()

    def count():  # the group's processes at once, as the kernel counts them
        while not done.is_set():
            for group in our_groups():
                try:
                    most[0] = max(most[0], int((group / "pids.current").read_text()))
                except OSError:
                    pass
            time.sleep(0.01)

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    with box.session({}) as session:
        out = box.run(session, [sys.executable, "-c", bomb], limits=limits, timeout=5)
    done.set()
    counter.join()
    assert out.timed_out and out.refused_forks
    assert out.why(limits, 5) == "did not finish within 5 s and was stopped"
    assert out.hint(limits) == "hit the process limit (32 processes)"
    assert 4 < most[0] <= 32
    assert_nothing_left()


@needs_cgroups
def test_the_groups_of_a_server_that_is_gone_are_removed():
    """A server killed mid-run leaves its groups (and maybe a process in them): the next one removes them."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no server has any more
    name = f"{sandbox_cgroup.PREFIX}{gone.pid}-1"
    left = subprocess.Popen(["sleep", "600"])
    try:
        for parent in CGROUPS.parents:
            (parent / name).mkdir()
            (parent / name / "cgroup.procs").write_text(str(left.pid))
        CGROUPS.remove_stale()
        assert left.wait(timeout=10) == -9
        assert not any((parent / name).exists() for parent in CGROUPS.parents)
    finally:
        left.kill()
        left.wait()
        for parent in CGROUPS.parents:
            if (parent / name).exists():
                (parent / name).rmdir()


@needs_cgroups
def test_doctor_says_which_limits_hold(monkeypatch):
    line = limits_line(SandboxLimits())
    assert line.startswith(f"cgroup v{CGROUPS.version} (memory 1 GiB incl. tmpfs, 64 processes"), line
    monkeypatch.setattr(sandbox_cgroup, "find", lambda: "no cgroup v1 memory hierarchy")
    assert limits_line(SandboxLimits()) == "rlimits only (no writable cgroup: no cgroup v1 memory hierarchy)"


# ---------------------------------------------------------------- reports of any size

# each passing test took ~57 bytes of the report as it was, which the server reads up to 1 MB: 30,000 passing
# tests (1.7 MB) failed with "no report". (100,000 pass too, but take longer than a test here should.)
MANY = 30_000


def test_a_run_too_big_for_the_old_report_passes():
    spec = (
        "import pytest\n\nfrom work import double\n\n\n"
        f"@pytest.mark.parametrize('n', range({MANY}))\ndef test_n(n):\n    assert n >= 0\n\n\n"
        "def test_double():\n    assert double(2) == 4\n"
    )
    critique = accept(card(spec, "def double(n):\n    return 2 * n\n"), timeout=600)
    assert critique.verdict == "PASS", (critique.summary, critique.issues)
    assert f"({MANY + 1} tests: {MANY + 1} passed)" in critique.summary
    assert not in_our_groups()


def test_many_failures_are_counted_and_the_first_shown():
    """2,000 failing tests with long ids: the first ones in full, the rest by id while they fit, all counted."""
    spec = (
        "import pytest\n\nfrom work import double\n\n\n"
        "@pytest.mark.parametrize('n', range(2000), ids=lambda n: f'case-{n}-' + 'x' * 400)\n"
        "def test_n(n):\n    assert double(n) == n + n\n"
    )
    critique = accept(card(spec, "def double(n):\n    return n\n"), timeout=600)
    assert critique.verdict == "FAIL"
    assert "(2000 tests: 1 passed, 1999 failed)" in critique.summary
    shown, [more] = critique.issues[:12], critique.issues[12:]
    assert [i.location[:30] for i in shown] == [f"test_spec.py::test_n[case-{n}-xx"[:30] for n in range(1, 13)]
    assert "expected 2, got 1" in shown[0].description
    assert more.description.startswith("1987 more tests of the card's acceptance tests did not pass, besides the 12")
    assert more.description.endswith("more not named (too many for the report)")
