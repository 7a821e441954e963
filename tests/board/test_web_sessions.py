"""People's web sessions on the board (board/web_sessions.py): what a login opens, and everything that ends
it: logging out, a new token, expiry. The HTTP side, across server processes and nodes, is in
tests/server/test_web.py."""

from __future__ import annotations

import hashlib

import pytest

from hiveboard.board.tasks import Board

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def test_a_session_stands_for_its_person_until_logged_out(board: Board):
    token = board.agents.new_token("ann", role="human")
    session = board.web_sessions.open("ann", token, 3600)
    assert len(session) == 43  # 256 random bits, url-safe
    assert board.web_sessions.person(session).name == "ann"
    other = board.web_sessions.open("ann", token, 3600)  # a second browser: a session of its own
    # only the id's digest is stored: a copy of the database opens no session
    stored = {r[0] for r in board.store.db.execute("SELECT id_hash FROM web_sessions").fetchall()}
    assert session not in stored and hashlib.sha256(session.encode()).hexdigest() in stored

    board.web_sessions.close(session)
    assert board.web_sessions.person(session) is None
    assert board.web_sessions.person(other).name == "ann"  # logging out one browser leaves the other


def test_a_new_token_ends_every_session_of_the_old_one(board: Board):
    old = board.agents.new_token("ann", role="human")
    session = board.web_sessions.open("ann", old, 3600)
    new = board.agents.new_token("ann")
    assert board.web_sessions.person(session) is None
    assert board.web_sessions.open("ann", old, 3600) is None  # the old token opens nothing
    assert board.web_sessions.person(board.web_sessions.open("ann", new, 3600)).name == "ann"


def test_an_expired_session_is_refused_and_pruned_at_the_next_login(board: Board):
    token = board.agents.new_token("ann", role="human")
    session = board.web_sessions.open("ann", token, 3600)
    with board.store.write() as db:
        db.execute("UPDATE web_sessions SET expires_at = expires_at - 3601")
    assert board.web_sessions.person(session) is None
    board.web_sessions.open("ann", token, 3600)
    assert board.store.db.execute("SELECT count(*) FROM web_sessions").fetchone()[0] == 1


def test_ids_that_were_never_issued_find_nobody(board: Board):
    board.agents.new_token("ann", role="human")
    for cookie in (None, "", "x" * 43, "x" * 44, "é" * 43, "a.b.c"):
        assert board.web_sessions.person(cookie) is None
        board.web_sessions.close(cookie)  # logging out a stale browser is harmless
    assert board.web_sessions.open("ann", "hb_not-the-token", 3600) is None
