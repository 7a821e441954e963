"""Nothing derived from a card's hidden tests leaves the sandbox: the critics that read them mark what they shaped
(`hidden`), and the author, bystanders, the synthesis, messages, lessons and memory see it sealed (no place, no
value, no count); only the card's creator and people see the evidence.

The checks are of non-interference: one submission reviewed on two cards whose hidden tests differ (or two
submissions that match them differently) must read the same to their author, so no critic's answer can be used
to probe for the hidden values."""

from __future__ import annotations

import json
import re

import pytest
from conftest import call, needs_sandbox
from reviewing import hand_in, verdict

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_sandbox]

STEPS = '''def steps(n):
    """How many Collatz steps take n to 1."""
    count, start = 0, n
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        count += 1
    return count{tweak}
'''
# steps(27) == 111, steps(97) == 118, steps(871) == 178, steps(6171) == 261
CANDIDATES = range(100, 2100)  # two thousand guesses at the hidden expected values, one per function


def candidates(noisy: int) -> str:
    """The probe: a module of functions each returning one candidate constant whatever it is given; the one
    returning `noisy` is written on one line with an unused variable, so ruff reports that very line."""
    parts = ['"""Candidate answers."""']
    for value in CANDIDATES:
        if value == noisy:
            parts.append(f"def c_{value}(n):  unused = 1; return {value}")
        else:
            parts.append(f"def c_{value}(n):\n    return {value}")
    return "\n\n\n".join(parts) + "\n"


def spec(pairs: list[tuple[int, int]]) -> str:
    asserts = "".join(f"\n\ndef test_{n}():\n    assert steps({n}) == {expected}\n" for n, expected in pairs)
    return "from steps import steps\n" + asserts


def line_of(text: str, value: int) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if re.search(rf"\breturn {value}\b", line))


async def hidden_card(carol, title: str, spec_text: str) -> int:
    card = await call(
        carol,
        "create_task",
        title=title,
        task_type="code",
        acceptance_tests={"files": [{"name": "test_steps_spec.py", "content": spec_text}], "hidden": True},
    )
    return card["id"]


def normalised(value, task_id: int):
    """What the author reads, with what differs between two cards anyway (ids, times) taken out."""
    drop = {"review_id", "task_id", "id", "version", "queued_at", "started_at", "finished_at", "at", "created_at"}
    drop.add("updated_at")
    drop.add("seconds")  # how long an analyser took; the critics that read hidden tests show none
    if isinstance(value, dict):
        return {k: normalised(v, task_id) for k, v in value.items() if k not in drop}
    if isinstance(value, (list, tuple)):
        return [normalised(v, task_id) for v in value]
    if isinstance(value, str):
        value = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TIME", value)
        return re.sub(rf"(task |task_id=|card #){task_id}\b", r"\1N", value)
    return value


async def authors_view(alice, task_id: int) -> dict:
    """Everything about the card's review its author can read: get_review (compact and full), the card's
    messages, and the card itself without the work she handed in."""
    task = await call(alice, "get_task", task_id=task_id, full=True)
    task = {k: v for k, v in task.items() if k not in ("artifacts", "output", "summary", "title")}
    pool = await call(alice, "get_messages", box="pool", task_id=task_id, full=True, limit=100)
    return normalised(
        {
            "compact": await call(alice, "get_review", task_id=task_id),
            "full": await call(alice, "get_review", task_id=task_id, full=True),
            "messages": [(m["intent"], m["sender"], m["content"]) for m in pool["messages"]],
            "task": task,
        },
        task_id,
    )


async def test_thousands_of_candidate_constants_learn_nothing_of_the_hidden_tests(connect, reviewer):
    """The oracle of issue 47: the integrity lens's copied-expected finding named the submitted lines that held
    hidden values. Now the author reads the same whichever candidates match, and how many; a person judges."""
    engine = reviewer()
    probe = candidates(noisy=111)
    async with connect("carol") as carol, connect("alice", review=engine) as alice, connect("bob") as bob:
        one = await hidden_card(carol, "count Collatz steps", spec([(27, 111)]))  # matches the line with ruff's
        three = await hidden_card(carol, "count Collatz steps", spec([(97, 118), (871, 178), (6171, 261)]))
        views = {}
        for card in (one, three):
            artifacts = [
                {"name": "steps.py", "kind": "code", "content": STEPS.format(tweak="")},
                {"name": "cands.py", "kind": "code", "content": probe},
            ]
            await hand_in(alice, card, artifacts=artifacts)
            trail = await verdict(alice, card)
            # a match is not fed back as a signal to iterate on: the card goes to a person
            assert trail["rounds"][-1]["outcome"] == "needs_human", trail["rounds"][-1]["synthesis"]
            views[card] = await authors_view(alice, card)
        assert views[one] == views[three]  # nothing in what she reads depends on which values matched, or how many
        shown = json.dumps(views[three])
        # ruff's finding on the line of 111 is there on both cards alike: ruff never read the hidden tests
        assert f"cands.py:{line_of(probe, 111)}" in shown
        for value in (118, 178, 261):
            assert f":{line_of(probe, value)}" not in shown and f"line {line_of(probe, value)}" not in shown
        for value in (111, 118, 178, 261):
            assert str(value) not in shown
        assert "test_steps_spec" not in shown and "constant(s)" not in shown
        # a bystander reads what the author reads
        assert await call(bob, "get_review", task_id=three, full=True) == await call(
            alice, "get_review", task_id=three, full=True
        )
        # the creator, who wrote the tests, and a person see the evidence
        full = json.dumps(await call(carol, "get_review", task_id=three, full=True))
        assert f"cands.py:{line_of(probe, 118)}" in full and "3 constant(s)" in full


async def test_hidden_test_failures_are_not_named_or_counted_to_the_author(connect, reviewer):
    """A variant: the acceptance critic listed each failing hidden test (a parametrized id carries its values)
    and counted them, a per-test oracle. Now one sealed issue says they did not pass."""
    engine = reviewer()
    table = "import pytest\nfrom steps import steps\n\n\n@pytest.mark.parametrize('n, expected', [(27, 111), (97, 118), (871, 178), (6171, 261)])\ndef test_steps(n, expected):\n    assert steps(n) == expected\n"  # noqa: E501
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        views = []
        for bound in (5000, 500):  # wrong on one hidden case, then on two
            card = await hidden_card(carol, "count Collatz steps", table)
            source = STEPS.format(tweak=f" + (start > {bound})")
            await hand_in(alice, card, artifacts=[{"name": "steps.py", "kind": "code", "content": source}])
            trail = await verdict(alice, card)
            assert trail["rounds"][-1]["verdict"] == "FAIL" and trail["rounds"][-1]["outcome"] == "in_progress"
            views.append((card, await authors_view(alice, card)))
        (first, a), (second, b) = views
        # the same words whichever hidden tests failed, and however many; the code differs only in a constant
        assert json.dumps(a).replace("5000", "500") == json.dumps(b)
        shown = json.dumps(b)
        assert "6171" not in shown and "871-178" not in shown and "test_steps[" not in shown, shown
        assert "2 failed" not in shown and "1 failed" not in shown and "4 tests" not in shown
        full = json.dumps(await call(carol, "get_review", task_id=second, full=True))
        assert "test_steps[871-178]" in full and "test_steps[6171-261]" in full  # the creator sees which


async def test_no_lesson_is_mined_from_work_the_hidden_tests_shaped(connect, reviewer, with_memory, board):
    """A variant: round 1 failed on the hidden tests and on bandit; round 2 fixed both. The bandit lesson would
    carry the diff, and the diff the hidden values: no lesson, and nothing in memory a bystander can find."""
    engine = reviewer(memory=with_memory)
    wrong = STEPS.format(tweak="").replace("return count", "return eval(str(count)) - 1")
    # the fix carries a hidden pair, as an author who had learned it would write it
    right = STEPS.format(tweak="").replace(
        "    count, start", "    if n == 6171:\n        return 261\n    count, start"
    )
    async with (
        connect("carol", memory=with_memory) as carol,
        connect("alice", review=engine, memory=with_memory) as alice,
        connect("bob", memory=with_memory) as bob,
    ):
        card = await hidden_card(carol, "count Collatz steps", spec([(27, 111), (6171, 261)]))
        for source in (wrong, right):
            claim = await call(alice, "claim_task", task_id=card)
            await call(
                alice,
                "complete_task",
                task_id=card,
                token=claim["token"],
                output="done",
                artifacts=[{"name": "steps.py", "kind": "code", "content": source}],
            )
            trail = await verdict(alice, card)
        first, second = trail["rounds"]
        assert first["verdict"] == "FAIL" and second["verdict"] == "PASS", first["synthesis"]
        assert "B307" in json.dumps(first)  # bandit's finding, which round 2 resolved
        assert not [i for i in board.knowledge.page(0, 1000) if i.kind == "lesson"]
        for query in ("eval", "Collatz steps", "6171", "261", "hidden tests"):
            found = await call(bob, "query_memory", query=query, mode="keyword", k=50)
            for hit in found["hits"]:
                text = json.dumps(hit)
                assert hit["kind"] != "lesson" and "6171" not in text and "261" not in text, hit
