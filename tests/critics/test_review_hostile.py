"""Submitted work is hostile: reviewing it must never import or run it on the server."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import anyio
import pytest
from conftest import call, http_client, needs_sandbox, self_registered_token
from reviewing import critic, hand_in, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = pytest.mark.anyio

# Names an analyser (bandit, its plugins, the interpreter's site machinery, pytest) would import if the
# artifact directory were on its import path.
SHADOWING = [
    "yaml.py",
    "argparse.py",
    "bandit.py",
    "stevedore.py",
    "bandit/__init__.py",
    "sitecustomize.py",
    "usercustomize.py",
    "conftest.py",
]


def py_file(name: str, content: str) -> dict:
    return {"name": name, "kind": "code", "content": content}


def planting(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"


@pytest.mark.parametrize("name", [*SHADOWING, "evil.pth"])
async def test_no_analyser_imports_a_submitted_file(connect, reviewer, tmp_path, name):
    marker = tmp_path / f"marker-{name.replace('/', '_')}"
    content = planting(marker)
    if name.endswith(".pth"):  # a .pth line starting with "import" runs when a site directory holds it
        content = content.replace("\n", "; ", 1)
    engine = reviewer()
    async with connect("mallory", review=engine) as c:
        card = await hand_in(
            c,
            artifacts=[
                {"name": name, "kind": "code", "content": content},
                {"name": "app.py", "kind": "code", "content": "X = 1\n"},
            ],
        )
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert not marker.exists(), f"{name} was imported while the work was reviewed"
    for name_ in ("bandit", "ruff"):
        assert critic(round1, name_)["status"] == "ok", critic(round1, name_)


# ---------------------------------------------------------------- hostile tests, run in the sandbox


def attacks(secret_env: str, server_pid: int, private: list[Path], ports: list[int], outside: Path) -> str:
    """A test file whose every test tries one escape and fails with BLOCKED (and why) or LEAKED (and what)."""
    return f"""
import os, socket

import pytest

def report(attempt):
    try:
        got = attempt()
    except BaseException as exc:  # MemoryError too
        pytest.fail(f"BLOCKED: {{type(exc).__name__}}: {{exc}}"[:200])
    pytest.fail(f"LEAKED: {{got!r}}"[:200] if got else "BLOCKED: nothing there")

def test_environment():
    report(lambda: os.environ.get({secret_env!r}))

def test_server_environ():
    report(lambda: open("/proc/{server_pid}/environ", "rb").read())

def test_server_cmdline():
    report(lambda: open("/proc/{server_pid}/cmdline", "rb").read())

@pytest.mark.parametrize("path", {[str(p) for p in private]!r})
def test_private_file(path):
    report(lambda: open(path, "rb").read(64))

@pytest.mark.parametrize("port", {ports!r})
def test_connect(port):
    report(lambda: socket.create_connection(("127.0.0.1", port), timeout=3) and "connected")

def test_write_outside():
    def write():
        open({str(outside)!r}, "w").write("escaped")
        return "wrote"
    report(write)

def test_system_is_read_only():
    def write():
        open("/usr/lib/hiveboard-escape", "w").write("escaped")
        return "wrote"
    report(write)

def test_fork_is_bounded():
    pids = []
    def fork():
        while len(pids) < 5000:
            pid = os.fork()
            if pid == 0:
                import time
                time.sleep(60)
                os._exit(0)
            pids.append(pid)
        return f"forked {{len(pids)}}"
    try:
        report(fork)
    finally:
        print(f"forked {{len(pids)}} before the limit")

def test_allocate_4_gb():
    report(lambda: len(bytearray(4 * 1024 ** 3)) and "allocated")
"""


def results(acceptance: dict) -> dict[str, str]:
    """test id -> its failure message, from the acceptance critique."""
    return {i["location"].split("::", 1)[1]: i["description"] for i in acceptance["issues"] if "::" in i["location"]}


@needs_sandbox
async def test_hostile_tests_are_contained_on_a_default_install(connect, reviewer, board, tmp_path, monkeypatch):
    secret = "sk-hiveboard-test-secret-1f9a"
    monkeypatch.setenv("HIVEBOARD_TEST_SECRET", secret)
    config = tmp_path / "config.toml"
    config.write_text(f"# {secret}\n")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    outside = tmp_path / "escaped.txt"
    source = attacks(
        "HIVEBOARD_TEST_SECRET",
        os.getpid(),
        [Path(board.store.path), config, Path.home() / ".bashrc"],
        [listener.getsockname()[1]],
        outside,
    )
    engine = reviewer()
    async with connect("mallory", review=engine) as c:
        card = await hand_in(c, artifacts=[{"name": "test_escape.py", "kind": "test", "content": source}])
        trail = await verdict(c, card["id"])
    round1 = trail["rounds"][0]
    acceptance = critic(round1, "acceptance")
    found = results(acceptance)
    assert round1["verdict"] == "FAIL" and acceptance["verdict"] == "FAIL"
    assert len(found) == 11, json.dumps(acceptance)[:3000]
    for test, message in found.items():
        outcome = message.split("\n", 1)[0]  # the test's own line; the rest quotes its source
        assert "BLOCKED" in outcome and "LEAKED" not in outcome, (test, message)
    assert "MemoryError" in found["test_allocate_4_gb"]
    assert "BlockingIOError" in found["test_fork_is_bounded"]  # the process limit, not the machine's
    assert "Read-only file system" in found["test_system_is_read_only"]
    everything = json.dumps(trail)
    assert secret not in everything and "SQLite format" not in everything
    assert not outside.exists()
    with pytest.raises(socket.timeout):
        listener.accept()  # nothing reached the listener
    listener.close()


@needs_sandbox
@pytest.mark.slow
async def test_a_test_that_never_ends_is_stopped_while_the_server_answers(connect, reviewer):
    engine = reviewer(ReviewConfig(execute_timeout=5))
    spin = "def test_forever():\n    while True:\n        pass\n"
    async with connect("mallory", review=engine) as c, connect("alice") as other:
        card = await hand_in(c, artifacts=[{"name": "test_spin.py", "kind": "test", "content": spin}])
        answered = 0
        while (await call(other, "get_task", task_id=card["id"]))["status"] == "review":
            await call(other, "get_board")  # other agents are served while the review runs
            answered += 1
            await anyio.sleep(0.25)
        trail = await verdict(c, card["id"])
    acceptance = critic(trail["rounds"][0], "acceptance")
    assert answered >= 5
    assert trail["rounds"][0]["verdict"] == "FAIL"
    assert acceptance["issues"][0]["category"] == "acceptance-timeout"
    assert "did not finish within 5 s and was stopped" in acceptance["issues"][0]["description"]


@needs_sandbox
@pytest.mark.slow
async def test_floods_and_fork_bombs_are_bounded(connect, reviewer):
    engine = reviewer(ReviewConfig(execute_timeout=10))
    flood = "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(100):\n    sys.stdout.write(chunk)\n"
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    async with connect("mallory", review=engine) as c:
        card = await hand_in(
            c,
            artifacts=[py_file("flood.py", flood), py_file("bomb.py", bomb)],
            criteria=["$ python flood.py", "$ python bomb.py"],
        )
        trail = await verdict(c, card["id"])
    acceptance = critic(trail["rounds"][0], "acceptance")
    text = " ".join(i["description"] for i in acceptance["issues"])
    assert trail["rounds"][0]["verdict"] == "FAIL"
    assert "printed more than 16 MB and was stopped" in text
    assert len(acceptance["issues"][0]["description"]) <= 4000  # what is kept of the output is capped
    # the bomb spins at the process limit until the wall clock stops the whole sandbox
    assert "was stopped" in acceptance["issues"][1]["description"]


@needs_sandbox
@pytest.mark.slow
async def test_a_served_default_install_keeps_its_secrets(tmp_path, http_server, monkeypatch):
    """`hiveboard serve --http` as installed, no configuration: hostile tests reach neither the server's
    port, its /proc, its environment, its database nor its config file."""
    secret = "sk-hiveboard-served-secret-77c2"
    monkeypatch.setenv("HIVEBOARD_TEST_SECRET", secret)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f"# {secret}\n")
    url = http_server(home=home)
    token = await self_registered_token(url, "mallory")
    server = http_server.procs[-1]
    port = int(url.split(":")[2].split("/")[0])
    source = attacks(
        "HIVEBOARD_TEST_SECRET",
        server.pid,
        [home / "hiveboard.db", home / "config.toml"],
        [port],
        tmp_path / "escaped.txt",
    )
    async with http_client(url, token) as c:
        card = await hand_in(c, artifacts=[{"name": "test_escape.py", "kind": "test", "content": source}])
        trail = await verdict(c, card["id"])
    acceptance = critic(trail["rounds"][0], "acceptance")
    found = results(acceptance)
    assert trail["rounds"][0]["verdict"] == "FAIL" and len(found) == 10, json.dumps(acceptance)[:3000]
    for test, message in found.items():
        outcome = message.split("\n", 1)[0]
        assert "BLOCKED" in outcome and "LEAKED" not in outcome, (test, message)
    assert "Connection refused" in found[f"test_connect[{port}]"] or "unreachable" in found[f"test_connect[{port}]"]
    assert secret not in json.dumps(trail) and not (tmp_path / "escaped.txt").exists()
