"""Claude Code sessions as Claude Code starts them: the stdio server from the `.mcp.json` setup wrote, with the
session's id in CLAUDE_CODE_SESSION_ID, clientInfo `claude-code` and the session-based protocol, spoken as raw
JSON-RPC lines (Claude Code's own client reads notifications the Python client drops); the hooks run as the
commands setup wrote into `.claude/settings.json`, with the hook's JSON on stdin."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import START_TIMEOUT, clean_env

from hiveboard.server.setup_clients import setup

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # every test starts server processes

SNAPSHOT = Path(__file__).with_name("channel_notification.json")
CHANNEL = "notifications/claude/channel"


@pytest.fixture
def anyio_backend():
    return "asyncio"  # the raw client below reads the process with asyncio's streams


class Session:
    """One Claude Code session's stdio connection to the server: requests by id, notifications kept in order."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.answers: dict[int, asyncio.Future] = {}
        self.notifications: list[dict] = []
        self.arrived = asyncio.Event()
        self.next_id = 0

    async def read(self) -> None:
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            if "id" in message and ("result" in message or "error" in message):
                self.answers.pop(message["id"]).set_result(message)
            elif "method" in message:
                self.notifications.append(message)
                self.arrived.set()

    async def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        future = self.answers[self.next_id] = asyncio.get_running_loop().create_future()
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        answer = await asyncio.wait_for(future, START_TIMEOUT)
        assert "error" not in answer, answer
        return answer["result"]

    async def call(self, tool: str, **arguments) -> dict:
        result = await self.request("tools/call", {"name": tool, "arguments": arguments})
        assert not result.get("isError"), result
        return (
            result["structuredContent"] if "structuredContent" in result else json.loads(result["content"][0]["text"])
        )

    async def channel(self, deadline: float) -> list[dict]:
        """The channel notifications that arrived, waiting up to `deadline` seconds for the first."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while not [n for n in self.notifications if n["method"] == CHANNEL] and loop.time() < end:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), end - loop.time())
            except TimeoutError:
                break
        return [n for n in self.notifications if n["method"] == CHANNEL]


def set_up(project: Path, home: Path) -> None:
    setup("claude-code", project=project, home=home, out=io.StringIO())


@asynccontextmanager
async def claude_code(project: Path, session_id: str):
    """A session's server, started from the `.mcp.json` setup wrote, initialized as Claude Code does it."""
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    env = clean_env(**entry.get("env", {}), CLAUDE_CODE_SESSION_ID=session_id)
    proc = await asyncio.create_subprocess_exec(
        entry["command"],
        *entry["args"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=project,
    )
    session = Session(proc)
    session.session_id = session_id
    reader = asyncio.get_running_loop().create_task(session.read())
    try:
        init = await session.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {"roots": {}, "elicitation": {}},
                "clientInfo": {"name": "claude-code", "version": "2.1.154"},
            },
        )
        session.capabilities = init["capabilities"]
        await session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield session
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        reader.cancel()


def run_hook(project: Path, event: str, payload: dict) -> subprocess.CompletedProcess:
    """The hook command setup wrote for `event`, run as Claude Code runs it: by a shell, the hook's JSON on stdin,
    CLAUDE_CODE_SESSION_ID set to the session's id."""
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = settings["hooks"][event][0]["hooks"][0]["command"]
    env = clean_env(CLAUDE_CODE_SESSION_ID=payload["session_id"], CLAUDE_PROJECT_DIR=str(project))
    return subprocess.run(
        ["sh", "-c", command],
        input=json.dumps({"hook_event_name": event, "cwd": str(project), **payload}),
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=START_TIMEOUT,
    )


async def test_two_sessions_are_two_agents_and_a_resumed_one_is_the_same(tmp_path):
    project, home = tmp_path / "repo", tmp_path / "home"
    project.mkdir()
    set_up(project, home)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    async with claude_code(project, first) as a, claude_code(project, second) as b:
        me_a, me_b = (await a.call("whoami"))["agent"], (await b.call("whoami"))["agent"]
        assert me_a != me_b
        assert me_a == "claude-" + first.replace("-", "")[:8]
        card = await a.call("create_task", title="one card, two sessions")
        claimed = await a.call("claim_task", task_id=card["id"])
        assert claimed["task"]["assignee"] == me_a
        # the other session is another agent: the card is not its to finish
        result = await b.request(
            "tools/call",
            {"name": "complete_task", "arguments": {"task_id": card["id"], "token": claimed["token"], "output": "x"}},
        )
        assert result.get("isError")
    async with claude_code(project, first) as resumed:  # `claude --resume`: the same session id
        assert (await resumed.call("whoami"))["agent"] == me_a
    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board

    board = Board(Store(str(home / "hiveboard.db")))
    try:
        sessions = {a.name: a for a in board.views.agents()}
        assert sessions[me_a].client_session == first and sessions[me_b].client_session == second
    finally:
        board.store.close()


async def test_a_direct_message_reaches_an_idle_session_through_the_channel_once(tmp_path):
    project, home = tmp_path / "repo", tmp_path / "home"
    project.mkdir()
    set_up(project, home)
    async with claude_code(project, str(uuid.uuid4())) as idle, claude_code(project, str(uuid.uuid4())) as other:
        assert idle.capabilities["experimental"]["claude/channel"] == {}
        me = (await idle.call("whoami"))["agent"]
        sender = (await other.call("whoami"))["agent"]
        sent = await other.call(
            "publish_message", intent="info", recipient=me, content="please look at card 7 when you can"
        )
        pushed = await idle.channel(START_TIMEOUT)  # idle: no request of its own is open meanwhile
        assert len(pushed) == 1
        params = pushed[0]["params"]
        assert params["meta"] == {"kind": "message", "sender": sender, "message_id": str(sent["id"])}
        assert params["content"].startswith("hiveboard (the team board) tells you: from " + sender)
        assert "«please look at card 7 when you can»" in params["content"]
        shape = json.loads(SNAPSHOT.read_text())["message"]
        assert set(pushed[0]) == set(shape) and set(params) == set(shape["params"])
        session = idle.session_id
    # the session reconnects (a new server, the same session id): the first message, still unread, is not told
    # again; the next direct message is, alone
    async with claude_code(project, session) as back, claude_code(project, str(uuid.uuid4())) as other:
        await other.call("publish_message", intent="info", content="to everyone: not a direct message")
        sent = await other.call("publish_message", intent="info", recipient=me, content="second")
        pushed = await back.channel(START_TIMEOUT)
        await back.call("whoami")  # anything the reconnect pushed was sent before this answer
        pushed = [n for n in back.notifications if n["method"] == CHANNEL]
    assert [n["params"]["meta"]["message_id"] for n in pushed] == [str(sent["id"])]


async def test_the_stop_hook_blocks_only_the_session_holding_a_card(tmp_path):
    project, home = tmp_path / "repo", tmp_path / "home"
    project.mkdir()
    set_up(project, home)
    holder, free = str(uuid.uuid4()), str(uuid.uuid4())
    async with claude_code(project, holder) as a, claude_code(project, free) as b:
        await b.call("whoami")
        card = await a.call("create_task", title="held by one session")
        await a.call("claim_task", task_id=card["id"])
        blocked = run_hook(project, "Stop", {"session_id": holder, "stop_hook_active": False})
        let_go = run_hook(project, "Stop", {"session_id": free, "stop_hook_active": False})
    assert blocked.returncode == 0 and json.loads(blocked.stdout)["decision"] == "block"
    assert f"#{card['id']}" in json.loads(blocked.stdout)["reason"]
    assert let_go.returncode == 0 and let_go.stdout == "", let_go.stderr


def test_setup_writes_no_fixed_agent_and_no_hook_after_every_tool(tmp_path):
    project = tmp_path / "repo"
    project.mkdir()
    out = io.StringIO()
    setup("claude-code", project=project, home=tmp_path / "home", out=out)
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    assert "HIVEBOARD_AGENT" not in entry.get("env", {})
    hooks = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    assert all("HIVEBOARD_AGENT" not in h["command"] for groups in hooks.values() for g in groups for h in g["hooks"])
    post = hooks["PostToolUse"][0]
    assert post["matcher"] == "mcp__hiveboard__.*" and post["hooks"][0]["async"] is True
    assert "claude --dangerously-load-development-channels server:hiveboard" in out.getvalue()
