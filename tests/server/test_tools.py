"""Every board tool through an in-process MCP client: the happy paths, the history, and bad input."""

from __future__ import annotations

import sys

import pytest
from conftest import call, call_error

import hiveboard.board.db as db_module
from hiveboard.server.app import INSTRUCTIONS

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def freeze_clock(monkeypatch, clock: list[float]) -> None:
    """The board's clock reads clock[0], in every board module that reads the time."""
    real = db_module.now
    for name, module in list(sys.modules.items()):
        if name.startswith("hiveboard.board.") and getattr(module, "now", None) is real:
            monkeypatch.setattr(module, "now", lambda: clock[0])


TOOLS = {
    "whoami",
    "create_task",
    "get_task",
    "list_tasks",
    "get_board",
    "claim_task",
    "release_task",
    "flag_task",
    "update_task",
    "complete_task",
    "get_review",
    "submit_critique",
    "board_stats",
    "publish_message",
    "get_messages",
    "subscribe",
    "wait_for_work",
    "reserve_paths",
    "release_paths",
}


def counts(board) -> tuple[int, int, int, int]:
    """Rows in every table a tool can write: nothing may change when a call is refused."""
    db = board.store.db
    return tuple(
        db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("tasks", "task_history", "artifacts", "agents", "messages", "inbox")
    ) + (db.execute("SELECT coalesce(sum(version), 0) FROM tasks").fetchone()[0],)


async def test_tools_are_described_annotated_and_few(connect):
    async with connect("alice") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description, name
    # the 15 of the board and messages, wait_for_work (issue 24), path reservations (23), flag_task (51)
    assert len(tools) <= 19
    for name in ("get_task", "list_tasks", "get_board"):
        assert tools[name].annotations.read_only_hint is True
    for name in ("claim_task", "complete_task", "release_task", "update_task"):  # absent: false, the default
        assert tools[name].annotations is None or not tools[name].annotations.read_only_hint
    props = tools["complete_task"].input_schema["properties"]
    assert props["token"] == {"minimum": 0, "type": "integer"}  # what it is: the instructions, said once
    assert "fencing token; pass the token to update_task, release_task" in INSTRUCTIONS
    assert props["artifacts"]["items"]


async def test_card_lifecycle_and_history(connect):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(
            alice,
            "create_task",
            title="Add login endpoint",
            task_type="code",
            priority="high",
            labels=["auth"],
            acceptance_criteria=["POST /login returns a JWT"],
        )
        assert card["status"] == "todo" and card["labels"] == ["auth"]
        claim = await call(bob, "claim_task")
        assert claim["claimed"] and claim["task"]["id"] == card["id"]
        assert claim["task"]["acceptance_criteria"] == ["POST /login returns a JWT"]
        token = claim["token"]
        await call(bob, "update_task", task_id=card["id"], token=token, note="handler written, tests next")
        lease = await call(bob, "update_task", task_id=card["id"], token=token)  # the token alone renews
        assert lease["status"] == "in_progress" and lease["lease_expires_at"] >= claim["lease_expires_at"]
        done = await call(
            bob,
            "complete_task",
            task_id=card["id"],
            token=token,
            output="login works",
            summary="JWT login",
            artifacts=[{"name": "auth.py", "kind": "code", "content": "x = 1"}],
        )
        assert done["status"] == "done" and done["assignee"] == "bob"
        full = await call(alice, "get_task", task_id=card["id"])
    assert full["output"] == "login works" and full["summary"] == "JWT login"
    assert full["artifacts"] == [{"name": "auth.py", "kind": "code", "content": "x = 1"}]
    steps = [(h["actor"], h["action"], h.get("from_status"), h["to_status"]) for h in full["history"]]
    assert steps == [
        ("alice", "created", None, "todo"),
        ("bob", "claimed", "todo", "in_progress"),
        ("bob", "progress", "in_progress", "in_progress"),
        ("bob", "renewed", "in_progress", "in_progress"),
        ("bob", "completed", "in_progress", "done"),
    ]
    assert full["history"][2]["note"] == "handler written, tests next"


async def test_claim_next_takes_priority_then_age_and_waits_for_dependencies(connect):
    async with connect("alice") as c:
        low = await call(c, "create_task", title="low", priority="low")
        base = await call(c, "create_task", title="schema", priority="medium")
        high = await call(c, "create_task", title="api", priority="critical", depends_on=[base["id"]])
        other = await call(c, "create_task", title="docs", priority="high", task_type="docs")
        refused = await call_error(c, "claim_task", task_id=high["id"])
        assert f"waits on tasks [{base['id']}]" in refused
        first = await call(c, "claim_task", task_type="code")
        assert first["task"]["id"] == base["id"]  # api waits on schema; low is lower
        typed = await call(c, "claim_task", task_type="docs")
        assert typed["task"]["id"] == other["id"]
        await call(c, "complete_task", task_id=base["id"], token=first["token"], output="schema done")
        nxt = await call(c, "claim_task")
        assert nxt["task"]["id"] == high["id"]  # now ready, and critical
        last = await call(c, "claim_task")
        assert last["task"]["id"] == low["id"]
        empty = await call(c, "claim_task")
        assert empty["claimed"] is False and "no ready card" in empty["message"]


async def test_reserved_card_only_for_its_assignee(connect):
    async with connect("lead") as lead, connect("bob") as bob, connect("carol") as carol:
        await call(bob, "whoami")
        card = await call(lead, "create_task", title="review PR", assignee="bob")
        assert (await call(carol, "claim_task"))["claimed"] is False
        assert "reserved for bob" in await call_error(carol, "claim_task", task_id=card["id"])
        assert (await call(bob, "claim_task"))["task"]["id"] == card["id"]
        assert "not a registered agent" in await call_error(lead, "create_task", title="x", assignee="nobody")


async def test_bad_input_is_refused_with_guidance_and_writes_nothing(connect, board):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="card")
        todo = await call(alice, "create_task", title="still todo")
        claim = await call(alice, "claim_task", task_id=card["id"])
        before = counts(board)
        cases = [
            (alice, "create_task", dict(title=""), "title"),
            (alice, "create_task", dict(title=["not", "a", "string"]), "title"),
            (alice, "create_task", dict(title="x", priority="urgent"), "priority"),
            (alice, "create_task", dict(title="x", task_type="Big Feature!"), "task_type"),
            (alice, "create_task", dict(title="x", depends_on=[999]), "do not exist: [999]"),
            (alice, "create_task", dict(title="x", description="d" * 20_001), "limit is 20000"),
            (alice, "create_task", dict(title="x", labels=[f"l{i}" for i in range(21)]), "at most 20"),
            (alice, "get_task", dict(task_id=999), "task 999 does not exist"),
            (alice, "get_task", dict(task_id="one"), "task_id"),
            (alice, "list_tasks", dict(status="doing"), "status"),
            (alice, "list_tasks", dict(cursor="garbage!"), "cursor is not valid"),
            (alice, "list_tasks", dict(limit=500), "limit"),
            (alice, "claim_task", dict(task_id=999), "does not exist"),
            (bob, "claim_task", dict(task_id=card["id"]), "claimed by alice"),
            (alice, "complete_task", dict(task_id=todo["id"], token=0, output="x"), "claim it first"),
            (alice, "complete_task", dict(task_id=card["id"], token=claim["token"] + 7, output="x"), "stale"),
            (alice, "complete_task", dict(task_id=card["id"], token=claim["token"], output=""), "needs output"),
            (
                alice,
                "complete_task",
                dict(task_id=card["id"], token=claim["token"], output="x" * 200_001),
                "limit is 200000",
            ),
            (bob, "complete_task", dict(task_id=card["id"], token=claim["token"], output="x"), "claimed by alice"),
            (bob, "update_task", dict(task_id=card["id"], token=claim["token"], note="mine now"), "claimed by alice"),
            (bob, "release_task", dict(task_id=card["id"], token=claim["token"]), "claimed by alice"),
            (bob, "update_task", dict(task_id=card["id"], token=claim["token"]), "claimed by alice"),
            (alice, "update_task", dict(task_id=card["id"], note="no token"), "pass token="),
            (alice, "update_task", dict(task_id=card["id"], token=claim["token"], status="blocked"), "needs reason"),
            (alice, "update_task", dict(task_id=card["id"]), "nothing to update"),
            (alice, "update_task", dict(task_id=todo["id"], status="in_progress"), "cannot move"),
            (alice, "update_task", dict(task_id=todo["id"], title="new", expected_version=99), "version"),
        ]
        for client, tool, args, expected in cases:
            text = await call_error(client, tool, **args)
            assert expected in text, f"{tool}({args}) said: {text}"
        assert counts(board) == before


async def test_done_and_review_are_not_reopened_by_update(connect):
    async with connect("alice") as c:
        card = await call(c, "create_task", title="t")
        claim = await call(c, "claim_task")
        await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="ok")
        assert "done" in await call_error(c, "update_task", task_id=card["id"], note="more")
        assert "only todo cards can be claimed" in await call_error(c, "claim_task", task_id=card["id"])
        assert "it is done" in await call_error(
            c, "complete_task", task_id=card["id"], token=claim["token"], output="again"
        )


async def test_lease_expiry_returns_card_and_refuses_the_late_holder(connect, monkeypatch):
    clock = [1_000_000.0]
    freeze_clock(monkeypatch, clock)
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="slow work")
        first = await call(alice, "claim_task")
        clock[0] += 301  # past the 300 s lease
        board_view = await call(bob, "get_board")
        todo = next(col for col in board_view["columns"] if col["status"] == "todo")
        assert todo["count"] == 1 and todo["top"][0].get("assignee") is None
        lapsed = await call_error(alice, "complete_task", task_id=card["id"], token=first["token"], output="late")
        assert "back in todo" in lapsed
        second = await call(bob, "claim_task")
        assert second["task"]["id"] == card["id"] and second["token"] > first["token"]
        late = await call_error(alice, "complete_task", task_id=card["id"], token=first["token"], output="late")
        assert "claimed by bob" in late
        await call(bob, "complete_task", task_id=card["id"], token=second["token"], output="on time")
        full = await call(bob, "get_task", task_id=card["id"])
    assert full["output"] == "on time"
    expired = [h for h in full["history"] if h["action"] == "expired"]
    assert expired and expired[0]["actor"] == "system" and "alice" in expired[0]["note"]


async def test_activity_renews_the_lease(connect, monkeypatch):
    clock = [2_000_000.0]
    freeze_clock(monkeypatch, clock)
    async with connect("alice") as c:
        card = await call(c, "create_task", title="long job")
        claim = await call(c, "claim_task")
        for _ in range(3):
            clock[0] += 200
            await call(c, "update_task", task_id=card["id"], token=claim["token"], note="still going")
        clock[0] += 200
        await call(c, "update_task", task_id=card["id"], token=claim["token"])
        clock[0] += 200  # 1000 s after the claim, but never 300 s idle
        done = await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="finished")
    assert done["status"] == "done"


async def test_reclaiming_your_own_card_gives_the_token_back(connect):
    async with connect("alice") as c:
        card = await call(c, "create_task", title="t")
        first = await call(c, "claim_task")
        again = await call(c, "claim_task", task_id=card["id"])
        assert again["token"] == first["token"] and again["claimed"]


async def test_release_block_unblock_and_escalate(connect):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="integrate payments")
        claim = await call(alice, "claim_task")
        blocked = await call(
            alice,
            "update_task",
            task_id=card["id"],
            token=claim["token"],
            status="blocked",
            reason="waiting for API keys",
        )
        assert blocked["status"] == "blocked" and blocked["assignee"] == "alice"
        assert "claimed by alice" in await call_error(bob, "update_task", task_id=card["id"], note="hi")
        resumed = await call(alice, "update_task", task_id=card["id"], token=claim["token"], status="in_progress")
        assert resumed["status"] == "in_progress"
        released = await call(alice, "release_task", task_id=card["id"], token=claim["token"], reason="handing off")
        assert released["status"] == "todo" and released.get("assignee") is None
        assert "ended" in await call_error(alice, "update_task", task_id=card["id"], token=claim["token"], note="x")
        c2 = await call(bob, "claim_task")
        await call(
            bob,
            "update_task",
            task_id=card["id"],
            token=c2["token"],
            status="needs_human",
            reason="needs a product decision",
        )
        reopened = await call(alice, "update_task", task_id=card["id"], status="todo", reason="decided: use Stripe")
        assert reopened["status"] == "todo"
        full = await call(alice, "get_task", task_id=card["id"])
    actions = [h["action"] for h in full["history"]]
    assert actions == ["created", "claimed", "blocked", "resumed", "released", "claimed", "escalated", "unblocked"]
    assert full["history"][2]["note"] == "waiting for API keys"


async def test_edits_with_expected_version_refuse_a_lost_update(connect):
    # the two who may edit a card's title: its creator and an operator
    async with connect("alice") as alice, connect("lee", role="lead") as lee:
        card = await call(alice, "create_task", title="v1")
        v = card["version"]
        await call(alice, "update_task", task_id=card["id"], title="alice's title", expected_version=v)
        err = await call_error(lee, "update_task", task_id=card["id"], title="lee's title", expected_version=v)
        assert f"changed since version {v}" in err
        assert (await call(lee, "get_task", task_id=card["id"]))["title"] == "alice's title"


async def test_identity_is_per_connection_and_cannot_be_borrowed(connect, board):
    async with connect(None) as anon:
        assert "whoami" in await call_error(anon, "create_task", title="x")
        assert (await call(anon, "whoami")).get("agent") is None
        me = await call(anon, "whoami", name="Dana", role="coder")
        assert me["agent"] == "dana" and me["token"].startswith("hb_")
        assert (await call(anon, "create_task", title="by dana"))["id"] == 1
        assert "already acts as 'dana'" in await call_error(anon, "whoami", name="eve")
    async with connect(None) as impostor:
        assert "already registered" in await call_error(impostor, "whoami", name="dana")
        assert "whoami" in await call_error(impostor, "claim_task")
    async with connect(None) as same_agent_later:
        again = await call(same_agent_later, "whoami", name="dana", token=me["token"])
        assert again["agent"] == "dana" and again.get("token") is None
    assert "reserved" in await call_error_in(connect, "whoami", name="system")
    assert board.get(1).created_by == "dana"


async def call_error_in(connect, tool, **args):
    async with connect(None) as c:
        return await call_error(c, tool, **args)


async def test_list_tasks_pages_are_bounded_and_complete(connect):
    async with connect("alice") as c:
        for i in range(120):
            await call(
                c,
                "create_task",
                title=f"card {i}",
                priority=["low", "medium", "high"][i % 3],
                labels=["even"] if i % 2 == 0 else [],
            )
        seen, cursor, pages = [], None, 0
        while True:
            page = await call(c, "list_tasks", limit=50, **({"cursor": cursor} if cursor else {}))
            pages += 1
            assert page["total"] == 120 and len(page["tasks"]) <= 50
            seen += page["tasks"]
            cursor = page.get("next_cursor")
            if not cursor:
                assert page.get("hint") is None
                break
            assert "cursor=" in page["hint"]
        assert pages == 3 and len({t["id"] for t in seen}) == 120
        ranks = [{"high": 2, "medium": 1, "low": 0}[t["priority"]] for t in seen]
        assert ranks == sorted(ranks, reverse=True)
        evens = await call(c, "list_tasks", label="even", limit=200)
        assert evens["total"] == 60
        assert (await call(c, "list_tasks", status="done"))["total"] == 0


async def test_board_columns_and_resources(connect):
    async with connect("alice") as c:
        a = await call(c, "create_task", title="a", priority="high")
        await call(c, "create_task", title="b", depends_on=[a["id"]])
        await call(c, "claim_task")
        view = await call(c, "get_board", top=3)
        cols = {col["status"]: col for col in view["columns"]}
        assert cols["in_progress"]["count"] == 1 and cols["todo"]["count"] == 1
        assert view["total"] == 2 and view["ready"] == 0  # b waits on a
        res = await c.read_resource("hiveboard://board")
        assert '"in_progress"' in res.contents[0].text
        res = await c.read_resource(f"hiveboard://tasks/{a['id']}")
        assert '"title":"a"' in res.contents[0].text
        templates = (await c.list_resource_templates()).resource_templates
        assert any(t.uri_template == "hiveboard://tasks/{task_id}" for t in templates)


async def test_ready_counts_each_todo_card_whose_dependencies_are_all_done(connect):
    async with connect("alice") as c:
        first = await call(c, "create_task", title="first", priority="critical")
        second = await call(c, "create_task", title="second", priority="high")
        await call(c, "create_task", title="waits on two", depends_on=[first["id"], second["id"]])
        await call(c, "create_task", title="waits on one", depends_on=[first["id"]])
        await call(c, "create_task", title="free")
        assert (await call(c, "get_board"))["ready"] == 3  # first, second, free
        held = await call(c, "claim_task", task_id=first["id"])
        await call(c, "complete_task", task_id=first["id"], token=held["token"], output="done")
        view = await call(c, "get_board")  # "waits on one" is ready now; "waits on two" still waits on second
        assert view["ready"] == 3 == (await call(c, "list_tasks", status="todo", ready=True))["total"]


async def test_long_output_is_trimmed_unless_full(connect):
    async with connect("alice") as c:
        card = await call(c, "create_task", title="big")
        claim = await call(c, "claim_task")
        await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="y" * 10_000)
        short = await call(c, "get_task", task_id=card["id"])
        assert len(short["output"]) < 4_200 and "full=true" in short["output"]
        full = await call(c, "get_task", task_id=card["id"], full=True)
        assert full["output"] == "y" * 10_000


async def test_a_full_read_of_a_huge_card_is_bounded_and_says_how_to_read_the_rest(connect):
    """get_task(full=true) on a card of 4 MB carries at most 100,000 characters of output and artifacts,
    each whole or cut with the way to the rest: get_task(artifact=name), which gives that one uncut."""
    async with connect("alice") as c:
        card = await call(c, "create_task", title="huge")
        claim = await call(c, "claim_task")
        artifacts = [{"name": f"src/part{n}.py", "content": f"# {n}\n" + "x" * 199_000} for n in range(20)]
        await call(
            c, "complete_task", task_id=card["id"], token=claim["token"], output="z" * 60_000, artifacts=artifacts
        )
        full = await call(c, "get_task", task_id=card["id"], full=True)
        whole = [a for a in full["artifacts"] if len(a["content"]) > 5_000]
        assert full["output"] == "z" * 60_000 and len(whole) == 0  # 60k fits in 100k; 60k + 199k does not
        cut = full["artifacts"][1]["content"]
        assert full["artifacts"][0]["content"].startswith("# 0\n")
        assert f"call get_task with task_id={card['id']} artifact=<name>" in cut and len(cut) < 4_300
        assert sum(len(a["content"]) for a in full["artifacts"]) + len(full["output"]) < 100_000 + 20 * 4_200
        one = await call(c, "get_task", task_id=card["id"], artifact="src/part7.py")
        assert [a["name"] for a in one["artifacts"]] == ["src/part7.py"]
        assert one["artifacts"][0]["content"] == artifacts[7]["content"] and len(one["output"]) < 4_300
        wrong = await call_error(c, "get_task", task_id=card["id"], artifact="src/nope.py")
        assert f"task {card['id']} has no artifact 'src/nope.py'; its artifacts: 'src/part0.py'" in wrong


async def test_review_seam_sends_completed_cards_to_review(connect):
    async with connect("alice", wants_review=lambda task: task.task_type == "code") as c:
        code = await call(c, "create_task", title="code", task_type="code")
        docs = await call(c, "create_task", title="docs", task_type="docs")
        for card in (code, docs):
            claim = await call(c, "claim_task", task_id=card["id"])
            await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="done")
        assert (await call(c, "get_task", task_id=code["id"]))["status"] == "review"
        assert (await call(c, "get_task", task_id=docs["id"]))["status"] == "done"
        assert "review" in await call_error(c, "update_task", task_id=code["id"], note="x")


async def test_legacy_protocol_clients_work_too(connect):
    async with connect("alice", mode="legacy") as c:
        card = await call(c, "create_task", title="legacy")
        claim = await call(c, "claim_task")
        done = await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="ok")
    assert done["status"] == "done"


async def test_a_stale_token_is_refused_even_for_moves_anyone_may_make(connect, monkeypatch):
    clock = [3_000_000.0]
    freeze_clock(monkeypatch, clock)
    async with connect("bob") as bob:
        card = await call(bob, "create_task", title="t")
        claim = await call(bob, "claim_task")
        clock[0] += 301
        err = await call_error(
            bob, "update_task", task_id=card["id"], token=claim["token"], status="blocked", reason="late"
        )
        assert "back in todo" in err
        assert (await call(bob, "get_task", task_id=card["id"]))["status"] == "todo"


async def test_a_reservation_outlives_release_and_cannot_skip_the_claim(connect):
    async with connect("lead") as lead, connect("bob") as bob, connect("carol") as carol:
        await call(bob, "whoami")
        card = await call(lead, "create_task", title="reserved", assignee="bob")
        assert card["reserved_for"] == "bob" and card.get("assignee") is None
        assert "only its holder" in await call_error(
            carol, "update_task", task_id=card["id"], status="blocked", reason="waiting"
        )
        await call(lead, "update_task", task_id=card["id"], status="blocked", reason="waiting")
        assert "not claimed" in await call_error(bob, "update_task", task_id=card["id"], token=0, status="in_progress")
        await call(lead, "update_task", task_id=card["id"], status="todo", reason="ready again")
        claim = await call(bob, "claim_task")
        await call(bob, "release_task", task_id=card["id"], token=claim["token"])
        assert "reserved for bob" in await call_error(carol, "claim_task", task_id=card["id"])
        assert (await call(carol, "claim_task"))["claimed"] is False
        mine = await call(bob, "list_tasks", assignee="bob")
        assert [t["id"] for t in mine["tasks"]] == [card["id"]]


async def test_more_bad_input_is_refused_cleanly(connect, board):
    async with connect("alice") as c:
        before = counts(board)
        assert "title is blank" in await call_error(c, "create_task", title="   ")
        assert "task_id" in await call_error(c, "get_task", task_id=2**70)
        assert "not a task id" in await call_error(c, "subscribe", kind="task", value="\u00b2")
        assert "not a task id" in await call_error(c, "subscribe", kind="task", value="9" * 30)
        weird_cursor = "WzcsICJ4Il0="  # valid base64 of [7, "x"]
        assert "cursor is not valid" in await call_error(c, "get_messages", cursor=weird_cursor)
        assert counts(board) == before


BAD_TEXT = [("\ud800", "lone UTF-16 surrogate"), ("a\x00b", "NUL character")]


@pytest.mark.parametrize("bad, said", BAD_TEXT)
async def test_text_that_cannot_be_stored_is_refused_and_nothing_is_written(connect, bad, said):
    """Over HTTP and stdio the SDK's JSON parser already refuses lone surrogates; the tools refuse them
    (and NUL) themselves, whatever transport lets them through, as the in-process client does."""
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="ok")
        attempts = [
            ("create_task", dict(title="x", labels=["fine", bad]), "labels[1]"),
            ("publish_message", dict(intent="info", content="hi", metadata={"note": bad}), "metadata.note"),
            ("update_task", dict(task_id=card["id"], labels=[bad]), "labels[0]"),
            (
                "create_task",
                dict(title="x", acceptance_tests={"files": [{"name": "t.py", "content": bad}]}),
                "acceptance_tests.files[0].content",
            ),
        ]
        for tool, args, where in attempts:
            error = await call_error(alice, tool, **args)
            assert where in error and said in error, (tool, error)
        # nothing was written, and everyone can still read everything
        assert (await call(bob, "list_tasks"))["total"] == 1
        assert (await call(bob, "get_task", task_id=card["id"]))["labels"] == []
        assert (await call(bob, "get_messages", box="pool"))["messages"] == []
        claim = await call(bob, "claim_task", task_id=card["id"])
        assert claim["claimed"] and claim["token"]


async def test_prompts_an_operator_can_use_as_slash_commands(connect):
    async with connect("alice") as c:
        names = {p.name for p in (await c.list_prompts()).prompts}
        assert names == {"work-the-board", "review-as-critic", "plan-feature"}
        work = await c.get_prompt("work-the-board", {"name": "cursor-1", "task_type": "code"})
        text = work.messages[0].content.text
        assert "whoami(name='cursor-1')" in text and "claim_task with task_type='code'" in text
        plan = await c.get_prompt("plan-feature", {"feature": "CSV export of the board"})
        assert "CSV export of the board" in plan.messages[0].content.text


async def test_unknown_and_invalid_arguments_get_one_sentence_and_nothing_is_written(connect):
    async with connect("alice") as alice:
        typo = await call_error(alice, "create_task", titel="Fix login")
        assert "no argument 'titel' (did you mean 'title'?)" in typo and "It takes: title," in typo
        bad = await call_error(alice, "create_task", title="x", priority="urgent")
        assert bad.endswith(
            "create_task: argument 'priority': Input should be 'critical', 'high', 'medium' or 'low'; nothing was done"
        )
        assert "pydantic" not in bad and "\n" not in bad
        assert "argument 'limit'" in await call_error(alice, "list_tasks", limit=500)
        assert (await call(alice, "list_tasks"))["total"] == 0


async def test_every_argument_has_structural_bounds_whatever_its_schema(connect, board):
    async with connect("alice") as alice:
        await call(alice, "whoami")
        before = counts(board)
        deep: dict = {}
        cursor = deep
        for _ in range(10):
            cursor["a"] = {}
            cursor = cursor["a"]
        attempts = [
            ("create_task", dict(title="x", labels=[f"l{n}" for n in range(600)]), "'labels' has 600 items"),
            ("publish_message", dict(intent="info", metadata=deep), "nested deeper than"),
            ("publish_message", dict(intent="info", metadata={f"k{n}": n for n in range(200)}), "200 keys"),
            ("complete_task", dict(task_id=1, token=1, output="x" * 300_000), "300000 characters"),
        ]
        for tool, args, said in attempts:
            error = await call_error(alice, tool, **args)
            assert said in error and "nothing was done" in error, (tool, error)
        assert counts(board) == before


async def test_a_server_bug_still_answers_with_a_sentence_the_agent_can_act_on(connect, board):
    def broken(**_):
        raise RuntimeError("a bug")

    board.board = broken
    async with connect("alice") as alice:
        error = await call_error(alice, "get_board")
    assert "get_board failed inside the server (RuntimeError" in error and "get_task" in error
    assert "a bug" not in error  # the exception's own text stays in the server log


async def test_a_claim_whose_lessons_cannot_be_read_still_hands_over_its_token(connect, board):
    class NoLessons:  # memory whose index fails after the claim has committed
        def context_for(self, agent, task):
            raise RuntimeError("index down")

    async with connect("alice", memory=NoLessons()) as alice:
        card = await call(alice, "create_task", title="x")
        claim = await call(alice, "claim_task", task_id=card["id"])
    assert claim["claimed"] and claim["token"] and "could not be read" in claim["message"]
