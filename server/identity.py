"""Who is acting: decided by the server from the connection, never taken from a tool argument.

- stdio and in-process: one connection per server process, so one agent per process — set by
  HIVEBOARD_AGENT (the operator's mcp.json), else by the client's session (server/sessions.py: a Claude Code
  session is `claude-<its id>`, registered on its first call), else by the agent's first `whoami(name=...)`;
  fixed after.
- streamable HTTP: `Authorization: Bearer <agent token>` names the agent on every request; on the
  session-based protocol (2025-11-25) a `whoami(name=...)` also binds the server-side MCP session
  object (not a header), and the binding ends with the session.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import weakref
from collections.abc import Hashable
from typing import Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from hiveboard.board.agents import Agents, check_name
from hiveboard.board.errors import BoardError
from hiveboard.board.models import Agent

from .compat import connection_of

Transport = Literal["stdio", "http", "memory"]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value, else None."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _bearer(ctx: Context | None) -> str | None:
    headers = ctx.headers if ctx is not None else None
    return bearer_token(headers.get("authorization")) if headers else None


def _session(ctx: Context | None):
    """The server-side session of a handshake-era (2025-11-25 and earlier) HTTP connection, else None.

    Only those connections have a session the transport created and checks; on 2026-07-28 every
    request stands alone, so identity there comes from the bearer token alone.
    """
    if ctx is None or ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    # ctx.session is rebuilt for every request; the Connection behind it lives as long as the MCP
    # session (the SDK exposes it only as this attribute).
    return connection_of(ctx.session)


def client_of(session) -> tuple[str | None, dict]:
    """(the client's clientInfo name, its experimental capabilities) on a request's session (`ctx.session`),
    as far as the client said them in its initialize request."""
    params, capabilities = session.client_params, session.client_capabilities
    name = params.client_info.name if params is not None else None
    return name, dict((capabilities.experimental if capabilities is not None else None) or {})


CHECKED = "hiveboard.agent"  # the ASGI scope's state key under which cli.BearerAuth leaves (token, agent)
TOKEN_SECONDS = 1.0  # an agent token found this recently is not looked up again: a replaced one works this long at most


class KnownTokens:
    """Agent tokens the HTTP entry found in the last TOKEN_SECONDS, kept by their SHA-256 with their agent: an agent
    calling again within it needs no lookup (a round trip on a database server, a hand-over to a worker thread on
    SQLite). A token replaced meanwhile (`hiveboard agent add`, another node) is refused once its time is up; an
    agent's new role applies then too. Unknown tokens are never kept: each is looked up."""

    MOST = 10_000  # tokens kept at once (past it, those whose time is up are dropped, then all)

    def __init__(self, seconds: float | None = None):
        self.seconds = TOKEN_SECONDS if seconds is None else seconds
        self._found: dict[bytes, tuple[float, Agent]] = {}

    def get(self, token: str) -> Agent | None:
        found = self._found.get(hashlib.sha256(token.encode()).digest())
        return found[1] if found is not None and found[0] > time.monotonic() else None

    def put(self, token: str, agent: Agent) -> None:
        now = time.monotonic()
        if len(self._found) >= self.MOST:
            self._found = {k: v for k, v in self._found.items() if v[0] > now}
            if len(self._found) >= self.MOST:
                self._found = {}
        self._found[hashlib.sha256(token.encode()).digest()] = (now + self.seconds, agent)


def _checked(ctx: Context | None, token: str) -> Agent | None:
    """The agent the HTTP entry found for this request's token (cli.BearerAuth looked it up already: one
    lookup per request, not one per layer), if it did."""
    try:
        state = ctx.request_context.request.scope.get("state") or {}
    except (AttributeError, ValueError):
        return None
    found = state.get(CHECKED)
    return found[1] if found is not None and found[0] == token else None


def caller_key(ctx: Context | None) -> Hashable:
    """Who a call is for, as the lanes tell callers apart without a lookup: its bearer token, else its MCP
    session, else None (stdio and in-process: the process's one agent)."""
    try:
        token = _bearer(ctx)
        if token:
            return ("token", token)
        session = connection_of(ctx.session) if ctx is not None else None
    except (LookupError, ValueError, AttributeError):  # no request behind this context
        return None
    return ("session", id(session)) if session is not None else None


class Identity:
    def __init__(
        self,
        agents: Agents,
        transport: Transport,
        agent: str | None = None,
        role: str | None = None,
        server_token: str | None = None,
        session: tuple[str, str] | None = None,
    ):
        """`session`: (agent, client session id) of a stdio server a client session started: the agent registers
        on the first call that needs it (the board's cap on self-registration applies)."""
        self.agents = agents
        self.transport = transport
        self.server_token = server_token
        self.role = role
        self._process_agent = agents.ensure(agent, role).name if agent else None
        self._session = session if agent is None else None
        self._sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ends with the session
        self._lock = threading.RLock()  # bind() holds it while current() may register a session's agent

    def current(self, ctx: Context | None) -> str | None:
        """The acting agent's name, or None if this connection has not said who it is."""
        token = _bearer(ctx)
        if token and not (self.server_token and hmac.compare_digest(token.encode(), self.server_token.encode())):
            agent = _checked(ctx, token) or self.agents.by_token(token)
            if agent is None:
                raise ToolError(
                    "the bearer token sent with this request belongs to no agent; ask the operator for the "
                    "agent's current token (`hiveboard agent token NAME`)"
                )
            return agent.name
        if self.transport == "http":
            session = _session(ctx)
            return self._sessions.get(session) if session is not None else None
        if self._process_agent is None and self._session is not None:
            self._register_session()
        return self._process_agent

    def _register_session(self) -> None:
        with self._lock:
            if self._process_agent is None and self._session is not None:
                name, session = self._session
                try:
                    self._process_agent = self.agents.for_session(name, session, self.role).name
                except BoardError as exc:
                    raise ToolError(str(exc)) from None
                self._session = None

    def require(self, ctx: Context | None) -> str:
        name = self.current(ctx)
        if name is None:
            raise ToolError(
                "this connection has no agent identity yet: call whoami(name='your-agent-name') once "
                "(or the operator sets HIVEBOARD_AGENT in the client's MCP config)"
            )
        self.agents.seen(name)
        return name

    def bind(
        self, ctx: Context | None, name: str, role: str | None, token: str | None
    ) -> tuple[Agent, str | None, str]:
        """Register (or re-attach to) an agent for this connection. Returns agent, new token, a note."""
        with self._lock:
            current = self.current(ctx)
            if current is not None and current != name.strip().lower():
                raise ToolError(
                    f"this connection already acts as {current!r} and cannot switch to {name!r}; "
                    "open a separate connection for another agent"
                )
            if current is not None:
                return self.agents.get(current), None, "already registered on this connection"
            if self.server_token and self.agents.get(name, missing_ok=True) is None:
                # an operator who set a server token hands out agents' tokens: nobody mints agents with it
                raise ToolError(
                    f"this server does not let agents register themselves (it has a server token); nothing was "
                    f"written; ask the operator for a token (`hiveboard agent add {check_name(name)}`) and connect with it"
                )
            agent, new_token = self.agents.register(name, role, token)
            if self.transport == "http":
                session = _session(ctx)
                if session is None:
                    return (
                        agent,
                        new_token,
                        (
                            "this HTTP connection has no MCP session to bind to: send "
                            "'Authorization: Bearer <token>' with every request to act as "
                            f"{agent.name}"
                        ),
                    )
                self._sessions[session] = agent.name
                return agent, new_token, f"this MCP session now acts as {agent.name}"
            self._process_agent = agent.name
            return agent, new_token, f"this connection now acts as {agent.name}"
