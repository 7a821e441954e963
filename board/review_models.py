"""What a review is made of, on the wire and between the layers: findings, critiques, syntheses, rounds,
trails and review metrics; the severities and verdicts they use.

board/reviews.py stores and reads them; critics/ produce them; server/ returns them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .models import AcceptanceTests, Artifact, Commit
from .quotas import DatabaseSize
from .usage import TokenStats

Severity = Literal["critical", "major", "minor", "info"]
Verdict = Literal["PASS", "CONDITIONAL", "FAIL"]
# unverified: the critic had tests to run and could not run them (no sandbox, or execution off)
CriticStatus = Literal["running", "ok", "error", "timeout", "skipped", "unverified", "pending", "missed", "cancelled"]
Outcome = Literal["done", "in_progress", "needs_human"]
# where a card's current work stands with its review (Reviews.state)
ReviewState = Literal["passed", "awaiting approval", "not passed"]
SEVERITY_RANK: dict[str, int] = {"critical": 3, "major": 2, "minor": 1, "info": 0}
BLOCKING: tuple[str, ...] = ("critical", "major")  # severities that fail the work on their own
MAX_ISSUES = 50  # per critique; a critic that floods is cut, with a note in its summary


class Finding(BaseModel):
    """One problem, as an agent critic reports it."""

    severity: Severity
    category: str = Field(description="e.g. sql-injection", max_length=80)
    location: str = Field("", description="file:line or section", max_length=300)
    description: str = Field(max_length=4000)
    suggestion: str = Field("", max_length=4000)


class ReviewIssue(Finding):
    """One problem a critic found, as the board keeps it."""

    rule: str | None = Field(None, description="a static analyser's rule id", max_length=40)
    ref: str | None = Field(None, description="set by the board; resolutions cite it")
    changed_line: bool | None = Field(
        None, description="work handed in as a commit: whether its diff changed the line this names"
    )
    hidden: bool = Field(
        False, description="shaped by the card's hidden tests: its detail is shown to its creator and people only"
    )


class Resolution(BaseModel):
    """A critic's judgement, in the next round, of one of its own earlier issues."""

    ref: str = Field(description="the earlier issue's ref", max_length=120)
    status: Literal["resolved", "partial", "not_addressed"]
    note: str = Field("", max_length=2000)


class Critique(BaseModel):
    """What one critic returns: the critique schema shared by every backend."""

    verdict: Verdict
    score: int = Field(
        ge=1, le=10, description="10 excellent, 7-9 good but improvable, 4-6 significant issues, 1-3 major problems"
    )
    summary: str = Field(max_length=4000)
    issues: list[ReviewIssue] = []
    resolutions: list[Resolution] = Field([], description="from round 2 on: one per earlier issue of yours")
    hidden: bool = Field(
        False, description="the card's hidden tests shaped it (its summary, score or issues): see `sealed`"
    )


class CritiqueRecord(BaseModel):
    """A critic's part in one round, including critics that failed or never ran."""

    critic: str
    lens: str
    backend: str
    model: str | None = None
    status: CriticStatus
    verdict: Verdict | None = None
    score: int | None = None
    summary: str | None = None
    issues: list[ReviewIssue] = []
    resolutions: list[Resolution] = []
    error: str | None = Field(None, description="why it errored, timed out, was skipped or missed")
    submitted_by: str | None = Field(None, description="the agent, for agent critics")
    seconds: float | None = None
    hidden: bool = Field(
        False, description="the card's hidden tests shaped it; shown whole only to the card's creator and people"
    )


class MergedIssue(BaseModel):
    """An issue after synthesis: duplicates across critics merged, with who found it. get_review names the
    critiques' issues by `refs` instead of repeating their text (Reviews.referenced)."""

    rank: int
    severity: Severity
    lens: str
    category: str
    location: str = ""
    description: str | None = Field(
        None, description="left out by get_review: the critiques' issues named in refs hold it"
    )
    suggestion: str | None = None
    found_by: list[str]
    refs: list[str] = Field(description="the critiques' issues this one merges (their ref)")


class MetaDecision(BaseModel):
    """The critic of the critics on one blocking issue: kept, or downgraded with a reason."""

    rank: int
    location: str = ""
    severity: Severity = Field(description="the severity the critics gave")
    decided: Severity = Field(description="the severity after the meta-review")
    reason: str


class Contradiction(BaseModel):
    """Critics that disagree; the precedence rule says which way the synthesis went."""

    about: str
    positions: dict[str, str] = Field(description="critic → its position")
    decided: str


class Synthesis(BaseModel):
    """One verdict from all critiques of a round."""

    verdict: Literal["PASS", "FAIL"]
    score: float | None = Field(None, description="mean critic score")
    issues: list[MergedIssue] = []
    contradictions: list[Contradiction] = []
    brief: str = Field("", description="the revision brief: what to fix, most important first")
    lenses_ran: list[str] = []
    lenses_failed: list[str] = Field([], description="lenses whose every critic errored or timed out")
    lenses_uncovered: list[str] = Field([], description="lenses of this task type that no critic could review")
    decisive: list[str] = Field(
        [],
        description="critics whose blocking input (a FAIL verdict, or a critical or major issue) made the verdict FAIL",
    )
    synthesiser: str = "deterministic"
    note: str | None = None
    meta: list[MetaDecision] = Field([], description="the meta-review of the blocking issues, when configured")
    unverified: str | None = Field(
        None, description="tests of this work that could not be run, and why; such work is not passed as tested"
    )
    evidence: str | None = Field(
        None,
        description="how the acceptance check's pass was established when only weak "
        "evidence exists, e.g. 'exit status only'",
    )


class ReviewRound(BaseModel):
    review_id: int
    round: int
    status: Literal["queued", "running", "finished", "cancelled"]
    verdict: Literal["PASS", "FAIL"] | None = None
    outcome: Outcome | None = None
    queued_at: str
    started_at: str | None = None
    finished_at: str | None = None
    attempts: int = Field(description="how many times a worker took the job (more than 1: resumed)")
    open_lenses: list[str] = Field([], description="lenses waiting for an agent critic (submit_critique)")
    agent_deadline: str | None = None
    summary: str | None = Field(None, description="the work's summary in this round")
    critiques: list[CritiqueRecord] = []
    synthesis: Synthesis | None = None


class ReviewTrail(BaseModel):
    """The whole review trajectory of a card: every round, every critique, every synthesis."""

    task_id: int
    title: str
    task_type: str
    status: str
    agent: str | None
    waiting_for: str | None = Field(
        None, description="what the card waits for in review when no round is under way (the merge queue, after a pass)"
    )
    scores: list[float | None] = Field([], description="the synthesis score of each finished round, oldest first")
    rounds: list[ReviewRound]
    rounds_omitted: int = Field(0, description="earlier rounds left out of this compact answer (full=true has them)")


class HandIn(BaseModel):
    """One hand-in of a card's work: a review round's snapshot of its files, or the files of a completion no
    review round took (done, or waiting on a person's approval, without a review)."""

    key: str = Field(description="names it: review-<review id>, or hand-in-<n> for one no review round took")
    review_id: int | None = Field(None, description="the review round that took it; null: none did")
    round: int | None = None
    status: str | None = Field(None, description="the review round's status")
    verdict: Literal["PASS", "FAIL"] | None = None
    at: str = Field(description="when it was handed in, UTC, ISO 8601")
    artifacts: list[Artifact] = []


class Approval(BaseModel):
    """What a person's pass of a card waiting on them approves: its latest hand-in, named, so that the person
    confirms exactly that and a confirmation of earlier work is refused."""

    task_id: int
    key: str = Field(description="the hand-in's key (HandIn.key), or claim-<n> when nothing was handed in")
    review_id: int | None = None
    round: int | None = None
    handed_in: bool = Field(description="false: the card waits on a person with nothing handed in")
    files: list[str] = Field([], description="the names of the hand-in's files (a commit's: the files it changed)")
    commit: str | None = Field(None, description="the commit id, when the hand-in is a commit (complete_task ref=)")

    @property
    def text(self) -> str:
        """In a person's words: "round 2 of card #12, 3 files" ("…, commit 1a2b3c4d5e6f, 3 files changed")."""
        n = len(self.files)
        files = f"{n} file{'' if n == 1 else 's'}" if n else "no files"
        if self.commit is not None:
            files = f"commit {self.commit[:12]}, {n} file{'' if n == 1 else 's'} changed"
        if self.round is not None:
            return f"round {self.round} of card #{self.task_id}, {files}"
        if self.handed_in:
            return f"the work handed in on card #{self.task_id} without a review round, {files}"
        return f"card #{self.task_id} as it stands, nothing handed in"


class ReviewJob(BaseModel):
    """A review a worker holds: the card's brief and a snapshot of the work as completed."""

    id: int
    task_id: int
    round: int
    agent: str
    fencing_token: int
    task_type: str
    title: str
    description: str
    acceptance_criteria: list[str]
    acceptance_tests: AcceptanceTests | None = None
    output: str
    summary: str | None
    artifacts: list[Artifact]
    attempts: int
    agent_deadline: float | None = None
    waived: list[str] = []  # analyser rule ids the card's creator waived
    round_limit: int | None = None  # its last round a FAIL hands back, when more were granted (Reviews.grant_rounds)
    commit: Commit | None = None  # the round's work as a commit of the card's repository (complete_task ref=)
    test_command: str | None = None  # that repository's own test command, run as a check of its own
    traceparent: str | None = None  # the call that queued it, whose trace the review joins (board/tracing.py)


class DayRate(BaseModel):
    day: str
    reviewed: int
    passed: int
    rate: float


class CriticStats(BaseModel):
    critic: str
    lens: str
    critiques: int = Field(description="critiques it delivered")
    failures: int = Field(description="times it errored, timed out or (agent slots) was missed")
    issues: int
    decisive: int = Field(description="rounds its blocking input turned into FAIL")
    contribution_rate: float | None


class AgentHonesty(BaseModel):
    """One agent against the canary cards (hidden tests that contradict their criteria: no honest work passes) and
    its flags (board/canaries.py)."""

    agent: str
    canaries_seen: int = Field(description="canary cards it claimed")
    flagged: int = Field(description="canaries it flagged: honest")
    failed_honestly: int = Field(description="canaries it failed review on, not for gaming, and never passed")
    gamed: int = Field(description="canaries whose review it passed: it gamed the gate")
    caught: int = Field(description="its rounds, any card, the integrity lens failed: work that attacked the tests")
    flags: int = Field(description="cards it flagged, canaries or not")
    passes: int = Field(description="its PASS verdicts, all cards")
    fails: int = Field(description="its FAIL verdicts, all cards")
    evidence: list[str] = Field([], description="the canary cards and reviews behind the counts")


class BoardStats(BaseModel):
    """How well review and memory are working."""

    reviews: int = Field(description="finished review rounds")
    queued: int
    running: int
    cards_reviewed: int
    first_pass_pass_rate: float | None = Field(description="cards that passed their first round")
    first_pass_by_day: list[DayRate]
    rounds_per_card: float | None = Field(description="mean rounds of cards whose review has ended")
    score_by_round: list[float] = Field(
        [], description="mean synthesis score of round 1, 2, …: how revision raises the work's score"
    )
    max_rounds_seen: int
    needs_human: int = Field(description="cards sent to a human after the last round")
    unverified_needs_human: int = Field(description="rounds sent to a human because the work's tests could not run")
    unverified_passed: int = Field(
        description='rounds that passed work whose tests could not run (marked unverified; review.unverified = "pass")'
    )
    critique_success_rate: float | None = Field(description="earlier issues marked resolved in the next round")
    issues_followed_up: int
    review_latency_p50: float | None = Field(description="seconds from complete_task to verdict")
    review_latency_p95: float | None
    critics: list[CriticStats]
    messages_per_task: float | None
    memory_surfaced: int
    memory_useful: int
    memory_reuse_rate: float | None
    memory_pending: int = Field(0, description="memory items waiting for the vector index (found by keyword meanwhile)")
    database: DatabaseSize | None = Field(None, description="the database's size against its ceiling (quotas)")
    tokens: TokenStats | None = Field(
        None, description="tokens agents' sessions spent, by card, agent and task type (recorded by hiveboard hook)"
    )
    honesty: list[AgentHonesty] | None = Field(None, description="per agent, canary cards and flags (people only)")


def judged(resolutions: list[Resolution], refs: list[str]) -> list[Resolution]:
    """A critic's resolutions of its own earlier issues only, one per issue; an issue it did not judge
    is recorded as not addressed (no credit for marking others' issues, or made-up ones, resolved)."""
    given = {r.ref: r for r in resolutions if r.ref in refs}
    return [
        given.get(ref) or Resolution(ref=ref, status="not_addressed", note="the critic did not judge this issue")
        for ref in refs
    ]


# What anyone but the card's creator and people sees of a critique the card's hidden tests shaped (`sealed`)
HIDDEN_SUMMARY = (
    "this critic read the card's hidden tests: what it found there is shown only to the card's creator and "
    "people (role human or lead)"
)
HIDDEN_ISSUE = (
    "the work does not pass this critic's check against the card's hidden tests. Which tests, lines, values or "
    "how many is shown only to the card's creator and people (role human or lead): nothing of the hidden tests "
    "is fed back to the author"
)
HIDDEN_SUGGESTION = "make the work right for every input the card describes, not for particular test values"
SEALED_SCORE = {"PASS": 10, "CONDITIONAL": 7, "FAIL": 2}  # a score that says the verdict and nothing more


def hidden_ref(ref: str | None) -> bool:
    """An issue ref the card's hidden tests shaped (r<round>:<critic>#h<n>, numbered apart: Reviews' _with_refs)."""
    return bool(ref) and "#h" in ref


def sealed(c: CritiqueRecord) -> CritiqueRecord:
    """A critique as the author, bystanders, agent critics, the synthesis, messages and memory see it: nothing
    the card's hidden tests shaped. Its blocking issues from them become one issue without place, count or values
    (their worst severity: the verdict's bit), those that do not block are left out (a waived or demoted match
    would otherwise be a signal that blocks nothing); its summary is a fixed sentence, its score the verdict's,
    its time gone; its other issues are kept as they are, since the hidden tests did not shape them."""
    if not (c.hidden or any(i.hidden for i in c.issues)):
        return c
    shown = [i for i in c.issues if not i.hidden]
    secret = [i for i in c.issues if i.hidden and i.severity in BLOCKING]  # one that does not block says nothing
    if secret:
        worst = max((i.severity for i in secret), key=SEVERITY_RANK.__getitem__)
        head = (secret[0].ref or "").split("#", 1)[0]
        shown.append(
            ReviewIssue(
                severity=worst,
                category="hidden-tests",
                description=HIDDEN_ISSUE,
                suggestion=HIDDEN_SUGGESTION,
                ref=f"{head}#hidden" if head else None,
                hidden=True,
            )
        )
    verdict = c.verdict
    if verdict in ("PASS", "CONDITIONAL"):  # not failed: what is left shown decides between the two
        verdict = "CONDITIONAL" if any(i.severity == "minor" for i in shown) else "PASS"
    return c.model_copy(
        update={
            "issues": shown,
            "resolutions": [r for r in c.resolutions if not hidden_ref(r.ref)],
            "summary": HIDDEN_SUMMARY if c.summary is not None else None,
            "verdict": verdict,
            "score": SEALED_SCORE.get(verdict or "") if c.score is not None else None,
            "seconds": None,
        }
    )


def sealed_trail(trail: ReviewTrail) -> ReviewTrail:
    """A card's review trail with every critique `sealed` (the syntheses are made from sealed critiques)."""
    return trail.model_copy(
        update={"rounds": [r.model_copy(update={"critiques": [sealed(c) for c in r.critiques]}) for r in trail.rounds]}
    )
