"""Registered agents: names, roles and the hashes of their bearer tokens."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import scopes
from .db import Store, iso, now
from .errors import Conflict, Forbidden, InvalidInput, NotFound
from .models import Agent

if TYPE_CHECKING:
    from ._sqlite_utils import Database

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
# "system" and "review" are the names the board itself posts as; the rest are audiences or roles
RESERVED = {"system", "review", "everyone", "all", "critic", "human"}


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> str:
    """Normalise an agent name or say what a valid one looks like."""
    norm = name.strip().lower()
    if not NAME_RE.match(norm):
        raise InvalidInput(
            f"agent name {name!r} is not valid: use 1-64 characters a-z, 0-9, '_', '.', '-', "
            "starting with a letter or digit, e.g. 'alice' or 'claude-code-1'"
        )
    if norm in RESERVED:
        raise InvalidInput(f"agent name {norm!r} is reserved; choose another, e.g. '{norm}-1'")
    return norm


def _agent(row) -> Agent:
    return Agent(name=row["name"], role=row["role"], created_at=iso(row["created_at"]))


# Roles only the operator grants (`hiveboard agent add NAME --role lead`, or the stdio config). Operator roles
# may move other agents' cards out of blocked and needs_human; critics may submit critiques.
OPERATOR_ROLES: tuple[str, ...] = ("human", "lead")
PRIVILEGED_ROLES: tuple[str, ...] = (*OPERATOR_ROLES, "critic")
SEEN_EVERY = 10.0  # seconds: presence is written at most this often per agent


def is_operator(db, agent: str) -> bool:
    """Whether the agent has a role only the operator grants (a person, or a lead), read in `db`."""
    row = db.execute("SELECT role FROM agents WHERE name = ?", [agent]).fetchone()
    return row is not None and row[0] in OPERATOR_ROLES


class Agents:
    def __init__(self, store: Store, admit: Callable[[Database, str], None] | None = None):
        """`admit(db, name)`: run inside the write that registers a new agent by itself, to refuse it (the
        board's cap on self-registration, board/quotas.py)."""
        self.store = store
        self.admit = admit
        self._seen: dict[str, float] = {}  # when this process last wrote each agent's presence

    def register(self, name: str, role: str | None = None, token: str | None = None) -> tuple[Agent, str | None]:
        """Create an agent and return it with a new bearer token (shown once).

        Registering a name that exists needs that agent's token; the answer then carries no new token.
        """
        name = check_name(name)
        if role is not None and not (0 < len(role) <= 40):
            raise InvalidInput("role must be 1-40 characters, e.g. 'coder', 'reviewer', 'tester'")
        if role in PRIVILEGED_ROLES:
            raise Forbidden(
                f"the role {role!r} is granted by the operator, not taken: ask them to run "
                f"`hiveboard agent add {name} --role {role}`; register with another role or none"
            )
        with self.store.write() as db:
            row = next(db.query("SELECT * FROM agents WHERE name = ?", [name]), None)
            if row is not None:
                if token is None or _hash(token) != row["token_hash"]:
                    raise Conflict(
                        f"agent {name!r} is already registered by someone else; pass its token to "
                        "act as it, or register another name"
                    )
                if role is not None and role != row["role"]:
                    db.execute("UPDATE agents SET role = ? WHERE name = ?", [role, name])
                    row["role"] = role
                return _agent(row), None
            if self.admit is not None:
                self.admit(db, name)
            new_token = "hb_" + secrets.token_urlsafe(24)
            ts = now()
            db.execute(
                "INSERT INTO agents (name, role, token_hash, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?)",
                [name, role, _hash(new_token), ts, ts],
            )
            return Agent(name=name, role=role, created_at=iso(ts)), new_token

    def for_session(self, name: str, session: str, role: str | None = None) -> Agent:
        """The agent of a client session (server/sessions.py): registered the first time, as an agent registering
        itself is (the board's cap on self-registration applies), and the same agent whenever that session comes
        back (a resumed session, its hooks). A name that another session or a registered agent holds is refused."""
        name = check_name(name)
        with self.store.write() as db:
            row = next(db.query("SELECT * FROM agents WHERE name = ?", [name]), None)
            if row is not None:
                if row["client_session"] != session:
                    raise Conflict(
                        f"agent {name!r} belongs to another session or was registered by hand; nothing was written; "
                        "set HIVEBOARD_AGENT in this client's MCP config to name this session's agent"
                    )
                return _agent(row)
            if self.admit is not None:
                self.admit(db, name)
            ts = now()
            db.execute(
                "INSERT INTO agents (name, role, token_hash, created_at, last_seen_at, client_session) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [name, role, _hash("hb_" + secrets.token_urlsafe(24)), ts, ts, session],
            )
            return Agent(name=name, role=role, created_at=iso(ts))

    def ensure(self, name: str, role: str | None = None) -> Agent:
        """Make sure an operator-configured agent exists (no token check: the operator chose it)."""
        name = check_name(name)
        existing = self.get(name, missing_ok=True)
        if existing is not None:
            self.seen(name)  # a server started for this agent: its client is connected
            return existing
        ts = now()
        with self.store.write() as db:
            db.execute(
                "INSERT INTO agents (name, role, token_hash, created_at, last_seen_at) VALUES "
                "(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [name, role, _hash("hb_" + secrets.token_urlsafe(24)), ts, ts],
            )
        return self.get(name)

    def seen(self, name: str, waiting_until: float | None = None) -> None:
        """Note that an agent is present: it made a call, or (waiting_until) it waits for messages until then.
        Written at most every SEEN_EVERY seconds per agent, unless a wait starts."""
        ts = now()
        if waiting_until is None:
            if ts - self._seen.get(name, 0.0) < SEEN_EVERY:
                return
            # any call notes it: this one need not wait for a writer
            with self.store.try_write(scopes.agent(name)) as db:
                if db is not None:
                    db.execute("UPDATE agents SET last_seen_at = ? WHERE name = ?", [ts, name])
                    self._seen[name] = ts
            return
        self._seen[name] = ts
        with self.store.write(scopes.agent(name)) as db:
            db.execute(
                "UPDATE agents SET last_seen_at = ?, waiting_until = ? WHERE name = ?", [ts, waiting_until, name]
            )

    def present(self, role: str, within: float, exclude: tuple[str, ...] = ()) -> list[str]:
        """Agents with this role that made a call within `within` seconds or are waiting for messages now."""
        ts = now()
        found = self.store.db.execute(
            "SELECT name FROM agents WHERE role = ? AND (last_seen_at >= ? OR waiting_until >= ?) ORDER BY name",
            [role, ts - within, ts],
        )
        return [name for (name,) in found if name not in exclude]

    def new_token(self, name: str, role: str | None = None) -> str:
        """Issue a fresh token for an agent, creating it if needed (the old token stops working).

        Operator use (`hiveboard agent add`): whoever runs it owns the data directory.
        """
        name = check_name(name)
        token = "hb_" + secrets.token_urlsafe(24)
        with self.store.write() as db:
            cur = db.execute(
                "UPDATE agents SET token_hash = ?, role = coalesce(?, role) WHERE name = ?", [_hash(token), role, name]
            )
            if cur.rowcount == 0:
                db.execute(
                    "INSERT INTO agents (name, role, token_hash, created_at) VALUES (?, ?, ?, ?)",
                    [name, role, _hash(token), now()],
                )
        return token

    def by_token(self, token: str) -> Agent | None:
        row = self.store.db.execute(
            "SELECT name, role, created_at FROM agents WHERE token_hash = ?", [_hash(token)]
        ).fetchone()
        return None if row is None else Agent(name=row[0], role=row[1], created_at=iso(row[2]))

    def get(self, name: str, missing_ok: bool = False) -> Agent | None:
        row = self.store.db.execute(
            "SELECT name, role, created_at FROM agents WHERE name = ?", [name.strip().lower()]
        ).fetchone()
        if row is None:
            if missing_ok:
                return None
            raise NotFound(f"unknown agent {name!r}; agents register with the whoami tool")
        return Agent(name=row[0], role=row[1], created_at=iso(row[2]))

    def names(self, limit: int = 50) -> list[str]:
        return [r[0] for r in self.store.db.execute("SELECT name FROM agents ORDER BY name LIMIT ?", [limit])]

    def registered(self, name: str | None, problem: str) -> str:
        """A registered agent's name, or InvalidInput: the problem and the agents that exist."""
        agent = self.get(name, missing_ok=True) if name else None
        if agent is None:
            raise InvalidInput(f"{problem}; known agents: {', '.join(self.names()) or 'none yet'}")
        return agent.name
