"""Who is looking at the web board, and whether a request may act.

People are agents with an operator role (`hiveboard agent add NAME --role human`). The login page
takes their token once and answers with a signed session cookie (HttpOnly, SameSite=Strict), so the
token never sits in the page or in scripts. The cookie is signed with a secret kept in the data
directory (0600), shared by every server process on that directory, and names the token it came from
by a fingerprint: `hiveboard agent token NAME` (a new token) ends every session of the old one.

Actions (POST) need, besides the cookie: a CSRF token derived from the session (a hidden form field or
the X-CSRF-Token header), and an Origin, when the browser sends one, of the board itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from hiveboard.board import Agent, Board
from hiveboard.board.agents import OPERATOR_ROLES

COOKIE = "hiveboard_session"
SESSION_SECONDS = 12 * 3600


def load_secret(home: Path) -> bytes:
    """The signing secret of this data directory, made on first use (0600, created exclusively so two
    processes starting together agree on one)."""
    path = Path(home) / "web-secret"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        secret = path.read_bytes()
        if len(secret) >= 32:
            return secret
        time.sleep(0.05)  # another process is writing it right now
        return path.read_bytes()
    secret = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    return secret


class Sessions:
    def __init__(self, board: Board, secret: bytes, seconds: int = SESSION_SECONDS):
        self.board, self.secret, self.seconds = board, secret, seconds

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()[:40]

    def login(self, token: str) -> tuple[Agent | None, str]:
        """(the person, the cookie value) for a token, or (None, why not)."""
        agent = self.board.agents.by_token(token.strip()) if token.strip() else None
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
        issued = str(int(time.time()))
        body = f"{agent.name}.{issued}.{self.board.agents.fingerprint(agent.name)}"
        value = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=") + "." + self._sign(body)
        return agent, value

    def person(self, cookie: str | None) -> Agent | None:
        """The person a session cookie stands for, if it is genuine, fresh and its token still current."""
        if not cookie or "." not in cookie or len(cookie) > 400:
            return None
        encoded, _, signature = cookie.rpartition(".")
        try:
            body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            name, issued, fingerprint = body.split(".")
        except (ValueError, UnicodeDecodeError):
            return None
        if not hmac.compare_digest(signature, self._sign(body)) or not issued.isdigit():
            return None
        if time.time() - int(issued) > self.seconds:
            return None
        agent = self.board.agents.get(name, missing_ok=True)
        if agent is None or agent.role not in OPERATOR_ROLES:
            return None
        if not hmac.compare_digest(fingerprint, self.board.agents.fingerprint(name)):
            return None  # the token it came from was replaced
        return agent

    def csrf(self, cookie: str) -> str:
        return self._sign("csrf:" + cookie)

    def csrf_ok(self, cookie: str | None, sent: str | None) -> bool:
        return bool(cookie and sent) and hmac.compare_digest(self.csrf(cookie), sent)


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
