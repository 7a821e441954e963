"""Shared fixtures: a board on a temp file, in-process MCP clients per agent, server subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fake_llm import FakeLLM
from hiveboard.board import Board, Store
from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.engine import ReviewEngine, ReviewWorker
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def board(tmp_path: Path):
    b = Board(Store(tmp_path / "hiveboard.db"), lease_seconds=300)
    yield b
    b.store.close()


@pytest.fixture
def connect(board: Board):
    """connect("alice") -> an in-process MCP client whose connection acts as alice (None: unregistered)."""

    @asynccontextmanager
    async def _connect(agent: str | None = None, *, mode: str = "auto", wants_review=None, memory=None, review=None,
                       role: str | None = None, **client_options):
        server = build_server(board, Identity(board.agents, "memory", agent=agent, role=role),
                              wants_review=wants_review, memory=memory, review=review)
        async with Client(server, mode=mode, **client_options) as client:
            yield client

    return _connect


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    """A local `chroma run` server on a free loopback port, for the whole test session."""
    chroma = Path(sys.executable).parent / "chroma"
    if not chroma.exists():
        pytest.skip("the chroma CLI is not installed next to this Python")
    port = free_port()
    proc = subprocess.Popen([str(chroma), "run", "--path", str(tmp_path_factory.mktemp("chroma-server")),
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(params=["embedded", "chroma-server"])
def memory(request, board: Board, tmp_path: Path):
    """The board's shared memory with real offline embeddings, on the embedded Chroma and on a Chroma server."""
    if request.param == "embedded":
        mem = open_memory(board, get_embedder(), tmp_path)
    else:
        url = request.getfixturevalue("chroma_server")
        mem = open_memory(board, get_embedder(), tmp_path, chroma_url=url,
                          collection=f"t{uuid.uuid4().hex[:16]}")  # each test its own collection
    yield mem
    mem.stop()


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hiveboard_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "hiveboard.server", *args]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}: {proc.stderr.read().decode()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"server on port {port} did not start")


@pytest.fixture
def http_server(tmp_path: Path):
    """start(home=..., token=None, extra=[]) -> base URL of a `hiveboard serve --http` subprocess."""
    procs: list[subprocess.Popen] = []

    def start(home: Path | None = None, token: str | None = None, extra: tuple[str, ...] = ()) -> str:
        port = free_port()
        home = home or tmp_path / "home"
        args = ["--home", str(home), "serve", "--http", "--port", str(port), *extra]
        if token:
            args += ["--token", token]
        env = {**os.environ, "HIVEBOARD_LOG_LEVEL": "WARNING"}
        proc = subprocess.Popen(hiveboard_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        procs.append(proc)
        wait_for_port(port, proc)
        return f"http://127.0.0.1:{port}/mcp"

    start.procs = procs  # the server processes, newest last (tests that need a server's pid)
    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def http_client(url: str, token: str | None = None, mode: str = "auto") -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60)),
                  mode=mode)


def agent_token(home: Path, name: str) -> str:
    """Issue a bearer token the way an operator would: `hiveboard agent add NAME`."""
    out = subprocess.run(hiveboard_cmd("--home", str(home), "agent", "add", name), capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


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
        config = config.model_copy(update={"poll_seconds": 0.1, "agent_deadline": config.agent_deadline
                                           if "agent_deadline" in config.model_fields_set else 0})
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
