"""The board's rules for review rounds and hidden-test evidence, without the protocol: a card's rounds are
counted across claims and holders, only its creator or a person grants more, and a critique the card's hidden
tests shaped reads sealed to everyone but them."""

from __future__ import annotations

import pytest

from hiveboard.board.errors import Forbidden
from hiveboard.board.models import NewTask
from hiveboard.board.review_models import CritiqueRecord, ReviewIssue, Synthesis, sealed
from hiveboard.board.tasks import Board

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def fail_round(board: Board, outcome: str = "in_progress") -> int:
    job = board.reviews.claim_job("worker", 30)
    board.reviews.begin(job, "worker", [], [], None)
    board.reviews.finish(job, "worker", Synthesis(verdict="FAIL", score=2, brief="fix it"), outcome, "FAIL", [])
    return job.round


def test_rounds_are_counted_across_claims_and_holders_and_granted_by_the_creator_or_a_person(board):
    board.agents.new_token("lee", role="lead")
    card = board.create("bob", NewTask(title="calc", task_type="code"))
    claim = board.claim("alice", card.id)
    board.complete("alice", card.id, claim.token, "v1", to_status="review")
    assert fail_round(board, "needs_human") == 1
    board.update("alice", card.id, status="todo")  # its holder puts it back
    claim = board.claim("carol", card.id)  # another agent takes it
    board.complete("carol", card.id, claim.token, "v2", to_status="review")
    assert fail_round(board) == 2  # round 2 of the card, not round 1 of carol's claim

    for who in ("alice", "carol"):  # its first author, its holder
        with pytest.raises(Forbidden, match="creator \\(bob\\).*may grant it more review rounds"):
            board.update(who, card.id, grant_rounds=3)
    board.update("lee", card.id, grant_rounds=3, reason="worth another go")
    job_limit = board.store.db.execute("SELECT round_limit FROM tasks WHERE id = ?", [card.id]).fetchone()[0]
    assert job_limit == 5  # two rounds had, three more
    granted = [h for h in board.get(card.id, history=50).history if h.action == "granted review rounds"]
    assert [(h.actor, h.note) for h in granted] == [
        (
            "lee",
            "lee granted 3 more review rounds: after 2, failed rounds go back to the author up to round 5; "
            "worth another go",
        )
    ]


def test_a_sealed_critique_says_nothing_of_what_the_hidden_tests_shaped():
    secret = [
        ReviewIssue(
            severity="critical",
            category="test-failed",
            location="spec.py::test[27-111]",
            ref="r1:t#h1",
            description="failed: AssertionError",
            hidden=True,
        ),
        ReviewIssue(
            severity="major",
            category="test-failed",
            location="spec.py::test[97-118]",
            ref="r1:t#h2",
            description="failed: AssertionError",
            hidden=True,
        ),
    ]
    own = ReviewIssue(severity="minor", category="style", location="calc.py:3", ref="r1:t#1", description="long")
    record = CritiqueRecord(
        critic="t",
        lens="tests",
        backend="acceptance",
        status="ok",
        verdict="FAIL",
        score=3,
        seconds=4.2,
        summary="1 of 2 checks passed: 4 tests: 2 passed, 2 failed",
        issues=[own, *secret],
        hidden=True,
    )
    shown = sealed(record)
    assert shown.issues[0] == own  # what the hidden tests did not shape stays as it is
    [collapsed] = shown.issues[1:]
    assert (collapsed.severity, collapsed.category, collapsed.location, collapsed.ref) == (
        "critical",
        "hidden-tests",
        "",
        "r1:t#hidden",
    )
    text = shown.model_dump_json()
    assert "27" not in text and "111" not in text and "2 failed" not in text and "test[" not in text
    assert shown.score == 2 and shown.seconds is None  # the verdict's score; no time
    assert sealed(sealed(record)) == shown
    # a hidden finding seals its critique even when the critique was not marked
    assert sealed(record.model_copy(update={"hidden": False})).issues == shown.issues
    # one that blocks nothing (waived, demoted) is not shown at all: it would be a signal and nothing more
    info = own.model_copy(update={"severity": "info"})
    minor = record.model_copy(
        update={"verdict": "CONDITIONAL", "issues": [info, secret[0].model_copy(update={"severity": "minor"})]}
    )
    assert (sealed(minor).issues, sealed(minor).verdict, sealed(minor).score) == ([info], "PASS", 10)
