"""docs/nginx.conf in front of two hiveboard nodes on one PostgreSQL database: the Debian package's nginx
runs that very file (only the node addresses, the listen port and the log path swapped), and real MCP
clients go through it. Stateless clients are spread round-robin over one board; a session-based client
stays on the node that opened its session, waits included; refusals are the nodes' own."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import call, call_error, clean_env, http_client, serve_http, stop_process, until, wait_until
from pg_cluster import free_port

from hiveboard.board.agents import Agents
from hiveboard.board.db import Store
from hiveboard.board.tasks import Board

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DOCS_CONF = Path(__file__).resolve().parents[2] / "docs" / "nginx.conf"
SERVER_TOKEN = "team-secret-for-the-balancer"
STATELESS = "2026-07-28"  # the protocol version of clients that need no stickiness
LOG_LINE = re.compile(r'"(?P<request>[^"]*)" (?P<status>\d+) \d+ node=(?P<node>\S+) protocol=(?P<protocol>\S+)')


@pytest.fixture(scope="session")
def nginx() -> str:
    """The nginx binary (Debian: /usr/sbin/nginx, often off a user's PATH); skipped where nginx is not
    installed, unless HIVEBOARD_REQUIRE_NGINX=1 (CI), which fails instead."""
    found = next((p for p in ("/usr/sbin/nginx", shutil.which("nginx")) if p and os.access(p, os.X_OK)), None)
    if found is None:
        if os.environ.get("HIVEBOARD_REQUIRE_NGINX") == "1":
            pytest.fail("nginx is not installed (apt-get install nginx) and HIVEBOARD_REQUIRE_NGINX=1")
        pytest.skip("no nginx here (apt-get install nginx)")
    return found


def site_config(nodes: list[str], port: int, log: Path) -> str:
    """docs/nginx.conf with these node addresses, listen port and access log; each swap must match exactly
    once, so a docs change that the test no longer understands fails here instead of testing something else."""
    text = DOCS_CONF.read_text()
    swaps = [
        (
            r"^(\s*)server 127\.0\.0\.1:\d+;\n(?:\s*server 127\.0\.0\.1:\d+;\n)*",
            "".join(f"\\1server {n};\n" for n in nodes),
        ),
        (r"^(\s*)listen 127\.0\.0\.1:\d+;", f"\\1listen 127.0.0.1:{port};"),
        (r"^(\s*)access_log /var/log/nginx/hiveboard\.log hiveboard;", f"\\1access_log {log} hiveboard;"),
    ]
    for pattern, replacement in swaps:
        text, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        assert count == 1, f"docs/nginx.conf: {pattern!r} matched {count} times"
    return text


def main_config(prefix: Path, site: Path) -> str:
    """What Debian's /etc/nginx/nginx.conf is to conf.d/*.conf, in a prefix of the test's own: several
    workers (Debian's is one per core), temporary files in the prefix (the package's /var/lib/nginx is root's)."""
    temp = " ".join(
        f"{kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"worker_processes 2;\nevents {{ worker_connections 512; }}\nhttp {{\n    {temp}\n    include {site};\n}}\n"


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Balanced:
    url: str  # the MCP endpoint through nginx
    database: str  # the nodes' PostgreSQL database
    node_urls: list[str]  # each node's own MCP endpoint
    nodes: list[str]  # the nodes' addresses as nginx names them
    log: Path

    def mark(self) -> int:
        return self.log.stat().st_size

    def requests(self, since: int) -> list[dict[str, str]]:
        """The access log's requests after mark `since`: request line, status, node, protocol."""
        with self.log.open("rb") as f:
            f.seek(since)
            lines = f.read().decode().splitlines()
        return [m.groupdict() for line in lines if (m := LOG_LINE.search(line))]


@pytest.fixture(scope="module")
def balanced(nginx, postgres, chroma_server, tmp_path_factory):
    """Two nodes (separate homes, one PostgreSQL database, one Chroma server, one server token) behind
    nginx on a free loopback port, configured by docs/nginx.conf."""
    root, database = tmp_path_factory.mktemp("balanced"), postgres.database()
    env = clean_env(
        HIVEBOARD_DB=database,
        HIVEBOARD_CHROMA_URL=chroma_server,
        HIVEBOARD_HTTP_TOKEN=SERVER_TOKEN,
        HIVEBOARD_REVIEW__ENABLED="false",
    )
    # nginx's workers drop root for nobody, who must reach the prefix: a directory of its own, not
    # pytest's (root's alone), as the PostgreSQL cluster does
    prefix = Path(tempfile.mkdtemp(prefix="hiveboard-nginx-"))
    prefix.chmod(0o755)
    procs: list[subprocess.Popen] = []
    try:
        node_urls = []
        for n in (1, 2):
            proc, url = serve_http(root / f"node{n}", env=env)
            procs.append(proc)
            node_urls.append(url)
        nodes = [url.removeprefix("http://").removesuffix("/mcp") for url in node_urls]
        log = prefix / "access.log"
        for _ in range(3):  # the free port may be taken by another process before nginx binds it
            port = free_port()
            (prefix / "hiveboard.conf").write_text(site_config(nodes, port, log))
            (prefix / "nginx.conf").write_text(main_config(prefix, prefix / "hiveboard.conf"))
            server = subprocess.Popen(
                [
                    nginx,
                    "-p",
                    str(prefix),
                    "-c",
                    str(prefix / "nginx.conf"),
                    "-e",
                    str(prefix / "error.log"),
                    "-g",
                    f"daemon off; pid {prefix / 'nginx.pid'}; error_log {prefix / 'error.log'};",
                ],
                cwd=prefix,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(server)
            # the pid file is written once the ports are bound: the port answers for this nginx, not another
            if wait_until(lambda: (prefix / "nginx.pid").exists() and listening(port), server):
                break
        else:
            raise RuntimeError("nginx exited three times before listening:\n" + (prefix / "error.log").read_text())
        yield Balanced(f"http://127.0.0.1:{port}/mcp", database, node_urls, nodes, log)
    finally:
        for proc in reversed(procs):  # nginx first, then the nodes
            stop_process(proc)
        shutil.rmtree(prefix, ignore_errors=True)


async def register(balanced: Balanced, name: str) -> str:
    """An agent's bearer token, issued as the operator does (`hiveboard agent add NAME`): a server with a server
    token takes no self-registration."""
    store = Store(balanced.database)
    try:
        return Agents(store).new_token(name)
    finally:
        store.close()


@pytest.fixture
def observer(balanced):
    """The nodes' board, read directly: what every node sees."""
    board = Board(Store(balanced.database))
    yield board
    board.store.close()


def waiting(board: Board, name: str) -> bool:
    """Whether the agent is in a get_messages wait now, as the board records it for every node to see."""
    return any(agent.name == name and agent.waiting for agent in board.views.agents())


async def test_stateless_calls_go_round_robin_to_every_node_of_one_board(balanced):
    bob_token, carol_token = await register(balanced, "bob"), await register(balanced, "carol")
    mark = balanced.mark()
    async with (
        http_client(balanced.url, bob_token, mode=STATELESS) as bob,
        http_client(balanced.url, carol_token, mode=STATELESS) as carol,
    ):
        card = await call(bob, "create_task", title="made through the balancer")
        claim = await call(bob, "claim_task", task_id=card["id"])
        assert claim["claimed"] and claim["task"]["id"] == card["id"]
        assert "claimed by bob" in await call_error(carol, "claim_task", task_id=card["id"])
        done = await call(bob, "complete_task", task_id=card["id"], token=claim["token"], output="did it")
        assert done["status"] == "done"
        for _ in range(6):  # whichever node answers, the card is done
            assert (await call(carol, "get_task", task_id=card["id"]))["status"] == "done"
    calls = 4 + 6

    def answered():
        made = [r for r in balanced.requests(mark) if r["protocol"] == STATELESS]
        return made if len(made) >= calls else None

    made = await until(answered, timeout=30, what="nginx's log of the stateless calls")
    assert all(r["status"] == "200" for r in made), made
    per_node = Counter(r["node"] for r in made)
    assert set(per_node) == set(balanced.nodes), per_node
    assert max(per_node.values()) - min(per_node.values()) <= 1, per_node  # round-robin: one each in turn


async def test_a_session_stays_on_the_node_that_opened_it_waits_included(balanced, observer):
    dave_token, alice_token = await register(balanced, "dave"), await register(balanced, "alice")
    mark = balanced.mark()
    async with http_client(balanced.url, SERVER_TOKEN, mode="legacy") as alice:
        # the binding lives in the memory of the node that opened the session: a later call acts as alice
        # only on that node (any other node does not know the session at all)
        welcome = await call(alice, "whoami", name="alice", token=alice_token)
        assert welcome["message"] == "this MCP session now acts as alice"
        for n in range(10):
            card = await call(alice, "create_task", title=f"alice's card {n}")
            assert (await call(alice, "claim_task", task_id=card["id"]))["task"]["assignee"] == "alice"
        async with http_client(balanced.url, dave_token, mode=STATELESS) as dave:
            got = {}

            async def wait() -> None:
                with anyio.fail_after(120):
                    got["inbox"] = await call(alice, "get_messages", wait_seconds=240)

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await until(
                    lambda: anyio.to_thread.run_sync(waiting, observer, "alice"),
                    timeout=60,
                    what="alice waiting for messages on her node",
                    interval=0.05,
                )
                await call(dave, "publish_message", intent="info", recipient="alice", content="through nginx")
        assert [m["content"] for m in got["inbox"]["messages"]] == ["through nginx"]
        assert (await call(alice, "whoami"))["agent"] == "alice"

    def session_requests():
        sent = [r for r in balanced.requests(mark) if r["protocol"] != STATELESS]
        return sent if len(sent) >= 26 else None  # initialize, initialized, 23 calls, the closing DELETE

    sent = await until(session_requests, timeout=30, what="nginx's log of the session's requests")
    assert sent[0]["request"].startswith("POST /mcp") and sent[0]["protocol"] == "-"  # initialize: no version yet
    assert len({r["node"] for r in sent}) == 1, Counter(r["node"] for r in sent)
    assert all(r["status"] in ("200", "202") for r in sent), sent


async def test_refusals_through_nginx_are_the_nodes_own(balanced):
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=60) as raw:
        for credentials in ({}, {"Authorization": "Bearer hb_not-a-token"}, {"Authorization": "Basic cm9vdDpyb290"}):
            direct = await raw.post(balanced.node_urls[0], json=initialize, headers={**headers, **credentials})
            through = await raw.post(balanced.url, json=initialize, headers={**headers, **credentials})
            assert direct.status_code == through.status_code == 401, (credentials, through.text)
            assert through.json() == direct.json() and "unauthorized" in through.json()["error"]["message"]
            # the same challenge, its resource_metadata at the address each client used (nginx passes the Host on)
            node, edge = (url.rsplit("/mcp", 1)[0] for url in (balanced.node_urls[0], balanced.url))
            assert through.headers["www-authenticate"] == direct.headers["www-authenticate"].replace(node, edge)
            assert (
                f'resource_metadata="{edge}/.well-known/oauth-protected-resource/mcp"'
                in through.headers["www-authenticate"]
            )
        # the Host goes through as sent, so the nodes' DNS-rebinding check still holds behind nginx
        port = balanced.url.split(":")[2].split("/")[0]
        rebound = await raw.post(
            balanced.url,
            json=initialize,
            headers={**headers, "Authorization": f"Bearer {SERVER_TOKEN}", "Host": f"evil.example:{port}"},
        )
        assert rebound.status_code == 421 and rebound.text == "Invalid Host header"
        # a body over the nodes' own limit (4 MiB) is refused at the edge, as a node would refuse it
        padded = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"' + b" " * (4 * 1024 * 1024) + b"}"
        large = await raw.post(
            balanced.url, content=padded, headers={**headers, "Authorization": f"Bearer {SERVER_TOKEN}"}
        )
        assert large.status_code == 413
    # one under it reaches a node (nginx's default limit, 1 MiB, would refuse it), which answers for itself
    async with http_client(balanced.url, await register(balanced, "erin"), mode=STATELESS) as erin:
        error = await call_error(erin, "create_task", title="huge", description="x" * 3_000_000)
    assert "is 3000000 characters" in error, error
