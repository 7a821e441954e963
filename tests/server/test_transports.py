"""The server as clients really start it: a stdio subprocess and a streamable-HTTP subprocess."""

from __future__ import annotations

import sys
import time

import anyio
import httpx
import pytest
from conftest import START_TIMEOUT, agent_token, call, call_error, clean_env, fence, http_client, stdio_server
from mcp import Client

from hiveboard.server.identity import TOKEN_SECONDS

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # every test starts server processes


async def test_stdio_server_runs_a_whole_card(tmp_path):
    async with stdio_server(tmp_path, agent="claude-desktop") as c:
        assert len((await c.list_tools()).tools) == 22
        assert (await call(c, "whoami"))["agent"] == "claude-desktop"
        card = await call(c, "create_task", title="write README", task_type="docs")
        claim = await call(c, "claim_task")
        await call(c, "update_task", task_id=card["id"], token=claim["token"], note="outline done")
        done = await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="README written")
        assert done["status"] == "review"
        review = await call(
            c, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT
        )  # the stdio server's worker
        assert review["status"] == "done" and review["rounds"][0]["synthesis"]["lenses_uncovered"] == [
            "accuracy",
            "clarity",
        ]
        assert "it is done" in await call_error(c, "update_task", task_id=card["id"], token=claim["token"])
    assert (tmp_path / "hiveboard.db").exists()


async def test_stdio_agent_without_config_registers_once(tmp_path):
    async with stdio_server(tmp_path) as c:
        assert "whoami" in await call_error(c, "claim_task")
        me = await call(c, "whoami", name="cursor-1")
        assert me["agent"] == "cursor-1"
        assert (await call(c, "create_task", title="x"))["id"] == 1
    async with stdio_server(tmp_path) as c:  # a new window cannot take the name without its token
        assert "already registered" in await call_error(c, "whoami", name="cursor-1")
        assert (await call(c, "whoami", name="cursor-1", token=me["token"]))["agent"] == "cursor-1"


async def test_http_agents_act_by_bearer_token_only(tmp_path, http_server):
    home = tmp_path / "home"
    alice, bob = agent_token(home, "alice"), agent_token(home, "bob")
    url = http_server(home=home)
    async with http_client(url, alice) as a, http_client(url, bob) as b:
        assert (await call(a, "whoami"))["agent"] == "alice"
        card = await call(a, "create_task", title="shared card")
        claim = await call(a, "claim_task")
        assert "claimed by alice" in await call_error(
            b, "complete_task", task_id=card["id"], token=claim["token"], output="not mine"
        )
        await call(a, "complete_task", task_id=card["id"], token=claim["token"], output="mine")
        full = await call(b, "get_task", task_id=card["id"])
        # the server's review worker may already have moved the card on after alice's three entries
        actors = [h["actor"] for h in full["history"]]
        assert actors[:3] == ["alice", "alice", "alice"] and set(actors[3:]) <= {"review"}, full["history"]
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer hb_forged"}
    async with httpx.AsyncClient(timeout=30) as raw:  # refused before any MCP: initialize included
        for body in (initialize, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
            r = await raw.post(url, json=body, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
            error = r.json()["error"]["message"]
            assert "matches no agent" in error and "hiveboard agent token NAME" in error
        for other in ("Basic cm9vdDpyb290", "Bearer", "hb_forged"):  # credentials not in the bearer form
            r = await raw.post(url, json=initialize, headers={**headers, "Authorization": other})
            assert r.status_code == 401 and "is not 'Bearer <token>'" in r.json()["error"]["message"], (other, r.text)
        r = await raw.post(url, json=initialize, headers={"Accept": headers["Accept"]})  # no token: local, allowed
        assert r.status_code == 200


async def test_a_replaced_token_is_refused_once_the_entry_stops_trusting_it(tmp_path, http_server):
    """The HTTP entry keeps an agent token it found for a moment (identity.TOKEN_SECONDS: an agent calling again
    needs no lookup): the operator's new token works at once, and the one it replaced is refused after that."""
    home = tmp_path / "home"
    old = agent_token(home, "alice")
    url = http_server(home=home)
    async with http_client(url, old) as a:
        assert (await call(a, "whoami"))["agent"] == "alice"
    new = agent_token(home, "alice")  # `hiveboard agent add alice` again: a new token replaces the old one
    async with http_client(url, new) as a:
        assert (await call(a, "whoami"))["agent"] == "alice"
    await anyio.sleep(TOKEN_SECONDS)
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {old}"}
    async with httpx.AsyncClient(timeout=30) as raw:
        r = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert r.status_code == 401 and "matches no agent" in r.json()["error"]["message"], r.text


def test_known_tokens_are_kept_a_moment_by_their_hash_and_never_when_unknown(monkeypatch):
    from hiveboard.board.models import Agent
    from hiveboard.server import identity

    known = identity.KnownTokens(seconds=0.2)
    agent = Agent(name="alice", role=None, created_at="2026-11-26T00:00:00.000Z")
    assert known.get("hb_secret") is None
    known.put("hb_secret", agent)
    assert known.get("hb_secret") == agent and known.get("hb_other") is None
    assert all("hb_secret" not in repr(key) for key in known._found)  # the token itself is not kept
    time.sleep(0.25)
    assert known.get("hb_secret") is None
    monkeypatch.setattr(identity.KnownTokens, "MOST", 3)
    for n in range(5):
        known.put(f"hb_{n}", agent)
    assert len(known._found) <= 3 and known.get("hb_4") == agent


async def test_http_session_binding_on_the_session_protocol(tmp_path, http_server):
    url = http_server(home=tmp_path / "home")
    async with http_client(url, mode="legacy") as c:
        assert (await call(c, "whoami", name="vscode"))["message"] == "this MCP session now acts as vscode"
        assert (await call(c, "create_task", title="from vscode"))["id"] == 1
    async with http_client(url, mode="legacy") as other:  # a new session starts anonymous
        assert (await call(other, "whoami")).get("agent") is None


async def test_http_token_origin_and_binding_defaults(tmp_path, http_server):
    home = tmp_path / "home"
    alice = agent_token(home, "alice")
    url = http_server(home=home, token="team-secret")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx.AsyncClient() as raw:
        assert (await raw.post(url, json=body, headers=headers)).status_code == 401
        evil = {**headers, "Authorization": "Bearer team-secret", "Origin": "http://evil.example"}
        assert (await raw.post(url, json=body, headers=evil)).status_code == 403
    async with http_client(url, alice) as c:  # an agent token also passes the server's gate
        assert (await call(c, "whoami"))["agent"] == "alice"
    async with http_client(url, "team-secret") as c:  # the team token gets in, but is nobody
        assert (await call(c, "whoami")).get("agent") is None


async def test_waiting_agent_on_one_process_gets_a_message_published_through_another(tmp_path):
    async with stdio_server(tmp_path, agent="window-a") as a, stdio_server(tmp_path, agent="window-b") as b:
        await call(a, "whoami")
        await call(b, "whoami")
        got: list = []

        async def wait():
            started = anyio.current_time()
            page = await call(a, "get_messages", wait_seconds=60)
            got.append((page["messages"], anyio.current_time() - started))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await fence(a)  # a's server has read the waiting call: it is being handled in its own process
            await call(b, "publish_message", intent="info", recipient="window-a", content="from the other window")
        messages, waited = got[0]
        assert [(m["sender"], m["content"]) for m in messages] == [("window-b", "from the other window")]
        assert waited < 30  # woken by the publish, not by the 60 s timeout


async def test_inbox_listener_on_one_process_hears_a_publish_through_another(tmp_path):
    async with stdio_server(tmp_path, agent="window-a") as a, stdio_server(tmp_path, agent="window-b") as b:
        await call(a, "whoami")
        await call(b, "whoami")
        async with a.listen(resource_subscriptions=["hiveboard://inbox/window-a"]) as sub:
            await call(b, "publish_message", intent="info", recipient="window-a", content="ping")
            with anyio.fail_after(START_TIMEOUT):
                event = await sub.__anext__()
        assert event.uri == "hiveboard://inbox/window-a"


async def test_a_forged_session_header_does_not_borrow_an_identity(tmp_path, http_server):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    url = http_server(home=tmp_path / "home", token="team-secret")
    vscode = agent_token(tmp_path / "home", "vscode")  # with a server token, agents do not register themselves
    seen: dict = {}

    async def keep_session_id(response):
        seen["sid"] = response.headers.get("mcp-session-id") or seen.get("sid")

    victim_http = httpx2.AsyncClient(
        headers={"Authorization": "Bearer team-secret"}, timeout=60, event_hooks={"response": [keep_session_id]}
    )
    async with Client(streamable_http_client(url, http_client=victim_http), mode="legacy") as victim:
        await call(victim, "whoami", name="vscode", token=vscode)
        forged_http = httpx2.AsyncClient(
            headers={"Authorization": "Bearer team-secret", "Mcp-Session-Id": seen["sid"]}, timeout=60
        )
        async with Client(streamable_http_client(url, http_client=forged_http)) as forger:
            assert (await call(forger, "whoami")).get("agent") is None
            assert "whoami" in await call_error(
                forger, "publish_message", intent="info", recipient="everyone", content="forged"
            )
    async with httpx.AsyncClient() as raw:  # a header that is not ASCII is refused, not a crash
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        response = await raw.post(
            url,
            json=body,
            headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer t\u00e9st".encode()},
        )
        assert response.status_code == 401


def test_stdio_answers_lines_that_are_not_a_json_rpc_message(tmp_path):
    """Raw lines the Python client refuses to send: a lone surrogate escape gets an error with the request's
    id, text that is not JSON gets a parse error; nothing is written and the server keeps answering."""
    import json
    import subprocess

    env = clean_env(HIVEBOARD_AGENT="alice")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hiveboard.server", "--home", str(tmp_path), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )

    def send(line: str) -> None:
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()

    def answer() -> dict:
        return json.loads(proc.stdout.readline())  # the test's own timeout guards a server that never answers

    def create(request_id: int, title: str) -> str:
        return (
            '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_task","arguments":'
            '{"title":"%s"}}}' % (request_id, title)
        )

    try:
        send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "1"},
                    },
                }
            )
        )
        assert answer()["id"] == 1
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        send(create(2, "bad \\ud800 title"))
        bad = answer()
        assert bad["id"] == 2 and bad["error"]["code"] == -32602 and "surrogate" in bad["error"]["message"]
        send('{"jsonrpc":"2.0","id":3,"method":"tools/call"')
        broken = answer()
        assert broken["id"] is None and broken["error"]["code"] == -32700
        send(create(4, "fine"))
        card = json.loads(answer()["result"]["content"][0]["text"])
        assert card["id"] == 1  # the refused requests wrote nothing
    finally:
        proc.kill()
        proc.wait()
