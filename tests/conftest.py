"""Shared fixtures: a board on a temp file, in-process MCP clients per agent, server subprocesses."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from fake_llm import FakeLLM
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pg_cluster import PostgresCluster, free_port

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board
from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.engine import ReviewEngine, ReviewWorker
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity

# Overall limit for a subprocess to start or a CLI command to finish: generous, because at load
# average 10 on two cores an interpreter start takes ten times as long; readiness itself is a signal.
START_TIMEOUT = 300


# The full lane (`-m slow`) is every test that needs a part of its own beyond this process: a PostgreSQL or
# Chroma server, a hiveboard subprocess, a browser, the review sandbox or git. It is told from the test's code and
# the fixtures it uses, so a new test lands in the right lane without anyone marking it; the fast lane
# (`-m "not slow"`) is the board's rules and the tools through an in-process client. `slow` marks by hand add the
# in-process tests that are long anyway (many clients, big data).
FULL_LANE_PARAMS = {"postgresql", "chroma-server"}
FULL_LANE_FIXTURES = {"postgres", "chroma_server", "http_server"}
FULL_LANE_NAMES = {"serve_http", "stdio_server", "run_cli", "hiveboard_cmd", "subprocess", "Popen", "sync_playwright"}
TESTS = str(Path(__file__).parent)


def _names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


@functools.cache
def _needs_a_part(fn) -> bool:
    """Whether `fn`, or a function of the tests it calls, starts a process or a server (by the names it uses)."""
    code = getattr(fn, "__code__", None)
    if code is None or not code.co_filename.startswith(TESTS):
        return False
    names = _names(code)
    if names & FULL_LANE_NAMES:
        return True
    scope = getattr(fn, "__globals__", {})
    return any(_needs_a_part(scope[n]) for n in names if n in scope and callable(scope[n]) and scope[n] is not fn)


def _full_lane(item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and FULL_LANE_PARAMS & {str(v) for v in callspec.params.values()}:
        return True
    if FULL_LANE_FIXTURES & set(item.fixturenames):
        return True
    if any(m.name == "skipif" and re.search(r"sandbox|git", str(m.kwargs)) for m in item.iter_markers()):
        return True
    if _needs_a_part(getattr(item, "function", None)):
        return True
    defs = item._fixtureinfo.name2fixturedefs
    return any(_needs_a_part(d.func) for name in item.fixturenames for d in defs.get(name, ()))


def pytest_collection_modifyitems(items):
    """The lanes (above); and slow tests first, so that with two workers the last minute is not one worker
    finishing a long test."""
    for item in items:
        if item.get_closest_marker("slow") is None and _full_lane(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def anyio_backend():
    return "asyncio"


def pytest_generate_tests(metafunc):
    """A test that uses the board runs on SQLite, and also on PostgreSQL where its module says
    `pytestmark = pytest.mark.backends("sqlite", "postgresql")`."""
    if "backend" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("backend", marker.args if marker else ("sqlite",), indirect=True)


@pytest.fixture
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """The session's PostgreSQL cluster; skipped where PostgreSQL is not installed, unless
    HIVEBOARD_REQUIRE_POSTGRES=1 (CI), which fails instead."""
    try:
        cluster = PostgresCluster(tmp_path_factory.mktemp("postgres"))
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        if os.environ.get("HIVEBOARD_REQUIRE_POSTGRES") == "1":
            raise
        why = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"no PostgreSQL here: {exc} {why.decode(errors='replace')[-300:]}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def migrated_postgres(postgres) -> str:
    """A database of the session's PostgreSQL with every migration applied, that nothing stays connected to:
    the template of the tests' boards. Copying it is a file copy on the server, where migrating each test's
    database anew runs every migration's statements again; the migrations themselves still run, here, and
    from an empty database in tests/board/test_postgres.py."""
    url = postgres.database()
    Store(url).close()
    return url


@pytest.fixture
def store_target(request, tmp_path: Path, backend: str) -> str:
    """Where a test's board lives: a SQLite file, or a new database on the session's PostgreSQL, migrated."""
    if backend == "postgresql":
        return request.getfixturevalue("postgres").database(template=request.getfixturevalue("migrated_postgres"))
    return str(tmp_path / "hiveboard.db")


@pytest.fixture
def node_env(request, backend: str, store_target: str) -> dict[str, str]:
    """The environment of this test's hiveboard processes (serve, web, the CLI) with --home at a directory of
    the test's. On SQLite the board is the file in that --home; on PostgreSQL it is HIVEBOARD_DB, with the
    Chroma server such a node needs, in a collection of this test's own (the session's tests share the
    server, and every fresh database numbers its items from 1)."""
    if backend == "sqlite":
        return clean_env()
    return clean_env(
        HIVEBOARD_DB=store_target,
        HIVEBOARD_CHROMA_URL=request.getfixturevalue("chroma_server"),
        HIVEBOARD_CHROMA_COLLECTION=f"t{uuid.uuid4().hex[:16]}",
    )


@pytest.fixture
def board(store_target: str):
    b = Board(Store(store_target), lease_seconds=300)
    yield b
    b.store.close()


@pytest.fixture
def connect(board: Board):
    """connect("alice") -> an in-process MCP client whose connection acts as alice (None: unregistered)."""

    @asynccontextmanager
    async def _connect(
        agent: str | None = None,
        *,
        mode: str = "auto",
        wants_review=None,
        memory=None,
        review=None,
        role: str | None = None,
        **client_options,
    ):
        server = build_server(
            board,
            Identity(board.agents, "memory", agent=agent, role=role),
            wants_review=wants_review,
            memory=memory,
            review=review,
        )
        async with Client(server, mode=mode, **client_options) as client:
            yield client

    return _connect


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    """A local `chroma run` server on a free loopback port, for the whole test session (per xdist worker)."""
    chroma = Path(sys.executable).parent / "chroma"
    if not chroma.exists():
        pytest.skip("the chroma CLI is not installed next to this Python")
    for _ in range(3):  # the free port may be taken by another process before chroma binds it
        port = free_port()
        proc = subprocess.Popen(
            [
                str(chroma),
                "run",
                "--path",
                str(tmp_path_factory.mktemp("chroma-server")),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        if wait_until(functools.partial(_answers, f"{url}/api/v2/heartbeat"), proc):
            break
    else:
        raise RuntimeError("chroma run exited three times before answering its heartbeat")
    try:
        yield url
    finally:
        stop_process(proc)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


async def until(check, timeout: float = START_TIMEOUT, what: str = "condition", interval: float = 0.01):
    """Poll check() on the event loop until it returns something truthy, and return that; check may be a
    coroutine function (a question to a server). Fail the test naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(interval)


def wait_until(ready, proc: subprocess.Popen, timeout: float = START_TIMEOUT) -> bool:
    """Poll ready() until it holds (True) or proc exits (False); a server too slow to start fails the test."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            stop_process(proc)
            raise TimeoutError(f"{proc.args[:3]} did not become ready within {timeout:.0f} s")
        time.sleep(0.05)
    return True


@pytest.fixture(params=["embedded", "chroma-server"])
def memory(request, board: Board, tmp_path: Path):
    """The board's shared memory with real offline embeddings, on the embedded Chroma and on a Chroma server."""
    if request.param == "embedded":
        mem = open_memory(board, get_embedder(), tmp_path)
    else:
        url = request.getfixturevalue("chroma_server")
        mem = open_memory(
            board, get_embedder(), tmp_path, chroma_url=url, collection=f"t{uuid.uuid4().hex[:16]}"
        )  # each test its own collection
    yield mem
    mem.stop()


@pytest.fixture
def with_memory(board: Board, tmp_path: Path):
    """The board's shared memory on the embedded Chroma only, for tests that are about something else."""
    memory = open_memory(board, get_embedder(), tmp_path)
    yield memory
    memory.stop()


class ToolFailed(AssertionError):
    pass


def data(result):
    """A tool result's data: the compact JSON text the server sends it as (once)."""
    assert result.structured_content is None, "the default profile sends a result's data once, as text"
    return json.loads(result.content[0].text)


async def call(client: Client, tool: str, **args):
    """Call a tool and return its result's data; fail the test if the tool errored."""
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise ToolFailed(f"{tool} failed: {result.content[0].text}")
    return data(result)


async def call_error(client: Client, tool: str, **args) -> str:
    """Call a tool that must fail; return its error text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} should have failed but returned {result.content}"
    return result.content[0].text


@pytest.fixture(scope="session")
def unreachable_url():
    """http://127.0.0.1:<port>/v1 where nothing listens, for the whole session: the port stays bound
    (without listen) so no other server, in this worker or another, can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def hiveboard_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "hiveboard.server", *args]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`hiveboard ARGS` as an operator runs it (in `env`, else this environment); its exit code, stdout and
    stderr (as text)."""
    return subprocess.run(hiveboard_cmd(*args), capture_output=True, text=True, timeout=START_TIMEOUT, env=env)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any HIVEBOARD_* setting of the outer shell, nor the session id of a Claude
    Code running the tests (it would name the servers' agent: server/sessions.py), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEBOARD_") and k != "CLAUDE_CODE_SESSION_ID"}
    env.update(extra)
    return env


def stdio_server(home: Path, agent: str | None = None, env: dict | None = None, offline: bool = False) -> Client:
    """A client of `hiveboard serve` on stdio in its own process, as agent (HIVEBOARD_AGENT), or with `env`.

    offline: in a network namespace with only loopback, where `unshare -n` works here; even native code
    cannot reach out."""
    args = ["-m", "hiveboard.server", "--home", str(home), "serve"]
    env = env or clean_env(**({"HIVEBOARD_AGENT": agent} if agent else {}))
    if (
        offline
        and shutil.which("unshare")
        and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    ):
        script = f"ip link set lo up 2>/dev/null; exec {sys.executable} " + " ".join(args)
        return Client(StdioServerParameters(command="unshare", args=["-n", "sh", "-c", script], env=env))
    return Client(StdioServerParameters(command=sys.executable, args=args, env=env))


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# uvicorn's INFO line once its socket listens; with --port 0 it names the port the kernel chose
READY = re.compile(r"Uvicorn running on (http://\S+?:\d+)")


def serve_http(home: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start `hiveboard serve --http` on a port of the kernel's choosing; (process, MCP URL) once it listens.

    Readiness is uvicorn's "running on" line on stderr, awaited up to START_TIMEOUT (a start under heavy
    load is slow, not broken); a server that exits first fails with its stderr. stderr is drained for the
    server's whole life, so its log can never fill the pipe and block it.
    """
    args = hiveboard_cmd("--home", str(home), "serve", "--http", "--port", "0", "--log-level", "INFO", *extra)
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else dict(os.environ),
    )
    tail: deque[str] = deque(maxlen=100)
    found: dict[str, str] = {}
    ready = threading.Event()

    def drain() -> None:
        for line in proc.stderr:
            tail.append(line)
            if not ready.is_set() and (m := READY.search(line)):
                found["url"] = m.group(1)
                ready.set()
        ready.set()  # end of stderr: the server exited

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(START_TIMEOUT):
        stop_process(proc)
        raise TimeoutError(
            f"hiveboard serve --http said nothing like ready within {START_TIMEOUT} s:\n" + "".join(tail)
        )
    if "url" not in found:
        proc.wait()
        raise RuntimeError(f"hiveboard serve --http exited with {proc.returncode}:\n" + "".join(tail))
    return proc, found["url"] + "/mcp"


@pytest.fixture
def http_server(tmp_path: Path):
    """start(home=..., token=None, extra=[]) -> MCP URL of a `hiveboard serve --http` subprocess."""
    procs: list[subprocess.Popen] = []

    def start(home: Path | None = None, token: str | None = None, extra: tuple[str, ...] = ()) -> str:
        proc, url = serve_http(home or tmp_path / "home", *extra, *(["--token", token] if token else []))
        procs.append(proc)
        return url

    start.procs = procs  # the server processes, newest last (tests that need a server's pid)
    yield start
    for proc in procs:
        stop_process(proc)


def http_client(url: str, token: str | None = None, mode: str = "auto") -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60)), mode=mode)


def agent_token(home: Path, name: str) -> str:
    """Issue a bearer token the way an operator would: `hiveboard agent add NAME`."""
    out = subprocess.run(
        hiveboard_cmd("--home", str(home), "agent", "add", name),
        capture_output=True,
        text=True,
        check=True,
        timeout=START_TIMEOUT,
    )
    return out.stdout.strip()


def issue_tokens(home: Path, env: dict[str, str], agents: dict[str, str | None]) -> dict[str, str]:
    """{name: role} -> {name: token}: what `hiveboard --home HOME agent add NAME --role ROLE` prints for each, in
    `env`, issued in this process on the board that command opens (HIVEBOARD_DB, else the SQLite file in HOME),
    with the board function it calls. For fixtures that need agents before a server starts: each command is an
    interpreter start and a board open; the command itself is tested in tests/server/test_cli.py."""
    board = Board(Store(env.get("HIVEBOARD_DB") or str(home / "hiveboard.db")))
    try:
        return {name: board.agents.new_token(name, role) for name, role in agents.items()}
    finally:
        board.store.close()


async def self_registered_token(url: str, name: str) -> str:
    """An agent registers itself over HTTP with whoami(name=...) and gets its bearer token: the MCP way,
    and one request instead of a `hiveboard agent add` process (seconds of interpreter start each)."""
    async with http_client(url) as client:
        me = await call(client, "whoami", name=name)
    assert me["agent"] == name and me["token"], me
    return me["token"]


async def fence(client: Client) -> None:
    """Return once the server has read every request this client sent before: it reads one connection's
    messages in order and starts their handlers in that order, so a call started in a task is then being
    handled, not still on its way. (A whoami, not a ping: ping is gone from the 2026-07-28 protocol.)"""
    await call(client, "whoami")


# ---------------------------------------------------------------- review (tests/critics)


@pytest.fixture
def fake_llm():
    """A fake OpenAI-compatible chat server on 127.0.0.1 (tests/fake_llm.py)."""
    fake = FakeLLM()
    yield fake
    fake.close()


@pytest.fixture
def reviewer(board):
    """reviewer(config=ReviewConfig(), memory=None) -> a running ReviewEngine (its worker stops at teardown).

    Agent critics are off unless the config sets agent_deadline."""
    workers: list[ReviewWorker] = []

    def start(config: ReviewConfig | None = None, memory=None) -> ReviewEngine:
        config = config or ReviewConfig()
        config = config.model_copy(
            update={
                "poll_seconds": 0.1,
                "agent_deadline": config.agent_deadline if "agent_deadline" in config.model_fields_set else 0,
            }
        )
        engine = ReviewEngine(board, config, memory)
        workers.append(ReviewWorker(engine).start())
        return engine

    yield start
    for worker in workers:
        worker.stop()


# ---------------------------------------------------------------- the review sandbox


def _sandbox():
    from hiveboard.critics.sandbox import detect

    found = detect()
    if found.box is None and os.environ.get("HIVEBOARD_REQUIRE_SANDBOX"):
        raise RuntimeError(f"HIVEBOARD_REQUIRE_SANDBOX is set but no sandbox works here: {found.reason}")
    return found


SANDBOX = _sandbox()
needs_sandbox = pytest.mark.skipif(SANDBOX.box is None, reason=f"no usable sandbox here: {SANDBOX.reason}")


# the review gate's cases are submitted work and the creator's tests, not tests of this project
collect_ignore = ["critics/gate_cases"]
