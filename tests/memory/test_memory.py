"""Shared memory through a real MCP client, with the real offline embedding model and embedded Chroma."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from conftest import START_TIMEOUT, call, call_error

from hiveboard.board.priority import BACKGROUND_NICE
from hiveboard.memory.embeddings import MINILM_DIM, MINILM_DYNAMIC_NAME, get_embedder
from hiveboard.memory.index import EmbeddingMismatch, VectorIndex
from hiveboard.memory.service import CROSS_TYPE_MARGIN, RELEVANCE_FLOOR, card_query

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

SQL_LESSON = dict(
    problem="The search endpoint built its SQL with an f-string from the request, so a quote in the "
    "name broke out of the query (SQL injection).",
    fix="Pass user values as parameters: cursor.execute('... WHERE name = ?', (name,)).",
    task_type="code",
    tags=["sql", "security"],
)
DOCS_LESSON = dict(
    problem="The README showed a CLI flag that had been renamed, so the quick start failed.",
    fix="Generate the option list from --help in CI and compare.",
    task_type="docs",
    tags=["cli"],
)
CACHE_LESSON = dict(
    problem="An lru_cache on a method kept every instance alive (memory leak).",
    fix="Cache at module level keyed by the id, or use cached_property.",
    task_type="code",
    tags=["performance"],
)


async def test_lessons_are_found_by_meaning_and_by_keyword(connect, memory):
    async with connect("alice", memory=memory) as c:
        sql = await call(c, "record_lesson", **SQL_LESSON)
        await call(c, "record_lesson", **DOCS_LESSON)
        await call(c, "record_lesson", **CACHE_LESSON)
        memory.drain()
        # no word in common with the lesson: only meaning can find it
        by_meaning = await call(
            c, "query_memory", query="concatenating untrusted strings into a database query", mode="vector", k=1
        )
        assert by_meaning["hits"][0]["id"] == sql["item"]["id"]
        assert by_meaning["hits"][0]["similarity"] > 0.2
        by_keyword = await call(c, "query_memory", query="lru_cache", mode="keyword")
        assert [h["title"] for h in by_keyword["hits"]] == [
            "An lru_cache on a method kept every instance alive (memory leak)."
        ]
        hybrid = await call(c, "query_memory", query="SQL injection in an endpoint", k=3)
        top = hybrid["hits"][0]
        assert top["id"] == sql["item"]["id"] and top["matched"] == ["vector", "keyword"]
        assert "f-string" in top["snippet"]


SNIPPET = (
    "def is_iterable(obj):\n    try:\n        iter(obj)\n    except TypeError:\n        return False\n    return True\n"
)


async def test_a_snippet_scores_as_the_model_scores_its_text(connect, memory):
    """An untitled snippet is titled with its first line, but the model reads that line once, and the
    snippet's vector is the one it has alone, whatever was stored with it: its similarity to a query is the
    raw model's."""
    model, query = get_embedder(), "python check if a variable is iterable"
    long = " ".join(f"step_{n} parses the header and retries the request" for n in range(60))
    async with connect("alice", memory=memory) as c:
        await call(c, "remember", items=[{"kind": "snippet", "text": SNIPPET, "tags": ["alone"]}])
        await call(
            c,
            "remember",
            items=[{"text": long}, {"kind": "snippet", "text": SNIPPET, "tags": ["among"]}, {"text": "on call: bo"}],
        )
        memory.drain()
        found = await call(c, "query_memory", query=query, kinds=["snippet"], mode="vector")
    assert [h["title"] for h in found["hits"]] == ["def is_iterable(obj):"] * 2
    raw = float(model.embed([query])[0] @ model.embed([SNIPPET])[0])
    assert [h["similarity"] for h in found["hits"]] == [pytest.approx(raw, abs=2e-4)] * 2


async def test_a_snippet_sent_as_a_lessons_fix_is_read_as_the_snippet(connect, memory):
    """A snippet recorded as a lesson's fix, its first line as the problem, scores as the raw model scores the
    snippet; a lesson in prose is read twice, its title (the problem's first line) then its text, and its fix
    alone, and scores the better of the two."""
    model, query = get_embedder(), "check whether an object can be iterated"
    code = dict(problem="def is_iterable(obj):", fix=SNIPPET, task_type="code")
    prose = dict(problem="Iterating a number raised TypeError.", fix="Check with iter() first.", task_type="docs")
    async with connect("alice", memory=memory) as c:
        await call(c, "record_lesson", **code)
        await call(c, "record_lesson", **prose)
        memory.drain()
        found = await call(c, "query_memory", query=query, mode="vector", kinds=["lesson"])
    similarity = {h["task_type"]: h["similarity"] for h in found["hits"]}
    q = model.embed([query])[0]
    assert similarity["code"] == pytest.approx(float(q @ model.embed([SNIPPET])[0]), abs=2e-4)
    read = f"{prose['problem']}\nProblem: {prose['problem']}\nFix: {prose['fix']}"
    both = [float(q @ model.embed([read])[0]), float(q @ model.embed([prose["fix"]])[0])]
    assert both[0] != pytest.approx(both[1], abs=1e-3)  # the two readings differ: the better one is the score
    assert similarity["docs"] == pytest.approx(max(both), abs=2e-4)


async def test_items_indexed_with_one_reading_get_their_second_in_the_background(connect, memory):
    """A board indexed before items had two readings: a titled snippet has only its first vector; the indexing
    worker gives it the second (its text alone) when it is idle, and a search then scores the better one."""
    model = get_embedder()
    text = "def is_iterable(obj):\n    try:\n        iter(obj)\n    except TypeError:\n        return False\n    return True"
    query = "python check if a variable is iterable"
    async with connect("alice", memory=memory) as c:
        await call(c, "remember", items=[{"kind": "snippet", "title": "zebra.stripes.Pattern", "text": text}])
        memory.drain()
        store = memory.board.store
        with store.write() as db:  # as an older version left it: one reading, the second not considered
            db.execute("UPDATE memory_items SET body_embedding = NULL")
        item = (await call(c, "query_memory", query=query, mode="keyword"))["hits"][0]["id"]
        memory._local_index().collection.delete(ids=[f"{item}:b"])
        q = model.embed([query])[0]
        first = float(q @ model.embed([f"zebra.stripes.Pattern\n{text}"])[0])
        alone = float(q @ model.embed([text])[0])
        assert alone > first + 0.05  # the title moves this query away: the second reading matters here
        before = await call(c, "query_memory", query=query, mode="vector")
        assert before["hits"][0]["similarity"] == pytest.approx(first, abs=2e-4)
        assert memory.read_bodies() == 1 and memory.read_bodies() == 0  # considered once
        after = await call(c, "query_memory", query=query, mode="vector")
        assert after["hits"][0]["similarity"] == pytest.approx(alone, abs=2e-4)


async def test_a_claim_scores_lessons_by_their_first_reading(connect, memory):
    """The relevance floor of claims was measured on an item's first reading (title, then text): a claim's
    lessons keep that score, while query_memory scores the better of both readings."""
    model = get_embedder()
    lesson = dict(
        problem="Totals were off by one cent.", fix="Round with decimal.Decimal, never float.", task_type="code"
    )
    async with connect("alice", memory=memory, role="lead") as c:  # a person's lessons are handed at claims
        await call(c, "record_lesson", **lesson)
        card = await call(
            c, "create_task", title="Round invoice totals", description="Use Decimal for money, not float"
        )
        memory.drain()
        while memory.prepare():
            pass
        claimed = await call(c, "claim_task", task_id=card["id"])
        searched = await call(
            c, "query_memory", query="Round invoice totals\nUse Decimal for money, not float", mode="vector"
        )
    q = model.embed([card_query("Round invoice totals", "Use Decimal for money, not float", [])])[0]
    read = f"{lesson['problem']}\nProblem: {lesson['problem']}\nFix: {lesson['fix']}"
    first, alone = float(q @ model.embed([read])[0]), float(q @ model.embed([lesson["fix"]])[0])
    assert alone > first + 0.01
    assert searched["hits"][0]["similarity"] == pytest.approx(alone, abs=2e-4)
    assert [h["similarity"] for h in claimed["lessons"]] == [pytest.approx(first, abs=2e-4)]


async def test_task_type_kind_and_tag_filters(connect, memory):
    async with connect("alice", memory=memory) as c:
        for lesson in (SQL_LESSON, DOCS_LESSON, CACHE_LESSON):
            await call(c, "record_lesson", **lesson)
        memory.drain()
        docs = await call(c, "query_memory", query="renamed flag in documentation", task_type="docs")
        assert {h["task_type"] for h in docs["hits"]} == {"docs"}
        code = await call(c, "query_memory", query="SQL injection and a memory leak", task_type="code")
        assert len(code["hits"]) == 2 and {h["task_type"] for h in code["hits"]} == {"code"}
        nothing = await call(c, "query_memory", query="renamed flag in documentation", task_type="code")
        assert nothing["hits"] == []  # nothing relevant of that type: nothing, rather than noise
        tagged = await call(c, "query_memory", query="problem", tags=["performance"])
        assert [h["tags"] for h in tagged["hits"]] == [["performance"]]
        outputs = await call(c, "query_memory", query="SQL injection", kinds=["output"])
        assert outputs["hits"] == []


async def test_near_duplicate_lessons_are_merged_and_counted(connect, memory):
    # alice's lesson is a person's (reviewed): another agent's copy merges into a reviewed lesson or its own only
    async with connect("alice", memory=memory, role="lead") as alice, connect("bob", memory=memory) as bob:
        first = await call(alice, "record_lesson", **SQL_LESSON)
        again = await call(bob, "record_lesson", **{**SQL_LESSON, "problem": SQL_LESSON["problem"] + " "})
        assert again["merged"] is True and again["duplicate_of"] == first["item"]["id"]
        assert again["item"]["merged_count"] == 2 and again["similarity"] > 0.9
        assert again["item"]["witnesses"] == 2  # two authors
        other_type = await call(bob, "record_lesson", **{**SQL_LESSON, "task_type": "test"})
        assert other_type["merged"] is False  # same words, another task type: kept apart
        different = await call(bob, "record_lesson", **CACHE_LESSON)
        assert different["merged"] is False
    assert memory.knowledge.count() == 3


async def test_alike_lessons_caught_by_different_rules_are_kept_apart(connect, memory):
    async with connect("alice", memory=memory) as c:
        args = dict(fix="Parse the input instead of evaluating it.", task_type="code")
        first = await call(
            c, "record_lesson", problem="Evaluating user input runs arbitrary code (caught by B307)", **args
        )
        other = await call(
            c, "record_lesson", problem="Evaluating user input runs arbitrary code (caught by B102)", **args
        )
        same = await call(
            c, "record_lesson", problem="Evaluating user input runs arbitrary code (caught by B307) ", **args
        )
    assert other["merged"] is False and same["merged"] is True and same["duplicate_of"] == first["item"]["id"]


async def test_a_lesson_caught_by_one_of_a_near_duplicates_tests_is_merged_into_it(connect, memory):
    args = dict(fix="changed `range(1, n)` to `range(1, n + 1)` in sum_to", task_type="code")
    async with connect("alice", memory=memory) as c:
        both = await call(
            c,
            "record_lesson",
            problem="test_sums_up_to_n failed: expected 15, got 10 (caught by the tests test_sums_up_to_n, test_one)",
            **args,
        )
        one = await call(
            c,
            "record_lesson",
            problem="test_sums_up_to_n failed: expected 15, got 10 (caught by the test test_one)",
            **args,
        )
        other = await call(
            c,
            "record_lesson",
            problem="test_sums_up_to_n failed: expected 15, got 10 (caught by the test test_sums_to_ten)",
            **args,
        )
    assert one["merged"] is True and one["duplicate_of"] == both["item"]["id"]
    assert other["merged"] is False  # alike, but no test caught both


async def test_a_claim_gets_no_lesson_about_unrelated_work(connect, memory):
    async with (
        connect("lead", memory=memory, role="lead") as lead,
        connect("dev", memory=memory) as dev,
    ):  # a person's lessons are handed at claims
        for lesson in (SQL_LESSON, CACHE_LESSON):
            await call(lead, "record_lesson", **lesson)
        memory.drain()
        cards = [
            await call(
                lead,
                "create_task",
                title=f"Add a search box to the {page} page",
                task_type="code",
                description=f"Filter the {page} articles by title as the user types.",
            )
            for page in ("help", "FAQ")
        ]
        # the SQL lesson shares a word with the card ("search"), nothing more: nothing rather than noise
        assert (await call(dev, "claim_task", task_id=cards[0]["id"]))["lessons"] == []
        memory.relevance_floor = float("-inf")  # without the floor: the best of what is there, however unrelated
        handed = (await call(dev, "claim_task", task_id=cards[1]["id"]))["lessons"]
    assert handed and max(h["score"] for h in handed) < RELEVANCE_FLOOR
    assert memory.knowledge.reuse()[0] == len(handed)  # only lessons handed out count as surfaced


async def test_a_lesson_of_another_task_type_needs_a_stronger_match(connect, memory):
    slugify = [
        dict(
            problem="slugify kept commas and '!' from titles",
            fix="collapse every run of characters outside [a-z0-9] into one '-', then strip '-' from both ends",
            task_type="code",
        ),
        dict(
            problem="in \"Add slugify()\": test_punctuation failed: expected 'hi-there', got 'hi,-there!'",
            fix="changed `return text.lower().replace(' ', '-')` to "
            "`return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')` in slugify.",
            task_type="code",
        ),
    ]
    # a person's lessons, so that claims hand them (an agent's unreviewed ones are found by search only)
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        code = [(await call(lead, "record_lesson", **lesson))["item"]["id"] for lesson in slugify]
        memory.drain()

        async def handed(title: str, description: str, task_type: str) -> list[dict]:
            card = await call(lead, "create_task", title=title, description=description, task_type=task_type)
            return (await call(dev, "claim_task", task_id=card["id"]))["lessons"]

        # the same words, other work: a docs card mentioning slugs gets no code lesson
        assert await handed("Write a changelog entry for 0.3", "Summarise the slug and search changes", "docs") == []
        # a code card of the same kind of work gets both
        same = await handed("Slugify tag names in tag URLs", "Tag pages use the tag name in the URL", "code")
        assert sorted(h["id"] for h in same) == sorted(code)
        # a docs card about the very function gets the lesson that matches it best, and only that one
        close = await handed(
            "Document the slugify helper", "Explain in docs/urls.md how titles become URL slugs", "docs"
        )
        assert [h["id"] for h in close] == code[:1] and close[0]["score"] >= RELEVANCE_FLOOR + CROSS_TYPE_MARGIN


async def test_a_superseding_lesson_hides_the_old_one(connect, memory):
    async with connect("alice", memory=memory) as c:
        old = await call(
            c,
            "record_lesson",
            problem="Tests hit the real payment API and were flaky.",
            fix="Skip payment tests in CI.",
            task_type="test",
        )
        new = await call(
            c,
            "record_lesson",
            problem="Tests hit the real payment API and were flaky.",
            fix="Run a local fake of the payment API on 127.0.0.1 and point the client at it.",
            task_type="test",
            supersedes=old["item"]["id"],
        )
        memory.drain()
        found = await call(c, "query_memory", query="flaky payment tests")
        assert [h["id"] for h in found["hits"]] == [new["item"]["id"]]
        everything = await call(c, "query_memory", query="flaky payment tests", include_deprecated=True)
        hidden = next(h for h in everything["hits"] if h["id"] == old["item"]["id"])
        assert hidden["deprecated"] is True and hidden["superseded_by"] == new["item"]["id"]
        assert "does not exist" in await call_error(
            c, "record_lesson", problem="p", fix="f", task_type="test", supersedes=999
        )


async def test_reindex_from_sqlite_gives_the_same_answers(connect, memory):
    async with connect("alice", memory=memory) as c:
        for lesson in (SQL_LESSON, DOCS_LESSON, CACHE_LESSON):
            await call(c, "record_lesson", **lesson)
        memory.drain()
        queries = ["database query safety", "documentation drift", "object lifetime and caching"]
        before = [[h["id"] for h in (await call(c, "query_memory", query=q, mode="vector"))["hits"]] for q in queries]
        assert memory.reindex() == 3
        after = [[h["id"] for h in (await call(c, "query_memory", query=q, mode="vector"))["hits"]] for q in queries]
    assert after == before


async def test_claim_hands_relevant_lessons_and_records_reuse(connect, memory, board):
    async with (
        connect("lead", memory=memory, role="lead") as lead,
        connect("dev", memory=memory) as dev,
    ):  # a person's lessons are handed at claims
        sql = await call(lead, "record_lesson", **SQL_LESSON)
        await call(lead, "record_lesson", **DOCS_LESSON)
        memory.drain()
        card = await call(
            lead,
            "create_task",
            title="Add a /users/search endpoint",
            description="Look users up by name in the users table.",
            task_type="code",
        )
        claim = await call(dev, "claim_task")
        lessons = claim["lessons"]
        assert lessons and lessons[0]["id"] == sql["item"]["id"]
        wrong = await call_error(
            dev, "complete_task", task_id=card["id"], token=claim["token"], output="done", helpful_lessons=[12345]
        )
        assert "were not handed to you" in wrong
        await call(
            dev,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="endpoint with parameterised SQL",
            helpful_lessons=[sql["item"]["id"]],
        )
    surfaced, useful = memory.knowledge.reuse()
    assert surfaced == len(lessons) and useful == 1


async def test_outputs_and_shared_messages_are_remembered_but_direct_messages_are_not(connect, memory):
    async with connect("alice", memory=memory) as alice, connect("bob", memory=memory) as bob:
        await call(bob, "whoami")
        card = await call(alice, "create_task", title="Rate limiter", task_type="code")
        claim = await call(alice, "claim_task")
        await call(
            alice,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="Token bucket per API key, refilled every second.",
            artifacts=[{"name": "limiter.py", "kind": "code", "content": "class TokenBucket: ..."}],
        )
        await call(
            alice,
            "publish_message",
            intent="proposal",
            recipient="everyone",
            content="Let us standardise on exponential backoff with jitter for retries.",
        )
        await call(alice, "publish_message", intent="info", recipient="bob", content="my salary is confidential")
        memory.drain()
        output = await call(bob, "query_memory", query="TokenBucket", kinds=["output"])
        assert output["hits"][0]["task_id"] == card["id"]
        message = await call(bob, "query_memory", query="how should clients retry", kinds=["message"])
        assert "backoff" in message["hits"][0]["snippet"]
        secret = await call(bob, "query_memory", query="salary confidential")
        assert all("salary" not in h["snippet"] for h in secret["hits"])


async def test_the_worker_indexes_in_the_background(connect, memory):
    memory.start(poll_seconds=0.05)
    async with connect("alice", memory=memory) as c:
        lesson = await call(c, "record_lesson", **CACHE_LESSON)
        # woken by the worker's commit (a poll for the hit raced it: Chroma has the item just before SQLite
        # takes it off the outbox)
        found = await call(c, "query_memory", query="objects never freed", mode="vector", wait_seconds=60)
    assert found["hits"][0]["id"] == lesson["item"]["id"] and "note" not in found
    assert memory.knowledge.pending() == 0


class PriorityOfEmbedding:
    """The real embedder, noting the priority of the thread each text is embedded on."""

    def __init__(self, embedder):
        self.inner, self.name, self.dim, self.seen = embedder, embedder.name, embedder.dim, {}

    def embed(self, texts):
        for text in texts:
            self.seen[text] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return self.inner.embed(texts)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
async def test_the_worker_embeds_below_the_priority_of_requests(connect, memory):
    memory.embedder = PriorityOfEmbedding(memory.embedder)
    memory.start(poll_seconds=0.05)
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    async with connect("alice", memory=memory) as c:
        await call(c, "publish_message", intent="status_update", content="the cache keeps every session forever")
        await call(c, "query_memory", query="sessions never expire")  # a request embeds its query itself
        deadline = time.monotonic() + START_TIMEOUT
        while memory.knowledge.pending() and time.monotonic() < deadline:
            time.sleep(0.05)
    seen = memory.embedder.seen
    assert seen["sessions never expire"] == ours
    assert [n for text, n in seen.items() if "every session forever" in text] == [min(19, ours + BACKGROUND_NICE)]


async def test_bad_memory_input_is_refused(connect, memory):
    async with connect("alice", memory=memory) as c:
        assert "query" in await call_error(c, "query_memory", query="")
        assert "kinds" in await call_error(c, "query_memory", query="x", kinds=["gossip"])
        assert "k" in await call_error(c, "query_memory", query="x", k=0)
        assert "fix" in await call_error(c, "record_lesson", problem="p", task_type="code")
        assert "task 999 does not exist" in await call_error(
            c, "record_lesson", problem="p", fix="f", task_type="code", task_id=999
        )
    assert memory.knowledge.count() == 0


def test_opening_the_index_with_another_model_is_refused(memory, tmp_path, request):
    memory.drain()
    if isinstance(memory.index, VectorIndex):  # on a Chroma server
        where = dict(url=request.getfixturevalue("chroma_server"), collection=memory.index.name)
    else:
        where = dict(path=tmp_path / "chroma")

    class OtherModel:
        name, dim = "some-other-model", 768

    with pytest.raises(EmbeddingMismatch, match="hiveboard reindex"):
        VectorIndex(OtherModel(), **where)
    embedder = get_embedder()
    assert (embedder.name, embedder.dim) == (MINILM_DYNAMIC_NAME, MINILM_DIM)
