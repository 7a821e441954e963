"""`GET /metrics`: a real Prometheus server scrapes it with the operator's bearer token, and PromQL counts the
reviews; the endpoint is the operator's alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from conftest import agent_token, call, clean_env, http_client, serve_http, stop_process
from pg_cluster import free_port

pytestmark = pytest.mark.anyio

OPERATOR = "s3rver-t0ken-for-the-operator"


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("HIVEBOARD_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("Prometheus is not installed (apt-get install prometheus); CI requires it")
        pytest.skip("no Prometheus here (apt-get install prometheus)")
    return found


def _start_prometheus(binary: str, root: Path, target: str, token_file: Path) -> tuple[subprocess.Popen, str]:
    """Prometheus on loopback, scraping `target`'s /metrics every second with the bearer token in token_file."""
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: hiveboard\n"
        "    scrape_interval: 1s\n"
        "    metrics_path: /metrics\n"
        f"    authorization:\n      type: Bearer\n      credentials_file: {token_file}\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, f"http://127.0.0.1:{port}"


def _query(api: str, promql: str) -> float | None:
    try:
        answer = httpx.get(f"{api}/api/v1/query", params={"query": promql}, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None
    result = answer.get("data", {}).get("result", [])
    return float(result[0]["value"][1]) if result else None


async def test_prometheus_scrapes_the_review_count_with_the_operator_token(tmp_path):
    binary = _prometheus()
    home = tmp_path / "home"
    token_file = tmp_path / "token"
    token_file.write_text(OPERATOR)
    alice = agent_token(home, "alice")
    proc, url = serve_http(home, "--token-file", str(token_file), env=clean_env())
    root = Path(tempfile.mkdtemp(prefix="hiveboard-prom-"))
    prometheus = None
    try:
        async with http_client(url, alice) as client:
            for n in range(3):
                card = await call(client, "create_task", title=f"write the notes {n}", task_type="docs")
                claim = await call(client, "claim_task", task_id=card["id"])
                await call(client, "complete_task", task_id=card["id"], token=claim["token"], output=f"notes {n}")
            for n in range(1, 4):
                review = await call(client, "get_review", task_id=n, wait_seconds=120)
                assert review["rounds"] and review["rounds"][-1].get("synthesis"), review
        target = url.removeprefix("http://").removesuffix("/mcp")
        prometheus, api = _start_prometheus(binary, root, target, token_file)
        deadline, count = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            count = _query(api, "sum(hiveboard_reviews_total)")
            if count == 3:
                break
            time.sleep(0.5)
        assert count == 3, f"PromQL sum(hiveboard_reviews_total) = {count}"
        up = _query(api, 'up{job="hiveboard"}')
        assert up == 1  # the scrape itself succeeds (the token was accepted)
        assert _query(api, 'sum(hiveboard_cards{type="docs"})') == 3
        assert _query(api, "hiveboard_review_duration_seconds_count") == 3
        assert (_query(api, "process_resident_memory_bytes") or 0) > 0
    finally:
        if prometheus is not None:
            stop_process(prometheus)
        shutil.rmtree(root, ignore_errors=True)
        stop_process(proc)


async def test_metrics_are_the_operators_alone(tmp_path):
    home = tmp_path / "home"
    coder = agent_token(home, "bob")
    lead = agent_token(home, "lee")  # made a lead below
    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board

    board = Board(Store(home / "hiveboard.db"))
    with board.store.write() as db:
        db.execute("UPDATE agents SET role = 'lead' WHERE name = 'lee'")
    board.store.close()
    token_file = tmp_path / "token"
    token_file.write_text(OPERATOR)
    proc, url = serve_http(home, "--token-file", str(token_file), env=clean_env())
    metrics = url.removesuffix("/mcp") + "/metrics"
    try:
        scraper = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"}
        none = httpx.get(metrics, headers=scraper)  # a scrape config without the token
        assert none.status_code == 401 and "Authorization: Bearer" in none.json()["error"]
        wrong = httpx.get(metrics, headers={"Authorization": "Bearer not-a-token"})
        assert wrong.status_code == 401
        agent = httpx.get(metrics, headers={"Authorization": f"Bearer {coder}"})
        assert agent.status_code == 403 and "operator" in agent.json()["error"]
        for token in (OPERATOR, lead):
            ok = httpx.get(metrics, headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/plain")
            assert 'hiveboard_cards{status="todo",type="code"} 0.0' in ok.text
        for accept in ("text/html,application/xhtml+xml,*/*;q=0.8", "*/*"):  # a browser, curl: the web board's page
            page = httpx.get(metrics, headers={"Accept": accept}, follow_redirects=False)
            assert page.status_code in (200, 303) and "hiveboard_cards" not in page.text
    finally:
        stop_process(proc)


@pytest.mark.backends("sqlite", "postgresql")
def test_the_collector_reads_the_board_at_each_scrape(store_target):
    """The figures come from the store when asked (a second scrape sees the new card), and a quota refusal,
    which writes nothing, is counted by the process that refused it."""
    from prometheus_client.exposition import generate_latest

    from hiveboard.board.db import Store
    from hiveboard.board.errors import OverQuota
    from hiveboard.board.messages import NewMessage
    from hiveboard.board.models import NewTask
    from hiveboard.board.quotas import QuotaConfig
    from hiveboard.board.tasks import Board
    from hiveboard.server.metrics import registry

    board = Board(Store(store_target), quotas=QuotaConfig(messages_per_minute=1))
    try:
        reg = registry(board)
        board.agents.ensure("alice")
        card = board.create("alice", NewTask(title="t", task_type="docs"))
        assert 'hiveboard_cards{status="todo",type="docs"} 1.0' in generate_latest(reg).decode()
        board.claim("alice", card.id)
        board.messages.publish("alice", NewMessage(intent="info", content="one"))
        with pytest.raises(OverQuota):
            board.messages.publish("alice", NewMessage(intent="info", content="two"))
        text = generate_latest(reg).decode()
        assert 'hiveboard_cards{status="in_progress",type="docs"} 1.0' in text
        assert "hiveboard_claims 1.0" in text
        assert 'hiveboard_messages{intent="info"} 1.0' in text
        assert 'hiveboard_quota_refusals_total{agent="alice",kind="message"} 1.0' in text
        assert "process_resident_memory_bytes" in text
    finally:
        board.store.close()
