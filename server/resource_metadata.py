"""What the MCP authorization spec asks of an HTTP server that refuses a request: a `WWW-Authenticate` challenge
saying why (RFC 6750 §3) and where the server describes itself (RFC 9728 §5.1), and that description at
/.well-known/oauth-protected-resource. Clients read the header, not the body, so without it they can only say
that the server returned an error.

hiveboard's tokens come from its operator (`hiveboard agent add NAME`), not from an OAuth authorization server:
the description names none, rather than sending a client into an authorization flow that cannot succeed."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

WELL_KNOWN = "/.well-known/oauth-protected-resource"
TOKENS = (
    "bearer tokens come from the board's operator: `hiveboard agent add NAME` (or `agent token NAME`) prints an "
    "agent's token; this server has no OAuth authorization server"
)


def origin(scope) -> str:
    """scheme://host of the request, as its client addressed the server (behind a proxy, the proxy's Host)."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin-1")
    if not re.fullmatch(r"[A-Za-z0-9.\-:\[\]]{1,255}", host):  # nothing of a forged Host reaches a header
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


def challenge(scope, error: str | None, description: str) -> bytes:
    """The WWW-Authenticate value of a 401; `error` None when the request carried no credentials, which
    RFC 6750 §3.1 answers with no error code."""
    parts = ['Bearer realm="hiveboard"', f'resource_metadata="{origin(scope)}{WELL_KNOWN}/mcp"']
    if error:
        # a quoted-string of printable ASCII: no quote nor backslash inside, nothing a header cannot carry
        said = "".join(c for c in description if " " <= c <= "~" and c not in '"\\')
        parts += [f'error="{error}"', f'error_description="{said}"']
    return ", ".join(parts).encode("latin-1")


async def metadata(request: Request) -> JSONResponse:
    """RFC 9728's protected resource metadata of the MCP endpoint, honest about where tokens come from."""
    return JSONResponse(
        {
            "resource": f"{origin(request.scope)}/mcp",
            "resource_name": "hiveboard",
            "bearer_methods_supported": ["header"],
            "token_source": TOKENS,
        }
    )


def metadata_routes() -> list[Route]:
    """The description at the well-known address, and at its form for the /mcp resource (RFC 9728 §3.1)."""
    return [Route(WELL_KNOWN, metadata, methods=["GET"]), Route(f"{WELL_KNOWN}/mcp", metadata, methods=["GET"])]
