"""The `hiveboard` command: serve (stdio or streamable HTTP), board, agent, memory, tools.

Logs go to stderr only: on stdio, stdout is the protocol.

Each command imports what it uses inside its function: `board` and `agent` need neither the MCP SDK
nor the memory's models, and `serve` loads the memory after it has answered `initialize` (see
memory/lazy.py). bench/bench_startup.py measures this; tests/server/test_startup.py keeps it so.
"""

from __future__ import annotations

import argparse
import functools
import gc
import hmac
import json
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from .stores import open_board, open_memory_for, refuse_unusable_database, shared_memory_problem

if TYPE_CHECKING:
    from hiveboard.board.tasks import Board
    from hiveboard.critics.engine import ReviewEngine, ReviewWorker
    from hiveboard.memory.digests import Digester
    from hiveboard.memory.lazy import LazyMemory
    from hiveboard.memory.service import Memory

    from .backup import BackupWorker
    from .config import Settings
    from .worktrees import WorktreeManager, WorktreeSweeper

log = logging.getLogger("hiveboard")


def _token_arg(args: argparse.Namespace) -> str | None:
    """The server token from --token-file (or --token, which every local user can read in `ps`)."""
    path = getattr(args, "token_file", None)
    if path:
        from .config import SetupError

        try:
            token = open(path, encoding="utf-8").read().strip()
        except OSError as exc:
            raise SetupError(
                f"cannot read --token-file {path} ({exc.strerror}); name a file this user can read"
            ) from None
        if not token:
            raise SetupError(f"--token-file {path} is empty; write the token into it")
        return token
    if getattr(args, "token", None):
        print(
            "hiveboard: warning: --token on the command line is visible to every local user (ps); use "
            "HIVEBOARD_HTTP_TOKEN or --token-file instead",
            file=sys.stderr,
        )
    return getattr(args, "token", None)


def _settings(args: argparse.Namespace) -> Settings:
    """The settings of this command: its flags over the environment over config.toml; SetupError if wrong."""
    from .config import load_settings

    overrides = {
        k: v
        for k, v in dict(
            home=args.home,
            db=args.db,
            agent=getattr(args, "agent", None),
            agent_role=getattr(args, "role", None),
            lease_seconds=getattr(args, "lease_seconds", None),
            host=getattr(args, "host", None),
            port=getattr(args, "port", None),
            http_token=_token_arg(args),
            log_level=getattr(args, "log_level", None),
            web_read_only=getattr(args, "read_only", None) or None,
        ).items()
        if v is not None
    }
    if args.home is not None and not os.environ.get("HIVEBOARD_CONFIG"):
        os.environ["HIVEBOARD_HOME"] = str(args.home)  # so <home>/config.toml is the file read
    return load_settings(**overrides)


class BearerAuth:
    """ASGI middleware for the MCP endpoint: a bearer token must be the server token or an agent's, on every
    request (initialize included); credentials in any other form are refused too, never ignored; without an
    Authorization header, a request passes only when the operator set no server token (local agents then
    register with whoami)."""

    def __init__(self, app, server_token: str | None, board: Board):
        from .identity import KnownTokens

        self.app, self.server_token, self.board = app, server_token, board
        self.known = KnownTokens()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        from mcp_types import INVALID_REQUEST

        from hiveboard.board.errors import Unavailable

        from . import lanes
        from .identity import CHECKED, bearer_token
        from .resource_metadata import challenge

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = bearer_token(headers.get("authorization"))
        malformed = token is None and "authorization" in headers  # Basic, a bare "Bearer", …: not a token we check
        operator = (
            token is not None
            and self.server_token is not None
            and hmac.compare_digest(token.encode("latin-1"), self.server_token.encode())
        )
        # one request per agent token in service at a time (lanes.Turns): calls, not the notification streams
        # (GET, subscriptions/listen) nor notifications (a cancellation must not queue behind what it cancels);
        # the server token is shared by whoever holds it, so it is not told apart
        method = headers.get("mcp-method", "")  # on 2026-07-28 requests; older ones say it in the body only
        served_in_turn = (
            token is not None
            and not operator
            and scope.get("method") == "POST"
            and method != "subscriptions/listen"
            and not method.startswith("notifications/")
        )
        async with lanes.turn(("token", token) if served_in_turn else None):
            if token is None:
                ok = self.server_token is None and not malformed
            else:
                agent = None if operator else self.known.get(token)
                if agent is None and not operator:
                    try:
                        agent = await lanes.lookup(self.board.agents.by_token, token)
                    except Unavailable as exc:  # the token cannot be checked: the call fails with the sentence
                        return await _unavailable(send, str(exc))
                    if agent is not None:
                        self.known.put(token, agent)
                ok = operator or agent is not None
                if agent is not None:  # the tools' Identity reads it from here instead of looking again
                    scope.setdefault("state", {})[CHECKED] = (token, agent)
            if ok:
                return await self.app(scope, receive, send)
        if malformed:
            why = "the Authorization header is not 'Bearer <token>'"
        elif token is None:
            why = "this server needs 'Authorization: Bearer <token>': the server token, or an agent's token"
        else:
            why = "the bearer token matches no agent (it may have been replaced by a newer one)"
        how = "; the operator gets an agent's token with `hiveboard agent token NAME` (or `agent add NAME`)"
        if self.server_token is None and (token is not None or malformed):
            how += ", or connect without an Authorization header and register with whoami(name=...)"
        # a JSON-RPC error, which MCP clients show with its message (any other body reads "Server returned an
        # error response"), and the challenge, which clients that follow the authorization spec read
        refusal = {"code": INVALID_REQUEST, "message": f"unauthorized: {why}{how}"}
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": refusal}).encode()
        error = "invalid_request" if malformed else "invalid_token" if token is not None else None
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", challenge(scope, error, why + how))]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _unavailable(send, sentence: str) -> None:
    """503 with a JSON-RPC error, which MCP clients raise with its message (a bare 500 reads "Server returned an
    error response"); nothing reached a tool, so nothing was written."""
    from mcp_types import INTERNAL_ERROR

    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": INTERNAL_ERROR, "message": sentence}}).encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_app(
    settings: Settings,
    board: Board,
    memory: Memory | LazyMemory | None = None,
    review: ReviewEngine | None = None,
    worktrees: WorktreeManager | None = None,
):
    """The Starlette app for streamable HTTP, with Host/Origin checks and optional bearer auth; `review`
    defaults to the configured review engine, `worktrees` to the configured git (worktree_manager)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from .app import build_server
    from .boundary import UnicodeGuard
    from .identity import Identity

    identity = Identity(board.agents, "http", server_token=settings.http_token)
    mcp = build_server(
        board,
        identity,
        memory=memory,
        review=review or review_engine(settings, board, memory),
        profile=settings.tool_profile,
        worktrees=worktrees or worktree_manager(settings, board),
    )
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", f"{settings.host}:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *settings.allowed_origins]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    app = UnicodeGuard(mcp.streamable_http_app(host=settings.host, transport_security=security))
    app = BearerAuth(app, settings.http_token, board)  # an unknown token is refused even without a server token
    from starlette.applications import Starlette

    from .hook_http import hook_routes
    from .resource_metadata import metadata_routes
    from .web.app import Site, WebBoard, web_routes

    web = WebBoard(
        board,
        memory=memory,
        hosts=hosts,
        origins=settings.allowed_origins,
        read_only=settings.web_read_only,
        presence=settings.review.critic_presence,
    )
    routes = [*hook_routes(settings, board), *metadata_routes(), *web_routes(web)]
    site = Site(app, Starlette(routes=routes), web)
    from .metrics import Metrics

    return Metrics(site, board, settings.http_token, hosts)  # GET /metrics for Prometheus, the operator's


def freeze_heap(collect: bool = True) -> None:
    """Move start-up objects out of the garbage collector's reach: full collections then scan only
    what requests allocate, which keeps long pauses out of wake-up latency. collect=False freezes
    without collecting first: before `initialize` is answered a collection costs more than the little
    garbage start-up leaves (which then stays). Turns the collector back on (main turned it off)."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.enable()


def configure_logging(settings: Settings) -> None:
    """Plain lines on stderr at the configured level, set before the MCP SDK would install its own (rich)
    handler, whose rendering costs more than a short call."""
    logging.basicConfig(level=settings.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")


def cmd_serve(args: argparse.Namespace) -> int:
    from hiveboard.memory.lazy import LazyMemory

    settings = _settings(args)
    configure_logging(settings)
    from .tracing import configure as configure_tracing

    configure_tracing(settings)  # off unless otel_endpoint names a collector
    if problem := role_problem(settings.agent_role):  # stdio's agent registers with it: a typo grants nothing
        print(f"hiveboard: {problem}", file=sys.stderr)
        return 2
    if problem := shared_memory_problem(settings):
        from .config import SetupError

        refuse_unusable_database(settings)
        raise SetupError(problem)
    from hiveboard.memory.embedder_choice import check_installed

    check_installed(settings.embedding_model, settings.embedding_base_url)  # the memory itself opens later
    board = open_board(settings)
    memory = LazyMemory(lambda: open_memory_for(settings, board))
    background = Background(settings, board, memory, review_engine(settings, board, memory))
    try:
        return _serve(args, settings, board, background)
    finally:
        background.stop()


def cmd_web(args: argparse.Namespace) -> int:
    """`serve --http`, then open the web board in the default browser once the port answers."""
    import socket
    import threading
    import webbrowser

    settings = _settings(args)
    if problem := _port_problem(settings):  # before a URL is printed or a browser opens on another server
        print(f"hiveboard: {problem}", file=sys.stderr)
        return 2
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    url = f"http://{host}:{settings.port}/"

    def open_when_listening() -> None:
        for _ in range(600):
            try:
                socket.create_connection((host, settings.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            return
        print(
            f"hiveboard: the web board is at {url} — log in with a person's token "
            "(hiveboard agent add YOUR-NAME --role human)",
            file=sys.stderr,
            flush=True,
        )
        if not args.no_browser:
            webbrowser.open(url)

    threading.Thread(target=open_when_listening, daemon=True).start()
    return cmd_serve(args)


QUIET_SECONDS = 0.25  # longer than the gaps within a client's start-up requests, shorter than a model's first call
LATEST_SECONDS = 3.0


class Background:
    """What `serve` starts once it is up, each in a thread of its own: the review worker (whose start
    probes the sandbox), the memory (Chroma and the embedding model, the slowest imports of all) and the
    sweeper of orphaned worktrees. Started before, they would compete for the GIL with the start-up that
    `initialize` waits for."""

    def __init__(
        self,
        settings: Settings,
        board: Board,
        memory: LazyMemory,
        review: ReviewEngine | None,
        worktrees: WorktreeManager | None = None,
    ):
        self.settings, self.board, self.memory, self.review = settings, board, memory, review
        self.worktrees = worktrees or worktree_manager(settings, board)
        self.worker: ReviewWorker | None = None
        self.digester: Digester | None = None
        self.sweeper: WorktreeSweeper | None = None
        self.backups: BackupWorker | None = None
        self._lock = threading.Lock()
        self._started = self._stopped = False

    def start(self) -> None:
        with self._lock:
            if self._started or self._stopped:
                return
            self._started = True
        threading.Thread(target=self._open_memory, name="hiveboard-memory-open", daemon=True).start()
        threading.Thread(target=self._start_worker, name="hiveboard-review-start", daemon=True).start()
        from .worktrees import WorktreeSweeper

        with self._lock:
            if not self._stopped:
                self.sweeper = WorktreeSweeper(self.worktrees).start()
        if self.settings.backup.every_hours > 0:
            from .backup import BackupWorker

            with self._lock:
                if not self._stopped:
                    self.backups = BackupWorker(self.board, self.settings).start()

    def _open_memory(self) -> None:
        from hiveboard.memory.lazy import OPEN_ERRORS

        try:
            memory = self.memory.get()
        except Exception as exc:
            if self._stopped:  # the server is stopping and closed the memory first
                return
            if not isinstance(exc, OPEN_ERRORS):
                log.exception("the memory could not be opened")
            _memory_failed(exc)
        freeze_heap()  # the memory's modules and model join the start-up objects
        digester = start_digester(self.settings, self.board, memory)
        with self._lock:
            if not self._stopped:
                self.digester, digester = digester, None
        if digester is not None:  # stopped meanwhile
            digester.stop()

    def _start_worker(self) -> None:
        worker = start_review_worker(self.settings, self.board, self.memory, self.review)
        with self._lock:
            if not self._stopped:
                self.worker, worker = worker, None
        if worker is not None:  # stopped meanwhile
            worker.stop()

    def after_initialize(self, quiet: float = QUIET_SECONDS, latest: float = LATEST_SECONDS):
        """Server middleware that starts the background after `initialize` has been answered, once the
        client has sent nothing for `quiet` seconds, or `latest` seconds after `initialize` at the
        latest. A client lists tools (and prompts, resources) right after `initialize`; started
        amid those answers, the background's imports would slow them for the GIL. A tool that needs
        the memory before then opens it itself."""
        import asyncio

        quiet_timer = latest_timer = None

        async def middleware(ctx, call_next):
            nonlocal quiet_timer, latest_timer
            if self._started or ctx.method == "initialize":
                return await call_next(ctx)
            loop = asyncio.get_running_loop()
            if latest_timer is None:  # the first message after the answer to `initialize`
                latest_timer = loop.call_later(latest, self.start)
            if quiet_timer is not None:
                quiet_timer.cancel()
            try:
                return await call_next(ctx)
            finally:
                quiet_timer = loop.call_later(quiet, self.start)

        return middleware

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            worker, digester, sweeper = self.worker, self.digester, self.sweeper
        if self.backups is not None:
            self.backups.stop()
        if sweeper is not None:
            sweeper.stop()
        if worker is not None:
            worker.stop()
        if digester is not None:
            digester.stop()
        self.memory.stop()


def _memory_failed(exc: Exception) -> None:
    """The memory cannot open (an index of another model, a missing model, Chroma unreachable): the
    server stops, as it did before it served, rather than run on with searches that cannot work. No
    search has been answered yet, and what SQLite committed stays committed."""
    print(f"hiveboard: {exc}", file=sys.stderr, flush=True)
    os._exit(2)


def review_engine(settings: Settings, board: Board, memory: Memory | LazyMemory | None) -> ReviewEngine | None:
    from hiveboard.critics.engine import ReviewEngine

    if not settings.review.enabled:
        return None
    return ReviewEngine(board, settings.review, memory, hidden=private_paths(settings))


def worktree_manager(settings: Settings, board: Board) -> WorktreeManager:
    """Worktrees made and removed by git in the sandbox, hiding what the review sandbox hides (the data
    directory, the database, the config); without a sandbox only when review.execute = "unsafe"."""
    from hiveboard.critics.git import Git

    from .worktrees import WorktreeManager

    git = Git.for_machine(private_paths(settings), unsafe=settings.review.execute == "unsafe")
    return WorktreeManager(board, git)


def cmd_repo(args: argparse.Namespace) -> int:
    """`hiveboard repo add|list|remove|adopt|reset|log` (server/repo_cli.py)."""
    from .repo_cli import repo

    settings = _settings(args)
    return repo(args, settings, functools.partial(worktree_manager, settings))


def cmd_worktree(args: argparse.Namespace) -> int:
    """`hiveboard worktree prune` (server/repo_cli.py)."""
    from .repo_cli import worktree

    settings = _settings(args)
    return worktree(args, settings, functools.partial(worktree_manager, settings))


def private_paths(settings: Settings) -> list:
    """What the review sandbox must never show: the data directory, the database and the config file."""
    from .config import config_file

    return [settings.home, *([] if settings.db_url else [settings.db_path]), config_file()]


def start_review_worker(
    settings: Settings, board: Board, memory: Memory | LazyMemory | None, engine: ReviewEngine | None = None
) -> ReviewWorker | None:
    """The background review worker of this process (every serving process runs one; jobs are leased)."""
    from hiveboard.critics.engine import ReviewWorker

    engine = engine or review_engine(settings, board, memory)
    if engine is None:
        return None
    if settings.review_workers == 0:
        print(
            "hiveboard: review is on but this process runs no review worker (HIVEBOARD_REVIEW_WORKERS=0): "
            "completed cards wait in review until a process that has one picks them up",
            file=sys.stderr,
        )
        return None
    for line in engine.describe().splitlines():
        print(f"hiveboard: {line}", file=sys.stderr, flush=True)
    if settings.review.execute == "unsafe":
        log.warning(
            'review.execute = "unsafe": submitted tests run on this machine as this user, with no '
            "sandbox; use it only for agents you trust as much as yourself"
        )
    return ReviewWorker(engine, threads=settings.review_workers).start()


def start_digester(settings: Settings, board: Board, memory: Memory) -> Digester:
    """The digests per task type, written in the background; by the configured model when there is one."""
    from hiveboard.memory.digests import Digester

    writer = None
    endpoint = settings.digest.llm or settings.review.llm
    if endpoint is not None:
        from hiveboard.critics.llm import DigestWriter

        writer = DigestWriter(endpoint, settings.review.critic_timeout, settings.review.repair_attempts)
    digester = Digester(
        board,
        memory.embedder,
        min_lessons=settings.digest.min_lessons,
        refresh_after=settings.digest.refresh_after,
        max_rules=settings.digest.max_rules,
        writer=writer,
        writer_name=writer.name if writer else None,
    )
    digester.start()
    return digester


def _serve(args: argparse.Namespace, settings: Settings, board: Board, background: Background) -> int:
    from hiveboard.board.db import release_connections

    from .app import build_server
    from .identity import Identity

    if args.http:
        import uvicorn

        if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.http_token:
            log.warning(
                "serving on %s without --token: anyone who reaches this address can use the board", settings.host
            )
        if problem := _port_problem(settings):
            print(f"hiveboard: {problem}", file=sys.stderr)
            return 2
        print(
            f"hiveboard: serving streamable HTTP on http://{settings.host}:{settings.port}/mcp "
            f"and the web board on http://{settings.host}:{settings.port}/ (data: {settings.database_label})",
            file=sys.stderr,
            flush=True,
        )
        app = http_app(settings, board, background.memory, background.review, background.worktrees)
        freeze_heap(collect=False)
        # An HTTP server usually waits for its first client longer than the background takes, and it
        # should refuse an unusable memory index on its own, so it starts now rather than at a client.
        background.start()
        release_connections()  # what start-up borrowed: the event loop's thread holds no connection while it serves
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower())
        return 0
    from .sessions import derive

    # the session a client started this server for names the agent when nobody named one (server/sessions.py)
    named, session = derive({**os.environ, "HIVEBOARD_AGENT": settings.agent or ""})
    identity = Identity(
        board.agents,
        "stdio",
        agent=settings.agent,
        role=settings.agent_role,
        session=(named, session) if session else None,
    )
    who = settings.agent or (f"{named} (its client session's)" if session else "set by whoami")
    print(
        f"hiveboard: serving stdio (data: {settings.database_label}, agent: {who})",
        file=sys.stderr,
        flush=True,
    )
    import anyio

    from .compat import run_stdio

    server = build_server(
        board,
        identity,
        memory=background.memory,
        review=background.review,
        profile=settings.tool_profile,
        worktrees=background.worktrees,
    )
    server.middleware.append(background.after_initialize())
    from .channel import CAPABILITY, Channel

    server.middleware.append(Channel(board, identity).middleware())  # pushes into a Claude Code session
    freeze_heap(collect=False)
    release_connections()
    anyio.run(run_stdio, server, {CAPABILITY: {}})
    return 0


def _port_problem(settings: Settings) -> str | None:
    """Why the HTTP port cannot be bound (e.g. another server has it), in a sentence, so that nothing claims
    to serve (nor opens a browser on the other server) first."""
    import socket

    try:
        infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(infos[0][4])
    except OSError as exc:
        return (
            f"cannot serve on {settings.host}:{settings.port}: {exc.strerror or exc}; stop the other server "
            "or pass --port"
        )
    return None


# columns the terminal board leaves out while they are empty: they hold cards only when something waits
QUIET_COLUMNS = ("blocked", "needs_human")


def board_text(board: Board, top: int) -> str:
    """The board as the terminal shows it."""
    view = board.board(top=top)
    lines = [f"hiveboard — {view.total} cards, {view.ready} ready to claim"]
    for column in view.columns:
        if column.count == 0 and column.status in QUIET_COLUMNS:
            continue
        lines.append(f"\n{column.status.upper()} ({column.count})")
        for t in column.top:
            who = f" @{t.assignee}" if t.assignee else ""
            mark = " (UNVERIFIED: its tests did not run)" if t.unverified else ""
            lines.append(f"  #{t.id:<5} [{t.priority:<8}] {t.task_type:<9} {t.title}{who}{mark}")
        if column.count > len(column.top):
            lines.append(f"  … {column.count - len(column.top)} more (hiveboard board --top N)")
    if view.reservations_live:
        lines.append(f"\nRESERVED PATHS ({view.reservations_live})")
        for r in view.reservations or []:
            where = f"{r.repo}:" if r.repo else ""
            card = f" for #{r.task_id}" if r.task_id is not None else ""
            kind = "exclusive" if r.exclusive else "shared"
            lines.append(f"  {where}{r.pattern}  @{r.agent}{card}, {kind}, until {r.until}")
        if view.reservations_live > len(view.reservations or []):
            lines.append(f"  … {view.reservations_live - len(view.reservations or [])} more")
    surfaced, useful = board.knowledge.reuse()
    rate = f", reuse rate {useful / surfaced:.0%}" if surfaced else ""
    lines.append(
        f"\nmemory: {board.knowledge.count()} items, {board.knowledge.pending()} waiting for the vector "
        f"index; {surfaced} handed to agents at claims, {useful} marked helpful{rate}"
    )
    return "\n".join(lines)


def cmd_board(args: argparse.Namespace) -> int:
    board = open_board(_settings(args), read_only=True)
    if not args.watch:
        print(board_text(board, args.top))
        return 0
    import anyio

    return anyio.run(_watch_board, board, args.top)


async def _watch_board(board: Board, top: int) -> int:
    """Redraw the board in place whenever a commit (of any process on this data directory) changes it."""
    import asyncio

    notifier = board.store.notifier
    changed = asyncio.Event()
    loop = asyncio.get_running_loop()
    notifier.subscribe(lambda events: loop.call_soon_threadsafe(changed.set))
    try:
        async with notifier.watching():
            while True:
                text = await asyncio.to_thread(board_text, board, top)
                stamp = time.strftime("%H:%M:%S")
                sys.stdout.write(f"\x1b[H\x1b[2J{text}\n\n(live, {stamp}; Ctrl-C to stop)\n")
                sys.stdout.flush()
                await changed.wait()
                await asyncio.sleep(0.1)  # one redraw for a burst of commits
                changed.clear()
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 0


def _memory_trust(board, args: argparse.Namespace) -> int:
    """`memory held` lists what is held back for a person; `memory confirm IDS` vouches for items as a person."""
    if args.action == "held":
        for item in board.knowledge.held(200):
            text = " ".join(item.text.split())[:200]
            print(f"{item.id}\t{item.kind}\tby {item.created_by}\theld: {item.held}\t{text}")
        return 0
    try:
        ids = [int(part) for part in (args.file or "").split(",") if part.strip()]
    except ValueError:
        ids = []
    if not ids:
        print(
            "hiveboard: memory confirm needs item ids, comma separated (e.g. 12,14); nothing was changed",
            file=sys.stderr,
        )
        return 2
    missing = sorted(set(ids) - set(board.knowledge.get(ids)))
    if missing:
        print(f"hiveboard: memory items {missing} do not exist; nothing was changed", file=sys.stderr)
        return 2
    with board.store.write() as db:
        changed = board.knowledge.confirm(db, ids, "operator", release=args.release_held)
    print(
        f"{len(changed)} memory item(s) now reviewed: {', '.join(map(str, changed)) or 'none changed'}", file=sys.stderr
    )
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    """Export the memory to JSON Lines, or import such a file (every line checked before anything is written)."""
    from pathlib import Path

    from .memory_file import MAX_ERRORS, check_file, export_file, import_file, index_imported

    settings = _settings(args)
    board = open_board(settings, read_only=args.action in ("export", "held"))
    if args.action in ("confirm", "held"):
        return _memory_trust(board, args)
    if args.action == "export":
        if args.file in (None, "-"):
            count = export_file(board, sys.stdout)
        else:
            try:
                out = open(args.file, "w", encoding="utf-8")
            except OSError as exc:
                print(f"hiveboard: cannot write {args.file} ({exc.strerror}); name another FILE", file=sys.stderr)
                return 2
            with out:
                count = export_file(board, out)
        print(
            f"exported {count} memory items{f' to {args.file}' if args.file not in (None, '-') else ''}",
            file=sys.stderr,
        )
        return 0
    if args.file in (None, "-"):
        print("hiveboard: memory import needs a FILE (it is read twice: checked, then written)", file=sys.stderr)
        return 2
    path = Path(args.file)
    if not path.is_file():
        print(f"hiveboard: {path} is not a file", file=sys.stderr)
        return 2
    count, problems = check_file(path)
    if problems:
        more = f"\n… and {len(problems) - MAX_ERRORS} more" if len(problems) > MAX_ERRORS else ""
        print("\n".join(problems[:MAX_ERRORS]) + more, file=sys.stderr)
        print(f"hiveboard: {len(problems)} bad line(s) in {path}; nothing was imported", file=sys.stderr)
        return 2
    gc.enable()  # a long run, not a start-up
    ids = import_file(path, board, count)
    print(
        f"imported {len(ids)} memory items from {path}" + (f" (ids {ids[0]}-{ids[-1]})" if ids else ""), file=sys.stderr
    )
    print(f"hiveboard: {index_imported(settings, board)}", file=sys.stderr)
    return 0


# The roles `agent add --role` grants: those the board gives rights to (board/agents.py: a person, human or
# lead, moves other agents' cards; a critic submits critiques), and the plain labels the docs and whoami use.
LABEL_ROLES: tuple[str, ...] = ("coder", "reviewer", "tester")


def role_problem(role: str | None) -> str | None:
    """Why `role` is not one `agent add --role` grants (a typo would silently grant no rights), or None."""
    import difflib

    from hiveboard.board.agents import PRIVILEGED_ROLES

    known = (*PRIVILEGED_ROLES, *LABEL_ROLES)
    if role is None or role in known:
        return None
    near = difflib.get_close_matches(role.lower(), known, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return (
        f"unknown role {role!r}{hint}; the roles are {_and(PRIVILEGED_ROLES)}, which carry rights on the board, "
        f"and {_and(LABEL_ROLES)}, which are labels: pass one of them, or leave --role out"
    )


def _and(words: tuple[str, ...]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else "".join(words)


def cmd_agent(args: argparse.Namespace) -> int:
    if problem := role_problem(args.role):
        print(f"hiveboard: {problem}", file=sys.stderr)
        return 2
    board = open_board(_settings(args), read_only=args.action == "list")
    if args.action in ("add", "token"):
        if args.action == "token" and board.agents.get(args.name, missing_ok=True) is None:
            print(
                f"hiveboard: no agent named {args.name!r}; create it with hiveboard agent add {args.name}",
                file=sys.stderr,
            )
            return 2
        token = board.agents.new_token(args.name, args.role)
        print(token)
        print(
            f"token for agent {args.name.lower()!r}: send 'Authorization: Bearer {token}' on HTTP. "
            "It replaces any earlier token of this agent.",
            file=sys.stderr,
        )
    else:
        names = board.agents.names(limit=1000)
        print("name\trole\tcreated_at")
        for name in names:
            agent = board.agents.get(name)
            print(f"{agent.name}\t{agent.role or '-'}\t{agent.created_at}")
        if not names:
            print("hiveboard: no agents yet; add one with hiveboard agent add NAME", file=sys.stderr)
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    import tempfile

    import anyio

    from hiveboard.memory.lazy import LazyMemory

    from .app import INSTRUCTIONS, build_server
    from .boundary import TOOLS_BUDGET, tool_token_costs
    from .config import load_settings
    from .identity import Identity

    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(home=tmp)
        board = open_board(settings)
        memory = LazyMemory(lambda: open_memory_for(settings, board))  # listing the tools never opens it
        mcp = build_server(
            board,
            Identity(board.agents, "memory"),
            memory=memory,
            review=review_engine(settings, board, memory),
            profile=settings.tool_profile,
        )
        tools = anyio.run(mcp.list_tools)
        memory.stop()
        board.store.close()
    costs = tool_token_costs(tools)
    print(f"{'tool':<16} {'~tokens':>8} {'+output':>8}  description")
    for (name, cost, output), tool in zip(costs, tools):
        print(f"{name:<16} {cost:>8} {output:>8}  {(tool.description or '').splitlines()[0]}")
    tool_total, output_total = sum(c[1] for c in costs), sum(c[2] for c in costs)
    total = tool_total + output_total
    print(
        f"{'total':<16} {tool_total:>8} {output_total:>8}  ({len(tools)} tools, profile {settings.tool_profile}; "
        "~4 characters of compact JSON per token; +output = output schemas)"
    )
    print(
        f"tools/list: ~{total} tokens, budget {TOOLS_BUDGET}: {'within' if total <= TOOLS_BUDGET else 'OVER'}; "
        f"server instructions (sent once at initialize): ~{len(INSTRUCTIONS) // 4} tokens"
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """The set-up, one line per check (the data directory, the database, the configuration), then what this
    machine gives review: the sandbox, where tests run, the analysers; 1 if a check fails or the configured
    execution cannot be honoured here. Changes nothing."""
    import importlib.util
    import platform
    import shutil
    import subprocess
    from pathlib import Path

    from hiveboard.critics.engine import build_critics, describe, execution
    from hiveboard.critics.sandbox import detect, limits_line

    from .config import SetupError, config_file, default_home
    from .stores import check_data, check_server, check_vectors

    print(f"hiveboard doctor — Python {platform.python_version()} on {platform.system()} {platform.release()}")
    settings: Settings | None = None
    try:
        settings = _settings(args)
        home, db = settings.home, settings.db_path
        found = "found and valid" if config_file().is_file() else "none: the defaults and HIVEBOARD_* variables"
        config = (None, f"{config_file()} ({found})")
    except SetupError as exc:  # the data is still checked where the flags and the environment put it
        home = Path(args.home or os.environ.get("HIVEBOARD_HOME") or default_home())
        raw = args.db or os.environ.get("HIVEBOARD_DB") or ""
        db = home / "hiveboard.db" if not raw or "://" in raw else Path(raw)  # a URL it could not read: unchecked
        config = (str(exc), str(config_file()))
    data = check_server(settings) if settings is not None and settings.db_url else check_data(home, db)
    vectors = check_vectors(settings) if settings is not None else []
    checks = [*data, *vectors, ("config", *config)]
    for what, problem, seen in checks:
        print(f"{'ok' if problem is None else 'FAIL':<4}  {what}: {problem or seen}")
    failed = any(problem for _, problem, _ in checks)
    if settings is None:
        return 1
    review = settings.review
    sandbox = detect(private_paths(settings))
    bwrap = shutil.which("bwrap")
    if bwrap:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"bubblewrap: {bwrap} ({version})")
    print(f"sandbox: {sandbox.reason}")
    if sandbox.box is not None and sandbox.box.name == "bubblewrap":
        print(
            "  new pid, network, ipc, uts and mount namespaces; "
            + (
                "running as root: each command drops to an unprivileged uid of its own inside"
                if os.geteuid() == 0
                else "a user namespace for this user"
            )
        )
        limits = review.limits
        print(
            f"  limits: {limits.cpu_seconds} s CPU, {limits.memory_mb} MB address space, {limits.processes} "
            f"processes, {limits.file_mb} MB per file, {limits.open_files} open files, {limits.work_mb} MB work "
            f"space, {review.execute_timeout:.0f} s wall clock"
        )
        print(f"  sandbox limits: {limits_line(limits)}")
    pytest_found = importlib.util.find_spec("pytest") is not None
    print(f"pytest for acceptance runs: {'installed' if pytest_found else 'MISSING (pip install pytest)'}")
    print(
        f"review: {'on' if review.enabled else 'off (review.enabled = false)'}; review.execute = "
        f'"{review.execute}"; review.unverified = "{review.unverified}"'
    )
    print(describe(review, sandbox, build_critics(review, sandbox)))
    box, why = execution(review, sandbox)
    if review.execute == "sandbox" and box is None:
        print(
            "hiveboard: the acceptance check cannot run here; install bubblewrap (apt-get install bubblewrap) "
            "or see docs/review.md (The sandbox)",
            file=sys.stderr,
        )
        return 1
    return 1 if failed else 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from hiveboard.memory.errors import IndexUnavailable

    gc.enable()  # a long run, not a start-up

    settings = _settings(args)
    if problem := shared_memory_problem(settings):  # it would rebuild an index that no node searches
        from .config import SetupError

        refuse_unusable_database(settings)
        raise SetupError(problem)
    board = open_board(settings)
    try:
        memory = open_memory_for(settings, board, rebuild=True)
    except IndexUnavailable as exc:
        print(f"hiveboard: {exc}", file=sys.stderr)
        return 2
    try:
        count = memory.reindex()
    except IndexUnavailable as exc:
        print(f"hiveboard: {exc}", file=sys.stderr)
        return 2
    finally:
        memory.stop()
    print(f"reindexed {count} memory items with {memory.embedder.name} ({memory.embedder.dim}-d)")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Copy this data directory's SQLite board into an empty PostgreSQL database and check the copy."""
    from hiveboard.board.copy import copy_board
    from hiveboard.board.db import dialect_for, is_url, redact

    from .config import SetupError
    from .stores import open_server_store

    settings = _settings(args)
    if settings.db_url:
        raise SetupError("migrate copies a SQLite board: run it with --db (or HIVEBOARD_DB) naming the SQLite file")
    target_url = args.to if args.to != "-" else os.environ.get("HIVEBOARD_MIGRATE_TO", "")
    try:
        server = is_url(target_url) and dialect_for(target_url).name == "postgresql"
    except ValueError:  # a URL of another database
        server = False
    if not server:
        raise SetupError(
            "migrate --to needs a postgresql:// URL (or --to - with the URL in HIVEBOARD_MIGRATE_TO, which keeps "
            "its password out of the process list)"
        )
    source = open_board(settings, read_only=True).store
    try:
        target = open_server_store(target_url)
        try:
            report = copy_board(source, target)
        finally:
            target.close()
    finally:
        source.close()
    print(f"{'table':<16} {'rows':>8}  checksum          copy")
    for t in report:
        print(f"{t.table:<16} {t.rows:>8}  {t.checksum}  {'same' if t.same else 'DIFFERENT'}")
    if not all(t.same for t in report):
        print("hiveboard: the copy differs from the source in the tables marked DIFFERENT", file=sys.stderr)
        return 1
    print(
        f"copied {sum(t.rows for t in report)} rows into {redact(target_url)}; every memory item is queued for the "
        "vector index: start the nodes with HIVEBOARD_DB and HIVEBOARD_CHROMA_URL set"
    )
    return 0


def cmd_canary(args: argparse.Namespace) -> int:
    """`hiveboard canary add FILE --as PERSON [--pick N]`: canary cards (board/canaries.py) from a file of cards, one
    JSON object per line, made as a person; every card is checked before any is made. Run from cron, with
    many more cards in the file than are picked each time, for canaries on a schedule."""
    import json
    import random
    from pathlib import Path

    from pydantic import ValidationError

    from hiveboard.board.errors import BoardError
    from hiveboard.board.models import NewTask

    try:
        lines = [(n, line) for n, line in enumerate(Path(args.file).read_text().splitlines(), 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        print(
            f"hiveboard: cannot read {args.file}: {exc}; give a UTF-8 file of cards, one JSON object a line",
            file=sys.stderr,
        )
        return 2
    cards = []
    for n, line in lines:
        try:
            fields = json.loads(line)
            if not isinstance(fields, dict):
                raise ValueError("it is not a JSON object")
            unknown = sorted(set(fields) - set(NewTask.model_fields) - {"canary"})
            if unknown:
                raise ValueError(f"unknown field {unknown[0]!r}")
            cards.append(NewTask.model_validate({**fields, "canary": True}))
        except ValidationError as exc:
            first = exc.errors()[0]
            print(
                f"hiveboard: {args.file} line {n}: {'.'.join(map(str, first['loc']))}: {first['msg']}; nothing was made",
                file=sys.stderr,
            )
            return 2
        except ValueError as exc:
            print(f"hiveboard: {args.file} line {n} is not a card ({exc}); nothing was made", file=sys.stderr)
            return 2
    if not cards:
        print(f"hiveboard: {args.file} holds no cards; write one JSON object a line", file=sys.stderr)
        return 2
    picked = random.sample(cards, min(args.pick, len(cards))) if args.pick else cards
    board = open_board(_settings(args))
    try:
        for card in picked:  # the person's role and each card's hidden tests, before anything is written
            board.canaries.check_new(args.person, card)
        made = [board.create(args.person, card) for card in picked]
    except BoardError as exc:
        print(f"hiveboard: {exc}; nothing was made", file=sys.stderr)
        return 2
    print(f"made {len(made)} canary card(s) as {args.person}: " + ", ".join(f"#{c.id}" for c in made))
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """`hiveboard backup [PATH]` takes a consistent copy of the live board (server/backup.py); `--verify PATH`
    checks one."""
    from pathlib import Path

    from . import backup

    if args.verify:
        manifest = backup.verify(Path(args.verify))
        rows = manifest.rows
        print(
            f"{args.verify}: whole — {len(manifest.files)} files match their sha256, {sum(rows.values())} rows in "
            f"{len(rows)} tables ({manifest.store}, taken {manifest.created_at})"
        )
        return 0
    settings = _settings(args)
    path = Path(args.path) if args.path else backup.default_path(settings.home)
    taken = backup.take(path, db_path=settings.db_path, db_url=settings.db_url)
    rows = taken.manifest.rows
    print(
        f"backed up {sum(rows.values())} rows in {len(rows)} tables ({taken.manifest.store}) into {taken.path}; "
        f"check it with `hiveboard backup --verify {taken.path}`"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """`hiveboard restore PATH`: the backup into an empty data directory (or empty PostgreSQL database), then
    the vector index rebuilt from the restored store."""
    from pathlib import Path

    from hiveboard.memory.errors import IndexUnavailable

    from . import backup

    gc.enable()  # a long run, not a start-up
    settings = _settings(args)
    if problem := shared_memory_problem(settings):
        from .config import SetupError

        raise SetupError(problem)
    manifest = backup.restore(Path(args.path), home=settings.home, db_path=settings.db_path, db_url=settings.db_url)
    settings = _settings(args)  # the restored config.toml, if the backup had one
    board = open_board(settings)  # brings an older backup's schema up to date
    try:
        memory = open_memory_for(settings, board, rebuild=True)
        try:
            count = memory.reindex()
        finally:
            memory.stop()
    except IndexUnavailable as exc:
        print(
            f"hiveboard: the board is restored but the vector index is not ({exc}); run `hiveboard reindex`",
            file=sys.stderr,
        )
        return 2
    rows = manifest.rows
    print(
        f"restored {sum(rows.values())} rows in {len(rows)} tables into {settings.database_label} and indexed "
        f"{count} memory items; `hiveboard doctor` checks it"
    )
    return 0


def cmd_setup(args: argparse.Namespace) -> int:
    """Write (or take out) hiveboard in an MCP client's config: server/setup_clients.py."""
    from pathlib import Path

    from hiveboard.board.agents import check_name

    from .config import default_home
    from .setup_clients import setup

    home = _settings(args).home  # --home, HIVEBOARD_HOME or config.toml, as `serve` would read them
    setup(
        args.client,
        project=Path(args.project) if args.project else None,
        agent=check_name(args.agent) if args.agent else None,
        home=None if Path(home).absolute() == default_home().absolute() else Path(home),
        dry_run=args.dry_run,
        uninstall=args.uninstall,
        url=args.url,
        token_file=Path(args.agent_token_file) if args.agent_token_file else None,
    )
    return 0


HOME_HELP = "data directory (env HIVEBOARD_HOME; default per-user data dir)"
DB_HELP = (
    "the board's database: a SQLite file, or a postgresql:// URL shared by several nodes (env HIVEBOARD_DB; "
    "default <home>/hiveboard.db)"
)
LOG_HELP = "what goes to stderr: DEBUG, INFO, WARNING (the default) or ERROR (env HIVEBOARD_LOG_LEVEL)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hiveboard",
        description="A shared Kanban board, message pool and review desk for AI agents, served over MCP.",
    )
    p.add_argument("--home", help=HOME_HELP)
    p.add_argument("--db", help=DB_HELP)
    # the same options after the command (`hiveboard board --home X`); there, unset, they leave the value of
    # the options before the command as it was
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help=HOME_HELP)
    common.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
    sub = p.add_subparsers(dest="command")

    def add(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002  (argparse's own keyword)
        # the sentence of the command list is also the command's own --help description
        return sub.add_parser(name, parents=[common], help=help, description=help[:1].upper() + help[1:] + ".")

    s = add("serve", help="run the MCP server (stdio by default)")
    s.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    s.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="HTTP port (default 8765)")
    s.add_argument(
        "--token",
        help="require this bearer token (or an agent token) on HTTP; visible in ps: prefer "
        "HIVEBOARD_HTTP_TOKEN or --token-file",
    )
    s.add_argument("--token-file", help="read the HTTP bearer token from this file")
    s.add_argument("--agent", help="stdio: the agent this connection acts as (env HIVEBOARD_AGENT)")
    s.add_argument("--role", help="stdio: that agent's role")
    s.add_argument("--lease-seconds", type=int, help="claim lease length (default 300)")
    s.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_HELP)
    s.add_argument(
        "--read-only",
        action="store_true",
        help="HTTP: the web board as a wall screen (pages without login, no actions)",
    )
    s.set_defaults(fn=cmd_serve)

    b = add("board", help="print the board in the terminal")
    b.add_argument("--top", type=int, default=10, help="cards shown per column")
    b.add_argument("--watch", action="store_true", help="redraw in place as the board changes (Ctrl-C stops)")
    b.set_defaults(fn=cmd_board)

    w = add("web", help="serve HTTP (MCP at /mcp, the web board at /) and open the board in a browser")
    w.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    w.add_argument("--port", type=int, help="HTTP port (default 8765)")
    w.add_argument("--read-only", action="store_true", help="a wall screen: pages without login, no actions")
    w.add_argument("--no-browser", action="store_true", help="do not open a browser")
    w.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_HELP)
    w.set_defaults(fn=cmd_web, http=True, token=None, token_file=None, agent=None, role=None, lease_seconds=None)

    a = add(
        "agent",
        help="manage agents: 'add NAME' prints a bearer token for HTTP; 'token NAME' replaces a lost token; 'list'",
    )
    a.add_argument("action", choices=["add", "token", "list"], help="add, token or list")
    a.add_argument("name", nargs="?", help="add, token: the agent's name (letters, digits, - and _)")
    a.add_argument("--role", help="add: the agent's role, e.g. coder, reviewer, or human for a person (web login)")
    a.set_defaults(fn=cmd_agent)

    r = add(
        "reindex",
        help="rebuild the memory's vector index from the board's database (after changing the "
        "embedding model); stop the servers of this data directory first",
    )
    r.set_defaults(fn=cmd_reindex)

    g = add(
        "migrate",
        help="copy this SQLite board into an empty PostgreSQL database (--to URL, or --to - with the URL in "
        "HIVEBOARD_MIGRATE_TO) and check every table's rows and checksum",
    )
    g.add_argument("--to", required=True, help="the postgresql:// URL, or - to read HIVEBOARD_MIGRATE_TO")
    g.set_defaults(fn=cmd_migrate)

    m = add(
        "memory",
        help="'export [FILE]' writes the shared memory as JSON Lines (stdout without "
        "FILE); 'import FILE' checks every line, then adds the items and indexes them; 'held' lists items held "
        "back for a person; 'confirm IDS [--release-held]' vouches for items (12,14): claims then hand them",
    )
    m.add_argument("action", choices=["export", "import", "held", "confirm"], help="export, import, held or confirm")
    m.add_argument(
        "file",
        nargs="?",
        help="export: the JSON Lines file (stdout without it); import: the file, required; confirm: the item ids",
    )
    m.add_argument("--release-held", action="store_true", help="confirm: also let go items held back")
    m.set_defaults(fn=cmd_memory)

    t = add("tools", help="list the MCP tools and their context cost in tokens")
    t.set_defaults(fn=cmd_tools)

    d = add(
        "doctor",
        help="check the data directory, the database and the configuration, then the review sandbox: where "
        "submitted tests run, and why",
    )
    d.set_defaults(fn=cmd_doctor)

    c = add(
        "setup",
        help="write hiveboard into an MCP client's config (and, for claude-code, its hooks into "
        ".claude/settings.json): merged, backed up, printed as a diff",
    )
    c.add_argument(
        "client", choices=["claude-code", "cursor", "vscode", "claude-desktop"], help="the MCP client to set up"
    )
    c.add_argument("--project", help="the project folder (default: the current one; cursor: else ~/.cursor)")
    c.add_argument("--agent", help="the agent the client acts as (default: the client's name)")
    c.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    c.add_argument("--uninstall", action="store_true", help="take out what setup added, leave the rest")
    c.add_argument(
        "--url",
        help="claude-code: the board is the `hiveboard serve --http` at this URL (the MCP entry and the hooks "
        "talk to it; docs/hooks.md)",
    )
    c.add_argument(  # not args.token_file: that is `serve`'s own token, which _settings reads
        "--token-file",
        dest="agent_token_file",
        help="with --url: the file holding the agent's token (never written in a config)",
    )
    c.set_defaults(fn=cmd_setup)

    r = add(
        "repo",
        help="the git repositories cards are worked in: 'add PATH --name NAME [--base main] [--test CMD] "
        "[--merge auto|manual]', 'list', 'remove NAME'; when a base moved outside the merge queue, 'adopt NAME' "
        "(take its new commits as reviewed) or 'reset NAME' (put it back where the queue left it); 'log NAME' (the "
        "base's moves on the record)",
    )
    r.add_argument(
        "action",
        choices=["add", "list", "remove", "adopt", "reset", "log"],
        help="add, list or remove; adopt, reset or log a base that moved outside the merge queue",
    )
    r.add_argument(
        "target", nargs="?", metavar="PATH|NAME", help="add: the repository's path; the other actions: its name"
    )
    r.add_argument("--name", help="add: the name cards give (create_task repo=NAME)")
    r.add_argument("--base", default="main", help="add: the branch work starts from and merges into (default main)")
    r.add_argument("--test", help="add: the command that runs the repository's tests in the sandbox")
    r.add_argument(
        "--merge",
        choices=["auto", "manual"],
        default="auto",
        help="add: a passed card's branch is merged by the queue (auto) or left for a person (manual)",
    )
    r.add_argument("--by", help="adopt, reset: who decides, for the record (default: operator and the OS user)")
    r.set_defaults(fn=cmd_repo)

    wt = add(
        "worktree",
        help="'prune': remove the worktrees no card keeps (and git's records of them), and hb/ branches the base "
        "already has; prints what it removed",
    )
    wt.add_argument("action", choices=["prune"], help="prune (the only action)")
    wt.set_defaults(fn=cmd_worktree)

    ca = add(
        "canary",
        help="'add FILE --as PERSON': canary cards (hidden tests that contradict their criteria, to measure gaming) "
        "from FILE, one JSON card a line, made as a person (role human or lead); --pick N makes N picked at random, "
        "for a schedule from cron",
    )
    ca.add_argument("action", choices=["add"], help="add (the only action)")
    ca.add_argument("file", help="the cards: one create_task JSON object a line, each with hidden acceptance_tests")
    ca.add_argument("--as", dest="person", required=True, help="the person they are made as (role human or lead)")
    ca.add_argument("--pick", type=int, default=0, help="make this many, picked at random (default: every card)")
    ca.set_defaults(fn=cmd_canary)

    bk = add(
        "backup",
        help="copy the live board consistently into PATH (default <home>/backups/<time>) with a manifest of rows "
        "and sha256 checksums; --verify PATH checks a backup",
    )
    bk.add_argument("path", nargs="?", help="a new directory for the backup")
    bk.add_argument("--verify", metavar="PATH", help="check the backup at PATH instead of taking one")
    bk.set_defaults(fn=cmd_backup)

    rs = add(
        "restore",
        help="verify the backup at PATH, put it into an empty data directory (--home) or an empty PostgreSQL "
        "database (--db), and rebuild the vector index",
    )
    rs.add_argument("path", help="the backup directory")
    rs.set_defaults(fn=cmd_restore)

    h = add(
        "hook",
        help="a Claude Code hook: reads the hook's JSON on stdin, tells the agent (HIVEBOARD_AGENT) about its "
        "cards, mail and verdicts, and records its token usage; never fails the session (docs/hooks.md)",
    )
    h.add_argument(
        "event",
        help="session-start, user-prompt-submit, post-tool-use, stop, session-end, task-completed or teammate-idle",
    )
    h.set_defaults(fn=cmd_hook)

    gd = add(
        "guard",
        help="'install [REPO]' writes a git pre-commit hook refusing commits that touch paths another agent "
        "reserved (HIVEBOARD_GUARD=warn only warns, =off skips it); 'uninstall [REPO]'; 'check' is what it runs",
    )
    gd.add_argument("action", choices=["install", "uninstall", "check"], help="install, uninstall or check")
    gd.add_argument("repo", nargs="?", help="the repository (default: the current directory's)")
    gd.add_argument(
        "--name",
        help="install: the name the repository is registered under (default: found by its path; none: the guard "
        "checks every repository's reservations)",
    )
    gd.set_defaults(fn=cmd_guard)
    return p


def cmd_hook(args: argparse.Namespace) -> int:
    from . import hook

    if getattr(args, "home", None):
        os.environ["HIVEBOARD_HOME"] = args.home
    if getattr(args, "db", None):
        os.environ["HIVEBOARD_DB"] = args.db
    return hook.main(args.event)


def cmd_guard(args: argparse.Namespace) -> int:
    from . import guard

    if args.action == "check":  # what the pre-commit hook runs: never exits 2 (that would refuse the commit)
        return guard.check(lambda: _settings(args))
    if args.action == "uninstall":
        print(guard.uninstall(args.repo), file=sys.stderr)
        return 0
    db_given = args.db or os.environ.get("HIVEBOARD_DB")
    print(guard.install(_settings(args), args.repo, args.name, db_given), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command is None:
        args = p.parse_args([*(argv if argv is not None else sys.argv[1:]), "serve"])
    if args.command == "agent" and args.action in ("add", "token") and not args.name:
        p.error(f"agent {args.action} needs a NAME, e.g. hiveboard agent {args.action} alice")
    if args.command == "hook":  # at every prompt and tool call: before the board's modules are imported
        return args.fn(args)
    # Start-up imports allocate hundreds of thousands of objects and free almost none, so the
    # collector's passes over them are wasted: it is off until `serve` is ready to serve
    # (freeze_heap) or a long command starts its work; the other commands end first.
    collecting = gc.isenabled()
    gc.disable()
    from hiveboard.board.dialect import SQLite
    from hiveboard.board.errors import BoardError  # after parsing: --help needs none of the board

    from .config import SetupError, unknown_variables

    for warning in unknown_variables(os.environ):
        print(f"hiveboard: warning: {warning}", file=sys.stderr)
    try:
        return args.fn(args) or 0
    except (BoardError, SetupError) as exc:
        print(f"hiveboard: {exc}", file=sys.stderr)
        return 2
    except SQLite.Error as exc:  # a database found damaged after it opened (a page read only now)
        print(f"hiveboard: {_database_problem(args, exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `hiveboard board | head`: the reader stopped; so do we, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if collecting:
            gc.enable()


def _database_problem(args: argparse.Namespace, exc: Exception) -> str:
    from .config import SetupError
    from .stores import database_problem

    try:
        return database_problem(exc, _settings(args).db_path)
    except SetupError:  # cannot be: the settings were read before the database was opened
        return f"the database cannot be used ({exc}); hiveboard doctor checks it"


if __name__ == "__main__":
    sys.exit(main())
