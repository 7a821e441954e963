"""A loop that teaches: a mistake fixed between two review rounds becomes a lesson named by what changed, and
the next agent on a card like it is handed that lesson at claim time (and nothing on unrelated work)."""

from __future__ import annotations

import anyio
import pytest
from buggy_cards import CARDS, RELATED, UNRELATED, Card
from conftest import call, needs_sandbox

from hiveboard.board.models import AcceptanceTests, Artifact
from hiveboard.board.review_models import ReviewIssue
from hiveboard.critics import lessons as teaching
from hiveboard.critics.config import CriticConfig, ReviewConfig
from hiveboard.critics.lessons import changed_files, changes, hidden, lessons, unified_diff
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory

pytestmark = pytest.mark.backends("sqlite", "postgresql")  # for the tests that take a board

OFF = CriticConfig(lens="none", backend="ruff", enabled=False)


def code(name: str, content: str) -> Artifact:
    return Artifact(name=name, kind="code", content=content)


def failure(test: str, message: str, statement: str = "", ref: str = "r1:acceptance#1") -> ReviewIssue:
    return ReviewIssue(
        severity="critical",
        category="test-failed",
        rule="the card's acceptance tests",
        location=f"test_spec.py::{test}",
        ref=ref,
        suggestion="make this test pass",
        description=f"failed: {message}"
        + (
            f"\n>       {statement}\nE       AssertionError\n\nTraceback (most recent call last):\n"
            f'  File "/tmp/review-x/spec/test_spec.py", line 4'
            if statement
            else ""
        ),
    )


# ---------------------------------------------------------------- the diff classifier, on its own


@pytest.mark.parametrize("card", CARDS, ids=[c.module for c in CARDS])
def test_each_kind_of_fix_is_named(card: Card):
    [change] = changes(changed_files([code(f"{card.module}.py", card.buggy)], [code(f"{card.module}.py", card.fixed)]))
    assert change.title.startswith(card.kind), (change.title, change.gist())
    assert change.function in card.fixed and change.function != f"{card.module}.py"


def test_the_fix_quotes_the_changed_expression_and_its_function():
    card = CARDS[0]
    before, after = [code("series.py", card.buggy)], [code("series.py", card.fixed)]
    [change] = changes(changed_files(before, after))
    assert change.title == "off-by-one in range end" and change.function == "sum_to"
    assert change.gist() == "changed `range(1, n)` to `range(1, n + 1)`"
    diff = unified_diff(changed_files(before, after))
    assert "-    for i in range(1, n):\n+    for i in range(1, n + 1):" in diff
    assert len(
        unified_diff(changed_files([code("big.py", "x = 1\n" * 2000)], [code("big.py", "x = 2\n" * 2000)]))
    ) <= 1500 + len("\n… (cut)")


def test_the_code_changes_come_before_the_authors_own_tests():
    files = changed_files(
        [code("m.py", "a = 1\n"), Artifact(name="test_m.py", kind="test", content="x\n")],
        [code("m.py", "a = 2\n"), Artifact(name="test_m.py", kind="test", content="y\n")],
    )
    assert [name for name, _, _ in files] == ["m.py", "test_m.py"]


# ---------------------------------------------------------------- lessons from resolved issues


def test_a_lesson_names_the_mistake_the_failing_test_and_the_change():
    card = CARDS[0]
    [lesson] = lessons(
        [("tests", failure("test_sums_up_to_n", "expected 15, got 10", "assert sum_to(5) == 15"))],
        [code("series.py", card.buggy)],
        [code("series.py", card.fixed)],
        "fixed the loop",
    )
    assert lesson.title == "off-by-one in range end (sum_to)"
    assert lesson.problem == "test_sums_up_to_n failed: expected 15, got 10 (`assert sum_to(5) == 15`)"
    assert lesson.fix.startswith("changed `range(1, n)` to `range(1, n + 1)` in sum_to.\n```diff\n")
    assert "fixed the loop" not in lesson.fix  # the change, not the author's summary
    assert lesson.caught_by == "the test test_sums_up_to_n" and "off-by-one" in lesson.tags
    for text in (lesson.problem, lesson.title):
        assert "Traceback" not in text and "/tmp" not in text and "test_spec.py" not in text


def test_a_failure_stored_with_its_test_id_in_front_reads_the_same():
    said_once = failure("test_add", "expected 5, got -1", "assert add(2, 3) == 5")
    stored = said_once.model_copy(update={"description": f"{said_once.location} {said_once.description}"})
    problems = {teaching.failure(issue, "tests").problem for issue in (said_once, stored)}
    assert problems == {"test_add failed: expected 5, got -1 (`assert add(2, 3) == 5`)"}


def test_two_tests_fixed_by_one_change_are_one_lesson():
    card = next(c for c in CARDS if c.module == "stats")
    [lesson] = lessons(
        [
            ("tests", failure("test_empty_scores", "ZeroDivisionError: division by zero")),
            ("tests", failure("test_empty_again", "ZeroDivisionError: division by zero", ref="r1:a#2")),
        ],
        [code("stats.py", card.buggy)],
        [code("stats.py", card.fixed)],
    )
    assert lesson.title == "missing empty-input check (mean)"
    assert lesson.caught_by == "the tests test_empty_scores, test_empty_again"
    assert lesson.fix.startswith("added `if not scores: return 0.0` in mean")


def test_two_mistakes_in_two_functions_are_two_lessons():
    before = "def add(a, b):\n    return a - b\n\n\ndef last(xs):\n    return xs[len(xs)]\n"
    after = "def add(a, b):\n    return a + b\n\n\ndef last(xs):\n    return xs[len(xs) - 1]\n"
    found = lessons(
        [
            ("tests", failure("test_add", "expected 5, got -1", "assert add(2, 3) == 5")),
            (
                "tests",
                failure(
                    "test_last", "IndexError: list index out of range", "assert last([1]) == 1", ref="r1:acceptance#2"
                ),
            ),
        ],
        [code("m.py", before)],
        [code("m.py", after)],
    )
    assert sorted(lesson.title for lesson in found) == [
        "off-by-one in index (last)",
        "wrong operator (`-` instead of `+`) (add)",
    ]
    assert {lesson.caught_by for lesson in found} == {"the test test_add", "the test test_last"}


def test_without_a_known_shape_or_a_diff_the_title_is_the_test_in_words():
    rewrite = lessons(
        [("tests", failure("test_greets_by_name", "expected 'hi ada', got 'hello'"))],
        [code("g.py", "def greet(name):\n    return 'hello'\n")],
        [code("g.py", "def greet(name):\n    return 'hi ' + name.lower()\n")],
    )
    assert rewrite[0].title == "greets by name failed: expected 'hi ada', got 'hello'"
    assert "changed `return 'hello'` to `return 'hi ' + name.lower()` in greet" in rewrite[0].fix
    no_files = lessons(
        [("tests", failure("test_greets_by_name", "expected 'hi ada', got 'hello'"))],
        [],
        [],
        "Greet with the name. Also tidied up.",
    )
    assert no_files[0].title == "greets by name failed: expected 'hi ada', got 'hello'"
    assert no_files[0].fix == "Greet with the name."  # no change to read: the author's words, one sentence


def test_an_analyser_finding_keeps_its_category_and_gains_the_change():
    issue = ReviewIssue(
        severity="major",
        category="sql-injection",
        location="db.py:2",
        rule="B608",
        description="Possible SQL injection vector through string-based query construction.",
        suggestion="Use a parameterised query.",
    )
    before = "def find(db, name):\n    return db.execute(\"SELECT * FROM u WHERE n = '%s'\" % name)\n"
    after = 'def find(db, name):\n    return db.execute("SELECT * FROM u WHERE n = ?", [name])\n'
    [lesson] = lessons([("security", issue)], [code("db.py", before)], [code("db.py", after)])
    assert lesson.problem.startswith("sql-injection: Possible SQL injection") and lesson.caught_by == "B608"
    assert lesson.title == "sql-injection: Possible SQL injection vector through string-based query construction (find)"
    assert lesson.fix.startswith("Use a parameterised query; changed `return db.execute(")


def test_issues_of_hidden_acceptance_tests_are_recognised():
    spec = AcceptanceTests(files=[{"name": "test_spec.py", "content": "def test_x(): pass"}], hidden=True)
    assert hidden(failure("test_x", "AssertionError"), spec)
    assert hidden(
        ReviewIssue(
            severity="critical",
            category="acceptance-failed",
            rule="the card's acceptance command",
            description="exited with 1",
        ),
        spec,
    )
    assert not hidden(failure("test_x", "AssertionError"), spec.model_copy(update={"hidden": False}))
    own = ReviewIssue(
        severity="critical",
        category="test-failed",
        rule="pytest over the submitted tests",
        location="test_mine.py::test_y",
        description="x",
    )
    assert not hidden(own, spec)


# ---------------------------------------------------------------- the loop, through MCP


@pytest.fixture
def memory(board, tmp_path):
    """The offline memory (embedded Chroma, the real embedding model), indexing in the background."""
    mem = open_memory(board, get_embedder(), tmp_path)
    mem.start()
    yield mem
    mem.stop()


async def fix_in_round_two(carol, alice, card: Card, hidden_tests: bool = False) -> tuple[dict, dict]:
    """Carol's card with her acceptance tests; alice's buggy version fails, her fix passes. The two rounds."""
    task = await call(
        carol,
        "create_task",
        title=card.title,
        description=card.description,
        task_type="code",
        acceptance_tests={
            "files": [{"name": f"test_{card.module}_spec.py", "content": card.spec}],
            "hidden": hidden_tests,
        },
    )
    rounds = []
    for text in (card.buggy, card.fixed):
        claim = await call(alice, "claim_task", task_id=task["id"])
        await call(
            alice,
            "complete_task",
            task_id=task["id"],
            token=claim["token"],
            output="done",
            summary="made the tests pass",
            artifacts=[{"name": f"{card.module}.py", "kind": "code", "content": text}],
        )
        trail = await call(alice, "get_review", task_id=task["id"], wait_seconds=120, full=True)
        rounds.append(trail["rounds"][-1])
    return task, rounds


@needs_sandbox
@pytest.mark.anyio
async def test_a_loop_of_fixed_bugs_teaches_the_next_agent(connect, reviewer, memory, board):
    engine = reviewer(
        ReviewConfig(critics={"bandit": OFF, "ruff": OFF, "ruff-style": OFF}, execute_timeout=60), memory=memory
    )
    done: dict[str, tuple] = {}
    async with connect("carol", memory=memory) as carol, connect("alice", review=engine, memory=memory) as alice:
        async with anyio.create_task_group() as tg:
            for card in CARDS:  # twenty cards, nine kinds of mistake

                async def one(card=card):
                    done[card.module] = await fix_in_round_two(carol, alice, card)

                tg.start_soon(one)
        memory.drain()
        for card in CARDS:
            _, (first, second) = done[card.module]
            assert (first["verdict"], second["verdict"]) == ("FAIL", "PASS"), (card.module, first["synthesis"])
            assert first["synthesis"]["score"] <= 2 < second["synthesis"]["score"]
        found = [i for i in board.knowledge.page(0, 1000) if i.kind == "lesson"]
        assert len(found) == len(CARDS) and len({i.title for i in found}) == len(CARDS)  # one per mistake, none merged
        by_card = {i.task_id: i for i in found}
        for card in CARDS:
            lesson = by_card[done[card.module][0]["id"]]
            assert lesson.title.startswith(card.kind) and not lesson.title.endswith("(code)"), lesson.title
            assert lesson.text.startswith(f'Problem: in "{card.title}": test_') and "Traceback" not in lesson.text
            fix = lesson.text.split("\nFix: ", 1)[1]
            assert fix.startswith(("changed `", "added `")) and "made the tests pass" not in fix, fix

        # the next agent on a card like one of them is handed the lesson of that kind of mistake first
        async with connect("bob", memory=memory) as bob:
            for title, description, kind in RELATED[:4]:
                nxt = await call(carol, "create_task", title=title, description=description, task_type="code")
                claim = await call(bob, "claim_task", task_id=nxt["id"])
                assert claim["lessons"] and claim["lessons"][0]["title"].startswith(kind), (title, claim["lessons"])
            # work unrelated to every lesson gets none: nothing rather than noise
            for title, description in [UNRELATED[0], UNRELATED[4], UNRELATED[5]]:
                other = await call(carol, "create_task", title=title, description=description, task_type="code")
                assert (await call(bob, "claim_task", task_id=other["id"]))["lessons"] == [], title


@needs_sandbox
@pytest.mark.anyio
async def test_hidden_acceptance_tests_teach_nothing_and_leave_no_trace_in_memory(connect, reviewer, memory, board):
    engine = reviewer(
        ReviewConfig(critics={"bandit": OFF, "ruff": OFF, "ruff-style": OFF}, execute_timeout=60), memory=memory
    )
    card = next(c for c in CARDS if c.module == "stats")
    async with connect("carol", memory=memory) as carol, connect("alice", review=engine, memory=memory) as alice:
        _, (first, second) = await fix_in_round_two(carol, alice, card, hidden_tests=True)
        assert (first["verdict"], second["verdict"]) == ("FAIL", "PASS")
        memory.drain()
    items = board.knowledge.page(0, 1000)
    assert not [i for i in items if i.kind == "lesson"]
    # the creator's test code and values never reach the memory (critiques name a hidden test and how it failed)
    for item in items:
        assert "mean([]) == 0.0" not in item.text and "assert mean" not in item.text, item
