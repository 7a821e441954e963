"""Quotas through a real MCP client: each agent's share of messages, broadcasts, remembered items, lessons and
artifacts; the database's size ceiling; the cap on agents registering themselves. A refused call says which
limit in one sentence and writes nothing; the agent's other work, and every other agent, go on."""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import call, call_error
from mcp import Client

from hiveboard.board.db import Store
from hiveboard.board.quotas import MB, QuotaConfig
from hiveboard.board.tasks import Board
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

# what a refused call leaves as it was: every table a bulk write or a registration adds rows to
# (not memory_outbox: the memory's indexer empties it meanwhile)
TABLES = ("messages", "inbox", "memory_items", "artifacts", "agents", "quota_usage")


class Clock:
    """The time the quotas' windows are measured in, moved by the test instead of waiting."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limited(store_target: str, clock: Clock):
    """limited(**quotas) -> a Board with these [quotas] settings (the others at their defaults) on the test's
    clock; several calls are several nodes (processes) on one database."""
    boards: list[Board] = []

    def make(**settings) -> Board:
        board = Board(Store(store_target), quotas=QuotaConfig(**settings))
        board.quotas.clock = clock
        boards.append(board)
        return board

    yield make
    for board in boards:
        board.store.close()


@asynccontextmanager
async def connect(board: Board, agent: str | None = None, *, role=None, transport="memory", token=None, memory=None):
    """An in-process MCP client acting as `agent` (configured as the operator would: HIVEBOARD_AGENT)."""
    identity = Identity(board.agents, transport, agent=agent, role=role, server_token=token)
    async with Client(build_server(board, identity, memory=memory)) as client:
        yield client


def rows(board: Board) -> dict[str, int]:
    return {t: board.store.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


async def refused(client: Client, tool: str, board: Board, **args) -> str:
    """Call a tool that must be refused by a quota; return its sentence, having checked nothing was written."""
    before = rows(board)
    text = (await call_error(client, tool, **args)).removeprefix(f"{tool}: ")
    assert rows(board) == before, text
    assert "nothing was written" in text and text.count(". ") == 0, text  # one sentence
    return text


async def test_messages_per_minute_slide_and_spare_the_agents_other_work_and_others(limited, clock):
    board = limited(messages_per_minute=3)
    board.agents.ensure("bob")
    async with connect(board, "alice") as alice, connect(board, "bob") as bob:
        card = await call(alice, "create_task", title="keep working")
        for n in range(3):  # sent at 0, 20 and 40 s
            clock.advance(20 if n else 0)
            await call(alice, "publish_message", intent="info", recipient="bob", content="hello")
        clock.advance(5)  # now 45 s: the first leaves the window at 60 s
        text = await refused(alice, "publish_message", board, intent="info", recipient="bob", content="one more")
        assert text == (
            "alice's messages in the last minute come to 3 and this call adds 1, over the quota of 3 "
            "(HIVEBOARD_QUOTAS__MESSAGES_PER_MINUTE=3); nothing was written; retry in 15 s"
        )
        # the flooding agent's other work goes on, and so does every other agent's
        claim = await call(alice, "claim_task", task_id=card["id"])
        await call(alice, "update_task", task_id=card["id"], token=claim["token"], note="still here")
        done = await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="done")
        assert done["status"] == "done"  # its completion posted the board's own event, which is never charged
        await call(bob, "publish_message", intent="info", recipient="alice", content="hi")
        # the window slides: at 61 s the message of 0 s has left it, and one more fits
        clock.advance(16)
        await call(alice, "publish_message", intent="info", recipient="bob", content="one more")
        assert "retry in 19 s" in await refused(alice, "publish_message", board, intent="info", content="and more")


async def test_a_broadcast_counts_once_per_recipient_and_has_its_own_lower_limit(limited):
    board = limited(message_mb_per_hour=1000 / MB, broadcasts_per_minute=2)
    for name in ("b1", "b2", "b3", "b4"):
        board.agents.ensure(name)
    async with connect(board, "alice") as alice:
        # 150 characters and its metadata's 2 ({}) to 4 agents: 608 of the 1000 an hour
        await call(alice, "publish_message", intent="info", recipient="everyone", content="x" * 150)
        text = await refused(alice, "publish_message", board, intent="info", recipient="everyone", content="x" * 150)
        assert text.startswith(
            "alice's characters of messages in the last hour come to 608 and this call adds 608 (a broadcast "
            "counts once per recipient), over the quota of 1,000 (HIVEBOARD_QUOTAS__MESSAGE_MB_PER_HOUR=0.001); "
            "nothing was written; retry in 60 min, or send less"
        ), text
        await call(alice, "publish_message", intent="info", recipient="b1", content="x" * 150)  # 152 fits
        too_big = await refused(alice, "publish_message", board, intent="info", recipient="everyone", content="y" * 300)
        assert too_big.startswith(
            "this call alone adds 1,208 characters of messages (a broadcast counts once per recipient), more "
            "than the quota of 1,000 per hour"
        )
        assert too_big.endswith("nothing was written; send less, or to fewer agents")

    board = limited(broadcasts_per_minute=2)  # a second node on the same database, other limits
    async with connect(board, "carol") as carol:
        for _ in range(2):
            await call(carol, "publish_message", intent="info", recipient="everyone", content="news")
        text = await refused(carol, "publish_message", board, intent="info", recipient="everyone", content="news")
        assert "(HIVEBOARD_QUOTAS__BROADCASTS_PER_MINUTE=2)" in text
        await call(carol, "publish_message", intent="info", recipient="b1", content="a direct message still goes")


async def test_a_quota_holds_across_nodes_and_operators_get_ten_times(limited):
    one, two = limited(messages_per_minute=2), limited(messages_per_minute=2)
    one.agents.ensure("bob")
    async with connect(one, "alice") as on_one, connect(two, "alice") as on_two:
        await call(on_one, "publish_message", intent="info", recipient="bob", content="from node one")
        await call(on_two, "publish_message", intent="info", recipient="bob", content="from node two")
        for client, board in ((on_one, one), (on_two, two)):
            text = await refused(client, "publish_message", board, intent="info", recipient="bob", content="more")
            assert "come to 2 and this call adds 1" in text
    async with connect(one, "lee", role="lead") as lead:
        for _ in range(20):
            await call(lead, "publish_message", intent="info", recipient="bob", content="orders")
        text = await refused(lead, "publish_message", one, intent="info", recipient="bob", content="orders")
        assert "over the quota of 20 (HIVEBOARD_QUOTAS__MESSAGES_PER_MINUTE=2, ×10 for role lead or human)" in text


class Counting:
    """An embedder that notes every text it is asked to embed."""

    def __init__(self, embedder, seen: list):
        self._embedder, self._seen = embedder, seen

    def __getattr__(self, name):
        return getattr(self._embedder, name)

    def embed(self, texts):
        self._seen.extend(texts)
        return self._embedder.embed(texts)


@pytest.fixture(scope="module")
def embedder():
    return get_embedder()


async def test_remember_and_record_lesson_are_limited_per_agent(limited, clock, tmp_path: Path, embedder, monkeypatch):
    board = limited(remember_items_per_hour=5, remember_mb_per_hour=100 / MB, lessons_per_hour=1)
    memory = open_memory(board, embedder, tmp_path)
    try:
        async with connect(board, "alice", memory=memory) as alice, connect(board, "bob", memory=memory) as bob:
            await call(alice, "remember", items=[{"text": "a" * 30, "title": "t"} for _ in range(2)])  # 62 characters
            text = await refused(alice, "remember", board, items=[{"text": "b" * 30, "title": "t"} for _ in range(2)])
            assert text.startswith("alice's characters remembered in the last hour come to 62 and this call adds 62")
            text = await refused(alice, "remember", board, items=[{"text": "c", "title": "t"} for _ in range(4)])
            assert (
                "alice's remembered items in the last hour come to 2 and this call adds 4, over the quota of 5" in text
            )
            await call(bob, "remember", items=[{"text": "b" * 30, "title": "t"} for _ in range(2)])  # bob has his own

            lesson = dict(problem="Tests hit the real payment API.", fix="Use the sandbox keys.", task_type="test")
            await call(alice, "record_lesson", **lesson)
            # a near-duplicate would only be counted against the first, and is still a call; refused before the
            # lesson is embedded (a refused call costs no model run)
            embedded = []
            monkeypatch.setattr(memory, "embedder", Counting(memory.embedder, embedded))
            text = await refused(alice, "record_lesson", board, **lesson)
            assert "(HIVEBOARD_QUOTAS__LESSONS_PER_HOUR=1); nothing was written; retry in 60 min" in text
            assert embedded == []
            error = await call_error(alice, "record_lesson", **lesson, task_id=999)
            assert "task 999 does not exist" in error and embedded == []
            clock.advance(3601)
            assert (await call(alice, "record_lesson", **lesson))["merged"] is True
    finally:
        memory.stop()


async def test_artifacts_are_limited_and_a_refused_completion_leaves_the_card_held(limited):
    board = limited(artifact_mb_per_hour=1000 / MB)
    async with connect(board, "alice") as alice:
        first, second = [await call(alice, "create_task", title=f"card {n}") for n in (1, 2)]
        claim = await call(alice, "claim_task", task_id=first["id"])
        artifact = {"name": "notes.md", "kind": "text", "content": "x" * 600}
        await call(alice, "complete_task", task_id=first["id"], token=claim["token"], output="ok", artifacts=[artifact])
        claim = await call(alice, "claim_task", task_id=second["id"])
        text = await refused(
            alice, "complete_task", board, task_id=second["id"], token=claim["token"], output="ok", artifacts=[artifact]
        )
        assert "alice's characters of artifacts in the last hour come to 600 and this call adds 600" in text
        assert (await call(alice, "get_task", task_id=second["id"]))["status"] == "in_progress"
        done = await call(alice, "complete_task", task_id=second["id"], token=claim["token"], output="ok, no files")
        assert done["status"] == "done"


async def test_at_the_size_ceiling_bulk_writes_stop_and_claims_go_on(limited, caplog):
    board = limited(max_db_mb=50_000 / MB)  # far below the size of an empty board
    board.agents.ensure("bob")
    async with connect(board, "alice") as alice:
        card = await call(alice, "create_task", title="still claimable")
        text = await refused(alice, "publish_message", board, intent="info", recipient="bob", content="hello")
        assert text == (
            "the board's database is at its size limit (50 kB); nothing was written; an operator must archive or "
            "raise HIVEBOARD_QUOTAS__MAX_DB_MB"
        )
        claim = await call(alice, "claim_task", task_id=card["id"])
        artifact = {"name": "a.txt", "kind": "text", "content": "x"}
        assert "size limit" in await refused(
            alice, "complete_task", board, task_id=card["id"], token=claim["token"], output="o", artifacts=[artifact]
        )
        assert (await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="o"))[
            "status"
        ] == "done"
        stats = (await call(alice, "board_stats"))["database"]
        assert (
            stats["limit_bytes"] == 50_000 and stats["percent"] > 100 and stats["note"].startswith("at its size limit")
        )

    size = board.store.dialect.size(board.store.db)
    near = limited(max_db_mb=size / 0.9 / MB)  # 90 %: a warning, and every write still goes
    near.agents.ensure("bob")
    with caplog.at_level(logging.WARNING, logger="hiveboard"):
        async with connect(near, "alice") as alice:
            await call(alice, "publish_message", intent="info", recipient="bob", content="hello")
            assert (await call(alice, "board_stats"))["database"]["note"].startswith("over 80 %")
    assert "of its size limit" in caplog.text and "HIVEBOARD_QUOTAS__MAX_DB_MB" in caplog.text


async def test_self_registration_is_capped_and_an_operators_agent_is_not(limited, clock):
    board = limited(registrations_per_10_minutes=2, max_agents=4)
    tokens = {}
    for name in ("a1", "a2"):
        async with connect(board) as client:
            tokens[name] = (await call(client, "whoami", name=name))["token"]
    async with connect(board) as client:
        text = await refused(client, "whoami", board, name="a3")
        assert text == (
            "2 agents registered themselves on this board in the last 10 minutes, the quota "
            "(HIVEBOARD_QUOTAS__REGISTRATIONS_PER_10_MINUTES=2); nothing was written; ask the operator for a token "
            "(`hiveboard agent add a3`), or retry in 10 min"
        )
    async with connect(board) as client:  # re-attaching with its token is no registration
        assert (await call(client, "whoami", name="a1", token=tokens["a1"]))["agent"] == "a1"
    async with connect(board, "set-by-operator", transport="stdio") as client:  # HIVEBOARD_AGENT: not capped
        assert (await call(client, "whoami"))["agent"] == "set-by-operator"
    clock.advance(601)
    async with connect(board) as client:
        await call(client, "whoami", name="a3")  # the window slid; now the board has 4 agents
    async with connect(board) as client:
        text = await refused(client, "whoami", board, name="a4")
        assert text.startswith("the board has 4 agents, the most that may register themselves")
        assert text.endswith("ask the operator for a token (`hiveboard agent add a4`)")


async def test_a_server_token_turns_self_registration_off(limited):
    board = limited()
    token = board.agents.new_token("alice")  # `hiveboard agent add alice`
    async with connect(board, transport="http", token="s3cret") as client:
        text = await refused(client, "whoami", board, name="Newbie")
        assert text == (
            "this server does not let agents register themselves (it has a server token); nothing was written; "
            "ask the operator for a token (`hiveboard agent add newbie`) and connect with it"
        )
    async with connect(board, transport="http", token="s3cret") as client:
        assert (await call(client, "whoami", name="alice", token=token))["agent"] == "alice"


def test_the_quotas_are_settings_that_reach_the_served_board(tmp_path, monkeypatch):
    from hiveboard.server.config import load_settings
    from hiveboard.server.stores import open_board

    monkeypatch.setenv("HIVEBOARD_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("HIVEBOARD_QUOTAS__MESSAGES_PER_MINUTE", "7")
    board = open_board(load_settings(home=tmp_path / "home"))
    try:
        assert board.quotas.config.messages_per_minute == 7 and board.quotas.config.max_db_mb == 2000
    finally:
        board.store.close()
    plain = Board(Store(tmp_path / "plain.db"))
    try:
        assert plain.quotas.on is False  # a board built in code has none unless given
    finally:
        plain.store.close()
