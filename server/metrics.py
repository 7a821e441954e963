"""`GET /metrics`: the board in Prometheus' text format, for a Prometheus server that scrapes it.

Every figure is read from the store when Prometheus asks (a custom collector of `prometheus_client`), so
every node of a PostgreSQL board reports the same board, and nothing is counted twice or lost across a
restart; only what the store does not keep is this process's own: its memory (the library's process
collector) and the quota refusals it answered (a refused write writes nothing, board/quotas.py).

The endpoint is the operator's: the server token (HIVEBOARD_HTTP_TOKEN) or the token of an agent with an
operator role, as `Authorization: Bearer …` (Prometheus' `authorization` in a scrape config). It shares the
path with the web board's metrics page: a request with an Authorization header, or one that asks for
Prometheus' formats (Prometheus' Accept names them), is answered here; any other (a browser) gets the page.
"""

from __future__ import annotations

import hmac
import json
import os
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from hiveboard.board.agents import OPERATOR_ROLES
from hiveboard.board.models import STATUSES

from . import lanes
from .identity import bearer_token
from .web.auth import host_allowed

if TYPE_CHECKING:
    from hiveboard.board.tasks import Board

PATH = "/metrics"
# seconds a review round takes, from a quick analyser pass to an LLM critic's slowest answer
REVIEW_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class BoardCollector(Collector):
    """The board's state, read in one snapshot of the store at each scrape."""

    def __init__(self, board: Board):
        self.board = board

    def collect(self):
        store = self.board.store
        now = time.time()
        with store.read() as db:
            cards = db.execute("SELECT status, task_type, count(*) FROM tasks GROUP BY status, task_type").fetchall()
            claims = db.execute(
                "SELECT count(*) FROM tasks WHERE status = 'in_progress' AND assignee IS NOT NULL "
                "AND lease_expires_at > ?",
                [now],
            ).fetchone()[0]
            verdicts = db.execute(
                "SELECT coalesce(verdict, 'none'), count(*) FROM reviews WHERE status = 'finished' GROUP BY 1"
            ).fetchall()
            durations = [
                r[0]
                for r in db.execute(
                    "SELECT finished_at - started_at FROM reviews WHERE status = 'finished' "
                    "AND started_at IS NOT NULL AND finished_at IS NOT NULL"
                ).fetchall()
            ]
            queue = db.execute(
                "SELECT status, count(*) FROM reviews WHERE status IN ('queued', 'running') GROUP BY status"
            ).fetchall()
            messages = db.execute("SELECT intent, count(*) FROM messages GROUP BY intent").fetchall()
            memory = db.execute("SELECT kind, count(*) FROM memory_items WHERE deprecated = 0 GROUP BY kind").fetchall()
            lag, oldest = db.execute("SELECT count(*), min(queued_at) FROM memory_outbox").fetchone()
            worktrees = db.execute("SELECT repo, path FROM worktrees WHERE removed_at IS NULL").fetchall()

        g = GaugeMetricFamily("hiveboard_cards", "Cards on the board, by status and type", labels=["status", "type"])
        found = {(s, t): n for s, t, n in cards}
        for status in STATUSES:  # every status, so a column that empties reads 0 rather than vanishing
            for task_type in sorted({t for _, t in found} or {"code"}):
                g.add_metric([status, task_type], found.get((status, task_type), 0))
        yield g
        yield GaugeMetricFamily("hiveboard_claims", "Cards held under a live claim", value=claims)

        c = CounterMetricFamily("hiveboard_reviews", "Finished review rounds, by verdict", labels=["verdict"])
        for verdict, n in verdicts:
            c.add_metric([verdict], n)
        yield c
        yield _histogram("hiveboard_review_duration_seconds", "How long finished review rounds ran", durations)
        q = GaugeMetricFamily("hiveboard_review_queue", "Review rounds waiting or running", labels=["state"])
        held = dict(queue)
        for state in ("queued", "running"):
            q.add_metric([state], held.get(state, 0))
        yield q

        m = GaugeMetricFamily("hiveboard_messages", "Messages posted, by intent", labels=["intent"])
        for intent, n in messages:
            m.add_metric([intent], n)
        yield m
        k = GaugeMetricFamily("hiveboard_memory_items", "Memory items in use, by kind", labels=["kind"])
        for kind, n in memory:
            k.add_metric([kind], n)
        yield k
        yield GaugeMetricFamily(
            "hiveboard_memory_index_lag_items", "Memory items not yet in the vector index", value=lag
        )
        yield GaugeMetricFamily(
            "hiveboard_memory_index_lag_seconds",
            "Age of the oldest memory item waiting for the vector index (0 when none waits)",
            value=max(0.0, now - oldest) if oldest is not None else 0.0,
        )

        r = CounterMetricFamily(
            "hiveboard_quota_refusals",
            "Writes this process refused because an agent had used its quota, by agent and kind",
            labels=["agent", "kind"],
        )
        for (agent, kind), n in sorted(self.board.quotas.refused.items()):
            r.add_metric([agent, kind], n)
        yield r

        w = GaugeMetricFamily("hiveboard_worktrees", "Live worktrees of cards, by repository", labels=["repo"])
        d = GaugeMetricFamily("hiveboard_worktree_bytes", "Disk used by live worktrees, by repository", labels=["repo"])
        per: dict[str, list[str]] = {}
        for repo, path in worktrees:
            per.setdefault(repo, []).append(path)
        for repo, paths in sorted(per.items()):
            w.add_metric([repo], len(paths))
            d.add_metric([repo], sum(_disk(p) for p in paths))
        yield w
        yield d


def _histogram(name: str, documentation: str, values: list[float]) -> HistogramMetricFamily:
    buckets = [(str(edge), sum(1 for v in values if v <= edge)) for edge in REVIEW_BUCKETS]
    buckets.append(("+Inf", len(values)))
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=float(sum(values)))


def _disk(path: str) -> int:
    """Bytes of the files under `path` (0 once it is gone); links are not followed."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while walking
                pass
    return total


def registry(board: Board) -> CollectorRegistry:
    """A registry of its own (not the library's global one): the board's collector and this process's."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BoardCollector(board))
    ProcessCollector(registry=reg)
    return reg


class Metrics:
    """ASGI middleware in front of the site: `GET /metrics` for Prometheus (see the module docstring), the
    rest passed on."""

    def __init__(self, app, board: Board, server_token: str | None, hosts: list[str]):
        self.app, self.board, self.server_token, self.hosts = app, board, server_token, hosts
        self.registry = registry(board)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != PATH:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        accept = headers.get("accept", "")
        if "authorization" not in headers and "openmetrics" not in accept and "text/plain" not in accept:
            return await self.app(scope, receive, send)  # a person's browser: the web board's page
        if not host_allowed(headers.get("host"), self.hosts):
            return await _answer(send, 421, f"Host {headers.get('host')!r} is not allowed; scrape 127.0.0.1:<port>")
        if scope.get("method") not in ("GET", "HEAD"):
            return await _answer(send, 405, "/metrics answers GET only")
        if problem := await self._refused(bearer_token(headers.get("authorization"))):
            return await _answer(send, problem[0], problem[1])
        body = await lanes.off_loop(generate_latest, self.registry)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode()), (b"cache-control", b"no-store")],
            }
        )
        await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})

    async def _refused(self, token: str | None) -> tuple[int, str] | None:
        if token is None:
            return 401, (
                "/metrics needs 'Authorization: Bearer <token>': the server token, or the token of an agent with the "
                f"role {' or '.join(OPERATOR_ROLES)} (hiveboard agent add prometheus --role lead)"
            )
        if self.server_token is not None and hmac.compare_digest(token.encode(), self.server_token.encode()):
            return None
        agent = await lanes.lookup(self.board.agents.by_token, token)
        if agent is None:
            return 401, "the bearer token matches no agent; give Prometheus the server token or an operator's token"
        if agent.role not in OPERATOR_ROLES:
            return 403, (
                f"{agent.name} has the role {agent.role or 'none'}, and /metrics is the operator's; use the server "
                f"token or an agent with the role {' or '.join(OPERATOR_ROLES)}"
            )
        return None


async def _answer(send, status: int, sentence: str) -> None:
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="hiveboard"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"error": sentence}).encode()})
