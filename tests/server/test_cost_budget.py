"""What cards cost: the Claude Code hooks record a session's tokens against the cards held while they were
spent; board_stats, the card's web page and the web metrics price them with the configured table; a card's
budget tells its creator once when its tokens reach it, and with budget_action = "needs_human" the card waits
for a person. The hooks run as Claude Code runs them (a new process, a transcript in its JSONL format); the
board is read and changed through MCP clients, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from conftest import call, call_error, http_client, issue_tokens, serve_http, stop_process
from test_hooks import base, hook
from test_web import _base, login

from hiveboard.server.config import SetupError, load_settings

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def assistant(msg_id: str, when: datetime, model: str, **usage: int) -> str:
    """One assistant message of a Claude Code transcript, with its usage as the Messages API reports it."""
    counts = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    return json.dumps(
        {
            "type": "assistant",
            "sessionId": "sess-1",
            "uuid": f"u-{msg_id}",
            "timestamp": when.isoformat().replace("+00:00", "Z"),
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": "working on it"}],
                "usage": {**counts, **usage},
            },
        }
    )


def at(entry: dict, seconds: float) -> datetime:
    """`seconds` after a history entry of a card."""
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00")) + timedelta(seconds=seconds)


class Session:
    """A Claude Code session of one agent: its transcript, and its stop hook."""

    def __init__(self, tmp_path: Path, store_target: str, agent: str = "alice", **env: str):
        self.tmp_path, self.target, self.agent, self.env = tmp_path, store_target, agent, env
        self.transcript = tmp_path / f"{agent}-session.jsonl"
        self.transcript.write_text(
            json.dumps({"type": "user", "timestamp": "2026-01-01T00:00:00Z", "message": {"content": "go"}}) + "\n"
        )
        self.n = 0

    def spend(self, model: str = "claude-sonnet-4-5-20250929", **usage: int) -> None:
        """One more assistant message, now (while whatever the agent holds now is held)."""
        self.n += 1
        with self.transcript.open("a") as f:
            f.write(assistant(f"msg_{self.agent}_{self.n}", datetime.now(UTC), model, **usage) + "\n")

    def stop(self) -> tuple[int, dict | None, str]:
        payload = base("Stop", stop_hook_active=False, transcript_path=str(self.transcript))
        return hook(self.tmp_path, self.target, "stop", payload, agent=self.agent, **self.env)


async def test_board_stats_prices_the_tokens_of_two_claims_in_one_session(tmp_path, store_target, connect):
    async with connect("alice") as alice:
        parser = await call(alice, "create_task", title="Write the parser", task_type="code")
        guide = await call(alice, "create_task", title="Write the guide", task_type="docs")
        first = await call(alice, "claim_task", task_id=parser["id"])
        # the session spends on the parser 1 ms after the claim's time as history shows it (to the millisecond,
        # truncated): it must still hold the card then, however fast the completion follows
        await anyio.sleep(0.05)
        await call(alice, "complete_task", task_id=parser["id"], token=first["token"], output="parser written")
        await call(alice, "claim_task", task_id=guide["id"])
        history = {c: (await call(alice, "get_task", task_id=c))["history"] for c in (parser["id"], guide["id"])}
    claimed = {c: next(h for h in history[c] if h["to_status"] == "in_progress") for c in history}

    transcript = tmp_path / "session.jsonl"
    lines = [
        assistant(
            "msg_a", at(claimed[parser["id"]], -1), "claude-sonnet-4-5-20250929", input_tokens=10, output_tokens=7
        ),
        assistant(
            "msg_b",
            at(claimed[parser["id"]], 0.001),
            "claude-sonnet-4-5-20250929",
            input_tokens=1_000,
            output_tokens=2_000,
            cache_creation_input_tokens=4_000,
            cache_read_input_tokens=100_000,
        ),
        # claude-opus-4-5 is priced under its own key, not under the shorter claude-opus-4 (15/75)
        assistant(
            "msg_c",
            at(claimed[guide["id"]], 0.001),
            "claude-opus-4-5-20251101",
            input_tokens=100,
            output_tokens=300,
            cache_read_input_tokens=20_000,
        ),
        assistant("msg_d", at(claimed[guide["id"]], 0.002), "acme-local-7b", input_tokens=50, output_tokens=60),
    ]
    transcript.write_text("\n".join(lines) + "\n")
    code, out, err = hook(tmp_path, store_target, "stop", base("Stop", transcript_path=str(transcript)))
    assert code == 0 and err == "" and out["decision"] == "block", (out, err)  # the guide is still held

    async with connect("bob") as bob:
        tokens = (await call(bob, "board_stats"))["tokens"]
    # USD per million tokens: sonnet 4.x 3 / 15, cache 3.75 written, 0.30 read; opus 4.5 5 / 25, cache read 0.50
    parser_cost = (1_000 * 3 + 2_000 * 15 + 4_000 * 3.75 + 100_000 * 0.30) / 1e6
    guide_cost = (100 * 5 + 300 * 25 + 20_000 * 0.50) / 1e6
    outside = (10 * 3 + 7 * 15) / 1e6
    shown = {u["key"]: (u["output"], u["cost_usd"], u.get("unpriced", 0)) for u in tokens["by_card"]}
    assert shown == {
        f"#{parser['id']}": (2_000, pytest.approx(parser_cost), 0),
        f"#{guide['id']}": (360, pytest.approx(guide_cost), 110),
        "no card": (7, pytest.approx(outside), 0),
    }, shown
    assert [u["key"] for u in tokens["by_card"]] == [f"#{parser['id']}", f"#{guide['id']}", "no card"]
    by_type = {u["key"]: u["cost_usd"] for u in tokens["by_task_type"]}
    assert by_type == {"code": pytest.approx(parser_cost), "docs": pytest.approx(guide_cost), "no card": outside}
    assert tokens["by_agent"][0]["key"] == "alice"
    assert tokens["by_agent"][0]["cost_usd"] == pytest.approx(parser_cost + guide_cost + outside)
    assert tokens["total"]["cost_usd"] == pytest.approx(parser_cost + guide_cost + outside)
    assert tokens["total"]["unpriced"] == 110 and tokens["unpriced_models"] == ["acme-local-7b"]


async def test_a_budget_crossing_messages_the_creator_once(tmp_path, store_target, connect):
    async with connect("bob") as bob, connect("alice") as alice:
        card = await call(bob, "create_task", title="Port the lexer", budget_tokens=1_000)
        claim = await call(alice, "claim_task", task_id=card["id"])
        session = Session(tmp_path, store_target)

        session.spend(input_tokens=100, output_tokens=200, cache_read_input_tokens=300)  # 600 of 1,000
        assert session.stop()[1]["decision"] == "block"
        assert (await call(bob, "get_messages", intent="budget"))["messages"] == []

        session.spend(input_tokens=50, output_tokens=150, cache_creation_input_tokens=200)  # 1,000: reached
        code, out, err = session.stop()
        assert code == 0 and err == "" and out["decision"] == "block", (out, err)  # still alice's to finish
        told = (await call(bob, "get_messages", intent="budget", full=True))["messages"]
        assert len(told) == 1, told
        said = told[0]
        assert said["sender"] == "system" and said["recipient"] == "bob" and said["task_id"] == card["id"]
        assert f"card #{card['id']} used 1,000 tokens of its budget of 1,000" in said["content"], said
        assert said["metadata"]["tokens"] == 1_000 and said["metadata"]["budget_tokens"] == 1_000

        session.spend(output_tokens=5_000)  # further over: nothing new to say
        session.stop()
        again = await call(bob, "get_messages", intent="budget", unread_only=False)
        assert len(again["messages"]) == 1, again
        assert (await call(alice, "get_messages", intent="budget"))["messages"] == []  # the creator's, not alice's
        got = await call(alice, "get_task", task_id=card["id"])
        assert got["status"] == "in_progress" and any(h["action"] == "over budget" for h in got["history"])
        await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="lexer ported")


async def test_with_budget_action_needs_human_the_card_waits_for_a_person(tmp_path, store_target, connect):
    async with connect("bob") as bob, connect("alice") as alice:
        card = await call(bob, "create_task", title="Port the lexer", budget_tokens=500)
        other = await call(bob, "create_task", title="Port the parser")  # no budget: never looked at
        await call(alice, "claim_task", task_id=card["id"])
        session = Session(tmp_path, store_target, HIVEBOARD_BUDGET_ACTION="needs_human")
        session.spend(input_tokens=200, output_tokens=400)
        code, out, err = session.stop()
        # the card left in_progress in this same run: the stop hook no longer holds the agent back
        assert (code, out, err) == (0, None, ""), (out, err)
        got = await call(bob, "get_task", task_id=card["id"])
        assert got["status"] == "needs_human" and got["assignee"] == "alice"
        assert "over budget" in got["blocked_reason"] and "600 tokens of its budget of 500" in got["blocked_reason"]
        told = (await call(bob, "get_messages", intent="budget", full=True))["messages"]
        assert len(told) == 1 and "needs_human" in told[0]["content"], told
        assert (await call(bob, "get_task", task_id=other["id"]))["status"] == "todo"

        session.spend(output_tokens=100)  # spent after it moved (the session went on): no second note
        session.stop()
        assert len((await call(bob, "get_messages", intent="budget", unread_only=False))["messages"]) == 1
        # its creator sends it back to work
        await call(bob, "update_task", task_id=card["id"], status="todo")

        # a card already done when its tokens are recorded: its creator is told, and the card stays done
        small = await call(bob, "create_task", title="Rename the module", budget_tokens=100)
        claim = await call(alice, "claim_task", task_id=small["id"])
        session.spend(input_tokens=150)
        await call(alice, "complete_task", task_id=small["id"], token=claim["token"], output="renamed")
        assert session.stop()[2] == ""
        assert (await call(bob, "get_task", task_id=small["id"]))["status"] == "done"
        told = (await call(bob, "get_messages", intent="budget", task_id=small["id"], full=True))["messages"]
        assert len(told) == 1 and "needs_human" not in told[0]["content"], told


async def test_a_bad_budget_is_refused_and_nothing_written(connect):
    async with connect("bob") as bob:
        for bad in (0, -5):
            error = await call_error(bob, "create_task", title="Port the lexer", budget_tokens=bad)
            assert "budget_tokens" in error and "greater than or equal to 1" in error, error
            assert error.count(". ") == 0 and "\n" not in error, error  # one sentence
        assert (await call(bob, "list_tasks"))["total"] == 0


@pytest.mark.backends("sqlite")  # reads no board
def test_the_price_table_comes_from_the_config_and_adds_to_the_defaults(tmp_path, monkeypatch):
    from hiveboard.board.usage import price_of

    config = tmp_path / "config.toml"
    monkeypatch.setenv("HIVEBOARD_CONFIG", str(config))
    config.write_text(
        '[prices."claude-sonnet-4-5"]\ninput = 2.5\noutput = 12\ncache_read = 0.25\ncache_creation = 3\n\n'
        '[prices."acme-local"]\ninput = 0\noutput = 0\ncache_read = 0\ncache_creation = 0\n'
    )
    prices = load_settings().prices
    assert price_of("claude-sonnet-4-5-20250929", prices).input == 2.5  # overridden, the longest key
    assert price_of("claude-sonnet-4-20250514", prices).input == 3  # the default's other keys stay
    assert price_of("acme-local-7b", prices).output == 0  # priced (at nothing), so not "unpriced"
    assert price_of("gpt-9", prices) is None

    config.write_text('[prices."acme-local"]\ninput = 1\noutput = 2\ncache_read = 0\ncache_creaton = 1\n')
    with pytest.raises(SetupError, match=r"cache_creaton.*did you mean prices\.acme-local\.cache_creation"):
        load_settings()
    config.write_text('budget_action = "stop"\n')
    with pytest.raises(SetupError, match=r"budget_action in .* should be 'message' or 'needs_human', not 'stop'"):
        load_settings()


async def test_the_cards_page_and_the_metrics_show_tokens_and_cost(tmp_path, node_env, backend):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[prices."acme-local"]\ninput = 1\noutput = 2\ncache_read = 0.5\ncache_creation = 4\n'
    )
    tokens = issue_tokens(home, node_env, {"alice": None, "bob": None, "ann": "human"})
    proc, url = serve_http(home, env=node_env)
    try:
        async with http_client(url, tokens["bob"]) as bob, http_client(url, tokens["alice"]) as alice:
            card = await call(bob, "create_task", title="Port the <b>lexer</b>", task_type="code", budget_tokens=10**6)
            await call(alice, "claim_task", task_id=card["id"])
            target = node_env["HIVEBOARD_DB"] if backend == "postgresql" else str(home / "hiveboard.db")
            session = Session(tmp_path, target)
            session.spend(
                "acme-local-7b",
                input_tokens=1_000,
                output_tokens=2_000,
                cache_creation_input_tokens=3_000,
                cache_read_input_tokens=40_000,
            )
            session.spend("<img src=x onerror=alert(1)>", input_tokens=5, output_tokens=6)  # a hostile model name
            assert session.stop()[2] == ""
        web, _ = login(_base(url), tokens["ann"])
        page = web.get(f"/task/{card['id']}").text
        assert "<b>lexer" not in page and "&lt;b&gt;lexer" in page
        tokens_part = page[page.index('id="fold-usage"') :]  # the card page's last fold
        # from the config's price: (1,000 × 1 + 2,000 × 2 + 3,000 × 4 + 40,000 × 0.5) / 1e6 = $0.037
        for figure in ("1,005", "2,006", "3,000", "40,000", "$0.0370", "+ 11 unpriced tokens"):
            assert figure in tokens_part, (figure, tokens_part)
        assert "Budget: 46,011 of 1,000,000 tokens used" in tokens_part, tokens_part

        metrics = web.get("/metrics").text
        spend = metrics[metrics.index("<h2>Tokens</h2>") :]
        assert "46,011" in spend and "$0.0370" in spend, spend
        by_agent = spend[spend.index("By agent") : spend.index("By task type")]
        by_type = spend[spend.index("By task type") : spend.index("By card")]
        assert "<td>alice</td>" in by_agent and "<td>code</td>" in by_type and "$0.0370" in by_type
        assert f'<a href="/task/{card["id"]}">#{card["id"]}</a>' in spend
        assert "<img" not in metrics and "&lt;img src=x onerror=alert(1)&gt;" in spend
    finally:
        stop_process(proc)
