"""The offline default review (no API key, no critic agents): bandit, ruff and the acceptance check."""

from __future__ import annotations

import json

import pytest
from conftest import call, call_error, needs_sandbox
from reviewing import critic, hand_in, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

EVAL = "def main():\n    value = eval(input())\n    print(value)\n"
SQL = "def find(db, name):\n    return db.execute(\"SELECT * FROM users WHERE name = '%s'\" % name).fetchall()\n"
CLEAN = (
    'def find(db, name):\n    """Rows of the user with this name."""\n'
    '    return db.execute("SELECT * FROM users WHERE name = ?", [name]).fetchall()\n'
)


def py(name: str, content: str) -> dict:
    return {"name": name, "kind": "code", "content": content}


@pytest.mark.parametrize("source, category, rule", [(EVAL, "eval", "B307"), (SQL, "sql-injection", "B608")])
async def test_insecure_python_fails_with_a_bandit_security_issue(connect, reviewer, source, category, rule):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("app.py", source)])
        assert card["status"] == "review"  # complete_task returns at once; the worker reviews
        trail = await verdict(c, card["id"])
        round1 = trail["rounds"][0]
        assert round1["verdict"] == "FAIL" and round1["outcome"] == "in_progress"
        bandit = critic(round1, "bandit")
        assert bandit["status"] == "ok" and bandit["verdict"] == "FAIL"
        found = [i for i in bandit["issues"] if i["rule"] == rule]
        assert found and found[0]["category"] == category and found[0]["severity"] in ("critical", "major")
        assert found[0]["location"].startswith("app.py:")
        top = round1["synthesis"]["issues"][0]
        assert top["lens"] == "security" and "bandit" in top["found_by"]
        # the card is back with its author, and the brief is in her inbox as a critique message
        task = await call(c, "get_task", task_id=card["id"])
        assert task["status"] == "in_progress" and task["assignee"] == "alice"
        inbox = await call(c, "get_messages", intent="critique", full=True)
        assert inbox["messages"] and rule in inbox["messages"][0]["content"]
        assert "complete_task again" in inbox["messages"][0]["content"]


async def test_clean_code_passes_and_says_which_lenses_ran(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("users.py", CLEAN)])
        trail = await verdict(c, card["id"])
        round1 = trail["rounds"][0]
        assert round1["verdict"] == "PASS" and round1["outcome"] == "done"
        synthesis = round1["synthesis"]
        assert synthesis["lenses_ran"] == ["security", "integrity", "correctness", "style"]
        assert set(synthesis["lenses_uncovered"]) == {"performance", "tests"}
        acceptance = critic(round1, "acceptance")
        assert acceptance["status"] == "skipped" and "acceptance command" in acceptance["error"]
        assert (await call(c, "get_task", task_id=card["id"]))["status"] == "done"
        approval = await call(c, "get_messages", intent="approval", full=True)
        assert "lenses reviewed: security, integrity, correctness, style" in approval["messages"][0]["content"]
        assert "not covered: performance, tests" in approval["messages"][0]["content"]


async def test_work_without_python_is_not_passed_off_as_reviewed(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, task_type="docs", output="Rewrote the install guide.")
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["outcome"] == "done"
        assert round1["synthesis"]["lenses_ran"] == []
        assert round1["synthesis"]["lenses_uncovered"] == ["accuracy", "clarity"]
        approval = await call(c, "get_messages", intent="approval", full=True)
        assert "without review: no critic could review this work" in approval["messages"][0]["content"]


async def test_python_blocks_in_the_output_are_checked_too(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, output=f"Here is the code:\n```python\n{EVAL}```\n")
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL"
        assert critic(round1, "bandit")["issues"][0]["location"].startswith("output_block_1.py:")


CALC = "def add(a, b):\n    return a - b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def spying(marker) -> str:
    """TEST, writing a marker file on the server's disk first (the path hex-encoded: bandit flags /tmp)."""
    return (
        f"import pathlib\n\npathlib.Path(bytes.fromhex({str(marker).encode().hex()!r}).decode()).write_text('ran')"
        f"\n{TEST}"
    )


async def test_tests_that_cannot_run_send_the_card_to_a_human(connect, reviewer, tmp_path):
    marker = tmp_path / "executed"
    spy = spying(marker)
    engine = reviewer(ReviewConfig(execute="off"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c, artifacts=[py("calc.py", CALC_FIXED), {"name": "test_calc.py", "kind": "test", "content": spy}]
        )
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        acceptance = critic(round1, "acceptance")
        assert acceptance["status"] == "unverified" and 'review.execute = "off"' in acceptance["error"]
        assert round1["outcome"] == "needs_human" and round1["synthesis"]["unverified"], round1["synthesis"]["brief"]
        task = await call(c, "get_task", task_id=card["id"])
        assert task["status"] == "needs_human" and "tests could not run" in task["blocked_reason"]
        assert not marker.exists()  # submitted code was never executed
        assert (await call(c, "board_stats"))["unverified_needs_human"] == 1


async def test_untested_work_can_pass_marked_unverified(connect, reviewer):
    engine = reviewer(ReviewConfig(execute="off", unverified="pass"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c, artifacts=[py("calc.py", CALC), {"name": "test_calc.py", "kind": "test", "content": TEST}]
        )
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["outcome"] == "done" and "could not run" in round1["synthesis"]["unverified"]
        task = await call(c, "get_task", task_id=card["id"])
        assert task["status"] == "done" and task["unverified"]
        listed = await call(c, "list_tasks", status="done")
        assert listed["tasks"][0]["unverified"]
        done = next(col for col in (await call(c, "get_board"))["columns"] if col["status"] == "done")
        assert done["top"][0]["unverified"] is True
        approval = await call(c, "get_messages", intent="approval", full=True)
        assert "UNVERIFIED" in approval["messages"][0]["content"]
        assert (await call(c, "board_stats"))["unverified_passed"] == 1


@needs_sandbox
async def test_the_default_runs_tests_in_the_sandbox(connect, reviewer, tmp_path):
    marker = tmp_path / "executed"
    spy = spying(marker)
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c, artifacts=[py("calc.py", CALC_FIXED), {"name": "test_calc.py", "kind": "test", "content": spy}]
        )
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        acceptance = critic(round1, "acceptance")
        # the test ran, and its write to the server's disk did not get out of the sandbox
        assert acceptance["status"] == "ok" and acceptance["verdict"] == "FAIL", acceptance
        assert "in the sandbox" in acceptance["summary"] and "FileNotFoundError" in str(acceptance["issues"])
        assert not marker.exists()


@needs_sandbox
async def test_failing_acceptance_tests_fail_the_review_then_pass_once_fixed(connect, reviewer):
    engine = reviewer(ReviewConfig(execute_timeout=60))
    async with connect("alice", review=engine) as c:
        tests = {"name": "test_calc.py", "kind": "test", "content": TEST}
        card = await hand_in(c, artifacts=[py("calc.py", CALC), tests])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        acceptance = critic(round1, "acceptance")
        assert acceptance["status"] == "ok" and acceptance["verdict"] == "FAIL"
        assert acceptance["issues"][0]["category"] == "test-failed"
        failure = acceptance["issues"][0]["description"]
        # which test, expected against actual, the failing line; no sandbox or temporary paths
        assert acceptance["issues"][0]["location"] == "test_calc.py::test_add"
        assert failure.startswith("failed: expected 5, got -1") and "assert add(2, 3) == 5" in failure
        assert round1["verdict"] == "FAIL" and round1["synthesis"]["issues"][0]["severity"] == "critical"
        brief = round1["synthesis"]["brief"]
        assert len(brief) <= 1000 and "expected 5, got -1" in brief
        for text in (failure, brief, acceptance["summary"]):
            assert "/review" not in text and "/tmp" not in text, text

        await hand_in(c, card["id"], artifacts=[py("calc.py", CALC_FIXED), tests], output="fixed add")
        trail = await verdict(c, card["id"])
        round2 = trail["rounds"][1]
        assert round2["round"] == 2 and round2["verdict"] == "PASS" and round2["outcome"] == "done"
        assert critic(round2, "acceptance")["resolutions"][0]["status"] == "resolved"


@needs_sandbox
async def test_an_acceptance_command_from_the_card_is_run(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c, artifacts=[py("tool.py", "import sys\nsys.exit(3)\n")], criteria=["exits cleanly", "$ python tool.py"]
        )
        acceptance = critic((await verdict(c, card["id"]))["rounds"][0], "acceptance")
        assert acceptance["verdict"] == "FAIL" and "exited with 3" in acceptance["issues"][0]["description"]


async def test_get_review_by_task_or_review_id(connect, reviewer, fake_llm):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        assert "task_id or review_id" in await call_error(c, "get_review")
        assert "does not exist" in await call_error(c, "get_review", review_id=999)
        card = await hand_in(c, artifacts=[py("users.py", CLEAN)])
        trail = await verdict(c, card["id"])
        by_review = await call(c, "get_review", review_id=trail["rounds"][0]["review_id"], full=True)
        assert by_review["task_id"] == card["id"] and len(by_review["rounds"]) == 1


async def test_no_artifact_hides_behind_another_name(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("app.py", EVAL), py("./app.py", CLEAN), py(".git/hook.py", SQL)])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        bandit = critic(round1, "bandit")
        assert {i["rule"] for i in bandit["issues"]} == {"B307", "B608"}
        assert "3 Python file(s)" in bandit["summary"]


@needs_sandbox
async def test_clashing_artifact_paths_still_get_their_tests_run(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c,
            artifacts=[
                py("calc.py", CALC),
                {"name": "test_calc.py", "kind": "test", "content": TEST},
                {"name": "notes", "kind": "text", "content": "a"},
                {"name": "notes/more.txt", "kind": "text", "content": "b"},
            ],
        )
        acceptance = critic((await verdict(c, card["id"]))["rounds"][0], "acceptance")
        assert acceptance["status"] == "ok" and acceptance["verdict"] == "FAIL"


async def test_a_stuck_review_can_be_handed_to_a_human(connect, board):
    async with connect("alice", wants_review=lambda task: True) as c, connect("lee", role="lead") as lee:
        card = await hand_in(c, artifacts=[py("users.py", CLEAN)])  # review on, but no worker runs
        assert "wait for its review" in await call_error(c, "update_task", task_id=card["id"], note="hello?")
        assert "only a person" in await call_error(
            c, "update_task", task_id=card["id"], status="needs_human", reason="no review worker"
        )  # its author would skip the review
        moved = await call(lee, "update_task", task_id=card["id"], status="needs_human", reason="no review worker")
        assert moved["status"] == "needs_human"


LINTY = (
    "import os\n\n\ndef total(items=[]):\n    n = 0\n    for i in range(3):\n        n += 1\n"
    "    return n + len(items)\n"
)
LINTY_TEST = "from totals import total\n\n\ndef test_total():\n    scratch = '/tmp/totals'\n    assert total() == 3\n"


@needs_sandbox
async def test_lint_common_in_working_code_does_not_fail_it(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c, artifacts=[py("totals.py", LINTY), {"name": "test_totals.py", "kind": "test", "content": LINTY_TEST}]
        )
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    # an unused import, a mutable default, an unused loop variable, asserts and /tmp in a test: minor
    rules = {i["rule"] for c in round1["critiques"] for i in c["issues"]}
    assert {"F401", "B006", "B007", "B101", "B108"} <= rules
    assert round1["verdict"] == "PASS" and round1["outcome"] == "done", round1["synthesis"]["brief"]


async def test_a_statement_that_does_nothing_fails(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("check.py", "def check(x):\n    x == 1\n    return x\n")])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert round1["verdict"] == "FAIL" and round1["synthesis"]["issues"][0]["severity"] == "major"
    assert "B015" in round1["synthesis"]["brief"]


MD5 = "import hashlib\n\n\ndef digest(data: bytes) -> str:\n    return hashlib.md5(data).hexdigest()\n"


async def test_an_authors_inline_suppression_is_reported_and_not_honoured_by_default(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("app.py", EVAL.replace("eval(input())", "eval(input())  # nosec"))])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert round1["verdict"] == "FAIL"
    found = [i for i in critic(round1, "bandit")["issues"] if i["rule"] == "B307"]
    assert found and found[0]["severity"] in ("critical", "major")
    assert "suppressed by the author: B307 at app.py:2" in found[0]["description"]
    assert "suppressed inline by the author" in critic(round1, "bandit")["summary"]


async def test_the_operator_may_honour_suppressions_of_named_rules(connect, reviewer):
    engine = reviewer(ReviewConfig(honour_suppressions=["B307"]))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("app.py", EVAL.replace("eval(input())", "eval(input())  # nosec B307"))])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    found = [i for i in critic(round1, "bandit")["issues"] if i["rule"] == "B307"]
    assert found[0]["severity"] == "info" and "allowed by the operator" in found[0]["description"]
    assert round1["verdict"] == "PASS", round1["synthesis"]["brief"]


async def test_the_cards_creator_can_waive_a_rule_the_card_requires(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await call(c, "create_task", title="MD5 hex digest for the legacy cache key", waive=["b324"])
        assert (await call(c, "get_task", task_id=card["id"]))["waived"] == ["B324"]
        await hand_in(c, card["id"], artifacts=[py("cache.py", MD5)])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert "waive takes up to" in await call_error(c, "create_task", title="x", waive=["not a rule"])
    found = [i for i in critic(round1, "bandit")["issues"] if i["rule"] == "B324"]
    assert found and found[0]["severity"] == "info" and "waived by the card's creator" in found[0]["description"]
    assert round1["verdict"] == "PASS", round1["synthesis"]["brief"]


async def test_work_joins_the_shared_memory_once_it_passes_its_review(connect, reviewer, board):
    engine = reviewer()

    def outputs() -> dict:
        return board.knowledge.get(board.knowledge.keyword("find users name", kinds=["output"]))

    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("users.py", SQL)], output="find users by name")
        assert card["status"] == "review" and outputs() == {}  # not before its review
        assert (await verdict(c, card["id"]))["rounds"][0]["verdict"] == "FAIL"
        assert outputs() == {}  # an output sent back is nothing to learn from

        await hand_in(
            c, card["id"], artifacts=[py("users.py", CLEAN)], output="find users by name, with a bound parameter"
        )
        assert (await verdict(c, card["id"]))["rounds"][-1]["verdict"] == "PASS"
        [item] = outputs().values()
        assert item.task_id == card["id"] and item.created_by == "alice" and item.task_type == "code"
        assert "bound parameter" in item.text and "[name]" in item.text and "'%s'" not in item.text


TOTALS = (
    "import os\n\n\ndef total(items):\n    s = 0\n    for i in range(1, len(items)):\n        s += items[i]\n"
    "    return s\n\n\ndef mean(items):\n    return total(items) / (len(items) + 1)\n"
)
TOTALS_SPEC = (
    "from calc import total, mean\n\n\ndef test_total_sums_all_items():\n    assert total([1, 2, 3]) == 6\n\n\n"
    "def test_mean_of_two():\n    assert mean([2, 4]) == 3\n"
)


@needs_sandbox
async def test_a_failing_round_scores_below_the_bar_and_get_review_writes_each_finding_once(connect, reviewer):
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="totals",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": TOTALS_SPEC}]},
        )
        await hand_in(alice, card["id"], artifacts=[py("calc.py", TOTALS)])  # two failing tests, an unused import
        full = (await verdict(alice, card["id"]))["rounds"][0]
        compact = await alice.call_tool("get_review", {"task_id": card["id"]})
    synthesis = full["synthesis"]
    assert full["verdict"] == "FAIL" and synthesis["score"] == 2  # the critics' mean would pass it
    assert synthesis["note"].startswith("2 critical test failures cap the score at 2/10 (critics averaged ")
    text = compact.content[0].text
    # each test failure once in the critique that found it, and its gist in the brief; the merged issues refer
    assert text.count("expected 6, got 5") == 2 and text.count("make this test pass") == 3
    merged = json.loads(text)["rounds"][0]["synthesis"]["issues"]
    assert [m["refs"] for m in merged] == [["r1:acceptance#1"], ["r1:acceptance#2"]]
    assert not any("description" in m or "suggestion" in m for m in merged)
    assert "F401" not in text and "F401" in str(critic(full, "ruff")["issues"])  # minor: in full=true only
    assert "get_review(task_id, full=true) has every issue" in synthesis["brief"]
