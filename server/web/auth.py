"""Who is looking at the web board, and whether a request may act.

People are agents with an operator role (`hiveboard agent add NAME --role human`). The login page
takes their token once and answers with a session cookie (HttpOnly, SameSite=Strict) that holds only a
random id, so the token never sits in the page or in scripts. The session itself is a row in the board's
database (board/web_sessions.py): logging out, a new token (`hiveboard agent token NAME`) or its 12 hours
running out ends it on every server process and every node, and any node can read it.

Actions (POST) need, besides the cookie: a CSRF token derived from the session id (a hidden form field or
the X-CSRF-Token header), and an Origin, when the browser sends one, of the board itself.
"""

from __future__ import annotations

import hashlib
import hmac

from hiveboard.board.agents import OPERATOR_ROLES
from hiveboard.board.models import Agent
from hiveboard.board.tasks import Board

COOKIE = "hiveboard_session"
SESSION_SECONDS = 12 * 3600


class Sessions:
    def __init__(self, board: Board, seconds: int = SESSION_SECONDS):
        self.board, self.seconds = board, seconds

    def login(self, token: str) -> tuple[Agent | None, str]:
        """(the person, the cookie value) for a token, or (None, why not)."""
        token = token.strip()
        agent = self.board.agents.by_token(token) if token else None
        if agent is None:
            return (
                None,
                "that token belongs to no agent: paste the token `hiveboard agent add NAME --role human` printed",
            )
        if agent.role not in OPERATOR_ROLES:
            return None, (
                f"{agent.name} is an agent with the role {agent.role or 'none'}; the web board is for people: "
                f"ask the operator for `hiveboard agent add YOUR-NAME --role human`"
            )
        session_id = self.board.web_sessions.open(agent.name, token, self.seconds)
        if session_id is None:  # the token was replaced between the two reads
            return None, "that token was just replaced: paste the new one"
        return agent, session_id

    def person(self, cookie: str | None) -> Agent | None:
        """The person a session cookie stands for, while their session is open and they are still a person."""
        agent = self.board.web_sessions.person(cookie)
        return agent if agent is not None and agent.role in OPERATOR_ROLES else None

    def logout(self, cookie: str | None) -> None:
        self.board.web_sessions.close(cookie)

    def csrf(self, cookie: str) -> str:
        # keyed by the secret session id itself: any node can check it, and the page's token reveals no id
        return hmac.new(cookie.encode(), b"csrf", hashlib.sha256).hexdigest()[:40]

    def csrf_ok(self, cookie: str | None, sent: str | None) -> bool:
        return bool(cookie and sent) and sent.isascii() and hmac.compare_digest(self.csrf(cookie), sent)


def host_allowed(host: str | None, hosts: list[str]) -> bool:
    """The Host header against patterns like `127.0.0.1:*` (the same list /mcp uses: DNS rebinding)."""
    if not host:
        return False
    for pattern in hosts:
        if pattern.endswith(":*"):
            if host == pattern[:-2] or (host.startswith(pattern[:-1]) and host[len(pattern) - 1 :].isdigit()):
                return True
        elif host == pattern:
            return True
    return False


def origin_allowed(origin: str, host: str, extra: list[str]) -> bool:
    """An action's Origin: the board's own (same scheme-less host and port), or one the operator listed
    in `allowed_origins`. Other local ports are other sites: a page served by another local program must
    not act here."""
    return origin in (f"http://{host}", f"https://{host}") or origin in extra
