"""Caps on the surfaces one agent could otherwise fill (issue 48), each inside the board's fair-share config
([quotas]) and each refused in one sentence that says what to do, with nothing written: running MCP tasks per
agent, reservations (the whole repository only for operators; an hour at most without a card) and token-usage
records (on a per-hour cap, and only against a card the agent holds or held last). Worktrees: test_worktrees.py."""

from __future__ import annotations

import time

import anyio
import pytest
from conftest import call, call_error
from tasks_client import TasksClient

from hiveboard.board.db import Store
from hiveboard.board.hook_view import View
from hiveboard.board.quotas import QuotaConfig
from hiveboard.board.tasks import Board
from hiveboard.server.hook_http import Refused, Usage, _record_usage

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


@pytest.fixture
def board(store_target: str):
    """A board with the default caps but three running tasks per agent (the connect fixture serves it)."""
    b = Board(Store(store_target), lease_seconds=300, quotas=QuotaConfig(running_tasks_per_agent=3))
    yield b
    b.store.close()


async def test_an_agents_running_mcp_tasks_stop_at_the_cap(connect, board: Board):
    async with connect("dev", extensions=[TasksClient()]) as dev, connect("ops", extensions=[TasksClient()]) as ops:
        for _ in range(3):
            handle = await dev.session.call_tool("wait_for_work", {"types": ["code"]}, allow_claimed=True)
            assert handle.result_type == "task"
        refused = await dev.session.call_tool("wait_for_work", {"types": ["code"]}, allow_claimed=True)
        assert refused.is_error and refused.content[0].text == (
            "you have 3 MCP tasks working, the most one agent may (HIVEBOARD_QUOTAS__RUNNING_TASKS_PER_AGENT=3); "
            "nothing was started: wait for one to finish or cancel one with tasks/cancel, then call again"
        )
        count = "SELECT count(*) FROM mcp_tasks WHERE agent = ?"
        assert board.store.db.execute(count, ["dev"]).fetchone()[0] == 3  # the refused one wrote nothing
        # another agent's share is its own
        other = await ops.session.call_tool("wait_for_work", {"types": ["docs"]}, allow_claimed=True)
        assert other.result_type == "task"


async def test_a_process_renews_all_its_running_tasks_in_one_write_in_the_write_lanes_turn(
    connect, board: Board, monkeypatch
):
    from hiveboard.server import lanes, task_ext

    monkeypatch.setattr(task_ext, "RENEW", 0.05)  # renewal periods come quickly; nothing here is timed
    renewals: list[tuple[list[str], object]] = []
    wanted = [10**9]  # renewals to wait for, set once every task runs
    enough = anyio.Event()
    real = board.mcp_tasks.renew

    def spy(task_ids, lease):
        renewals.append(([task_ids] if isinstance(task_ids, str) else list(task_ids), lanes.caller.get()))
        if len(renewals) >= wanted[0]:
            enough.set()
        return real(task_ids, lease)

    monkeypatch.setattr(board.mcp_tasks, "renew", spy)
    async with connect("dev", extensions=[TasksClient()]) as dev:
        handles = [
            (await dev.session.call_tool("wait_for_work", {"types": ["code"]}, allow_claimed=True)).task_id
            for _ in range(3)
        ]
        since = len(renewals) + 1  # one renewal may have read the tasks before the last one began
        wanted[0] = since + 4
        with anyio.fail_after(30):
            await enough.wait()
        # one write per renewal period for every task the process runs, not one per task, and in the write lane's
        # turns as the renewals' own caller (never ahead of an agent whose calls wait)
        assert all(sorted(ids) == sorted(handles) for ids, _ in renewals[since:]), renewals
        assert {who for _, who in renewals} == {task_ext.RENEWALS}
        ending = "SELECT count(*) FROM mcp_tasks WHERE status = 'working' AND runner_until > ?"
        assert board.store.db.execute(ending, [time.time() + 20]).fetchone()[0] == 3  # each lease renewed


async def test_the_whole_repository_is_reserved_only_by_an_operator(connect, board: Board):
    async with connect("mallory") as mallory, connect("lead", role="lead") as lead:
        error = await call_error(mallory, "reserve_paths", paths=["src/app.py", "**"], ttl_seconds=3600)
        assert error.endswith(
            "'**' reaches every directory of the repository and only an operator may reserve that; nothing was "
            "reserved: reserve the directories you edit, e.g. 'src/api/**'"
        )
        assert "*/**" in await call_error(mallory, "reserve_paths", paths=["*/**"])
        assert board.store.db.execute("SELECT count(*) FROM reservations").fetchone()[0] == 0
        await call(lead, "reserve_paths", paths=["**"], exclusive=False)  # an operator may
        await call(mallory, "reserve_paths", paths=["**/app.py"], exclusive=False)  # every app.py is not everything


async def test_a_reservation_without_a_card_lasts_an_hour_at_most(connect, board: Board):
    week = 7 * 86_400
    async with connect("mallory") as mallory, connect("alice") as alice:
        error = await call_error(mallory, "reserve_paths", paths=["src/**"], ttl_seconds=week)
        assert error.endswith(
            "a reservation tied to no card lasts at most 3600 s (HIVEBOARD_QUOTAS__RESERVATION_SECONDS_WITHOUT_CARD"
            "=3600); nothing was reserved: claim the card the edit is for, or ask for ttl_seconds up to 3600"
        )
        assert board.store.db.execute("SELECT count(*) FROM reservations").fetchone()[0] == 0
        await call(mallory, "reserve_paths", paths=["src/**"], ttl_seconds=3600)
        # tied to a card it holds, a reservation may be asked for longer: it ends with the card
        card = await call(alice, "create_task", title="Port the lexer")
        await call(alice, "claim_task", task_id=card["id"])
        held = await call(alice, "reserve_paths", paths=["lexer/**"], ttl_seconds=week)
        assert held["reservations"][0]["task_id"] == card["id"]


async def test_what_the_reservation_check_grants_the_git_guard_lets_through(connect, board: Board):
    """The guard of a registered repository weighs its scope's reservations and the board's (no card, or a card of
    no repository): the check must weigh the same, or it grants what the guard then refuses."""
    from hiveboard.board.reservations import blocking

    board.repos.add("api", "/srv/api", "/srv/api/.git", "main", None, "auto", "operator")
    async with connect("mallory") as mallory, connect("alice") as alice:
        await call(mallory, "reserve_paths", paths=["src/**"], ttl_seconds=3600)  # on the board: no card
        card = await call(alice, "create_task", title="Fix the handler", repo="api")
        await call(alice, "claim_task", task_id=card["id"])
        error = await call_error(alice, "reserve_paths", paths=["src/app.py"])
        assert "src/app.py overlaps src/**, held exclusively by mallory" in error
        assert error.endswith(
            "nothing was reserved; reserve other paths, wait for it to end, or ask its holder (publish_message)"
        )
        # the other way round: alice's reservation in the repository meets mallory's on the board
        await call(alice, "reserve_paths", paths=["lib/**"])
        error = await call_error(mallory, "reserve_paths", paths=["lib/util.py"], ttl_seconds=600)
        assert "lib/util.py overlaps lib/**, held exclusively by alice for task" in error
        # and what the check grants, the guard lets through
        await call(alice, "reserve_paths", paths=["docs/**"])
        assert blocking(board.store.db, ["docs/api.md"], "alice", ["", "api"]) == []
        assert [r["agent"] for _, r in blocking(board.store.db, ["src/app.py"], "alice", ["", "api"])] == ["mallory"]
        count = "SELECT count(*) FROM reservations WHERE agent = ? AND released_at IS NULL"
        assert board.store.db.execute(count, ["alice"]).fetchone()[0] == 2  # lib/** and docs/**: nothing else
        assert board.store.db.execute(count, ["mallory"]).fetchone()[0] == 1


def usage(task_id: int | None, output: int, rows: int = 1) -> Usage:
    row = {"task_id": task_id, "model": "m", "output_tokens": output, "messages": 1}
    return Usage(session_id="s", rows=[row] * rows)


async def test_usage_goes_only_to_a_card_held_or_held_last_and_stops_at_the_hourly_cap(
    connect, board: Board, store_target: str
):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="Port the lexer")
        claim = await call(alice, "claim_task", task_id=card["id"])
        await call(alice, "release_task", task_id=card["id"], token=claim["token"])
        await call(bob, "claim_task", task_id=card["id"])
    view = View(store_target)
    try:
        # alice held the card once; bob holds it now: her tokens cannot push his card over its budget
        with pytest.raises(Refused) as refused:
            _record_usage(view, "alice", usage(card["id"], 10**7), per_hour=120)
        assert refused.value.status == 403 and str(refused.value) == (
            f"card #{card['id']} was claimed by another agent after alice: usage is recorded only against a card "
            "you hold or held last; nothing was recorded"
        )
        assert _record_usage(view, "bob", usage(card["id"], 50), per_hour=120) == [card["id"]]
        # the hourly cap counts rows, whoever they name
        _record_usage(view, "bob", usage(None, 1, rows=119), per_hour=120)
        with pytest.raises(Refused) as capped:
            _record_usage(view, "bob", usage(None, 1), per_hour=120)
        assert capped.value.status == 429 and str(capped.value).startswith(
            "bob posted 120 usage records in the last hour, the most one agent may "
            "(HIVEBOARD_QUOTAS__USAGE_RECORDS_PER_HOUR=120); nothing was recorded"
        )
        assert view.usage_rows("bob", time.time() - 3600) == 120
        assert view.usage_rows("alice", 0) == 0
    finally:
        view.close()
