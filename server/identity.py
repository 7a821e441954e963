"""Who is acting: decided by the server from the connection, never taken from a tool argument.

- stdio and in-process: one connection per server process, so one agent per process — set by
  HIVEBOARD_AGENT (the operator's mcp.json) or by the agent's first `whoami(name=...)`; fixed after.
- streamable HTTP: `Authorization: Bearer <agent token>` names the agent on every request; on the
  session-based protocol a `whoami(name=...)` also binds the MCP session (its id is issued and
  checked by the transport).
"""

from __future__ import annotations

import threading
from typing import Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from hiveboard.board import Agent, Agents

Transport = Literal["stdio", "http", "memory"]


def _bearer(ctx: Context | None) -> str | None:
    headers = ctx.headers if ctx is not None else None
    if not headers:
        return None
    value = headers.get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _session_id(ctx: Context | None) -> str | None:
    headers = ctx.headers if ctx is not None else None
    return headers.get("mcp-session-id") if headers else None


class Identity:
    def __init__(self, agents: Agents, transport: Transport, agent: str | None = None, role: str | None = None,
                 server_token: str | None = None):
        self.agents = agents
        self.transport = transport
        self.server_token = server_token
        self._process_agent = agents.ensure(agent, role).name if agent else None
        self._sessions: dict[str, str] = {}
        self._lock = threading.Lock()

    def current(self, ctx: Context | None) -> str | None:
        """The acting agent's name, or None if this connection has not said who it is."""
        token = _bearer(ctx)
        if token and token != self.server_token:
            agent = self.agents.by_token(token)
            if agent is None:
                raise ToolError("the bearer token sent with this request belongs to no agent; ask the operator for "
                                "a token (`hiveboard agent add NAME`) or register with whoami(name=...)")
            return agent.name
        if self.transport == "http":
            sid = _session_id(ctx)
            return self._sessions.get(sid) if sid else None
        return self._process_agent

    def require(self, ctx: Context | None) -> str:
        name = self.current(ctx)
        if name is None:
            raise ToolError("this connection has no agent identity yet: call whoami(name='your-agent-name') once "
                            "(or the operator sets HIVEBOARD_AGENT in the client's MCP config)")
        return name

    def bind(self, ctx: Context | None, name: str, role: str | None, token: str | None) -> tuple[Agent, str | None, str]:
        """Register (or re-attach to) an agent for this connection. Returns agent, new token, a note."""
        with self._lock:
            current = self.current(ctx)
            if current is not None and current != name.strip().lower():
                raise ToolError(f"this connection already acts as {current!r} and cannot switch to {name!r}; "
                                "open a separate connection for another agent")
            if current is not None:
                return self.agents.get(current), None, "already registered on this connection"
            agent, new_token = self.agents.register(name, role, token)
            if self.transport == "http":
                sid = _session_id(ctx)
                if sid is None:
                    return agent, new_token, ("this HTTP connection has no MCP session to bind to: send "
                                              "'Authorization: Bearer <token>' with every request to act as "
                                              f"{agent.name}")
                self._sessions[sid] = agent.name
                return agent, new_token, f"this MCP session now acts as {agent.name}"
            self._process_agent = agent.name
            return agent, new_token, f"this connection now acts as {agent.name}"
