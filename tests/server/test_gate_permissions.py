"""Who may change what, through MCP, so that the review gate cannot be walked around: a card's brief (title,
description, labels, acceptance criteria, needs_approval) is its creator's or an operator's; its acceptance
criteria are frozen once it has been claimed; whether it needs a person's approval is decided when it is
made; only a person takes a card out of review. Each refusal is one sentence and writes nothing."""

from __future__ import annotations

import re

import pytest
from conftest import START_TIMEOUT, call, call_error

from hiveboard.critics.config import CriticConfig, HumanApproval, ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def approval_config(fake) -> ReviewConfig:
    """One LLM critic (the fake passes everything) and a person's approval for cards labelled release."""
    off = CriticConfig(lens="none", backend="ruff", enabled=False)
    critic = CriticConfig(lens="correctness", backend="llm", model="fake-model", base_url=fake.url, api_key_env=None)
    return ReviewConfig(
        critics={"bandit": off, "ruff": off, "ruff-style": off, "acceptance": off, "llm-correctness": critic},
        task_types={"code": ["correctness"]},
        human_approval=HumanApproval(labels=["release"]),
    )


async def hand_in(client, task_id: int | None = None, *, output: str = "done", title: str = "do it") -> dict:
    """Claim a card (made now unless task_id is given) and complete it."""
    if task_id is None:
        task_id = (await call(client, "create_task", title=title))["id"]
    claim = await call(client, "claim_task", task_id=task_id)
    return await call(client, "complete_task", task_id=task_id, token=claim["token"], output=output)


async def verdict(client, task_id: int) -> dict:
    """The card's review trail once its latest round has finished."""
    trail = await call(client, "get_review", task_id=task_id, wait_seconds=START_TIMEOUT, full=True)
    assert trail["rounds"] and trail["rounds"][-1]["status"] == "finished", trail
    return trail


def written(board) -> tuple[int, ...]:
    """Rows in every table a refused update could touch, and the sum of the cards' versions."""
    db = board.store.db
    return tuple(
        db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("tasks", "task_history", "messages", "inbox", "reviews")
    ) + (db.execute("SELECT coalesce(sum(version), 0) FROM tasks").fetchone()[0],)


async def refused(board, client, reader, task_id: int, **args) -> str:
    """update_task(task_id, **args) by `client` must fail in one sentence and leave the card as it was."""
    before, rows = await call(reader, "get_task", task_id=task_id), written(board)
    error = await call_error(client, "update_task", task_id=task_id, **args)
    assert not re.search(r"[.;!?]\s+[A-Z]", error), f"more than one sentence: {error}"
    assert await call(reader, "get_task", task_id=task_id) == before and written(board) == rows, error
    return error


async def test_the_holder_cannot_drop_the_label_that_asks_for_a_person(connect, reviewer, fake_llm, board):
    engine = reviewer(approval_config(fake_llm))
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        card = await call(alice, "create_task", title="ship 1.0", labels=["release"])
        assert card["needs_approval"] == "label release"
        claim = await call(bob, "claim_task", task_id=card["id"])
        error = await refused(board, bob, alice, card["id"], token=claim["token"], labels=[])
        assert "only task" in error and "creator (alice)" in error and "labels" in error
        # even its creator taking the label away leaves the requirement the card was made with
        relabelled = await call(alice, "update_task", task_id=card["id"], labels=["docs"])
        assert relabelled["labels"] == ["docs"] and relabelled["needs_approval"] == "label release"
        await call(bob, "complete_task", task_id=card["id"], token=claim["token"], output="shipped")
        last = (await verdict(bob, card["id"]))["rounds"][-1]
        task = await call(alice, "get_task", task_id=card["id"])
    assert (last["verdict"], last["outcome"]) == ("PASS", "needs_human")
    assert task["status"] == "needs_human" and "label release" in task["blocked_reason"]


async def test_a_creator_on_its_own_card_cannot_clear_what_the_configuration_asked_for(
    connect, reviewer, fake_llm, board
):
    engine = reviewer(approval_config(fake_llm))
    async with connect("alice", review=engine) as alice, connect("lee", role="lead", review=engine) as lee:
        card = await call(alice, "create_task", title="ship 1.0", labels=["release"])
        claim = await call(alice, "claim_task", task_id=card["id"])
        error = await refused(board, alice, lee, card["id"], token=claim["token"], needs_approval=False)
        assert "remove that label" in error  # the label still asks for it
        await call(alice, "update_task", task_id=card["id"], token=claim["token"], labels=[])
        error = await refused(board, alice, lee, card["id"], token=claim["token"], needs_approval=False)
        assert "only an agent with the role human or lead may clear" in error
        # an operator may: the card then goes through review to done like any other
        cleared = await call(lee, "update_task", task_id=card["id"], needs_approval=False)
        assert cleared.get("needs_approval") is None
        await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="shipped")
        last = (await verdict(alice, card["id"]))["rounds"][-1]
    assert (last["verdict"], last["outcome"]) == ("PASS", "done")


async def test_needs_approval_asked_at_creation_is_kept_and_changed_only_by_its_creator_or_an_operator(
    connect, reviewer, fake_llm, board
):
    engine = reviewer(approval_config(fake_llm))
    async with (
        connect("alice", review=engine) as alice,
        connect("bob", review=engine) as bob,
        connect("lee", role="lead", review=engine) as lee,
    ):
        card = await call(alice, "create_task", title="migrate the schema", needs_approval=True)
        assert (await call(bob, "get_task", task_id=card["id"]))["needs_approval"] == "asked by its creator"
        error = await refused(board, bob, alice, card["id"], needs_approval=False)
        assert "only task" in error and "needs_approval" in error
        assert (await call(alice, "update_task", task_id=card["id"], needs_approval=False)).get(
            "needs_approval"
        ) is None  # its creator asked for it, so its creator may take it back
        asked = await call(lee, "update_task", task_id=card["id"], needs_approval=True)
        assert asked["needs_approval"] == "asked by lee"
        error = await refused(board, alice, bob, card["id"], needs_approval=False)
        assert "asked by lee" in error and "only an agent with the role human or lead" in error
        await hand_in(bob, card["id"], output="migrated")
        last = (await verdict(bob, card["id"]))["rounds"][-1]
        task = await call(alice, "get_task", task_id=card["id"])
    assert (last["verdict"], last["outcome"]) == ("PASS", "needs_human")
    assert task["status"] == "needs_human" and "asked by lee" in task["blocked_reason"]


async def test_a_bystander_cannot_edit_an_unheld_card_its_creator_can(connect, board):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(
            alice,
            "create_task",
            title="add search",
            description="full text",
            labels=["api"],
            acceptance_criteria=["$ python -m pytest -q"],
        )
        for change in (
            dict(title="add nothing"),
            dict(description="skip it"),
            dict(labels=[]),
            dict(acceptance_criteria=["$ python leak.py"]),
            dict(needs_approval=False),
        ):
            error = await refused(board, bob, alice, card["id"], **change)
            assert "only task" in error and "creator (alice)" in error, change
        edited = await call(
            alice,
            "update_task",
            task_id=card["id"],
            title="add fuzzy search",
            description="full text, fuzzy",
            labels=["api", "search"],
            acceptance_criteria=["$ python -m pytest -q tests/test_search.py"],
        )
        task = await call(bob, "get_task", task_id=card["id"])
    assert edited["title"] == "add fuzzy search" and edited["labels"] == ["api", "search"]
    assert task["description"] == "full text, fuzzy"
    assert task["acceptance_criteria"] == ["$ python -m pytest -q tests/test_search.py"]


async def test_acceptance_criteria_are_frozen_once_the_card_has_been_claimed(connect, board):
    async with connect("alice") as alice, connect("bob") as bob:
        card = await call(alice, "create_task", title="parse dates", acceptance_criteria=["$ python -m pytest -q"])
        claim = await call(bob, "claim_task", task_id=card["id"])
        leak = ["$ python -m pytest -q", "$ python leak.py"]
        error = await refused(board, bob, alice, card["id"], token=claim["token"], acceptance_criteria=leak)
        assert "only task" in error and "acceptance_criteria" in error
        error = await refused(board, alice, bob, card["id"], acceptance_criteria=leak)
        assert "frozen since it was first claimed" in error and "create_task" in error
        await call(bob, "release_task", task_id=card["id"], token=claim["token"])
        assert "frozen" in await refused(board, alice, bob, card["id"], acceptance_criteria=leak)  # claimed once
        renamed = await call(alice, "update_task", task_id=card["id"], title="parse ISO dates")
        # a card its creator works on itself is frozen just the same
        own = await call(bob, "create_task", title="format dates", acceptance_criteria=["$ python -m pytest -q"])
        own_claim = await call(bob, "claim_task", task_id=own["id"])
        assert "frozen" in await refused(
            board, bob, alice, own["id"], token=own_claim["token"], acceptance_criteria=leak
        )
    assert renamed["title"] == "parse ISO dates"


async def test_the_author_cannot_push_its_own_review_to_a_human(connect, board):
    async with (
        connect("alice", wants_review=lambda task: True) as alice,
        connect("bob", wants_review=lambda task: True) as bob,
    ):  # review on, no worker: the job waits
        card = await call(alice, "create_task", title="add two numbers")
        await hand_in(bob, card["id"], output="def add(a, b): return a - b")
        error = await refused(board, bob, alice, card["id"], status="needs_human", reason="the review is stuck")
        assert "only a person" in error and "from review to needs_human" in error
        trail = await call(alice, "get_review", task_id=card["id"])
    assert trail["status"] == "review" and trail["rounds"][-1]["status"] == "queued"


async def test_a_bystander_cannot_cancel_another_agents_review_a_person_can(connect, board):
    async with (
        connect("alice", wants_review=lambda task: True) as alice,
        connect("carol", wants_review=lambda task: True) as carol,
        connect("lee", role="human", wants_review=lambda task: True) as lee,
    ):
        card = await hand_in(alice, title="add two numbers")
        error = await refused(board, carol, alice, card["id"], status="needs_human", reason="looks stuck")
        assert "only a person" in error
        moved = await call(lee, "update_task", task_id=card["id"], status="needs_human", reason="no review worker")
        trail = await call(alice, "get_review", task_id=card["id"])
    assert moved["status"] == "needs_human" and trail["rounds"][-1]["status"] == "cancelled"


async def test_without_a_review_a_card_that_needs_a_person_waits_for_one(connect):
    async with connect("carol") as carol, connect("alice") as alice:  # no review engine: nothing reviews
        card = await call(carol, "create_task", title="ship it", needs_approval=True)
        claim = await call(alice, "claim_task", task_id=card["id"])
        done = await call(alice, "complete_task", task_id=card["id"], token=claim["token"], output="shipped")
        assert (
            done["status"] == "needs_human"
            and "approval" in (await call(carol, "get_task", task_id=card["id"]))["blocked_reason"]
        )
        plain = await call(carol, "create_task", title="tidy up")
        claim = await call(alice, "claim_task", task_id=plain["id"])
        assert (await call(alice, "complete_task", task_id=plain["id"], token=claim["token"], output="tidied"))[
            "status"
        ] == "done"
