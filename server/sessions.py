"""Which agent a client session is, from what the client gives: one derivation for the stdio server and the hooks.

Claude Code starts one stdio server per session and runs the hooks of that session, and since 2.1.154 it gives
both the session's id: the server as `CLAUDE_CODE_SESSION_ID` in its environment, the hooks as `session_id` in the
JSON on their stdin (the same value; `--resume` keeps it). So each session is an agent of its own, `claude-` and
the first characters of its id, with no name written into any config file, and several sessions in one
repository race for cards like any agents. `HIVEBOARD_AGENT`, when the user sets one, wins: the session then acts
as that agent.

An agent team's teammate is a session too (its own id): Claude Code names the teammate only in the inputs of the
TeammateIdle and TaskCompleted hooks, never to the server, so a name taken from there would make the hooks and the
server two agents; the teammate is its session's agent, like any session.

Standard library only: a hook imports this on every run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

SESSION_ENV = "CLAUDE_CODE_SESSION_ID"  # what Claude Code sets for its stdio servers and hooks
PREFIX = "claude-"
SHOWN = 8  # hex characters of the session id in the name: two sessions share a name once in ~4 billion pairs
SESSION_MAX = 200  # characters of a session id kept (Claude Code's are UUIDs)


def session_agent(session_id: str) -> str:
    """The agent name of a client session: `claude-` and the first SHOWN hex digits of its id (of its SHA-256 when
    the id has too few), lowercase, a valid agent name."""
    digits = re.sub(r"[^0-9a-f]", "", session_id.strip().lower())
    if len(digits) < SHOWN:
        digits = hashlib.sha256(session_id.encode()).hexdigest()
    return PREFIX + digits[:SHOWN]


def clean_session(session_id: object) -> str | None:
    """A session id as the board keeps it (printable, bounded), or None when there is none."""
    if not isinstance(session_id, str):
        return None
    text = "".join(c for c in session_id.strip() if c.isprintable())[:SESSION_MAX]
    return text or None


def derive(env: Mapping[str, str], session_id: object = None) -> tuple[str | None, str | None]:
    """(agent, client session) for a server or a hook: HIVEBOARD_AGENT when set (with no session: the user named
    the agent), else the session's agent from `session_id` (a hook's input) or CLAUDE_CODE_SESSION_ID; (None,
    None) when the client gives neither."""
    named = (env.get("HIVEBOARD_AGENT") or "").strip().lower()
    if named:
        return named, None
    session = clean_session(session_id) or clean_session(env.get(SESSION_ENV))
    return (session_agent(session), session) if session else (None, None)
