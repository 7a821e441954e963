"""LLM critics through the real openai client against a fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import re
import threading

import pytest
from conftest import call, data
from fake_llm import critique, issue
from reviewing import NO_BUILTINS, critic, hand_in, llm_critic, verdict

from hiveboard.critics.config import Endpoint, ReviewConfig, SynthesisConfig
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


def config(fake, *lenses: str, **extra) -> ReviewConfig:
    """One LLM critic per lens on the fake server, built-in critics off, a 'code' card reviewed by those lenses."""
    critics = {**NO_BUILTINS, **{f"llm-{lens}": llm_critic(fake, lens, model=f"model-{lens}") for lens in lenses}}
    return ReviewConfig(critics=critics, task_types={"code": list(lenses)}, **extra)


def resolve_all(request: dict) -> dict:
    """A round-2 critic that finds its earlier issues fixed (refs read from the prompt it was sent)."""
    prompt = request["messages"][-1]["content"]
    refs = re.findall(r"- ref (\S+):", prompt)
    return critique(
        "PASS", 9, "all fixed", resolutions=[{"ref": r, "status": "resolved", "note": "fixed"} for r in refs]
    )


async def test_pass_path_uses_each_critics_own_model_and_a_json_schema(connect, reviewer, fake_llm):
    engine = reviewer(config(fake_llm, "correctness", "clarity"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, output="implemented the parser")
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["verdict"] == "PASS" and round1["outcome"] == "done"
        assert {x["critic"]: x["model"] for x in round1["critiques"]} == {
            "llm-correctness": "model-correctness",
            "llm-clarity": "model-clarity",
        }
    calls = fake_llm.calls()
    assert sorted((r["lens"], r["model"]) for r in calls) == [
        ("clarity", "model-clarity"),
        ("correctness", "model-correctness"),
    ]
    body = calls[0]["body"]
    assert body["response_format"]["type"] == "json_schema"
    assert set(body["response_format"]["json_schema"]["schema"]["required"]) >= {"verdict", "score", "issues"}
    assert "implemented the parser" in body["messages"][-1]["content"]
    # a critic sees only its own lens's rubric
    system = next(m["content"] for m in body["messages"] if m["role"] == "system")
    other = "clarity" if calls[0]["lens"] == "correctness" else "correctness"
    assert f"You are the {calls[0]['lens']} critic" in system and f"You are the {other}" not in system


async def test_fail_then_revise_then_pass_records_a_lesson_the_next_agent_gets(
    connect, reviewer, fake_llm, board, tmp_path
):
    memory = open_memory(board, get_embedder(), tmp_path)
    memory.start()
    try:
        fake_llm.script(
            "security",
            critique(
                "FAIL",
                3,
                "SQL injection",
                issues=[
                    issue(
                        "critical",
                        "sql-injection",
                        "db.py:4",
                        "the query is built by string formatting from user input",
                        "use a parameterised query with placeholders",
                    )
                ],
            ),
            resolve_all,
        )
        fake_llm.script("correctness", critique("PASS", 8), resolve_all)
        engine = reviewer(config(fake_llm, "security", "correctness"), memory=memory)
        async with connect("alice", review=engine, memory=memory) as c:
            card = await hand_in(c, title="look up users by name", output="wrote find_user")
            round1 = (await verdict(c, card["id"]))["rounds"][0]
            assert round1["verdict"] == "FAIL" and round1["outcome"] == "in_progress"
            assert round1["synthesis"]["decisive"] == ["llm-security"]
            brief = (await call(c, "get_messages", intent="critique", full=True))["messages"][0]["content"]
            assert "the query is built by string formatting" in brief and "parameterised" in brief

            await hand_in(c, card["id"], output="switched find_user to a parameterised query")
            trail = await verdict(c, card["id"])
            round2 = trail["rounds"][1]
            assert round2["verdict"] == "PASS" and round2["outcome"] == "done"
            security = critic(round2, "llm-security")
            assert security["resolutions"] == [{"ref": "r1:llm-security#1", "status": "resolved", "note": "fixed"}]
            # the round-2 prompt carried the critic's own earlier issue, and only its own
            prompt = fake_llm.calls("security")[1]["body"]["messages"][-1]["content"]
            assert "r1:llm-security#1" in prompt and "llm-correctness" not in prompt

            memory.drain()
            lessons = await call(
                c, "query_memory", query="SQL query built with string formatting", kinds=["lesson"], task_type="code"
            )
            assert lessons["hits"] and "parameterised" in lessons["hits"][0]["snippet"]
            lesson = lessons["hits"][0]["snippet"]  # one sentence of problem, one of fix, what caught it
            assert "sql-injection: the query is built by string formatting from user input" in lesson
            assert "caught by" in lesson and "db.py" not in lesson and "Traceback" not in lesson
            # the next agent on a code card like it is handed the lesson at claim time
            nxt = await call(
                c,
                "create_task",
                title="search users by email",
                task_type="code",
                description="query the users table by email address",
            )
        async with connect("bob", review=engine, memory=memory) as bob:
            claim = await call(bob, "claim_task", task_id=nxt["id"])
            assert claim["lessons"][0]["kind"] == "lesson"  # lessons first; critiques only where none fits
            assert any(h["kind"] == "lesson" and h["id"] == lessons["hits"][0]["id"] for h in claim["lessons"])
            surfaced = (await call(bob, "board_stats"))["memory_surfaced"]
            await call(bob, "claim_task", task_id=nxt["id"])  # claimed again by its holder: not counted again
            stats = await call(bob, "board_stats")
            assert stats["memory_surfaced"] == surfaced
            assert stats["critique_success_rate"] == 1.0 and stats["first_pass_pass_rate"] == 0.0
            assert stats["rounds_per_card"] == 2.0
            security_stats = next(x for x in stats["critics"] if x["critic"] == "llm-security")
            assert security_stats["decisive"] == 1 and security_stats["contribution_rate"] == 0.5
            assert security_stats["critiques"] == 2 and security_stats["issues"] == 1
            assert stats["reviews"] == 2 and stats["cards_reviewed"] == 1 and stats["needs_human"] == 0
            assert stats["first_pass_by_day"][0]["reviewed"] == 1 and stats["review_latency_p50"] > 0
            assert stats["messages_per_task"] > 1 and stats["memory_surfaced"] >= 1
            resource = await bob.read_resource("hiveboard://stats")
            assert json.loads(resource.contents[0].text)["critique_success_rate"] == 1.0
            # the critics reviewing that next card are handed the lesson as context
            fake_llm.script("security", critique("PASS", 9, "parameterised"))
            await call(bob, "complete_task", task_id=nxt["id"], token=claim["token"], output="find_by_email done")
            await verdict(bob, nxt["id"])
            prompt = fake_llm.calls("security")[-1]["body"]["messages"][-1]["content"]
            assert "From the team's memory" in prompt and "string formatting from user input" in prompt
    finally:
        memory.stop()


async def test_max_rounds_sends_the_card_to_a_human_with_a_summary(connect, reviewer, fake_llm):
    stubborn = critique(
        "FAIL",
        4,
        "still slow",
        issues=[issue("major", "n-plus-one", "api.py:10", "one query per row", "batch the query")],
    )
    fake_llm.default["performance"] = stubborn
    engine = reviewer(config(fake_llm, "performance", max_rounds=2))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        assert (await verdict(c, card["id"]))["rounds"][0]["outcome"] == "in_progress"
        await hand_in(c, card["id"], output="tried again")
        trail = await verdict(c, card["id"])
        assert [r["outcome"] for r in trail["rounds"]] == ["in_progress", "needs_human"]
        first, last = (r["synthesis"]["brief"] for r in trail["rounds"])
        assert first.startswith("Round 1: FAIL. Fix these first, in order:")
        assert (
            last.startswith("Round 2: FAIL. The card went to needs_human: a person decides")
            and "Fix these first" not in last
        )
        assert "api.py:10" in last  # the open issues stay listed, for the person
        task = await call(c, "get_task", task_id=card["id"])
        assert task["status"] == "needs_human"
        assert "did not converge after 2 of 2 rounds" in task["blocked_reason"]
        summary = (await call(c, "get_messages", intent="needs_human", full=True))["messages"][0]["content"]
        assert "llm-performance (performance): 0 resolved, 1 unresolved" in summary
        assert "UNRESOLVED [major] api.py:10 one query per row — suggests: batch the query" in summary
        assert "llm-performance: FAIL" in summary
        # back in todo, the card keeps its rounds: its next round is round 3, and its failure goes to a person
        await call(c, "update_task", task_id=card["id"], status="todo")
        await hand_in(c, card["id"])
        assert [(r["round"], r["outcome"]) for r in (await verdict(c, card["id"]))["rounds"]][-1] == (3, "needs_human")


async def test_malformed_output_is_repaired_retried_or_recorded(connect, reviewer, fake_llm):
    good = json.dumps(critique("PASS", 8, "fine"))
    fake_llm.script("correctness", f"Sure! Here is my review:\n```json\n{good}\n```")  # repaired locally
    fake_llm.script("clarity", "I think it is great", good)  # asked again with the error
    fake_llm.default["style"] = '{"verdict": "MAYBE"}'  # never valid
    engine = reviewer(config(fake_llm, "correctness", "clarity", "style", repair_attempts=1))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert critic(round1, "llm-correctness")["status"] == "ok" and len(fake_llm.calls("correctness")) == 1
    assert critic(round1, "llm-clarity")["status"] == "ok" and len(fake_llm.calls("clarity")) == 2
    retry = fake_llm.calls("clarity")[1]["body"]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I think it is great"} and "not valid" in retry[-1]["content"]
    style = critic(round1, "llm-style")
    assert style["status"] == "error" and "malformed output 2 time(s)" in style["error"]
    assert len(fake_llm.calls("style")) == 2
    assert (
        round1["synthesis"]["lenses_failed"] == ["style"] and "llm-style (style) error" in round1["synthesis"]["note"]
    )


async def test_a_slow_critic_times_out_and_an_unreachable_one_errors_the_rest_decide(
    connect, reviewer, fake_llm, unreachable_url
):
    fake_llm.delay["performance"] = 5
    fake_llm.script("correctness", critique("FAIL", 3, "off by one", issues=[issue()]))
    critics = {
        **NO_BUILTINS,
        "slow": llm_critic(fake_llm, "performance", timeout=0.5),
        "gone": llm_critic(fake_llm, "security").model_copy(update={"base_url": unreachable_url}),
        "llm-correctness": llm_critic(fake_llm, "correctness"),
    }
    engine = reviewer(ReviewConfig(critics=critics, task_types={"code": ["security", "correctness", "performance"]}))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    slow, gone = critic(round1, "slow"), critic(round1, "gone")
    assert slow["status"] == "timeout" and "did not answer within" in slow["error"]
    assert gone["status"] == "error" and "could not reach model" in gone["error"]
    assert round1["verdict"] == "FAIL" and round1["synthesis"]["decisive"] == ["llm-correctness"]
    assert set(round1["synthesis"]["lenses_failed"]) == {"security", "performance"}


async def test_every_critic_failing_sends_the_card_to_a_human(connect, reviewer, unreachable_url):
    dead = unreachable_url
    critics = {
        **NO_BUILTINS,
        "gone": {"lens": "correctness", "backend": "llm", "model": "m", "base_url": dead, "api_key_env": None},
    }
    engine = reviewer(ReviewConfig(critics=critics, task_types={"code": ["correctness"]}))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["outcome"] == "needs_human"
        assert "the review could not run" in (await call(c, "get_task", task_id=card["id"]))["blocked_reason"]


async def test_three_critics_run_in_parallel(connect, reviewer, fake_llm):
    """Each critic's model call answers only once all three calls are in flight: run one after another,
    the first would wait alone until the barrier gives up (no timing is asserted)."""
    together = threading.Barrier(3, timeout=60)
    broke = []

    def answer_when_all_asked(request: dict) -> dict:
        try:
            together.wait()
        except threading.BrokenBarrierError:
            broke.append(request["model"])
        return critique("PASS", 9, "fine")

    for lens in ("security", "correctness", "performance"):
        fake_llm.script(lens, answer_when_all_asked)
    engine = reviewer(config(fake_llm, "security", "correctness", "performance"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"], timeout=300))["rounds"][0]
    assert len(fake_llm.calls()) == 3 and broke == [], f"critics were not all asked at once: {broke}"
    assert [x["status"] for x in round1["critiques"]] == ["ok", "ok", "ok"]


async def test_duplicates_are_merged_across_critics_and_contradictions_surfaced(connect, reviewer, fake_llm):
    fake_llm.script(
        "security",
        critique(
            "FAIL",
            2,
            "eval of input",
            issues=[
                issue(
                    "critical", "code-injection", "app.py:2", "eval() runs whatever the user types", "parse the input"
                )
            ],
        ),
    )
    fake_llm.script(
        "style",
        critique(
            "PASS", 9, "tidy", issues=[issue("minor", "naming", "app.py:2", "rename value to parsed", "call it parsed")]
        ),
    )
    critics = {
        "llm-security": llm_critic(fake_llm, "security"),
        "llm-style": llm_critic(fake_llm, "style"),
        "ruff": NO_BUILTINS["ruff"],
        "acceptance": NO_BUILTINS["acceptance"],
    }
    engine = reviewer(ReviewConfig(critics=critics, task_types={"code": ["security", "style"]}))
    async with connect("alice", review=engine) as c:
        card = await hand_in(
            c,
            artifacts=[
                {
                    "name": "app.py",
                    "kind": "code",
                    "content": "def main():\n    value = eval(input())\n    return value\n",
                }
            ],
        )
        synthesis = (await verdict(c, card["id"]))["rounds"][0]["synthesis"]
    top = synthesis["issues"][0]
    assert top["lens"] == "security" and top["severity"] == "critical"
    assert sorted(top["found_by"]) == ["bandit", "llm-security"]  # same place, same lens: one issue
    assert synthesis["issues"][-1]["lens"] == "style"  # ranked by severity, then lens precedence
    clash = [x for x in synthesis["contradictions"] if x["about"].startswith("app.py:2")]
    assert clash and "security takes precedence" in clash[0]["decided"]


async def test_an_llm_synthesiser_writes_the_brief_but_cannot_pass_a_critical_security_issue(
    connect, reviewer, fake_llm
):
    fake_llm.script(
        "security", critique("FAIL", 2, "bad", issues=[issue("critical", "secret", "cfg.py:1", "hard-coded password")])
    )
    fake_llm.script("synthesis", {"verdict": "PASS", "brief": "Ship it.", "contradictions": ["none really"]})
    synthesis_config = SynthesisConfig(
        backend="llm", endpoint=Endpoint(model="judge", base_url=fake_llm.url, api_key_env=None)
    )
    engine = reviewer(config(fake_llm, "security", synthesis=synthesis_config))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        synthesis = (await verdict(c, card["id"]))["rounds"][0]["synthesis"]
    assert synthesis["synthesiser"] == "llm:judge" and synthesis["brief"] == "Ship it."
    assert synthesis["verdict"] == "FAIL"
    assert fake_llm.calls("synthesis")[0]["model"] == "judge"


async def test_get_review_reports_progress_while_it_waits(connect, reviewer, fake_llm):
    fake_llm.delay["performance"] = 1.5
    engine = reviewer(config(fake_llm, "correctness", "performance"))
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, total, message))

    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        result = await c.call_tool(
            "get_review", {"task_id": card["id"], "wait_seconds": 30}, progress_callback=on_progress
        )
        assert data(result)["rounds"][0]["status"] == "finished"
    assert updates and updates[-1][1] == 2 and any(p == 1 for p, _, _ in updates)
    assert "of 2 critics done" in updates[-1][2]


@pytest.mark.parametrize("policy, outcome", [("needs_human", "needs_human"), ("pass", "done")])
async def test_a_lens_whose_critics_failed_does_not_pass_silently(
    connect, reviewer, fake_llm, policy, outcome, unreachable_url
):
    critics = {
        **NO_BUILTINS,
        "llm-style": llm_critic(fake_llm, "style"),
        "gone": llm_critic(fake_llm, "security").model_copy(update={"base_url": unreachable_url}),
    }
    engine = reviewer(
        ReviewConfig(critics=critics, task_types={"code": ["security", "style"]}, on_critic_failure=policy)
    )
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["outcome"] == outcome and round1["synthesis"]["lenses_failed"] == ["security"]
        if outcome == "needs_human":
            reason = (await call(c, "get_task", task_id=card["id"]))["blocked_reason"]
            assert "security could not be reviewed" in reason and "could not reach model" in reason


async def test_work_under_the_score_bar_is_revised_until_it_reaches_it(connect, reviewer, fake_llm):
    """The seeds' loop: no blocking issue is not enough while the score is under review.pass_score."""
    fake_llm.script(
        "correctness",
        critique("PASS", 6, "works, but thin: no edge cases"),
        critique("PASS", 9, "handles the edge cases"),
    )
    engine = reviewer(config(fake_llm, "correctness", pass_scores={"code": 8}))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, output="first try")
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL" and round1["outcome"] == "in_progress"
        assert "below the bar 8" in round1["synthesis"]["brief"]
        await hand_in(c, card["id"], output="added the edge cases")
        trail = await verdict(c, card["id"])
        assert trail["rounds"][1]["verdict"] == "PASS" and trail["scores"] == [6, 9]
        approval = (await call(c, "get_messages", intent="approval", full=True))["messages"][0]["content"]
        assert "score 9.0/10; by round 6 → 9" in approval
        assert (await call(c, "board_stats"))["score_by_round"] == [6.0, 9.0]
        compact = await call(c, "get_review", task_id=card["id"])  # the default: the latest round, to act on
        assert compact["rounds_omitted"] == 1 and [r["round"] for r in compact["rounds"]] == [2]
        assert compact["scores"] == [6, 9] and "brief" in compact["rounds"][0]["synthesis"]


def meta_config(fake, *lenses: str) -> ReviewConfig:
    return config(fake, *lenses, meta=Endpoint(model="meta-model", base_url=fake.url, api_key_env=None))


async def test_the_critic_of_the_critics_downgrades_a_blocking_issue_with_a_reason(connect, reviewer, fake_llm):
    fake_llm.script(
        "correctness",
        critique(
            "FAIL",
            4,
            "weak hash",
            issues=[issue("major", "weak-hash", "cache.py:4", "MD5 is broken for security", "use sha256")],
        ),
    )
    fake_llm.script(
        "meta",
        {
            "judgements": [
                {
                    "rank": 1,
                    "keep": False,
                    "severity": "info",
                    "reason": "the card asks for an MD5 cache key; no security use",
                }
            ]
        },
    )
    engine = reviewer(meta_config(fake_llm, "correctness"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, title="MD5 hex digest for the legacy cache key")
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    synthesis = round1["synthesis"]
    assert round1["verdict"] == "PASS" and round1["outcome"] == "done"
    assert synthesis["meta"] == [
        {
            "rank": 1,
            "location": "cache.py:4",
            "severity": "major",
            "decided": "info",
            "reason": "the card asks for an MD5 cache key; no security use",
        }
    ]
    prompt = fake_llm.calls("meta")[0]["body"]["messages"][-1]["content"]
    assert "MD5 hex digest for the legacy cache key" in prompt and "MD5 is broken" in prompt


async def test_the_critic_of_the_critics_never_clears_a_critical_security_finding(connect, reviewer, fake_llm):
    fake_llm.script(
        "security",
        critique(
            "FAIL",
            2,
            "injection",
            issues=[issue("critical", "sql-injection", "db.py:2", "user input formatted into SQL", "use placeholders")],
        ),
    )
    fake_llm.script("meta", {"judgements": [{"rank": 1, "keep": False, "severity": "minor", "reason": "looks fine"}]})
    engine = reviewer(meta_config(fake_llm, "security"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert round1["verdict"] == "FAIL"
    decision = round1["synthesis"]["meta"][0]
    assert decision["decided"] == "critical" and "never lowered" in decision["reason"]


async def test_a_malformed_meta_review_leaves_the_verdict_standing(connect, reviewer, fake_llm):
    fake_llm.script("correctness", critique("FAIL", 3, "bug", issues=[issue("major")]))
    fake_llm.script("meta", "not json", "still not json", "nope")
    engine = reviewer(meta_config(fake_llm, "correctness"))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c)
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert round1["verdict"] == "FAIL" and "meta-review failed" in round1["synthesis"]["note"]
