"""Review jobs across server processes: a server killed mid-review resumes the job on restart, and two
servers on one data directory never run the same job. Real `hiveboard serve --http` subprocesses."""

from __future__ import annotations

import signal
import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from conftest import START_TIMEOUT, call, http_client, self_registered_token, serve_http, stop_process, until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def write_config(home: Path, fake_url: str, critics: dict[str, str]) -> None:
    """config.toml with one LLM critic per lens on the fake server and the built-in critics off."""
    home.mkdir(parents=True, exist_ok=True)
    lines = [
        "[review]",
        "worker_lease = 2",
        "poll_seconds = 0.2",
        "agent_deadline = 0",
        "[review.task_types]",
        f"code = {list(critics.values())!r}".replace("'", '"'),
    ]
    for builtin in ("bandit", "ruff", "ruff-style", "acceptance"):
        lines += [f"[review.critics.{builtin}]", "enabled = false"]
    for name, lens in critics.items():
        lines += [
            f"[review.critics.{name}]",
            f'lens = "{lens}"',
            'backend = "llm"',
            f'model = "{name}"',
            f'base_url = "{fake_url}"',
            'api_key_env = "HIVEBOARD_TEST_UNSET_KEY"',
        ]
    (home / "config.toml").write_text("\n".join(lines) + "\n")


async def test_a_server_killed_mid_review_resumes_the_job_on_restart(tmp_path, fake_llm):
    home = tmp_path / "home"
    write_config(home, fake_llm.url, {"quick": "correctness", "slow": "performance"})
    fake_llm.delay["performance"] = START_TIMEOUT  # the first server dies while this critic is still thinking
    first, url = serve_http(home)
    try:
        token = await self_registered_token(url, "alice")
        async with http_client(url, token) as c:
            card = await call(c, "create_task", title="cache the index", task_type="code")
            claim = await call(c, "claim_task", task_id=card["id"])
            await call(c, "complete_task", task_id=card["id"], token=claim["token"], output="added an LRU cache")
            await until(lambda: fake_llm.calls("performance"), what="the slow critic to be asked")

            def quick_done() -> bool:
                row = (
                    sqlite3.connect(home / "hiveboard.db")
                    .execute("SELECT status FROM critiques WHERE critic = 'quick'")
                    .fetchone()
                )
                return row == ("ok",)

            await until(quick_done, what="the quick critic's critique")
            trail = await call(c, "get_review", task_id=card["id"], full=True)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=START_TIMEOUT)
    finally:
        stop_process(first)
    assert trail["rounds"][0]["status"] == "running"

    fake_llm.delay["performance"] = 0
    second, url = serve_http(home)
    try:
        async with http_client(url, token) as c:
            trail = await call(c, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT, full=True)
            round1 = trail["rounds"][0]
            assert round1["status"] == "finished" and round1["attempts"] == 2
            assert {x["critic"]: x["status"] for x in round1["critiques"]} == {"quick": "ok", "slow": "ok"}
            assert (await call(c, "get_task", task_id=card["id"]))["status"] == "done"
            resumed = await call(c, "get_messages", box="pool", task_id=card["id"], intent="review.resumed")
            assert resumed["messages"]
    finally:
        stop_process(second)
    # the critic that had finished was not asked again; the interrupted one was
    assert len(fake_llm.calls("correctness")) == 1 and len(fake_llm.calls("performance")) == 2


async def test_two_servers_on_one_data_directory_never_run_the_same_job(tmp_path, fake_llm):
    home = tmp_path / "home"
    write_config(home, fake_llm.url, {"judge": "correctness"})
    fake_llm.delay["correctness"] = 0.5
    (a, url_a), (b, url_b) = serve_http(home), serve_http(home)
    cards = 8
    try:
        # four agents: one agent's jobs run one at a time (review.per_agent), so four keep both servers busy
        tokens = [await self_registered_token(url_a, name) for name in ("alice", "bob", "carol", "dave")]
        async with AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(http_client(url_a if n % 2 else url_b, token))
                for n, token in enumerate(tokens)
            ]
            ids = []
            for n in range(cards):
                client = clients[n % len(clients)]
                card = await call(client, "create_task", title=f"card {n}", task_type="code")
                claim = await call(client, "claim_task", task_id=card["id"])
                await call(client, "complete_task", task_id=card["id"], token=claim["token"], output=f"work {n}")
                ids.append(card["id"])
            for task_id in ids:
                trail = await call(clients[0], "get_review", task_id=task_id, wait_seconds=START_TIMEOUT, full=True)
                assert trail["rounds"][0]["status"] == "finished" and trail["rounds"][0]["attempts"] == 1
    finally:
        stop_process(a)
        stop_process(b)
    assert len(fake_llm.calls("correctness")) == cards  # each job's critic ran exactly once
    db = sqlite3.connect(home / "hiveboard.db")
    assert db.execute("SELECT count(*), count(DISTINCT review_id) FROM critiques").fetchone() == (cards, cards)
    pids = {worker.split(":")[1] for (worker,) in db.execute("SELECT worker FROM reviews")}
    assert pids == {str(a.pid), str(b.pid)}  # both servers took jobs
