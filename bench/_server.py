"""Benchmark server: the real `hiveboard serve --http` app plus one bare no-op tool, `noop`.

Run as its own process so the server does not share a GIL with the load generator:

    python bench/_server.py --home DIR --port PORT

The app is `hiveboard.server.cli.http_app` itself (same Identity, build_server, Host/Origin checks,
bearer middleware) served by uvicorn the way `cmd_serve` does. The only difference: `build_server`
is wrapped so the MCPServer it returns also carries `noop`, the baseline the board tools are
compared against. Wrapping (rather than copying http_app) keeps the bench on the real app as it
changes.

With `--background` it also starts what `hiveboard serve --http` starts beside the app (cli.Background):
the memory (Chroma, the embedding model and its indexing thread) and the review worker, in this process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn
from mcp_types import CallToolResult

from hiveboard.server import app, cli
from hiveboard.server.config import Settings


def noop() -> CallToolResult:
    """Do nothing and answer nothing (the benchmark's floor)."""
    return CallToolResult(content=[])


def bench_app(settings: Settings, background: bool = False):
    """cli.http_app with `noop` registered on the same MCPServer as the board tools (http_app takes
    build_server from server/app.py when it is called, so that is where it is wrapped); with
    `background`, the memory and the review worker started as `hiveboard serve --http` starts them."""
    real_build_server = app.build_server

    def build_server_with_noop(*args, **kwargs):
        mcp = real_build_server(*args, **kwargs)
        mcp.add_tool(noop, name="noop", structured_output=False)
        return mcp

    app.build_server = build_server_with_noop
    try:
        board = cli.open_board(settings)
        if not background:
            return cli.http_app(settings, board)
        from hiveboard.memory.lazy import LazyMemory

        memory = LazyMemory(lambda: cli.open_memory_for(settings, board))
        started = cli.Background(settings, board, memory, cli.review_engine(settings, board, memory))
        served = cli.http_app(settings, board, started.memory, started.review)
        started.start()
        return served
    finally:
        app.build_server = real_build_server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True, help="data directory (the bench prepares its database)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--db", help="the board's database: a SQLite file or a postgresql:// URL (default HOME/hiveboard.db)"
    )
    p.add_argument(
        "--background",
        action="store_true",
        help="also run the memory indexer and the review worker, as hiveboard serve --http does",
    )
    args = p.parse_args(argv)
    settings = Settings(
        home=args.home,
        db=args.db or str(Path(args.home) / "hiveboard.db"),
        host=args.host,
        port=args.port,
        log_level="WARNING",
    )
    cli.configure_logging(settings)  # as cmd_serve does
    served = bench_app(settings, args.background)
    cli.freeze_heap(collect=False)  # as `hiveboard serve` does before it serves (no long full collections)
    uvicorn.run(served, host=settings.host, port=settings.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
