"""People's sessions on the web board: one row per login, in the board's database.

Every server process on a data directory, and every node on a PostgreSQL board, reads the same rows, so a
logout, a replaced token or an expiry ends a session everywhere at once, and a browser sent to another node
behind a load balancer stays logged in. The browser holds only a random 256-bit id; the table keeps its
SHA-256, so a copy of the database opens no session. A session is bound to the token it was opened with:
the lookup joins the agent's row on that token's hash, so `hiveboard agent token NAME` (a new token) ends
every session of the old one without touching this table.
"""

from __future__ import annotations

import hashlib
import secrets

from .agents import _hash as token_hash
from .db import Store, iso, now
from .models import Agent

ID_CHARS = 43  # secrets.token_urlsafe(32): 256 random bits


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _well_formed(session_id: str | None) -> bool:
    return bool(session_id) and len(session_id) == ID_CHARS and session_id.isascii()


class WebSessions:
    def __init__(self, store: Store):
        self.store = store

    def open(self, name: str, token: str, seconds: float) -> str | None:
        """A new session of `name`, who logged in with `token`, for `seconds`: the id the browser keeps. None
        when that token is not (or no longer) the agent's. Expired rows are pruned on the way."""
        session_id = secrets.token_urlsafe(32)
        ts = now()
        with self.store.write() as db:
            db.execute("DELETE FROM web_sessions WHERE expires_at < ?", [ts])
            made = db.execute(
                "INSERT INTO web_sessions (id_hash, agent, token_hash, created_at, expires_at) "
                "SELECT ?, name, token_hash, ?, ? FROM agents WHERE name = ? AND token_hash = ?",
                [_digest(session_id), ts, ts + seconds, name, token_hash(token)],
            )
            if made.rowcount != 1:
                return None
        return session_id

    def person(self, session_id: str | None) -> Agent | None:
        """The agent a session stands for while it is open: not logged out, not expired, its token current."""
        if not _well_formed(session_id):
            return None
        row = self.store.db.execute(
            "SELECT a.name, a.role, a.created_at FROM web_sessions s "
            "JOIN agents a ON a.name = s.agent AND a.token_hash = s.token_hash "
            "WHERE s.id_hash = ? AND s.revoked_at IS NULL AND s.expires_at > ?",
            [_digest(session_id), now()],
        ).fetchone()
        return None if row is None else Agent(name=row[0], role=row[1], created_at=iso(row[2]))

    def close(self, session_id: str | None) -> None:
        """Log a session out (kept, revoked, until it would have expired)."""
        if not _well_formed(session_id):
            return
        with self.store.write() as db:
            db.execute(
                "UPDATE web_sessions SET revoked_at = ? WHERE id_hash = ? AND revoked_at IS NULL",
                [now(), _digest(session_id)],
            )
