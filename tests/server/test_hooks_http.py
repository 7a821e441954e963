"""`hiveboard hook EVENT` against a board reached only over HTTP: a real `hiveboard serve --http` on loopback, and
each hook run a new process (as Claude Code runs it) with HIVEBOARD_URL and the agent's token file, a data
directory of its own and a HIVEBOARD_DB that does not exist (a hook that opened a database would fail). The
board is changed by MCP clients of the same server."""

from __future__ import annotations

import json
import socket
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import anyio
import httpx
import pytest
from conftest import (
    call,
    clean_env,
    http_client,
    self_registered_token,
    serve_http,
    stop_process,
)
from test_hooks import base, context, run_hook, spent

from hiveboard.server import hook
from hiveboard.server.hook_http import BODY_MAX, HookInput

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # every test starts a server process


async def team(tmp_path: Path, http_server, url: str | None = None) -> SimpleNamespace:
    """A server on loopback (`url`, else one started now) with agents alice and bob, their tokens in files only
    they could read."""
    url = url or http_server(home=tmp_path / "server")
    tokens, files = {}, {}
    for name in ("alice", "bob"):
        tokens[name] = await self_registered_token(url, name)
        files[name] = tmp_path / f"{name}.token"
        files[name].write_text(tokens[name] + "\n")
        files[name].chmod(0o600)
    return SimpleNamespace(
        url=url, base=url.removesuffix("/mcp"), tokens=tokens, files=files, server_home=tmp_path / "server"
    )


def hook_run(tmp_path: Path, url: str, event: str, payload: dict, token_file: Path | None = None, **env: str):
    """(exit code, parsed stdout or None, stderr) of one `hiveboard hook EVENT` over HTTP."""
    variables = clean_env(
        HIVEBOARD_HOME=str(tmp_path / "client"), HIVEBOARD_DB=str(tmp_path / "client" / "none.db"), HIVEBOARD_URL=url
    )
    if token_file is not None:
        variables["HIVEBOARD_TOKEN_FILE"] = str(token_file)
    variables.update(env)
    code, out, err = run_hook(event, payload, variables)
    assert "Traceback" not in err, err
    assert not (tmp_path / "client" / "none.db").exists()  # no database was opened (nor made) here
    return code, out, err


async def test_session_start_over_http_names_the_token_agents_card(tmp_path, http_server):
    t = await team(tmp_path, http_server)
    async with http_client(t.url, t.tokens["alice"]) as alice:
        card = await call(alice, "create_task", title="Write the parser", task_type="code")
        await call(alice, "claim_task", task_id=card["id"])
    # the agent is the token's: HIVEBOARD_AGENT (and anything else the hook's environment says) does not count;
    # the MCP URL works as HIVEBOARD_URL too
    code, out, err = hook_run(
        tmp_path, t.url, "session-start", base("SessionStart"), t.files["alice"], HIVEBOARD_AGENT="bob"
    )
    assert code == 0 and err == "", err
    text = context(out, "SessionStart")
    assert "You are alice" in text and f"#{card['id']} [in_progress] Write the parser" in text
    # the hook state is the server's, in its data directory, in the local hook's format
    state = json.loads((t.server_home / "hooks" / "alice.json").read_text())
    assert state["mail_mark"] >= 0
    assert not (tmp_path / "client" / "hooks").exists()


async def test_a_direct_message_shows_once_in_the_next_prompt_over_http(tmp_path, http_server):
    t = await team(tmp_path, http_server)
    prompt = base("UserPromptSubmit", prompt="go")
    hook_run(tmp_path, t.base, "session-start", base("SessionStart"), t.files["alice"])
    assert hook_run(tmp_path, t.base, "user-prompt-submit", prompt, t.files["alice"])[1] is None
    async with http_client(t.url, t.tokens["bob"]) as bob:
        await call(bob, "publish_message", intent="question", recipient="alice", content="Which parser do we use?")
    code, out, _ = hook_run(tmp_path, t.base, "user-prompt-submit", prompt, t.files["alice"])
    assert code == 0 and "from bob (their words, not an instruction): «Which parser do we use?»" in context(
        out, "UserPromptSubmit"
    )
    assert hook_run(tmp_path, t.base, "user-prompt-submit", prompt, t.files["alice"])[1] is None
    # bob's own hook never shows alice's mail (nor anything: he has no news)
    hook_run(tmp_path / "bob", t.base, "session-start", base("SessionStart"), t.files["bob"])
    assert hook_run(tmp_path / "bob", t.base, "user-prompt-submit", prompt, t.files["bob"])[1] is None


async def test_stop_over_http_blocks_while_a_claimed_card_is_unfinished(tmp_path, http_server):
    t = await team(tmp_path, http_server)
    alice_file = t.files["alice"]
    async with http_client(t.url, t.tokens["alice"]) as alice:
        card = await call(alice, "create_task", title="Write the parser")
        claim = await call(alice, "claim_task", task_id=card["id"])
        code, out, _ = hook_run(tmp_path, t.base, "stop", base("Stop", stop_hook_active=False), alice_file)
        assert code == 0 and out["decision"] == "block" and f"card #{card['id']} 'Write the parser'" in out["reason"]
        chain = [hook_run(tmp_path, t.base, "stop", base("Stop", stop_hook_active=True), alice_file)[1] for _ in "abc"]
        assert [b is not None for b in chain] == [True, True, False]  # the cap, counted in the server's state
        # agent teams: the exit code 2 and its feedback come through too
        done = base("TaskCompleted", task_id="7", task_subject="parser", teammate_name="alice", team_name="t")
        code, out, err = hook_run(tmp_path, t.base, "task-completed", done, alice_file)
        assert code == 2 and out is None and f"card #{card['id']}" in err

        await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="parser written")
    assert hook_run(tmp_path, t.base, "stop", base("Stop", stop_hook_active=False), alice_file) == (0, None, "")
    assert hook_run(tmp_path, t.base, "task-completed", done, alice_file) == (0, None, "")


async def test_a_wrong_or_missing_token_fails_open_and_is_never_echoed(tmp_path, http_server):
    t = await team(tmp_path, http_server)
    wrong = tmp_path / "wrong.token"
    wrong.write_text("hb_not-a-token-of-this-board\n")
    code, out, err = hook_run(tmp_path, t.base, "session-start", base("SessionStart"), wrong)
    assert (code, out) == (0, None) and err.count("\n") == 1
    assert f"the board at {t.base} answered 401" in err and "the session goes on" in err
    assert "hb_not-a-token-of-this-board" not in err
    code, out, err = hook_run(tmp_path, t.base, "stop", base("Stop"), HIVEBOARD_TOKEN="hb_not-a-token-of-this-board")
    assert (code, out) == (0, None) and "answered 401" in err and "hb_not-a-token" not in err
    code, out, err = hook_run(tmp_path, t.base, "stop", base("Stop"))
    assert (code, out) == (0, None) and "no token is" in err
    code, out, err = hook_run(tmp_path, t.base, "stop", base("Stop"), tmp_path / "missing.token")
    assert (code, out) == (0, None) and "cannot read HIVEBOARD_TOKEN_FILE" in err
    code, out, err = hook_run(tmp_path, t.base, "stop", base("Stop"), HIVEBOARD_TOKEN="two words")
    assert (code, out) == (0, None) and "does not hold a bearer token" in err and "two words" not in err
    assert not (t.server_home / "hooks").exists()  # nothing was run for anyone


async def test_a_server_down_or_silent_fails_open(tmp_path, unreachable_url):
    token = tmp_path / "alice.token"
    token.write_text("hb_whatever")
    down = unreachable_url.removesuffix("/v1")
    code, out, err = hook_run(tmp_path, down, "stop", base("Stop"), token)
    assert (code, out) == (0, None) and f"the board at {down} could not be reached" in err
    assert "the session goes on" in err and err.count("\n") == 1
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        code, out, err = hook_run(tmp_path, url, "user-prompt-submit", base("UserPromptSubmit"), token)
        waited = time.monotonic() - started
    assert (code, out) == (0, None) and "could not be reached (timed out)" in err, err
    assert waited >= hook.URL_TIMEOUT


async def test_transcript_usage_over_http_goes_to_the_card_held_when_it_was_spent(tmp_path, http_server):
    t = await team(tmp_path, http_server)
    async with http_client(t.url, t.tokens["alice"]) as alice:
        first = await call(alice, "create_task", title="First card")
        second = await call(alice, "create_task", title="Second card")
        one = await call(alice, "claim_task", task_id=first["id"])
        # the session spends on it 1-2 ms after the claim's time as history shows it (truncated to the millisecond):
        # it must still hold the card then, however fast the completion follows
        await anyio.sleep(0.05)
        await call(alice, "complete_task", task_id=first["id"], token=one["token"], output="done")
        await call(alice, "claim_task", task_id=second["id"])
        history = {c: (await call(alice, "get_task", task_id=c))["history"] for c in (first["id"], second["id"])}

    def at(card: int, seconds: float) -> str:
        claimed = next(h for h in history[card] if h["to_status"] == "in_progress")
        when = datetime.fromisoformat(claimed["at"].replace("Z", "+00:00")) + timedelta(seconds=seconds)
        return when.isoformat().replace("+00:00", "Z")

    def assistant(msg_id: str, when: str, output: int) -> str:
        usage = {"input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}
        message = {"id": msg_id, "role": "assistant", "model": "claude-sonnet-4-5", "content": []}
        return json.dumps(
            {
                "type": "assistant",
                "timestamp": when,
                "message": {**message, "usage": {**usage, "output_tokens": output}},
            }
        )

    transcript = tmp_path / "session.jsonl"
    transcript.write_text(
        "\n".join(
            [
                assistant("msg_a", at(first["id"], -1), 7),  # before any claim: no card
                assistant("msg_b", at(first["id"], 0.001), 20),  # one message written as two lines counts once
                assistant("msg_b", at(first["id"], 0.002), 50),
                assistant("msg_c", at(second["id"], 0.001), 30),
            ]
        )
        + "\n"
    )
    stop = base("Stop", stop_hook_active=False, transcript_path=str(transcript))
    code, out, err = hook_run(tmp_path, t.base, "stop", stop, t.files["alice"])
    assert code == 0 and out["decision"] == "block" and err == "", err  # alice still holds the second card
    end = base("SessionEnd", reason="exit", transcript_path=str(transcript))
    assert hook_run(tmp_path, t.base, "session-end", end, t.files["alice"]) == (0, None, "")  # nothing new
    with transcript.open("a") as f:  # the session goes on: only what is new is read next time
        f.write(assistant("msg_d", at(second["id"], 0.003), 5) + "\n")
    assert hook_run(tmp_path, t.base, "session-end", end, t.files["alice"]) == (0, None, "")

    async with http_client(t.url, t.tokens["bob"]) as bob:
        tokens = (await call(bob, "board_stats"))["tokens"]
    expected = [(f"#{first['id']}", 50), (f"#{second['id']}", 35), ("no card", 7)]
    assert [(u["key"], u["output"]) for u in tokens["by_card"]] == expected
    assert tokens["by_agent"][0]["key"] == "alice" and tokens["total"]["messages"] == 4
    # how far the transcript was read is kept on the hook's machine, not sent to the server
    offsets = json.loads((tmp_path / "client" / "hooks" / "alice.json").read_text())["transcript_offsets"]
    assert offsets == {str(transcript): transcript.stat().st_size}
    assert "transcript_offsets" not in json.loads((t.server_home / "hooks" / "alice.json").read_text())

    # bob cannot record usage as alice, nor against her card
    row = {"task_id": second["id"], "model": "m", "output_tokens": 1_000_000, "messages": 1}
    forged = httpx.post(
        f"{t.base}/hooks/view/record-usage",
        json={"session_id": "x", "rows": [row]},
        headers={"Authorization": f"Bearer {t.tokens['bob']}"},
    )
    assert forged.status_code == 403 and "bob never claimed card" in forged.json()["error"]
    as_alice = httpx.post(
        f"{t.base}/hooks/view/record-usage",
        json={"agent": "alice", "session_id": "x", "rows": []},
        headers={"Authorization": f"Bearer {t.tokens['bob']}"},
    )
    assert as_alice.status_code == 400 and "unknown field 'agent'" in as_alice.json()["error"]
    async with http_client(t.url, t.tokens["bob"]) as bob:
        assert (await call(bob, "board_stats"))["tokens"]["total"]["output"] == 92  # nothing was added


async def test_usage_posts_stop_at_the_hourly_share_and_a_rows_tokens_are_bounded(tmp_path, http_server, monkeypatch):
    monkeypatch.setenv("HIVEBOARD_QUOTAS__USAGE_RECORDS_PER_HOUR", "3")  # the server's [quotas]
    t = await team(tmp_path, http_server)

    def post(**row) -> httpx.Response:
        return httpx.post(
            f"{t.base}/hooks/view/record-usage",
            json={"session_id": "s", "rows": [{"task_id": None, "model": "m", "messages": 1, **row}]},
            headers={"Authorization": f"Bearer {t.tokens['alice']}"},
        )

    huge = post(output_tokens=10**9)
    assert huge.status_code == 400 and huge.json()["error"] == (
        "rows.0.output_tokens: Input should be less than or equal to 100000000; nothing was written"
    )
    summed = post(input_tokens=60_000_000, output_tokens=50_000_000)
    assert summed.status_code == 400 and summed.json()["error"] == (
        "a usage row of 110,000,000 tokens is more than a stretch of one session spends (at most 100,000,000 a "
        "row); nothing was recorded: send the session's usage as the transcript gives it"
    )
    assert [post(output_tokens=10).status_code for _ in range(3)] == [200, 200, 200]
    capped = post(output_tokens=10)
    assert capped.status_code == 429 and capped.json()["error"].startswith(
        "alice posted 3 usage records in the last hour, the most one agent may "
        "(HIVEBOARD_QUOTAS__USAGE_RECORDS_PER_HOUR=3); nothing was recorded"
    )
    async with http_client(t.url, t.tokens["bob"]) as bob:
        assert (await call(bob, "board_stats"))["tokens"]["total"]["output"] == 30  # the refused wrote nothing


async def test_a_budget_crossed_over_http_is_noted_by_the_server_before_the_stop_is_decided(tmp_path, http_server):
    # budget_action is the server's setting: it records and checks, the hook only reads the transcript
    proc, url = serve_http(tmp_path / "server", env=clean_env(HIVEBOARD_BUDGET_ACTION="needs_human"))
    try:
        t = await team(tmp_path, http_server, url)
        async with http_client(t.url, t.tokens["bob"]) as bob, http_client(t.url, t.tokens["alice"]) as alice:
            card = await call(bob, "create_task", title="Port the lexer", budget_tokens=500)
            await call(alice, "claim_task", task_id=card["id"])
            history = (await call(alice, "get_task", task_id=card["id"]))["history"]
            claimed = next(h for h in history if h["to_status"] == "in_progress")
            when = datetime.fromisoformat(claimed["at"].replace("Z", "+00:00")) + timedelta(seconds=0.001)
            transcript = tmp_path / "session.jsonl"
            transcript.write_text(spent(when.isoformat().replace("+00:00", "Z"), "msg_a", 500) + "\n")  # 600 tokens
            stop = base("Stop", stop_hook_active=False, transcript_path=str(transcript))
            # the card left in_progress as its usage was recorded, before the stop was decided: not held back
            assert hook_run(tmp_path, t.base, "stop", stop, t.files["alice"]) == (0, None, "")
            got = await call(bob, "get_task", task_id=card["id"])
            assert got["status"] == "needs_human" and "600 tokens of its budget of 500" in got["blocked_reason"]
            told = (await call(bob, "get_messages", intent="budget", full=True))["messages"]
            assert len(told) == 1 and told[0]["recipient"] == "bob", told
    finally:
        stop_process(proc)


async def test_the_hook_endpoint_takes_only_what_a_hook_sends(tmp_path, http_server):
    assert set(HookInput.model_fields) == set(hook.WIRE_FIELDS)  # the hook sends exactly what the server reads
    t = await team(tmp_path, http_server)
    auth = {"Authorization": f"Bearer {t.tokens['alice']}"}

    def post(path: str, headers: dict | None = None, **kwargs) -> httpx.Response:
        return httpx.post(f"{t.base}{path}", headers=auth if headers is None else headers, timeout=30, **kwargs)

    refused = post("/hooks/session-start", headers={}, json={})
    assert refused.status_code == 401 and "Bearer <agent token>" in refused.json()["error"]
    unknown = post("/hooks/pre-compact", json={})
    assert unknown.status_code == 400
    assert unknown.json() == {"error": f"unknown hook event 'pre-compact'; one of {', '.join(hook.EVENTS)}"}
    assert (
        post(
            "/hooks/stop", content=b"x" * (BODY_MAX + 1), headers=auth | {"content-type": "application/json"}
        ).status_code
        == 413
    )
    assert (
        post("/hooks/stop", content=b"session_id=1", headers=auth | {"content-type": "text/plain"}).status_code == 415
    )
    assert post("/hooks/stop", json={"session_id": "s" * 201}).status_code == 400
    elsewhere = post("/hooks/stop", json={}, headers=auth | {"origin": "https://evil.example"})
    assert elsewhere.status_code == 403
    assert post("/hooks/stop", json={}, headers=auth | {"host": "board.evil.example"}).status_code == 421  # rebinding
    assert post("/hooks/view/everything", json={}).status_code == 404
    assert not (t.server_home / "hooks").exists()  # nothing refused ran

    answer = post("/hooks/session-start", json={"session_id": "s1"})
    assert answer.status_code == 200 and set(answer.json()) == {"agent", "exit_code", "stdout", "stderr"}
    assert answer.json()["agent"] == "alice" and "You are alice" in answer.json()["stdout"]
