"""Pydantic models: the contract between the board and the layers above it, and on the wire."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

Status = Literal["todo", "in_progress", "review", "done", "blocked", "needs_human", "cancelled"]
STATUSES: tuple[str, ...] = get_args(Status)

Priority = Literal["critical", "high", "medium", "low"]  # most urgent first
# the tasks table stores the rank, so that the most urgent card sorts first with ORDER BY priority DESC
PRIORITY_RANK: dict[str, int] = {p: rank for rank, p in enumerate(reversed(get_args(Priority)))}
RANK_PRIORITY: dict[int, str] = {rank: p for p, rank in PRIORITY_RANK.items()}

# Free text, but these are the types the critics and memory know about out of the box.
KNOWN_TASK_TYPES: tuple[str, ...] = ("code", "test", "refactor", "docs", "design", "bug", "research", "ops")

ArtifactKind = Literal["code", "text", "diff", "test", "data", "link", "other"]


class Artifact(BaseModel):
    """One piece of finished work attached to a completion."""

    name: str = Field(description="path or name, e.g. 'src/auth.py'", min_length=1, max_length=300)
    kind: ArtifactKind = "other"
    content: str = ""


class TestFile(BaseModel):
    """One file of a card's acceptance tests."""

    name: str = Field(description="e.g. 'tests/test_api.py'", min_length=1, max_length=300)
    content: str


class AcceptanceTests(BaseModel):
    """Tests the card's creator attaches: they run in the review sandbox against the claimer's work, next
    to the claimer's own tests, and the claimer cannot change or delete them."""

    files: list[TestFile] = Field([], description="pytest files")
    commands: list[str] = Field([], description="e.g. '$ python -m pytest -q'")
    hidden: bool = Field(False, description="claimer sees only that they exist")


class Reservation(BaseModel):
    """A live path reservation: an agent's announcement that it edits the paths a glob matches."""

    pattern: str = Field(description="a glob from the repository's root; a directory (dir/**) covers all under it")
    agent: str
    exclusive: bool = Field(description="true: nobody else may reserve or commit overlapping paths")
    task_id: int | None = Field(None, description="the card it is tied to: it ends when the card ends")
    repo: str | None = Field(None, description="the card's repository; null: the board")
    reason: str | None = None
    until: str = Field(description="UTC time, ISO 8601, when it ends unless renewed")


class Reserved(BaseModel):
    """The answer to reserve_paths."""

    reservations: list[Reservation]
    message: str


class Released(BaseModel):
    """The answer to release_paths."""

    released: list[str]
    message: str


class ChangedFile(BaseModel):
    """One file a commit changed against the merge base with its repository's base branch."""

    status: Literal["A", "M", "D", "R", "C", "T"] = Field(
        description="added, modified, deleted, renamed, copied, type changed"
    )
    path: str
    old_path: str | None = Field(None, description="renamed or copied from")
    added: int | None = Field(None, description="lines added; null: binary")
    deleted: int | None = Field(None, description="lines deleted; null: binary")


class Commit(BaseModel):
    """Work handed in as a commit of the card's repository (complete_task ref=)."""

    repo: str
    ref: str = Field(description="the branch or commit id as handed in")
    sha: str = Field(description="the commit it named, pinned so deleting the branch does not lose it")
    base_sha: str = Field(description="its merge base with the repository's base branch: what the diff is against")
    files: list[ChangedFile] = []
    files_omitted: int = Field(0, description="changed files left out of this answer (get_task full=true)")
    diff: str = Field("", description="the unified diff, bounded: what was cut is named at its end")


class HistoryEntry(BaseModel):
    """One recorded change to a card: who did what, when, and why."""

    at: str = Field(description="UTC time, ISO 8601")
    actor: str = Field(description="agent that made the change, or 'system' (lease expiry)")
    action: str = Field(
        description="created, claimed, renewed, released, expired, progress, blocked, "
        "unblocked, edited, completed, escalated, reopened, granted review rounds"
    )
    from_status: str | None = None
    to_status: str | None = None
    note: str | None = Field(None, description="why, or the progress note")


class TaskSummary(BaseModel):
    """A compact card, as listed on the board."""

    id: int
    title: str
    task_type: str
    priority: Priority
    status: Status
    assignee: str | None = Field(None, description="the agent holding the claim")
    reserved_for: str | None = Field(None, description="only this agent may claim the card")
    labels: list[str] = []
    depends_on: list[int] = []
    lease_expires_at: str | None = None
    version: int = Field(1, description="bumped on every change (see update_task expected_version)")
    unverified: str | None = Field(None, description="done without its tests having run: why")
    contest: int | None = Field(None, description="competing attempts: the id of the contest's first card")
    contest_result: str | None = Field(None, description="the referee's decision, once every attempt has ended")
    needs_approval: str | None = Field(
        None,
        description="why a person must approve it after the critics pass it "
        "(e.g. 'label release'), decided when it was made; null: no approval",
    )
    evidence: str | None = Field(
        None,
        description="how its acceptance check's pass was established when only weak "
        "evidence exists, e.g. 'exit status only'",
    )
    repo: str | None = Field(None, description="the registered git repository it is worked in")


class Task(TaskSummary):
    """A whole card."""

    description: str = ""
    acceptance_criteria: list[str] = []
    acceptance_tests: AcceptanceTests | None = Field(
        None, description="the creator's tests (content hidden from everyone but the creator when hidden)"
    )
    hidden_tests: int = Field(0, description="hidden acceptance test files and commands not shown to you")
    waived: list[str] = Field(
        [],
        description="analyser rule ids the creator waived for this card (e.g. B324 when "
        "MD5 is the requirement): their findings are reported as info, never blocking",
    )
    created_by: str
    created_at: str
    updated_at: str
    ready: bool = Field(description="true when every dependency is done")
    waiting_on: list[int] = Field([], description="dependencies that are not done yet")
    blocked_reason: str | None = None
    summary: str | None = Field(None, description="the completing agent's short summary")
    output: str | None = Field(None, description="the completing agent's output")
    artifacts: list[Artifact] = []
    commit: Commit | None = Field(None, description="the work handed in as a commit (complete_task ref=)")
    history: list[HistoryEntry] = []
    paths: list[str] = Field([], description="the paths (globs) the card says it will touch")
    reservations: list[Reservation] | None = Field(
        None, description="live reservations tied to the card or overlapping its paths"
    )
    reservations_live: int | None = Field(None, description="how many there are (the list is bounded)")


class NewTask(BaseModel):
    """What create_task accepts."""

    title: str = Field(min_length=1, max_length=200)
    description: str = ""
    task_type: str = "code"
    priority: Priority = "medium"
    labels: list[str] = []
    depends_on: list[int] = []
    acceptance_criteria: list[str] = []
    acceptance_tests: AcceptanceTests | None = None
    assignee: str | None = None
    waive: list[str] = []
    attempts: int = 1  # >1: competing attempts, one card each, compared by a referee
    needs_approval: bool = False  # a person approves it after the critics pass it, whatever its labels
    budget_tokens: int | None = None  # its agents' recorded tokens that get its creator told (board/usage.py)
    paths: list[str] = []  # the paths (globs) it will touch: a claim warns about others' reservations of them
    repo: str | None = None  # a registered repository's name (board/repos.py): claim_task(worktree=true) gives one
    canary: bool = False  # hidden tests that contradict its criteria, to measure gaming (board/canaries.py)


class TaskEdit(BaseModel):
    """Fields update_task may change; None means leave as is. All but priority are the card's brief: only its
    creator or an operator changes them, and its acceptance criteria not once it has been claimed."""

    title: str | None = None
    description: str | None = None
    priority: Priority | None = None
    labels: list[str] | None = None
    acceptance_criteria: list[str] | None = None
    needs_approval: bool | None = None  # False clears the approval stored when the card was made


class Claim(BaseModel):
    """The answer to claim_task: a card with its lease and fencing token, or why there was none."""

    claimed: bool
    message: str
    task: Task | None = None
    token: int | None = Field(
        None,
        description="fencing token: pass it to update_task, release_task "
        "and complete_task; a newer claim makes it stale",
    )
    lease_expires_at: str | None = Field(
        None, description="the card returns to todo then unless you renew it or act on it"
    )
    lease_seconds: int | None = None
    reservations: list[Reservation] | None = Field(
        None,
        description="other agents' live reservations overlapping the card's paths: "
        "coordinate with them before you edit those paths",
    )


class Lease(BaseModel):
    """A renewed claim."""

    task_id: int
    token: int
    lease_expires_at: str
    lease_seconds: int


class Page(BaseModel):
    """A bounded page of cards."""

    tasks: list[TaskSummary]
    total: int = Field(description="how many cards match the filters")
    next_cursor: str | None = Field(None, description="pass as cursor to get the next page; null on the last page")


class Card(BaseModel):
    """A card as the board shows it (get_task has the rest)."""

    id: int
    title: str
    task_type: str
    priority: Priority
    assignee: str | None = None
    unverified: bool = Field(False, description="done without its tests having run (get_task says why)")


class Column(BaseModel):
    status: Status
    count: int
    top: list[Card] = Field(description="highest priority cards of this column (done: most recent)")


class BoardView(BaseModel):
    """The whole board at a glance."""

    columns: list[Column]
    total: int
    ready: int = Field(description="todo cards whose dependencies are all done (claimable now)")
    reservations: list[Reservation] | None = Field(None, description="live path reservations, soonest to end first")
    reservations_live: int | None = Field(None, description="how many there are (the list is bounded)")


class Agent(BaseModel):
    name: str
    role: str | None = None
    created_at: str
