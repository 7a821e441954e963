"""Agents told about work: wait_for_work, and long waits as MCP Tasks (io.modelcontextprotocol/tasks) for clients
that declare the extension. Through the MCP client in-process (SQLite and PostgreSQL) and over streamable HTTP
against `hiveboard serve --http`; the requester side is tests/tasks_client.py, written from the specification."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from conftest import agent_token, call, call_error, data
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from tasks_client import TasksClient, cancel, get, until_done, update

from hiveboard.board.tasks import Board

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


async def a_handle(client, tool: str, **args):
    """Call `tool` as a client that takes the task handle itself; the handle (CreateTaskResult)."""
    handle = await client.session.call_tool(tool, args, allow_claimed=True)
    assert handle.result_type == "task", handle
    return handle


# ----------------------------------------------------------------------------- wait_for_work, a plain call


async def test_wait_for_work_answers_at_once_with_a_ready_card_of_the_types_asked(connect):
    async with connect("lead") as lead, connect("dev") as dev, connect("erin") as erin:
        await call(erin, "whoami")
        await call(lead, "create_task", title="write the docs", task_type="docs")
        await call(lead, "create_task", title="for erin only", task_type="code", assignee="erin")
        wanted = await call(lead, "create_task", title="fix the login", task_type="code", labels=["auth"])
        got = await call(dev, "wait_for_work", types=["code"], wait_seconds=0)
        assert got["task"]["id"] == wanted["id"]  # not the docs card, not erin's
        assert got["hint"] == f"claim it with claim_task(task_id={wanted['id']})"
        assert "task" not in await call(dev, "wait_for_work", labels=["billing"], wait_seconds=0)
        assert (await call(dev, "wait_for_work", labels=["auth"], wait_seconds=0))["task"]["id"] == wanted["id"]
        assert (await call(dev, "get_task", task_id=wanted["id"]))["status"] == "todo"  # nothing was claimed


async def test_a_waiting_wait_for_work_sleeps_through_changes_that_give_no_work(connect, board: Board, monkeypatch):
    """Every waiting call re-reads the board when it wakes: woken by each lease renewal and note of every agent,
    an agent's thousand waiting tasks would read the board a thousand times for each of them."""
    looks = []
    real = board.next_ready

    def counted(*args, **kwargs):
        looks.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(board, "next_ready", counted)
    async with connect("lead") as lead, connect("dev") as dev:
        busy = await call(lead, "create_task", title="the lead's own card", task_type="ops")
        claim = await call(lead, "claim_task", task_id=busy["id"])
        got = {}

        async def wait():
            got.update(await call(dev, "wait_for_work", types=["code"], wait_seconds=60))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                while not looks:
                    await anyio.sleep(0.01)
                for n in range(3):  # a lease renewed, a note: nobody's work changes
                    await call(lead, "update_task", task_id=busy["id"], token=claim["token"], note=f"step {n}")
                await anyio.sleep(0.5)  # room for a woken wait to look again (none is woken: nothing to wait for)
                card = await call(lead, "create_task", title="then the code", task_type="code")
        assert got["task"]["id"] == card["id"]
        assert len(looks) == 2, looks  # when it began, and when the card came


async def test_wait_for_work_wakes_when_another_agent_creates_a_card(connect):
    async with connect("lead") as lead, connect("dev") as dev:
        got = {}

        async def wait():
            got.update(await call(dev, "wait_for_work", types=["code"], wait_seconds=60))

        with anyio.fail_after(30):  # woken by the card, long before the 60 s wait ends
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(0.3)
                await call(lead, "create_task", title="docs first", task_type="docs")  # wakes it; not its type
                await anyio.sleep(0.3)
                assert not got
                await anyio.sleep(0.5)  # room for a woken wait to look again (none is woken: nothing to wait for)
                card = await call(lead, "create_task", title="then the code", task_type="code")
        assert got["task"]["id"] == card["id"]


async def test_wait_for_work_tells_of_mail_without_marking_it_read(connect):
    async with connect("lead") as lead, connect("dev") as dev:
        await call(dev, "whoami")
        await call(lead, "publish_message", intent="request_help", recipient="dev", content="look at #12 please")
        got = await call(dev, "wait_for_work", types=["nothing-of-this-type"], wait_seconds=5)
        assert got.get("task") is None and got["unread"] == 1
        assert got["messages"][0]["content"] == "look at #12 please"
        assert "get_messages" in got["hint"]
        inbox = await call(dev, "get_messages")
        assert [m["content"] for m in inbox["messages"]] == ["look at #12 please"]  # it was still unread


async def test_a_wait_of_a_client_with_a_short_timeout_is_cut_to_it_and_reports_progress(connect, monkeypatch):
    """Claude Code ends a tool call after about 60 s: its waits are cut below that (here, scaled down), and a call
    that sent a progressToken hears that the wait goes on; another client waits what it asked."""
    from mcp_types import Implementation

    from hiveboard.server import waits

    monkeypatch.setitem(waits.CLIENT_LIMITS, "claude-code", 0.6)
    monkeypatch.setattr(waits, "PROGRESS_EVERY", 0.1)
    progress: list[tuple[float, float | None, str | None]] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    claude = Implementation(name="claude-code", version="2.1.154")
    async with connect("dev", client_info=claude, mode="legacy") as dev, connect("other") as other:
        with anyio.fail_after(30):  # an hour asked for; the client's limit answers long before
            result = await dev.call_tool("wait_for_work", {"wait_seconds": 3600}, progress_callback=heard)
        assert not result.is_error and "nothing yet" in data(result)["hint"]
        assert progress and all(total == 1 for _, total, _ in progress)  # of the 0.6 s it waits, not of the hour
        got = {}

        async def wait():
            got.update(await call(other, "wait_for_work", wait_seconds=3600))

        async with anyio.create_task_group() as tg:  # another client is not cut: it waits until work comes
            tg.start_soon(wait)
            await anyio.sleep(1.5)
            assert not got
            card = await call(dev, "create_task", title="for whoever waits")
        assert got["task"]["id"] == card["id"]


async def test_wait_for_work_with_nothing_to_do_says_so_and_refuses_bad_input(connect):
    async with connect("dev") as dev:
        got = await call(dev, "wait_for_work", wait_seconds=0.2)
        assert got == {"unread": 0, "messages": [], "hint": "nothing yet; call wait_for_work again"}
        error = await call_error(dev, "wait_for_work", wait_seconds=7200)
        assert "wait_seconds" in error and "3600" in error


# ----------------------------------------------------------------------------- as MCP Tasks


async def test_a_wait_for_work_task_completes_when_another_agent_creates_a_matching_card(connect):
    async with connect("lead") as lead, connect("dev", extensions=[TasksClient()]) as dev:
        handle = await a_handle(dev, "wait_for_work", types=["code"])
        assert handle.status == "working" and handle.poll_interval_ms and handle.ttl_ms
        assert (await get(dev.session, handle.task_id)).status == "working"
        await call(lead, "create_task", title="docs", task_type="docs")
        await anyio.sleep(0.3)
        assert (await get(dev.session, handle.task_id)).status == "working"  # not a card of its type
        card = await call(lead, "create_task", title="the code", task_type="code")
        done = await until_done(dev.session, handle.task_id)
        assert done.status == "completed" and done.result_type == "complete"
        assert done.result["isError"] is False
        assert f'"id":{card["id"]}' in done.result["content"][0]["text"]
        assert (await update(dev.session, handle.task_id, {"nothing": {}})).result_type == "complete"


async def test_a_client_of_the_extension_gets_the_final_result_transparently(connect):
    async with connect("lead") as lead, connect("dev", extensions=[TasksClient()]) as dev:
        await call(dev, "whoami")
        async with anyio.create_task_group() as tg:

            async def later():
                await anyio.sleep(0.5)
                await call(lead, "publish_message", intent="answer", recipient="dev", content="use the v2 API")

            tg.start_soon(later)
            with anyio.fail_after(30):
                page = await call(dev, "get_messages", wait_seconds=60)  # resolved by polling tasks/get
        assert [m["content"] for m in page["messages"]] == ["use the v2 API"]


async def test_a_task_can_be_cancelled_and_stays_cancelled(connect, board: Board):
    async with connect("lead") as lead, connect("dev", extensions=[TasksClient()]) as dev:
        handle = await a_handle(dev, "wait_for_work", types=["code"])
        assert (await cancel(dev.session, handle.task_id)).result_type == "complete"
        assert (await get(dev.session, handle.task_id)).status == "cancelled"
        await call(lead, "create_task", title="the code", task_type="code")
        await anyio.sleep(0.5)
        task = await get(dev.session, handle.task_id)
        assert task.status == "cancelled" and task.result is None


async def test_a_task_is_its_own_agents_only(connect):
    async with (
        connect("dev", extensions=[TasksClient()]) as dev,
        connect("eve", extensions=[TasksClient()]) as eve,
        connect("plain") as plain,
    ):
        handle = await a_handle(dev, "wait_for_work", types=["code"])
        for attempt in (get, cancel):
            with pytest.raises(MCPError) as refused:
                await attempt(eve.session, handle.task_id)
            assert refused.value.code == -32602 and "of yours" in refused.value.message
        with pytest.raises(MCPError) as undeclared:
            await get(plain.session, handle.task_id)
        assert undeclared.value.code == -32021
        assert (await get(dev.session, handle.task_id)).status == "working"  # eve's cancel did nothing
        await cancel(dev.session, handle.task_id)


async def test_clients_without_the_extension_and_short_calls_keep_plain_results(connect, board: Board):
    async with connect("dev") as plain, connect("dev", extensions=[TasksClient()]) as tasks:
        got = await plain.session.call_tool("wait_for_work", {"wait_seconds": 0.1}, allow_claimed=True)
        assert type(got).__name__ == "CallToolResult"
        got = await tasks.session.call_tool("get_messages", {}, allow_claimed=True)  # no wait: no task
        assert type(got).__name__ == "CallToolResult"
        bad = await tasks.session.call_tool("wait_for_work", {"wait_seconds": 99999}, allow_claimed=True)
        assert bad.is_error and "wait_seconds" in bad.content[0].text  # refused as a call, and no task written
        for hostile, says in (
            ({"typez": ["code"]}, "did you mean 'types'"),
            ({"types": ["\ud800"]}, "types"),
            ({"types": ["code"] * 500}, "at most 20 items"),
        ):
            bad = await tasks.session.call_tool("wait_for_work", hostile, allow_claimed=True)
            assert type(bad).__name__ == "CallToolResult" and bad.is_error and says in bad.content[0].text, bad
    assert board.store.db.execute("SELECT count(*) FROM mcp_tasks").fetchone()[0] == 0


async def test_a_task_whose_server_stopped_reads_failed_not_working_forever(connect, board: Board):
    async with connect("dev", extensions=[TasksClient()]) as dev:
        await call(dev, "whoami")
        orphan = board.mcp_tasks.create("dev", "wait_for_work", ttl=600, lease=-1)  # its node's lease has lapsed
        task = await get(dev.session, orphan["id"])
        assert task.status == "failed" and task.error["code"] == -32603
        assert "call the tool again" in task.status_message


# ----------------------------------------------------------------------------- over HTTP


def tasks_http_client(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=http), extensions=[TasksClient()])


async def test_tasks_over_streamable_http_across_two_agents(http_server, tmp_path):
    home = tmp_path / "home"
    url = http_server(home=home)
    lead_token, dev_token, eve_token = (agent_token(home, n) for n in ("lead", "dev", "eve"))
    async with (
        tasks_http_client(url, lead_token) as lead,
        tasks_http_client(url, dev_token) as dev,
        tasks_http_client(url, eve_token) as eve,
    ):
        handle = await a_handle(dev, "wait_for_work", types=["code"])
        other = await a_handle(dev, "wait_for_work", types=["docs"])
        with anyio.fail_after(30):  # the waits run on in the server, and the agent's own calls go on being served
            for n in range(6):
                extra = await a_handle(dev, "wait_for_work", types=[f"kind-{n}"])
                assert (await call(dev, "whoami"))["agent"] == "dev"
                await cancel(dev.session, extra.task_id)
        with pytest.raises(MCPError):
            await get(eve.session, handle.task_id)  # the bearer token decides whose tasks one reads
        await cancel(dev.session, other.task_id)
        card = await call(lead, "create_task", title="over http", task_type="code")
        done = await until_done(dev.session, handle.task_id)
        assert done.status == "completed" and f'"id":{card["id"]}' in done.result["content"][0]["text"]
        assert (await get(dev.session, other.task_id)).status == "cancelled"
