"""Benchmark server: the real `hiveboard serve --http` app plus one bare no-op tool, `noop`.

Run as its own process so the server does not share a GIL with the load generator:

    python bench/_server.py --home DIR --port PORT

The app is built the way `hiveboard.server.cli.http_app` builds it (same Identity, build_server,
Host/Origin checks); the only difference is the extra `noop` tool on the same MCPServer, which is
the baseline that the board tools are compared against.
"""

from __future__ import annotations

import argparse
import sys

import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from hiveboard.server.app import build_server
from hiveboard.server.cli import BearerAuth, open_board
from hiveboard.server.config import Settings
from hiveboard.server.identity import Identity


def noop() -> str:
    """Do nothing (benchmark baseline)."""
    return "ok"


def bench_app(settings: Settings):
    """Mirror of cli.http_app, with `noop` registered on the same server."""
    board = open_board(settings)
    identity = Identity(board.agents, "http", server_token=settings.http_token)
    mcp = build_server(board, identity)
    mcp.add_tool(noop, name="noop")
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", f"{settings.host}:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *settings.allowed_origins]
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    app = mcp.streamable_http_app(host=settings.host, transport_security=security)
    if settings.http_token:
        app = BearerAuth(app, settings.http_token, board)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args(argv)
    settings = Settings(home=args.home, host=args.host, port=args.port, log_level="WARNING")
    uvicorn.run(bench_app(settings), host=settings.host, port=settings.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
