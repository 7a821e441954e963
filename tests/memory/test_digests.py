"""Digests per task type through a real MCP client: lessons grouped by meaning into rules with counts."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import START_TIMEOUT, call

from hiveboard.critics.config import Endpoint
from hiveboard.critics.llm import DigestWriter
from hiveboard.memory.digests import Digester
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

# Ten web-scraping lessons: three ways of saying "back off when rate limited", two of "render JavaScript in a
# headless browser", two of "select by stable attributes", and three lessons of their own.
RATE_LIMIT = [
    (
        "the site answered 429 Too Many Requests after a burst of requests",
        "throttle requests and back off exponentially when the server answers 429",
    ),
    (
        "we got rate limited by the website when crawling fast",
        "slow down the crawler and retry with exponential backoff on HTTP 429",
    ),
    (
        "scraper was blocked for sending too many requests per second",
        "limit the request rate and wait longer between retries when rate limited",
    ),
]
JAVASCRIPT = [
    (
        "prices were missing because the page renders them with JavaScript",
        "use a headless browser to render JavaScript before parsing the page",
    ),
    (
        "content loaded by JS was not in the downloaded HTML",
        "render the page in a headless browser such as Playwright before extracting content",
    ),
]
SELECTORS = [
    (
        "the CSS selector broke when the site changed its layout",
        "select elements by stable attributes like data-testid instead of layout classes",
    ),
    (
        "extraction failed after a redesign changed class names",
        "prefer stable attributes such as ids or data attributes over generated class names in selectors",
    ),
]
SINGLES = [
    ("the crawler fetched pages disallowed by the site", "read robots.txt and skip disallowed paths before crawling"),
    ("non-UTF-8 pages came out garbled", "detect the page encoding from headers or meta tags before decoding"),
    ("requests without a user agent got 403 Forbidden", "send a realistic User-Agent header with every request"),
]
LESSONS = RATE_LIMIT + JAVASCRIPT + SELECTORS + SINGLES


@pytest.fixture
def memory(board, tmp_path):
    mem = open_memory(board, get_embedder(), tmp_path)
    yield mem
    mem.stop()


async def record(client, lessons, task_type="web_scraping") -> list[int]:
    return [
        (await call(client, "record_lesson", problem=p, fix=f, task_type=task_type))["item"]["id"] for p, f in lessons
    ]


async def read_digest(client, task_type="web_scraping") -> dict:
    return json.loads((await client.read_resource(f"hiveboard://digest/{task_type}")).contents[0].text)


async def test_a_digest_appears_after_enough_lessons_grouping_paraphrases_with_counts(connect, memory, board):
    digester = Digester(board, memory.embedder, min_lessons=10)
    async with connect("alice", memory=memory, role="lead") as c:
        ids = await record(c, LESSONS[:9])
        assert digester.refresh() == []  # nine lessons: not yet
        with pytest.raises(Exception, match="no digest yet \\(9 lessons\\)"):
            await read_digest(c)
        ids += await record(c, LESSONS[9:])
        assert [d.task_type for d in digester.refresh()] == ["web_scraping"]
        digest = await read_digest(c)
        listed = json.loads((await c.read_resource("hiveboard://digests")).contents[0].text)
    assert digest["title"] == "Common Web Scraping Techniques" and digest["written_by"] == "extractive"
    assert digest["lessons"] == 10
    groups = [(r["count"], sorted(r["lessons"])) for r in digest["rules"]]
    assert groups == [(3, ids[0:3]), (2, ids[3:5]), (2, ids[5:7]), (1, [ids[7]]), (1, [ids[8]]), (1, [ids[9]])]
    # each rule is a sentence from one of its own lessons' fixes
    for rule in digest["rules"]:
        fixes = [LESSONS[ids.index(i)][1] for i in rule["lessons"]]
        assert rule["rule"].lower() in [f.lower() for f in fixes]
    assert listed == [
        {
            "task_type": "web_scraping",
            "title": "Common Web Scraping Techniques",
            "rules": 6,
            "lessons": 10,
            "uri": "hiveboard://digest/web_scraping",
        }
    ]


async def test_claim_hands_the_digest_before_single_lessons(connect, memory, board):
    digester = Digester(board, memory.embedder, min_lessons=10)
    async with connect("lead", memory=memory, role="lead") as lead, connect("dev", memory=memory) as dev:
        await record(lead, LESSONS)
        digester.refresh()
        memory.drain()
        await call(
            lead,
            "create_task",
            title="Scrape the prices of the shop",
            task_type="web_scraping",
            description="The shop renders its prices with JavaScript and rate-limits crawlers.",
        )
        await call(lead, "create_task", title="Write the changelog", task_type="docs")
        result = await dev.call_tool("claim_task", {"task_type": "web_scraping"})
        text = result.content[0].text
        claim = json.loads(text)
        assert claim["digest"]["title"] == "Common Web Scraping Techniques"
        assert claim["digest"]["rules"][0]["count"] == 3 and claim["lessons"]
        assert text.index('"digest"') < text.index('"lessons"')  # what the agent reads first
        other = await call(dev, "claim_task", task_type="docs")
        assert "digest" not in other  # no digest for a task type without one


async def test_a_digest_is_refreshed_as_lessons_accrue_not_on_reads(connect, memory, board):
    digester = Digester(board, memory.embedder, min_lessons=10, refresh_after=3)
    async with connect("alice", memory=memory, role="lead") as c:
        await record(c, LESSONS)
        digester.refresh()
        first = await read_digest(c)
        for _ in range(3):
            assert await read_digest(c) == first  # reading never rewrites it
        more = [
            ("a proxy pool rotated too slowly and one IP got banned", "rotate proxies per request from a pool"),
            ("the sitemap listed pages we never crawled", "seed the crawl from the sitemap.xml"),
        ]
        await record(c, more)
        assert digester.refresh() == [] and (await read_digest(c))["version"] == first["version"]  # 2 < refresh_after
        await record(c, [("one banned IP stopped the whole crawl", "rotate proxies from a pool for every request")])
        assert [d.version for d in digester.refresh()] == [first["version"] + 1]
        second = await read_digest(c)
    assert second["lessons"] == 13
    proxies = next(r for r in second["rules"] if "prox" in r["rule"])
    assert proxies["count"] == 2  # the two proxy lessons, said differently, are one rule


def signalling_digester(board, memory, **options) -> tuple[Digester, threading.Event]:
    """A digester (4 lessons make a digest) and an event set each time it saves one."""
    digester = Digester(board, memory.embedder, min_lessons=4, **options)
    written = threading.Event()
    original = digester.digests.save

    def save(*args, **kwargs):
        digest = original(*args, **kwargs)
        written.set()
        return digest

    digester.digests.save = save
    return digester, written


async def test_the_server_writes_digests_in_the_background(connect, memory, board):
    digester, written = signalling_digester(board, memory, settle_seconds=0.05)
    digester.start()
    try:
        async with connect("alice", memory=memory, role="lead") as c:
            await record(c, RATE_LIMIT + JAVASCRIPT[:1])
            assert written.wait(START_TIMEOUT), "no digest was written after the fourth lesson"
            digest = await read_digest(c)
    finally:
        digester.stop()
    assert [r["count"] for r in digest["rules"]] == [3, 1]


async def test_a_merged_near_duplicate_wakes_the_digest_writer(connect, memory, board):
    """A lesson merged into an existing one adds no item but counts when another author records it (one author's
    copies count once): when it makes a digest due, the digest is written at once, not at the next poll (an hour
    away here)."""
    digester, written = signalling_digester(board, memory, poll_seconds=3600, settle_seconds=0.05)
    digester.start()
    try:
        async with connect("alice", memory=memory, role="lead") as c, connect("bob", memory=memory) as bob:
            await record(c, RATE_LIMIT)
            assert not written.wait(1), "three lessons are not enough for a digest"
            same = await call(
                c, "record_lesson", problem=RATE_LIMIT[0][0], fix=RATE_LIMIT[0][1], task_type="web_scraping"
            )
            assert same["merged"] and not written.wait(1), "alice's own copy is not a fourth witness"
            again = await call(
                bob, "record_lesson", problem=RATE_LIMIT[0][0], fix=RATE_LIMIT[0][1], task_type="web_scraping"
            )
            assert again["merged"]
            assert written.wait(START_TIMEOUT), "the merged fourth lesson did not wake the digest writer"
            digest = await read_digest(c)
    finally:
        digester.stop()
    assert digest["lessons"] == 4


async def test_the_configured_model_writes_the_rules_and_the_counts_stay(connect, memory, board, fake_llm):
    def reply(body):
        groups = json.loads(body["messages"][-1]["content"].split("groups:\n", 1)[1])
        return {
            "title": "Web Scraping: What Works",
            "rules": [f"Rule {g['group']} from {g['lessons']} lessons" for g in groups],
        }

    fake_llm.script("digest", reply, "not json at all", "still not json", "nor this")
    writer = DigestWriter(Endpoint(model="digest-model", base_url=fake_llm.url), timeout=30, repair_attempts=2)
    digester = Digester(board, memory.embedder, min_lessons=10, refresh_after=1, writer=writer, writer_name=writer.name)
    async with connect("alice", memory=memory, role="lead") as c:
        await record(c, LESSONS)
        digester.refresh()
        digest = await read_digest(c)
        assert digest["title"] == "Web Scraping: What Works" and digest["written_by"] == "llm:digest-model"
        assert [(r["rule"], r["count"]) for r in digest["rules"]] == [
            ("Rule 1 from 3 lessons", 3),
            ("Rule 2 from 2 lessons", 2),
            ("Rule 3 from 2 lessons", 2),
            ("Rule 4 from 1 lessons", 1),
            ("Rule 5 from 1 lessons", 1),
            ("Rule 6 from 1 lessons", 1),
        ]
        sent = fake_llm.calls("digest")[0]["body"]
        assert sent["model"] == "digest-model" and "throttle requests" in sent["messages"][-1]["content"]
        # a model that keeps answering nonsense leaves the offline digest, never a broken one
        await record(c, [("the crawler fetched pages disallowed by robots", "honour robots.txt rules")])
        digester.refresh()
        fallback = await read_digest(c)
    assert fallback["written_by"] == "extractive" and fallback["version"] == digest["version"] + 1
    assert fallback["rules"][0]["rule"].startswith("Throttle requests")


def test_the_server_writes_digests_with_the_configured_model_else_offline(board, memory, tmp_path):
    from hiveboard.critics.config import ReviewConfig
    from hiveboard.server.cli import start_digester
    from hiveboard.server.config import DigestConfig, Settings

    chosen = {}
    for name, settings in (
        ("offline", Settings(home=tmp_path)),
        ("review.llm", Settings(home=tmp_path, review=ReviewConfig(llm=Endpoint(model="critic-model")))),
        (
            "digest.llm",
            Settings(
                home=tmp_path,
                review=ReviewConfig(llm=Endpoint(model="critic-model")),
                digest=DigestConfig(min_lessons=4, llm=Endpoint(model="digest-model")),
            ),
        ),
    ):
        digester = start_digester(settings, board, memory)
        digester.stop()
        chosen[name] = (digester.writer_name if digester.writer else None, digester.min_lessons)
    assert chosen == {
        "offline": (None, 10),
        "review.llm": ("llm:critic-model", 10),
        "digest.llm": ("llm:digest-model", 4),
    }
