"""Helpers for review tests: critic configs on the fake LLM, and driving a card through review."""

from __future__ import annotations

from conftest import START_TIMEOUT, call
from fake_llm import FakeLLM

from hiveboard.critics.config import CriticConfig

OFF = CriticConfig(lens="none", backend="ruff", enabled=False)
NO_BUILTINS = {"bandit": OFF, "ruff": OFF, "ruff-style": OFF, "acceptance": OFF, "integrity": OFF}


def llm_critic(fake: FakeLLM, lens: str, model: str = "fake-model", **extra) -> CriticConfig:
    return CriticConfig(lens=lens, backend="llm", model=model, base_url=fake.url, api_key_env=None, **extra)


async def hand_in(
    client,
    task_id: int | None = None,
    *,
    artifacts: list[dict] | None = None,
    output: str = "done",
    task_type: str = "code",
    title: str = "do the thing",
    criteria: list[str] | None = None,
) -> dict:
    """Create (unless task_id is given) and claim a card, complete it; returns the completed card."""
    if task_id is None:
        task_id = (
            await call(client, "create_task", title=title, task_type=task_type, acceptance_criteria=criteria or [])
        )["id"]
    claim = await call(client, "claim_task", task_id=task_id)
    assert claim["claimed"], claim
    return await call(
        client,
        "complete_task",
        task_id=task_id,
        token=claim["token"],
        output=output,
        summary=output[:100],
        artifacts=artifacts or [],
    )


async def verdict(client, task_id: int, timeout: float = START_TIMEOUT) -> dict:
    """Wait for the card's latest review round to finish; returns the trail (get_review)."""
    trail = await call(client, "get_review", task_id=task_id, wait_seconds=timeout, full=True)
    assert trail["rounds"] and trail["rounds"][-1]["status"] == "finished", trail
    return trail


def critic(round_: dict, name: str) -> dict:
    return next(c for c in round_["critiques"] if c["critic"] == name)
