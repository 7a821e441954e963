"""Acceptance tests the card's creator attaches: run against the claimer's work, beyond the claimer's reach."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import call, call_error, needs_sandbox
from reviewing import critic, verdict

from hiveboard.board.priority import BACKGROUND_NICE

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

SPEC = (
    "from slug import slugify\n\n\ndef test_lowercases_and_joins_words():\n    assert slugify('Hello World') == "
    "'hello-world'\n\n\ndef test_drops_punctuation():\n    assert slugify('Ready, set: go!') == 'ready-set-go'\n"
)
WRONG = "def slugify(text):\n    return text.lower().replace(' ', '-')\n"
RIGHT = "import re\n\n\ndef slugify(text):\n    return '-'.join(re.findall(r'[a-z0-9]+', text.lower()))\n"
# the claimer's attempts to get around the creator's tests
OWN_TEST = "from slug import slugify\n\n\ndef test_it():\n    assert slugify('a b') == 'a-b'\n"
SABOTAGE = (
    "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    items.clear()\n\n\n"
    "@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n"
    "    outcome.get_result().outcome = 'passed'\n"
)
FAKE_SPEC = "def test_lowercases_and_joins_words():\n    pass\n"


def art(name: str, content: str, kind: str = "code") -> dict:
    return {"name": name, "kind": kind, "content": content}


async def complete(client, task_id: int, artifacts: list[dict]) -> None:
    claim = await call(client, "claim_task", task_id=task_id)
    await call(client, "complete_task", task_id=task_id, token=claim["token"], output="slugify", artifacts=artifacts)


@needs_sandbox
async def test_hidden_creator_tests_judge_the_work_and_cannot_be_dodged(connect, reviewer):
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="slugify titles",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SPEC}], "hidden": True},
        )
        # the claimer sees that tests exist, not what they check; the creator sees them
        seen = (await call(alice, "claim_task", task_id=card["id"]))["task"]
        assert seen.get("acceptance_tests") is None and seen["hidden_tests"] == 1
        assert (await call(carol, "get_task", task_id=card["id"]))["acceptance_tests"]["files"][0]["content"] == SPEC
        await call(
            alice,
            "release_task",
            task_id=card["id"],
            token=(await call(alice, "claim_task", task_id=card["id"]))["token"],
        )

        await complete(
            alice,
            card["id"],
            [
                art("slug.py", WRONG),
                art("test_slug.py", OWN_TEST, "test"),
                art("conftest.py", SABOTAGE),
                art("test_spec.py", FAKE_SPEC, "test"),
            ],
        )
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        acceptance = critic(round1, "acceptance")
        assert round1["verdict"] == "FAIL" and acceptance["verdict"] == "FAIL"
        # its author reads that the hidden tests did not pass, and nothing of which or how (the per-test answer
        # would be an oracle on them); the card's creator reads which
        assert [i for i in acceptance["issues"] if i["hidden"]] == [
            next(i for i in acceptance["issues"] if i["category"] == "hidden-tests")
        ]
        assert "test_drops_punctuation" not in str(round1) and "AssertionError" not in str(round1)
        acceptance = critic((await call(carol, "get_review", task_id=card["id"], full=True))["rounds"][0], "acceptance")
        failed = [i for i in acceptance["issues"] if "card's acceptance tests" in (i["rule"] or "")]
        assert [i["location"] for i in failed] == ["test_spec.py::test_drops_punctuation"]
        # hidden: the name and the kind of failure, never the test's code or values
        assert "ready-set-go" not in str(acceptance) and "AssertionError" in failed[0]["description"]
        assert "the card's own acceptance test" in failed[0]["suggestion"]

        await complete(alice, card["id"], [art("slug.py", RIGHT), art("test_slug.py", OWN_TEST, "test")])
        round2 = (await verdict(alice, card["id"]))["rounds"][1]
        assert round2["verdict"] == "PASS" and round2["outcome"] == "done", round2["synthesis"]["brief"]
        round2 = (await call(carol, "get_review", task_id=card["id"], full=True))["rounds"][1]
        assert "2 of 2 runs passed in the sandbox" in critic(round2, "acceptance")["summary"]


@needs_sandbox
async def test_a_creator_command_runs_from_the_creator_files(connect, reviewer):
    engine = reviewer()
    check = "from slug import slugify\nassert slugify('A b') == 'a-b', slugify('A b')\nprint('checked')\n"
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="slugify",
            acceptance_tests={"files": [{"name": "check.py", "content": check}], "commands": ["$ python check.py"]},
        )
        await complete(alice, card["id"], [art("slug.py", RIGHT)])
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "PASS", round1["synthesis"]["brief"]
        assert "`python check.py`: passed" in critic(round1, "acceptance")["summary"]


async def test_acceptance_tests_are_bounded_and_checked(connect):
    async with connect("carol") as carol:
        too_many = {"files": [{"name": f"test_{n}.py", "content": ""} for n in range(51)]}
        assert "at most 50 files" in await call_error(carol, "create_task", title="x", acceptance_tests=too_many)
        huge = {"files": [{"name": "test_a.py", "content": "x" * 200_001}]}
        assert "200000 characters" in await call_error(carol, "create_task", title="x", acceptance_tests=huge)
        assert (await call(carol, "list_tasks"))["total"] == 0  # nothing was written


@needs_sandbox
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
async def test_reviews_run_below_the_priority_of_requests(connect, reviewer):
    # on a busy machine the scheduler runs tool calls before critics: the card's own command sees its niceness
    wanted = min(19, os.nice(0) + BACKGROUND_NICE)
    check = f"import os, sys\nprint('nice', os.nice(0))\nsys.exit(0 if os.nice(0) >= {wanted} else 1)\n"
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="slugify",
            acceptance_tests={"files": [{"name": "check.py", "content": check}], "commands": ["$ python check.py"]},
        )
        await complete(alice, card["id"], [art("slug.py", RIGHT)])
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "PASS", critic(round1, "acceptance")
