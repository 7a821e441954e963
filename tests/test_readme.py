"""The README's five-minute flow, run as written: lee plans, alice codes (first with a bug), the critics review
on their defaults. What the README quotes of the answers is checked against what the server answers, so a
sample in the README cannot drift from the real wording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import START_TIMEOUT, call, needs_sandbox

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite"), needs_sandbox]

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
FLOW = README[README.index("## Five minutes with a team") : README.index("## Cards in a git repository")]
TESTS = (
    "from slug import slugify\n\ndef test_spaces():\n    assert slugify('Hello World') == 'hello-world'\n\n"
    "def test_punctuation():\n    assert slugify('Hi, there!') == 'hi-there'\n"
)
BUGGY = "def slugify(text):\n    return text.lower().replace(' ', '-')\n"
FIXED = "import re\n\n\ndef slugify(text):\n    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')\n"


def flat(text: str) -> str:
    return " ".join(text.split())


def quoted(key: str) -> list[str]:
    """Each value the README's samples quote for `key` ("summary": "…"), its line breaks undone."""
    return [flat(v) for v in re.findall(rf'"{key}": "((?:[^"\\]|\\.)*)"', FLOW)]


def agrees(sample: str, answer: str, as_json: bool = True) -> bool:
    """The sample is the answer, cut where it says … (each piece in order; as_json: a line break written out as
    \\n, as a JSON string shows it)."""
    answer, at = flat(answer.replace("\n", "\\n") if as_json else answer), 0
    for piece in filter(None, (flat(p) for p in sample.split("…"))):
        found = answer.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


async def test_the_readmes_five_minutes_answer_as_the_readme_quotes(connect, reviewer, board):
    engine = reviewer(ReviewConfig())
    async with connect("lee", role="lead", review=engine) as lee, connect("alice", review=engine) as alice:
        card = await call(
            lee,
            "create_task",
            title="Add slugify()",
            task_type="code",
            acceptance_criteria=["slugify('Hi, there!') == 'hi-there'"],
            acceptance_tests={"files": [{"name": "test_slug.py", "content": TESTS}]},
        )
        claim = await call(alice, "claim_task")
        assert claim["message"].startswith(f"task {card['id']} is yours until")
        await call(
            alice,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="slugify in slug.py",
            artifacts=[{"name": "slug.py", "kind": "code", "content": BUGGY}],
        )
        first = await call(alice, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT)
        round1 = first["rounds"][-1]
        acceptance = next(c for c in round1["critiques"] if c["critic"] == "acceptance")
        assert first["status"] == "in_progress" and first["scores"] == [2.0] and round1["verdict"] == "FAIL"
        summary, note, brief = quoted("summary"), quoted("note"), quoted("brief")
        assert summary and note and brief
        assert agrees(summary[0], acceptance["summary"]), (summary[0], acceptance["summary"])
        assert agrees(note[0], round1["synthesis"]["note"]), (note[0], round1["synthesis"]["note"])
        assert agrees(brief[0], round1["synthesis"]["brief"]), (brief[0], round1["synthesis"]["brief"])

        inbox = (await call(alice, "get_messages"))["messages"]
        critique = next(m for m in inbox if m["intent"] == "critique")
        said = re.search(r'holds the brief as a `critique` message: "([^"]*)"', FLOW)[1]
        assert agrees(said, critique["content"]), (said, critique["content"])

        await call(
            alice,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="slugify in slug.py",
            artifacts=[{"name": "slug.py", "kind": "code", "content": FIXED}],
        )
        second = await call(alice, "get_review", task_id=card["id"], wait_seconds=START_TIMEOUT)
        round2 = second["rounds"][-1]
        passed = next(c for c in round2["critiques"] if c["critic"] == "acceptance")
        step6 = flat(FLOW[FLOW.index("**6. PASS") : FLOW.index("**7.")])
        assert agrees(re.search(r'every critic passes \("([^"]*)"\)', step6)[1], passed["summary"]), passed["summary"]
        assert f'the brief is "{round2["synthesis"]["brief"]}"' in step6
        assert f"the card is `{second['status']}`" in step6 and f"`{second['scores']}`" in step6

    # step 7: the lesson mined from the fix, as the README shows it (its title, then its text)
    lesson = next(x for x in board.knowledge.page() if x.kind == "lesson" and x.task_id == card["id"])
    shown = re.search(r"a diff below it\):\n\n```\n(.*?)\n```", FLOW, re.DOTALL)[1]
    assert agrees(shown, f"{lesson.title}\n{lesson.text}", as_json=False), (shown, lesson.title, lesson.text)
