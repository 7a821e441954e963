"""A review's life when the card moves on: leaving review by any path cancels the card's unfinished jobs,
a running job never acts on a card that moved on, the next cycle starts at round 1, and a critic still
running never keeps the server process alive at shutdown."""

from __future__ import annotations

import signal

import anyio
import pytest
from conftest import START_TIMEOUT, agent_token, call, http_client, serve_http
from reviewing import NO_BUILTINS, hand_in, llm_critic

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


async def test_a_card_taken_out_of_review_by_hand_cancels_its_job_and_starts_again_at_round_1(connect):
    async with connect("alice", wants_review=lambda task: True) as alice, connect("lee", role="lead") as lee:
        card = await hand_in(alice)  # no worker runs: the job stays queued
        # a person takes it (its author may not: that would skip its review)
        await call(lee, "update_task", task_id=card["id"], status="needs_human", reason="the review is stuck")
        trail = await call(alice, "get_review", task_id=card["id"], full=True)
        assert [r["status"] for r in trail["rounds"]] == ["cancelled"]
        await call(alice, "update_task", task_id=card["id"], status="todo")
        await hand_in(alice, card["id"])
        trail = await call(alice, "get_review", task_id=card["id"], full=True)
        assert [(r["round"], r["status"]) for r in trail["rounds"]] == [(1, "cancelled"), (1, "queued")]


async def test_a_passed_card_in_the_merge_queue_says_what_it_waits_for(connect, board):
    from hiveboard.board import cards
    from hiveboard.board.db import now
    from hiveboard.board.models import Commit

    async with connect("alice", wants_review=lambda task: True) as alice:
        card = await hand_in(alice)  # no worker runs: the job stays queued
        assert "waiting_for" not in await call(alice, "get_review", task_id=card["id"])
        with board.store.write() as db:  # its review passed a commit of repository calc: the queue takes it
            row = cards.row(db, card["id"])
            commit = Commit(repo="calc", ref="hb/alice/1", sha="ab12" * 10, base_sha="cd34" * 10)
            board.merges.enqueue(db, row, commit, "review", "review", now(), "PASS")
        trail = await call(alice, "get_review", task_id=card["id"])
        assert trail["status"] == "review"
        assert trail["waiting_for"].startswith(
            f"the merge: the passed commit {'ab12' * 3} waits in the merge queue of calc"
        )


async def test_a_running_review_never_acts_on_a_card_that_moved_on(connect, reviewer, fake_llm, board):
    fake_llm.delay["*"] = 3
    engine = reviewer(
        ReviewConfig(
            critics={**NO_BUILTINS, "slow": llm_critic(fake_llm, "correctness")}, task_types={"code": ["correctness"]}
        )
    )
    async with connect("alice", review=engine) as alice, connect("lee", role="lead", review=engine) as lee:
        card = await hand_in(alice)
        with anyio.fail_after(30):  # readiness by signal: the critic has asked the model
            while not fake_llm.calls():
                await anyio.sleep(0.02)
        await call(lee, "update_task", task_id=card["id"], status="needs_human", reason="a person takes it")
        with anyio.fail_after(30):  # the worker notices and drops the job
            while board.reviews.stats().running:
                await anyio.sleep(0.05)
        await anyio.sleep(3.5)  # the critic's late answer arrives and is refused
        trail = await call(alice, "get_review", task_id=card["id"], full=True)
        task = await call(alice, "get_task", task_id=card["id"])
        pool = await call(alice, "get_messages", box="pool", task_id=card["id"], limit=100)
    assert trail["rounds"][-1]["status"] == "cancelled" and trail["rounds"][-1].get("verdict") is None
    assert [c["status"] for c in trail["rounds"][-1]["critiques"]] == ["cancelled"]
    assert task["status"] == "needs_human" and task["history"][-1]["action"] == "escalated"
    assert not {"approval", "critique"} & {m["intent"] for m in pool["messages"]}


@pytest.mark.slow
async def test_a_critic_still_running_does_not_keep_the_server_alive(tmp_path, fake_llm):
    fake_llm.delay["*"] = 3600
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "\n".join(
            [
                "[review]",
                "critic_timeout = 3600",
                "agent_deadline = 0",
                "[review.task_types]",
                'code = ["correctness"]',
                *[
                    line
                    for b in ("bandit", "ruff", "ruff-style", "acceptance")
                    for line in (f"[review.critics.{b}]", "enabled = false")
                ],
                "[review.critics.slow]",
                'lens = "correctness"',
                'backend = "llm"',
                'model = "m"',
                f'base_url = "{fake_llm.url}"',
                'api_key_env = "HIVEBOARD_TEST_UNSET_KEY"',
            ]
        )
        + "\n"
    )
    token = agent_token(home, "alice")
    proc, url = serve_http(home)
    try:
        async with http_client(url, token) as alice:
            await hand_in(alice)
            with anyio.fail_after(START_TIMEOUT):
                while not fake_llm.calls():
                    await anyio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=START_TIMEOUT)  # the critic would answer only after an hour, within its timeout
        assert proc.returncode is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
