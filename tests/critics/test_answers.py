"""What an agent reads after a review (the brief, the critique message, get_review, the card's history, the
errors) says each finding once, gives counts that add up, and points only to calls that show more."""

from __future__ import annotations

import json
import re

import pytest
from conftest import START_TIMEOUT, call, call_error, needs_sandbox
from reviewing import NO_BUILTINS, critic, verdict

from hiveboard.critics.config import ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

# the creator's tests: one of each outcome (a skipped test of the card's fails the check)
SPEC = """import pytest
from slug import slugify


@pytest.fixture
def table():
    raise RuntimeError("no table")


def test_lowercases():
    assert slugify("Hello World") == "hello-world"


def test_accents():
    assert slugify("Café") == "cafe"


def test_with_table(table):
    assert slugify(table) == ""


def test_later():
    pytest.skip("not yet")
"""
WRONG = "def slugify(text):\n    return text.lower().replace(' ', '-')\n"
# the author's own tests: two pass, two fail
OWN = "".join(
    f"from slug import slugify\n\n\ndef test_{name}():\n    assert slugify({given!r}) == {wanted!r}\n\n\n"
    if n == 0
    else f"def test_{name}():\n    assert slugify({given!r}) == {wanted!r}\n\n\n"
    for n, (name, given, wanted) in enumerate(
        [("spaces", "a b", "a-b"), ("upper", "Ab", "ab"), ("accent", "É", "e"), ("comma", "x,y", "x-y")]
    )
)
CREATOR, AUTHOR = "the card's acceptance tests", "pytest over the submitted tests"
BLOCKING = ("critical", "major")


def art(name: str, content: str, kind: str = "code") -> dict:
    return {"name": name, "kind": kind, "content": content}


async def hand_in(client, task_id: int, artifacts: list[dict]) -> None:
    claim = await call(client, "claim_task", task_id=task_id)
    await call(client, "complete_task", task_id=task_id, token=claim["token"], output="slugify", artifacts=artifacts)


def issues_of(trail: dict) -> list[dict]:
    return [i for r in trail["rounds"] for c in r["critiques"] for i in c.get("issues", [])]


def brief_entries(brief: str) -> list[tuple[str, str]]:
    """(location, text) of each finding the brief lists ("1. [critical] test_x.py::test_a — failed: …")."""
    return re.findall(r"^\d+\. \[\w+\] (\S+) — (.*)$", brief, re.M)


def tally(text: str) -> tuple[int, dict[str, int]]:
    """ "4 tests: 1 passed, 1 failed, 1 errored, 1 skipped" → (4, {"passed": 1, …})."""
    total, parts = re.fullmatch(r"(\d+) tests?: (.*)", text).groups()
    return int(total), {word: int(n) for n, word in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", parts)}


def checks(summary: str) -> tuple[int, int, dict[str, tuple[str, str]]]:
    """The acceptance critique's summary: (runs passed, runs, {label: (passed|failed, detail)})."""
    head = re.match(r"(\d+) of (\d+) runs? (passed|failed) in the sandbox \([^)]*\): ", summary)
    assert head, summary
    runs = re.findall(r"(?:^|; )([^;]+?): (passed|failed)(?: \(([^)]*)\))?", summary[head.end() :])
    counted, total = int(head[1]), int(head[2])
    return counted if head[3] == "passed" else total - counted, total, {label: (o, d) for label, o, d in runs}


TOOL_CALL = re.compile(r"\b([a-z_]+)\(([^()]*)\)")


def pointers(text: str, tools: set[str]) -> list[tuple[str, dict[str, str | None]]]:
    """Every tool call the text points to: (tool, {argument: value, or None for a placeholder})."""
    found = []
    for name, args in TOOL_CALL.findall(text):
        if name in tools:
            parsed = {}
            for arg in filter(None, (a.strip() for a in args.split(","))):
                key, _, value = arg.partition("=")
                parsed[key.strip()] = value.strip() if value.strip() not in ("", "...", "…") else None
            found.append((name, parsed))
    return found


async def follow(client, name: str, args: dict[str, str | None], ids: dict[str, int]) -> dict:
    """Make the call a pointer names; a placeholder (`task_id`, `task_id=...`) stands for the id at hand."""
    values: dict = {}
    for key, value in args.items():
        if value is None:
            values[key] = ids[key]
        elif value in ("true", "false"):
            values[key] = value == "true"
        elif value.isdigit():
            values[key] = int(value)
        else:
            values[key] = value.strip("'\"")
    return await call(client, name, **values)


def unseen(answer: str, result: dict) -> list[str]:
    """What a followed pointer shows that the answer did not: issues, reviews and their verdicts, briefs."""
    more = []
    for r in result.get("rounds", []):
        if f"review {r['review_id']}" not in answer and f"review_id={r['review_id']}" not in answer:
            more.append(f"review {r['review_id']}: {r.get('verdict')}")
        brief = (r.get("synthesis") or {}).get("brief", "")
        if brief and brief not in answer:
            more.append(brief)
        for c in r["critiques"]:
            for i in c.get("issues", []):
                first = (i.get("description") or "").splitlines()[0]
                if i.get("location", "") not in answer or first not in answer:
                    more.append(f"{i.get('location')}: {first}")
    return more


@needs_sandbox
async def test_a_failed_review_says_each_finding_once_counts_that_add_up_and_points_to_more(connect, reviewer):
    engine = reviewer(ReviewConfig(execute_timeout=60))
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        tools = {t.name for t in (await alice.list_tools()).tools}
        card = await call(
            carol,
            "create_task",
            title="slugify",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SPEC}]},
        )
        await hand_in(alice, card["id"], [art("slug.py", WRONG), art("test_slug.py", OWN, "test")])
        full = await verdict(alice, card["id"])
        plain = await call(alice, "get_review", task_id=card["id"])
        round1 = full["rounds"][0]
        synthesis, brief = round1["synthesis"], plain["rounds"][0]["synthesis"]["brief"]
        message = (await call(alice, "get_messages", intent="critique", full=True))["messages"][0]["content"]
        history = [h["note"] for h in (await call(alice, "get_task", task_id=card["id"]))["history"] if h.get("note")]
        acceptance = critic(round1, "acceptance")
        assert round1["verdict"] == "FAIL" and brief in message

        # each finding once: a finding's text does not repeat its place, in the critiques or the brief
        for issue in issues_of(full):
            if issue.get("location"):
                assert issue["location"] not in issue["description"], issue
        entries = brief_entries(brief)
        assert entries and all(place not in text for place, text in entries), brief
        for text in (message, *history):
            for place, said in brief_entries(text):
                assert place not in said, text

        # counts that add up: checks, and the tests inside each pytest run, each counted once
        passed, ran, runs = checks(acceptance["summary"])
        assert (passed, ran) == (0, 2) and set(runs) == {CREATOR, AUTHOR}, acceptance["summary"]
        assert passed == sum(outcome == "passed" for outcome, _ in runs.values())
        expected = {
            CREATOR: (4, {"passed": 1, "failed": 1, "errored": 1, "skipped": 1}),
            AUTHOR: (4, {"passed": 2, "failed": 2}),
        }
        for label, (outcome, detail) in runs.items():
            total, parts = tally(detail)
            assert (total, parts) == expected[label] and sum(parts.values()) == total, detail
            failing = [i for i in acceptance["issues"] if i["rule"] == label[:40] and "::" in i.get("location", "")]
            assert outcome == "failed" and len(failing) == total - parts["passed"], (label, failing)
        blocking = [m for m in synthesis["issues"] if m["severity"] in BLOCKING]
        minor = [m for m in synthesis["issues"] if m["severity"] not in BLOCKING]
        more = re.search(r"(\d+) more blocking", brief)
        assert len(entries) + (int(more[1]) if more else 0) == len(blocking) == 5
        assert minor and f"{len(minor)} minor/info (not blocking)" in brief
        capped = re.match(r"(\d+) critical test failures cap the score", synthesis["note"])
        assert capped and int(capped[1]) == len(blocking), synthesis["note"]

        # pointers that lead somewhere: each names a call that, made, shows more than the answer did
        ids = {"task_id": card["id"], "review_id": round1["review_id"]}
        answers = [brief, message, *history, acceptance["summary"]]
        answers += [i.get("suggestion") or "" for i in issues_of(full)]
        followed = 0
        for answer in answers:
            for name, args in pointers(answer, tools):
                result = await follow(alice, name, args, ids)
                assert unseen(answer, result), (answer, name, args)
                followed += 1
        assert followed >= 3  # the brief, the critique message and the history note each point to the rest


@needs_sandbox
async def test_failures_beyond_those_listed_are_named_and_counted(connect, reviewer):
    many = "from slug import slugify\n" + "".join(
        f"\n\ndef test_{n:02}():\n    assert slugify('a b') == 'a_b'\n" for n in range(14)
    )
    engine = reviewer(ReviewConfig(execute_timeout=60))
    async with connect("alice", review=engine) as alice:
        card = await call(alice, "create_task", title="slugify")
        await hand_in(alice, card["id"], [art("slug.py", WRONG), art("test_slug.py", many, "test")])
        acceptance = critic((await verdict(alice, card["id"]))["rounds"][0], "acceptance")
        _, _, runs = checks(acceptance["summary"])
        total, parts = tally(runs[AUTHOR][1])
        assert (total, parts) == (14, {"failed": 14})
        listed = [i for i in acceptance["issues"] if i.get("location")]
        [rest] = [i for i in acceptance["issues"] if not i.get("location")]
        named = re.findall(r"test_slug\.py::test_\d+", rest["description"])
        assert len(listed) + len(named) == parts["failed"] and rest["description"].startswith("2 more tests")
        assert set(named) == {"test_slug.py::test_12", "test_slug.py::test_13"}
        assert "get_review" not in json.dumps(acceptance)  # nothing more to fetch: the ids are all there is


@pytest.mark.slow  # its teardown waits for the worker of a review still open
async def test_errors_about_reviews_point_to_calls_that_show_them(connect, reviewer):
    engine = reviewer(ReviewConfig(critics=NO_BUILTINS, task_types={"code": ["correctness"]}, agent_deadline=60))
    async with connect("alice", review=engine) as alice, connect("bob", role="critic", review=engine) as bob:
        tools = {t.name for t in (await bob.list_tools()).tools}
        card = await call(alice, "create_task", title="parse dates")
        await hand_in(alice, card["id"], [])
        request = (await call(bob, "get_messages", intent="review.request", wait_seconds=START_TIMEOUT, full=True))[
            "messages"
        ][0]
        review_id = request["metadata"]["review_id"]
        await call(
            bob,
            "submit_critique",
            review_id=review_id,
            lens="correctness",
            verdict="FAIL",
            score=4,
            summary="misses time zones",
            issues=[
                {"severity": "major", "category": "timezone", "location": "dates.py:12", "description": "naive"},
                {"severity": "minor", "category": "naming", "location": "dates.py:3", "description": "name it d"},
            ],
        )
        await verdict(alice, card["id"])
        ids = {"task_id": card["id"], "review_id": review_id}
        late = await call_error(
            bob, "submit_critique", review_id=review_id, lens="correctness", verdict="PASS", score=9, summary="x"
        )
        missing = await call_error(alice, "get_review", review_id=review_id + 100)
        for answer in (late, missing):
            found = pointers(answer, tools)
            assert found, answer
            for name, args in found:
                assert unseen(answer, await follow(bob, name, args, ids)), (answer, name, args)

        # round 2's request points the critic to its earlier issues: the plain call shows them, the minor one too
        await hand_in(alice, card["id"], [])
        request = (await call(bob, "get_messages", intent="review.request", wait_seconds=START_TIMEOUT, full=True))[
            "messages"
        ][0]
        [(name, args)] = [p for p in pointers(request["content"], tools) if p[0] == "get_review"]
        shown = await follow(bob, name, args, ids)
        earlier = {i["ref"]: i["description"] for i in issues_of(shown) if i.get("ref", "").startswith("r1:agent:")}
        assert earlier == {"r1:agent:correctness#1": "naive", "r1:agent:correctness#2": "name it d"}, shown
        assert unseen(request["content"], shown)
