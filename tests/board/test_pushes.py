"""A client session's agent (Agents.for_session) and what an agent is told unasked, once (board/pushes.py): the
board's side of issue 49, on both stores. The stdio side (a Claude Code session's channel) is in
tests/server/test_claude_code.py."""

from __future__ import annotations

import pytest

from hiveboard.board.db import Store
from hiveboard.board.errors import Conflict, OverQuota
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask
from hiveboard.board.quotas import QuotaConfig
from hiveboard.board.tasks import Board

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def test_a_session_is_one_agent_whenever_it_comes_back_and_no_other_takes_its_name(board: Board):
    first = board.agents.for_session("claude-3f2a9c1d", "3f2a9c1d-0000")
    again = board.agents.for_session("claude-3f2a9c1d", "3f2a9c1d-0000")  # a resumed session
    assert first == again
    with pytest.raises(Conflict, match="belongs to another session"):
        board.agents.for_session("claude-3f2a9c1d", "3f2a9c1d-9999")
    board.agents.register("alice")
    with pytest.raises(Conflict, match="registered by hand"):
        board.agents.for_session("alice", "a-session")
    assert {a.name: a.client_session for a in board.views.agents()} == {
        "claude-3f2a9c1d": "3f2a9c1d-0000",
        "alice": None,
    }


def test_a_session_registers_as_an_agent_registering_itself_does(store_target: str):
    board = Board(Store(store_target), quotas=QuotaConfig(max_agents=1))
    try:
        board.agents.for_session("claude-00000001", "s1")
        with pytest.raises(OverQuota, match="the most that may register themselves"):
            board.agents.for_session("claude-00000002", "s2")
        assert [a.name for a in board.views.agents()] == ["claude-00000001"]
    finally:
        board.store.close()


def test_what_an_agent_must_act_on_is_pushed_once(board: Board):
    for name in ("lee", "dev"):
        board.agents.ensure(name)
    direct = board.messages.publish("lee", NewMessage(intent="info", recipient="dev", content="look at this"))
    board.messages.publish("lee", NewMessage(intent="info", content="to everyone"))
    card = board.create("lee", NewTask(title="yours", assignee="dev"))
    waiting = board.pushes.waiting("dev")
    # the direct message, the card's assignment (a direct message too) and the card, ready; not the broadcast
    assert [(p.kind, p.intent, p.task_id) for p in waiting] == [
        ("message", "info", None),
        ("message", "task_assignment", card.id),
        ("ready", None, card.id),
    ]
    assert waiting[0].message_id == direct.id
    assert board.pushes.message("dev", direct.id).sender == "lee"
    assert board.pushes.ready("lee", card.id) is None  # reserved for dev, not lee
    key = board.pushes.ready("dev", card.id).key
    assert board.pushes.first("dev", key) is True
    assert board.pushes.first("dev", key) is False  # told already: a reconnect is not told again
    assert board.pushes.first("lee", key) is True  # told per agent
