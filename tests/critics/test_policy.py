"""critics/policy.py without the protocol: what a change touches, and the review that follows from it (the review
itself is driven through MCP in test_review_policy.py)."""

from __future__ import annotations

from hiveboard.board.models import Artifact, ChangedFile, Commit
from hiveboard.board.review_models import ReviewJob
from hiveboard.critics.config import HumanApproval, ReviewConfig
from hiveboard.critics.policy import policy


def job(task_type: str = "docs", artifacts: list[Artifact] | None = None, commit: Commit | None = None) -> ReviewJob:
    return ReviewJob(
        id=1,
        task_id=1,
        round=1,
        agent="alice",
        fencing_token=1,
        task_type=task_type,
        title="t",
        description="",
        acceptance_criteria=[],
        output="done",
        summary=None,
        artifacts=artifacts or [],
        attempts=1,
        commit=commit,
    )


def commit(*files: ChangedFile) -> Commit:
    return Commit(repo="calc", ref="hb/alice/1", sha="a" * 40, base_sha="b" * 40, files=list(files))


def test_a_rename_or_a_deletion_of_code_is_a_change_to_code():
    moved = policy(ReviewConfig(), job(commit=commit(ChangedFile(status="R", path="notes.md", old_path="calc.py"))))
    assert list(moved.touched.kinds) == ["docs", "code"] and "security" in moved.lenses
    gone = policy(ReviewConfig(), job(commit=commit(ChangedFile(status="D", path="calc.py"))))
    assert "code" in gone.touched.kinds and gone.must_review == "a commit of repository calc"


def test_a_repository_file_no_pattern_knows_is_code_unless_the_operator_says_otherwise():
    build = job(commit=commit(ChangedFile(status="M", path="Makefile")))
    assert policy(ReviewConfig(), build).touched.why("code") == "code (Makefile)"
    operator = ReviewConfig(unmatched="ops", paths={"docs": ["*.md", "docs/**"]})
    assert list(policy(operator, build).touched.kinds) == ["ops"]


def test_the_strictest_bar_and_any_approval_rule_that_applies():
    config = ReviewConfig(pass_scores={"code": 8}, human_approval=HumanApproval(task_types=["code"]))
    rules = policy(config, job("chore", [Artifact(name="tool", kind="code", content="x = 1\n")]))
    assert rules.bar == 8 and rules.must_review == "code (tool)"
    assert rules.lenses[:2] == ["correctness", "clarity"] and "security" in rules.lenses  # chore's, then code's


def test_prose_and_fenced_examples_are_not_code():
    guide = Artifact(name="guide.md", kind="text", content="# Use\n\n```python\nimport calc\n```\n")
    prose = Artifact(name="notes", content="import the module first, then call add.\n")
    rules = policy(ReviewConfig(), job("docs", [guide, prose]))
    assert list(rules.touched.kinds) == ["docs"] and rules.must_review is None
