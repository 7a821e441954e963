"""The deterministic synthesis on its own (no protocol): scores agree with verdicts, and a round's findings are
written once in what get_review returns."""

from __future__ import annotations

from hiveboard.board.review_models import CritiqueRecord, ReviewIssue, ReviewRound, ReviewTrail
from hiveboard.board.reviews import Reviews
from hiveboard.critics.synthesis import convergence_summary, downgrade, rescore, synthesise

LENSES = ["security", "correctness", "tests", "style"]


def record(critic: str, lens: str, verdict: str, score: int, issues: list[ReviewIssue] = ()) -> CritiqueRecord:
    return CritiqueRecord(
        critic=critic,
        lens=lens,
        backend="test",
        status="ok",
        verdict=verdict,
        score=score,
        summary=f"{critic}: {verdict}",
        issues=[i.model_copy(update={"ref": f"r1:{critic}#{n}"}) for n, i in enumerate(issues, 1)],
    )


def failing(test: str, got: str) -> ReviewIssue:
    return ReviewIssue(
        severity="critical",
        category="test-failed",
        rule="the card's acceptance tests",
        location=f"test_spec.py::{test}",
        description=f"failed: expected 6, got {got}\n>       assert total([1, 2, 3]) == 6\nE       assert {got} == 6",
        suggestion="make this test pass",
    )


CLEAN = [
    record("bandit", "security", "PASS", 10),
    record("ruff", "correctness", "PASS", 10),
    record("ruff-style", "style", "CONDITIONAL", 9),
]


def test_critical_test_failures_cap_a_fail_below_the_critics_mean():
    two = record("acceptance", "tests", "FAIL", 2, [failing("test_a", "5"), failing("test_b", "4")])
    synthesis = synthesise([*CLEAN, two], LENSES, 1)
    assert synthesis.verdict == "FAIL" and synthesis.score == 2
    assert synthesis.note == "2 critical test failures cap the score at 2/10 (critics averaged 7.75)"


def test_a_major_issue_caps_higher_than_a_critical_one_and_a_pass_keeps_the_mean():
    major = ReviewIssue(
        severity="major",
        category="useless-expression",
        location="check.py:2",
        description="B015: pointless comparison",
        rule="B015",
    )
    synthesis = synthesise([*CLEAN, record("ruff-b", "correctness", "FAIL", 4, [major])], LENSES, 1)
    assert synthesis.score == 4 and synthesis.note.startswith("1 major issue caps the score at 4/10")
    passed = synthesise(CLEAN, LENSES, 1)
    assert passed.verdict == "PASS" and passed.score == 9.67 and passed.note is None


def test_a_fail_without_an_issue_and_a_fail_by_the_bar():
    blunt = synthesise([*CLEAN, record("llm-tests", "tests", "FAIL", 8)], LENSES, 1)
    assert blunt.score == 4 and "the FAIL of llm-tests caps the score at 4/10" in blunt.note
    under_bar = synthesise([record("llm", "correctness", "PASS", 6)], LENSES, 1, bar=8)
    assert under_bar.verdict == "FAIL" and under_bar.score == 6  # already below the bar: the mean stands
    low_bar = synthesise(
        [
            *CLEAN,
            record("ruff-b", "correctness", "FAIL", 9, [ReviewIssue(severity="major", category="x", description="x")]),
        ],
        LENSES,
        1,
        bar=3.5,
    )
    assert low_bar.score == 2.5  # below a bar that is under the major cap too


def test_a_meta_review_that_clears_the_blocking_issue_gives_back_the_mean():
    one = record("acceptance", "tests", "FAIL", 2, [failing("test_a", "5")])
    synthesis = synthesise([*CLEAN, one], LENSES, 1)
    assert synthesis.score == 2
    cleared = downgrade(synthesis, [*CLEAN, one], 1, {1: ("info", "the card asks for it")})
    assert cleared.verdict == "PASS" and cleared.score == 7.75 and cleared.note is None


def test_the_brief_says_a_shared_fix_once_and_a_test_id_once():
    two = record("acceptance", "tests", "FAIL", 2, [failing("test_a", "5"), failing("test_b", "4")])
    text = synthesise([*CLEAN, two], LENSES, 1).brief
    assert text.count("make this test pass") == 1 and text.count("test_spec.py::test_a") == 1
    assert "1. [critical] test_spec.py::test_a — failed: expected 6, got 5 | > assert total([1, 2, 3]) == 6" in text


def test_a_finding_that_repeats_its_place_says_it_once_in_the_brief_and_to_a_human():
    # a model's finding often starts with its place; one that merely starts with a longer place keeps its text
    said_twice = ReviewIssue(
        severity="major",
        category="injection",
        location="app.py:3",
        description="app.py:3: eval on user input",
        suggestion="use ast.literal_eval",
    )
    elsewhere = said_twice.model_copy(update={"location": "app.py:30", "description": "app.py:300 is fine, 30 not"})
    model = record("agent:security", "security", "FAIL", 3, [said_twice, elsewhere])
    text = synthesise([*CLEAN, model], LENSES, 1).brief
    assert "app.py:3 — eval on user input" in text and text.count("app.py:3 ") == 1
    assert "app.py:30 — app.py:300 is fine, 30 not" in text
    human = convergence_summary([[*CLEAN, model]] * 3, 3)
    assert "UNRESOLVED [major] app.py:3 eval on user input — suggests" in human and human.count("app.py:3 ") == 1


def test_get_review_names_the_critiques_issues_instead_of_repeating_them():
    critiques = [*CLEAN, record("acceptance", "tests", "FAIL", 2, [failing("test_a", "5"), failing("test_b", "4")])]
    synthesis = synthesise(critiques, LENSES, 1)
    trail = ReviewTrail(
        task_id=1,
        title="t",
        task_type="code",
        status="in_progress",
        agent="alice",
        rounds=[
            ReviewRound(
                review_id=1,
                round=1,
                status="finished",
                verdict="FAIL",
                queued_at="",
                attempts=1,
                critiques=critiques,
                synthesis=synthesis,
            )
        ],
    )
    for view in (Reviews.compact(trail), Reviews.referenced(trail)):
        text = view.model_dump_json(exclude_none=True)
        assert text.count("expected 6, got 5") == 2  # the critique's issue and the brief, not the merged issue
        merged = view.rounds[0].synthesis.issues
        assert [m.refs for m in merged] == [["r1:acceptance#1"], ["r1:acceptance#2"]]
        assert all(m.description is None and m.suggestion is None for m in merged)
    assert trail.rounds[0].synthesis.issues[0].description  # the stored synthesis keeps its text (the web board)


def test_a_model_never_lowers_a_critical_integrity_finding():
    integrity = ReviewIssue(
        severity="critical",
        category="integrity-process-exit",
        rule="INT006",
        location="calc.py:2",
        description="exits the process from library code",
        suggestion="raise instead",
    )
    round_ = [record("integrity", "integrity", "FAIL", 2, [integrity])]
    first = synthesise(round_, ["integrity"], 1)
    lowered = downgrade(first, round_, 1, {first.issues[0].rank: ("minor", "looks harmless")})
    assert lowered.verdict == "FAIL" and lowered.issues[0].severity == "critical"
    assert "never lowered" in lowered.meta[0].reason


def test_a_verdict_decided_elsewhere_gets_a_score_that_agrees():
    round_ = [record("ruff", "correctness", "PASS", 9, [])]
    passed = synthesise(round_, ["correctness"], 1)
    assert passed.score == 9
    failed = rescore(passed.model_copy(update={"verdict": "FAIL"}), round_)
    assert failed.score == 4 and "caps the score at 4/10" in failed.note
