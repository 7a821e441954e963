"""Fair share at the HTTP entry (server/lanes.py `Turns`): one agent flooding a real `hiveboard serve --http`
with reads, memory or messages does not starve another agent, and its own work still gets done.

The flooding agent runs in a process of its own (so its client's work does not slow the measured client),
eight calls at once; the other agent's get_board is timed quiet, then during the flood, in the same test.
The bound is a generous ratio (never an absolute time): without the turns a read flood took get_board to
5-6x its quiet p50 on this machine; bench/bench_fairness.py has the figures (with them: 1.0-1.6x)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import anyio
import pytest
from conftest import START_TIMEOUT, agent_token, call, http_client, serve_http, stop_process

from hiveboard.board.db import Store
from hiveboard.board.models import Artifact, NewTask
from hiveboard.board.tasks import Board

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 3.0  # the flood's p50 over the quiet p50; the bench's target is 2x, the test's bound leaves room for noise
CALLS = 60

# the flooding agent: `loops` clients of one token, each calling as fast as answers come, for `seconds`;
# prints its counts of answered and refused calls as one JSON line at the end
FLOOD = r"""
import json, sys, time
import anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

url, token, kind, loops, seconds, target = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
counts = {"ok": 0, "refused": 0, "why": None}

def request(n):
    if kind == "reads":
        return "get_task", {"task_id": target, "full": True}
    if kind == "memory":
        return "remember", {"items": [{"text": f"note {n}.{i}: " + "m" * 19_980} for i in range(50)]}
    return "publish_message", {"intent": "info", "recipient": "everyone", "content": "b" * 64_000}

async def loop(end):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    async with Client(streamable_http_client(url, http_client=http)) as c:
        n = 0
        while time.monotonic() < end:
            n += 1
            result = await c.call_tool(*request(n))
            counts["refused" if result.is_error else "ok"] += 1
            if result.is_error and counts["why"] is None:
                counts["why"] = result.content[0].text

async def main():
    end = time.monotonic() + seconds
    print("flooding", flush=True)
    async with anyio.create_task_group() as tg:
        for _ in range(loops):
            tg.start_soon(loop, end)

anyio.run(main)
print(json.dumps(counts), flush=True)
"""


def huge_card(home, agent: str) -> int:
    """A card of ~4 MB (its output and 20 artifacts at their limits), and 30 ordinary cards for get_board."""
    board = Board(Store(home / "hiveboard.db"))
    try:
        for n in range(30):
            board.create("worker", NewTask(title=f"card {n}"))
        card = board.create(agent, NewTask(title="a very large hand-in"))
        claim = board.claim(agent, card.id)
        artifacts = [Artifact(name=f"src/part{n}.py", content=f"# {n}\n" + "x" * 199_000) for n in range(20)]
        board.complete(agent, card.id, claim.token, output="z" * 199_000, artifacts=artifacts)
        return card.id
    finally:
        board.store.close()


async def get_board_p50(url: str, token: str) -> float:
    lat = []
    async with http_client(url, token) as c:
        for _ in range(5):
            await call(c, "get_board")
        for _ in range(CALLS):
            started = time.perf_counter()
            await call(c, "get_board")
            lat.append(time.perf_counter() - started)
            await anyio.sleep(0.005)  # an agent between calls, not a flood of its own
    return statistics.median(lat)


@pytest.mark.parametrize("kind", ["reads", "memory", "messages"])
async def test_one_agent_flooding_does_not_starve_another(tmp_path, kind):
    home = tmp_path / "home"
    flooder, worker = agent_token(home, "flooder"), agent_token(home, "worker")
    target = huge_card(home, "flooder")
    proc, url = serve_http(home)
    flood = None
    try:
        quiet = await get_board_p50(url, worker)
        flood = subprocess.Popen(
            # at nice 10, as in the bench: its client's work must not take this 2-core machine's other core
            ["nice", "-n", "10", sys.executable, "-c", FLOOD, url, flooder, kind, "8", "12", str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert flood.stdout.readline().strip() == "flooding", flood.stderr.read()
        await anyio.sleep(2)  # the flood under way (and, for memory, its accepted items being indexed)
        loud = await get_board_p50(url, worker)
        out, err = flood.communicate(timeout=START_TIMEOUT)
        assert flood.returncode == 0, err
        counts = json.loads(out.strip().splitlines()[-1])
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
        stop_process(proc)
    assert loud <= BOUND * quiet, (
        f"during a {kind} flood the other agent's get_board p50 was {loud * 1000:.2f} ms, "
        f"{loud / quiet:.1f}x its quiet {quiet * 1000:.2f} ms"
    )
    assert counts["ok"] > 0, counts  # the flooding agent's own work still completes
    if kind != "reads":  # its flood meets its quota: refused calls, nothing written for them
        assert counts["refused"] > 0, counts


async def test_a_waiting_call_does_not_hold_up_the_same_agents_next_calls(tmp_path):
    """One request of an agent is served at a time, but a call that waits steps aside while it waits."""
    home = tmp_path / "home"
    alice, bob = agent_token(home, "alice"), agent_token(home, "bob")
    proc, url = serve_http(home)
    try:
        async with http_client(url, alice) as waiting, http_client(url, alice) as busy, http_client(url, bob) as b:
            got: dict = {}

            async def wait_for_mail() -> None:
                got["inbox"] = await call(waiting, "get_messages", wait_seconds=60)

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_mail)
                await anyio.sleep(0.5)  # the wait under way
                with anyio.fail_after(30):  # were it held behind the wait, this would take the wait's 60 s
                    for n in range(5):
                        await call(busy, "create_task", title=f"while waiting {n}")
                    claimed = await call(busy, "claim_task")
                    seen = await call(busy, "get_board")
                assert claimed["claimed"] and seen
                assert "inbox" not in got  # still waiting
                await call(b, "publish_message", intent="info", recipient="alice", content="done waiting?")
            assert [m["content"] for m in got["inbox"]["messages"]] == ["done waiting?"]
    finally:
        stop_process(proc)
