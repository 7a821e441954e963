"""Review rounds in the store: durable jobs, every critique, syntheses, card outcomes and review metrics
(their models: board/review_models.py).

The review engine (critics/) decides; this module stores and moves cards. A job is leased by one
worker at a time with a guarded UPDATE, so two server processes never run the same job, and a job
whose worker died is picked up again once its lease runs out. Each critic's row is written as soon
as that critic finishes, so a resumed job only re-runs the critics that had not finished.
"""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime

from . import cards, scopes, tracing
from ._sqlite_utils import Database
from .agents import OPERATOR_ROLES
from .commits import Commits
from .db import Store, iso, now, placeholders, rows
from .errors import Forbidden, IllegalTransition, InvalidInput, NotFound
from .events import ReviewChanged
from .knowledge import Knowledge
from .limits import Limits
from .machine import TRANSITIONS, Machine, Via
from .merges import Merges
from .models import Artifact, Commit
from .review_models import (
    BLOCKING,
    MAX_ISSUES,
    SEVERITY_RANK,
    BoardStats,
    CriticStats,
    CriticStatus,
    Critique,
    CritiqueRecord,
    DayRate,
    HandIn,
    Outcome,
    Resolution,
    ReviewIssue,
    ReviewJob,
    ReviewRound,
    ReviewState,
    ReviewTrail,
    Synthesis,
    hidden_ref,
    judged,
    sealed_trail,
)

COMPLETED = next(t.action for t in TRANSITIONS if t.via == "complete_task")  # a hand-in, as the history says it


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _merge_step(merge: dict | None) -> str | None:
    """What a passed card in review waits for, in a sentence: its status says review until the merge ends."""
    if merge is None:
        return None
    where = (
        f"is being merged into {merge['repo']}'s base branch"
        if merge["status"] == "running"
        else f"waits in the merge queue of {merge['repo']}"
    )
    return (
        f"the merge: the passed commit {merge['sha'][:12]} {where}; the card moves to done once it is merged and the "
        "tests pass on the result, or goes back to its author on a conflict or a failure"
    )


class Reviews:
    """Review jobs and critiques of one board."""

    def __init__(self, store: Store, machine: Machine, knowledge: Knowledge, limits: Limits, merges: Merges):
        self.store = store
        self.machine = machine
        self.messages = machine.messages
        self.agents = machine.agents
        self.knowledge = knowledge
        self.limits = limits
        self.merges = merges  # a passed commit goes through the merge queue before done

    def left_review(self, db: Database, row: dict, target: str, via: Via, actor: str, ts: float) -> None:
        """A card left review by another path than its verdict (a person took it): its jobs are cancelled."""
        if via != "review":
            self.cancel(db, row["id"], f"cancelled: the card left review ({row['status']} → {target} by {actor})", ts)

    # ----------------------------------------------------------------- the job

    def enqueue(
        self, db: Database, row: dict, output: str, summary: str | None, artifacts: list[Artifact], ts: float
    ) -> int:
        """Queue a review of a card just completed (inside complete's own transaction)."""
        task_id = row["id"]
        review_id = db.execute(
            "INSERT INTO reviews (task_id, round, agent, fencing_token, task_type, output, summary, artifacts, "
            "status, created_at, traceparent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?) RETURNING id",
            [
                task_id,
                self._round(db, task_id) + 1,
                row["assignee"],
                row["fencing_token"],
                row["task_type"],
                output,
                summary,
                json.dumps([a.model_dump() for a in artifacts]),
                ts,
                tracing.traceparent(),  # the review's span joins the caller's trace
            ],
        ).fetchall()[0][0]
        self.store.emit(ReviewChanged(review_id, task_id))
        return review_id

    @staticmethod
    def _round(db: Database, task_id: int) -> int:
        """Review rounds the card has had, whoever held it: rounds bound the card, so no way back to todo (a
        release, a lease running out, update_task, a person sending it back, another agent's claim) starts the
        count again. A round a person cancelled (the card left review by hand) does not count."""
        return db.execute(
            "SELECT count(*) FROM reviews WHERE task_id = ? AND status != 'cancelled'", [task_id]
        ).fetchone()[0]

    def grant_rounds(self, db: Database, row: dict, actor: str, rounds: int, reason: str | None, ts: float) -> dict:
        """Inside a write: `rounds` more review rounds for the card, counted from the rounds it has had (a failed
        round goes back to its author up to that round, or up to review.max_rounds if that is later), by its
        creator or a person (an operator role) only: its holder would grant itself more tries at the review. The
        card's history names who granted them. Returns the new row."""
        if actor != row["created_by"] and not self.machine.operator(actor):
            raise Forbidden(
                f"only task {row['id']}'s creator ({row['created_by']}) or a person (an agent with the role "
                f"{' or '.join(OPERATOR_ROLES)}) may grant it more review rounds; ask one of them with "
                "publish_message"
            )
        if row["status"] == "done":
            raise IllegalTransition(f"task {row['id']} is done: it has no review rounds to grant")
        had = self._round(db, row["id"])
        limit = had + rounds
        note = (
            f"{actor} granted {rounds} more review round{'' if rounds == 1 else 's'}: after {had}, failed rounds go "
            f"back to the author up to round {limit}" + (f"; {reason}" if reason else "")
        )
        return self.machine.edit(db, row, actor, "granted review rounds", {"round_limit": limit}, note, ts)

    def cancel(self, db: Database, task_id: int, reason: str, ts: float) -> None:
        """The card left review by another path (e.g. to a human): its unfinished jobs stop counting, and a
        worker still running one can no longer record anything for it."""
        jobs = [
            r[0]
            for r in db.execute(
                "SELECT id FROM reviews WHERE task_id = ? AND status IN ('queued', 'running')", [task_id]
            )
        ]
        for review_id in jobs:
            db.execute(
                "UPDATE reviews SET status = 'cancelled', finished_at = ?, leased_until = NULL WHERE id = ?",
                [ts, review_id],
            )
            db.execute(
                "UPDATE critiques SET status = 'cancelled', error = ?, finished_at = ? WHERE review_id = ? "
                "AND status IN ('running', 'pending')",
                [reason, ts, review_id],
            )
            self._withdraw_requests(db, review_id)
            self.store.emit(ReviewChanged(review_id, task_id))

    def _blocking_refs(self, db: Database, task_id: int, before_review: int) -> set[str]:
        """Refs of the blocking issues raised in the card's earlier rounds, but those the card's hidden tests
        shaped: how many of them got resolved is theirs too, and board_stats is everyone's."""
        marks = placeholders(BLOCKING)
        sql = self.store.dialect
        return {
            ref
            for (ref,) in db.execute(
                f"SELECT {sql.json_field('i.value', 'ref')} FROM critiques c, {sql.json_elements('c.issues', 'i')} "
                f"WHERE c.task_id = ? AND c.review_id < ? AND {sql.json_field('i.value', 'severity')} IN ({marks})",
                [task_id, before_review, *BLOCKING],
            )
            if not hidden_ref(ref)
        }

    def held(self, review_id: int, worker: str) -> bool:
        """Whether this worker still holds the job (not cancelled, not taken over)."""
        return self._held(self.store.db, review_id, worker)

    def claim_job(self, worker: str, lease_seconds: float, per_agent: int = 1) -> ReviewJob | None:
        """Take the next job in fair order, of an agent with fewer than `per_agent` reviews running (over
        every process): a queued job (or one whose worker stopped renewing its lease) of the agent whose
        reviews took the least time in the last hour first (so slow reviews, timed-out ones included,
        count against their own agent), then the oldest. One agent's backlog waits for itself; another
        agent's review takes the next free worker."""
        ts = now()
        with self.store.write(scopes.REVIEW_QUEUE) as db:
            row = next(
                db.query(
                    "UPDATE reviews SET status = 'running', worker = ?, leased_until = ?, attempts = attempts + 1, "
                    "started_at = coalesce(started_at, ?) WHERE id = ("
                    "WITH busy AS (SELECT agent, count(*) AS n FROM reviews WHERE status = 'running' AND "
                    "leased_until >= ? GROUP BY agent), "
                    "used AS (SELECT agent, sum(coalesce(finished_at, ?) - started_at) AS seconds FROM reviews "
                    "WHERE started_at > ? GROUP BY agent) "
                    "SELECT r.id FROM reviews r LEFT JOIN busy b ON b.agent = r.agent LEFT JOIN used u ON "
                    "u.agent = r.agent WHERE (r.status = 'queued' OR (r.status = 'running' AND r.leased_until < ?)) "
                    "AND coalesce(b.n, 0) < ? ORDER BY coalesce(u.seconds, 0), r.id LIMIT 1) RETURNING *",
                    [worker, ts + lease_seconds, ts, ts, ts, ts - 3600, ts, per_agent],
                ),
                None,
            )
            if row is None:
                return None
            return self._job(db, row)

    def job(self, review_id: int) -> ReviewJob:
        """A round as its reviewers were given it (the card's checks, the work, its commit): what the merge queue
        runs the same checks with on a merge result."""
        with self.store.read() as db:
            return self._job(db, rows(db, "SELECT * FROM reviews WHERE id = ?", [review_id])[0])

    @staticmethod
    def _job(db: Database, row: dict) -> ReviewJob:
        task = cards.row(db, row["task_id"])
        commit = Commits.of_review(db, row["id"])
        test = db.execute("SELECT test_command FROM repos WHERE name = ?", [commit.repo]).fetchone() if commit else None
        return ReviewJob(
            id=row["id"],
            task_id=row["task_id"],
            round=row["round"],
            agent=row["agent"],
            fencing_token=row["fencing_token"],
            task_type=row["task_type"],
            title=task["title"],
            description=task["description"],
            acceptance_criteria=json.loads(task["acceptance_criteria"]),
            acceptance_tests=cards.acceptance_tests(task),
            output=row["output"],
            summary=row["summary"],
            artifacts=[Artifact(**a) for a in json.loads(row["artifacts"])],
            attempts=row["attempts"],
            agent_deadline=row["agent_deadline"],
            waived=json.loads(task["waived"]),
            round_limit=task["round_limit"],
            commit=commit,
            test_command=test[0] if test else None,
            traceparent=row.get("traceparent"),
        )

    def heartbeat(self, review_id: int, worker: str, lease_seconds: float) -> bool:
        """Extend the worker's lease on its job; False when it no longer holds it."""
        with self.store.write(scopes.review(review_id)) as db:
            return (
                db.execute(
                    "UPDATE reviews SET leased_until = ? WHERE id = ? AND worker = ? AND status = 'running'",
                    [now() + lease_seconds, review_id, worker],
                ).rowcount
                == 1
            )

    def _held(self, db: Database, review_id: int, worker: str) -> bool:
        return (
            db.execute(
                "SELECT 1 FROM reviews WHERE id = ? AND worker = ? AND status = 'running'", [review_id, worker]
            ).fetchone()
            is not None
        )

    def begin(
        self,
        job: ReviewJob,
        worker: str,
        critics: list[tuple[str, str, str, str | None]],
        agent_lenses: list[str],
        agent_deadline: float | None,
    ) -> list[str]:
        """Record the round's critics (name, lens, backend, model) and open agent slots; returns the
        critics still to run (all of them, or on a resumed job those that had not finished)."""
        ts = now()
        with self.store.write(scopes.review(job.id)) as db:
            if not self._held(db, job.id, worker):
                return []
            for name, lens, backend, model in critics:
                db.execute(
                    "INSERT INTO critiques (review_id, task_id, round, critic, lens, backend, model, "
                    "status, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?) ON CONFLICT DO NOTHING",
                    [job.id, job.task_id, job.round, name, lens, backend, model, ts],
                )
            for lens in agent_lenses:
                db.execute(
                    "INSERT INTO critiques (review_id, task_id, round, critic, lens, backend, "
                    "status, started_at) VALUES (?, ?, ?, ?, ?, 'agent', 'pending', ?) ON CONFLICT DO NOTHING",
                    [job.id, job.task_id, job.round, f"agent:{lens}", lens, ts],
                )
            if agent_lenses and job.agent_deadline is None:
                db.execute("UPDATE reviews SET agent_deadline = ? WHERE id = ?", [agent_deadline, job.id])
            names = [c[0] for c in critics]
            marks = placeholders(names)
            return (
                [
                    r[0]
                    for r in db.execute(
                        f"SELECT critic FROM critiques WHERE review_id = ? AND status = 'running' AND critic IN ({marks})",
                        [job.id, *names],
                    )
                ]
                if names
                else []
            )

    def record(
        self,
        job: ReviewJob,
        worker: str,
        critic: str,
        status: CriticStatus,
        critique: Critique | None,
        error: str | None = None,
        seconds: float | None = None,
    ) -> bool:
        """Store one critic's result as soon as it is in; False if the worker lost the job meanwhile."""
        issues = _with_refs(job.round, critic, critique.issues if critique else [])
        hidden = bool(critique and (critique.hidden or any(i.hidden for i in critique.issues)))
        with self.store.write(scopes.review(job.id)) as db:
            if not self._held(db, job.id, worker):
                return False
            followed, resolved = _tally(
                critique.resolutions if critique else [], self._blocking_refs(db, job.task_id, job.id)
            )
            self.store.emit(ReviewChanged(job.id, job.task_id))  # wakes get_review calls waiting on this round
            return (
                db.execute(
                    "UPDATE critiques SET status = ?, verdict = ?, score = ?, summary = ?, issues = ?, issue_count = ?, "
                    "resolutions = ?, error = ?, followed = ?, resolved = ?, finished_at = ?, hidden = ?, "
                    "started_at = coalesce(?, started_at) WHERE review_id = ? AND critic = ? AND status = 'running'",
                    [
                        status,
                        critique.verdict if critique else None,
                        critique.score if critique else None,
                        critique.summary if critique else None,
                        json.dumps([i.model_dump() for i in issues]),
                        _shown_count(issues),
                        json.dumps([r.model_dump() for r in critique.resolutions] if critique else []),
                        error,
                        followed,
                        resolved,
                        now(),
                        int(hidden),
                        (now() - seconds) if seconds is not None else None,
                        job.id,
                        critic,
                    ],
                ).rowcount
                == 1
            )

    def announce(
        self,
        task_id: int,
        intent: str,
        summary: str,
        content: str = "",
        recipient: str | None = None,
        metadata: dict | None = None,
    ) -> None:
        """Post a review event to the pool (review.started, review.request to role:critic, …)."""
        with self.store.write(scopes.agent("review")) as db:
            self.messages.event(db, "review", intent, task_id, summary, content, recipient=recipient, metadata=metadata)

    def critic_agents(self, task_id: int, author: str, within: float) -> list[str]:
        """Present agents with the critic role (given by the operator) who neither did the work nor created
        the card."""
        creator = cards.row(self.store.db, task_id)["created_by"]
        return self.agents.present("critic", within, exclude=(author, creator))

    def _withdraw_requests(self, db: Database, review_id: int) -> None:
        """The review moved on: its requests leave the critics' inboxes (the pool keeps them)."""
        db.execute(
            "DELETE FROM inbox WHERE message_id IN (SELECT id FROM messages WHERE intent = 'review.request' "
            f"AND {self.store.dialect.json_number('metadata', 'review_id')} = ?)",
            [review_id],
        )

    def fail_unfinished(self, job: ReviewJob, worker: str, error: str) -> None:
        """Critics of this round still marked running are recorded as errors."""
        with self.store.write(scopes.review(job.id)) as db:
            if self._held(db, job.id, worker):
                db.execute(
                    "UPDATE critiques SET status = 'error', error = ?, finished_at = ? WHERE review_id = ? "
                    "AND status = 'running'",
                    [error, now(), job.id],
                )

    # ----------------------------------------------------------------- agent critics

    def open_lenses(self, review_id: int) -> list[str]:
        return [
            r[0]
            for r in self.store.db.execute(
                "SELECT lens FROM critiques WHERE review_id = ? AND status = 'pending' ORDER BY lens", [review_id]
            )
        ]

    def submit(self, agent: str, review_id: int, lens: str, critique: Critique) -> CritiqueRecord:
        """An agent critic's critique for one open lens of a running review."""
        ts = now()
        with self.store.write(scopes.review(review_id), scopes.agent(agent)) as db:
            review = next(db.query("SELECT * FROM reviews WHERE id = ?", [review_id]), None)
            if review is None:
                raise NotFound(f"review {review_id} does not exist; the review request message names the review id")
            role = db.execute("SELECT role FROM agents WHERE name = ?", [agent]).fetchone()
            if role is None or role[0] != "critic":
                raise Forbidden(
                    "only agents the operator gave the critic role may submit critiques (`hiveboard "
                    "agent add NAME --role critic`); ask the operator, or post your view with "
                    "publish_message"
                )
            creator = db.execute("SELECT created_by FROM tasks WHERE id = ?", [review["task_id"]]).fetchone()[0]
            if agent in (review["agent"], creator):
                raise Forbidden(
                    f"review {review_id} is of task {review['task_id']}, which you "
                    f"{'did' if review['agent'] == agent else 'created'}; critics must be other agents"
                )
            if review["status"] != "running":
                raise IllegalTransition(
                    f"review {review_id} is {review['status']}, not taking critiques"
                    + (
                        ""
                        if review["status"] == "queued"
                        else f"; get_review(review_id={review_id}, full=true) shows its verdict"
                    )
                )
            slots = {
                r["lens"]: r
                for r in db.query(
                    "SELECT lens, status, submitted_by FROM critiques WHERE review_id = ? AND backend = 'agent'",
                    [review_id],
                )
            }
            open_ = sorted(lens_ for lens_, r in slots.items() if r["status"] == "pending")
            if review["agent_deadline"] is not None and ts > review["agent_deadline"]:
                raise IllegalTransition(
                    f"the deadline for agent critiques of review {review_id} passed at "
                    f"{iso(review['agent_deadline'])}; the review went on without them"
                )
            if lens not in slots:
                raise InvalidInput(
                    f"lens {lens!r} is not open to agents in review {review_id}; open lenses: "
                    f"{', '.join(open_) or 'none'}"
                )
            if slots[lens]["status"] != "pending":
                raise IllegalTransition(
                    f"lens {lens!r} of review {review_id} was already "
                    + (f"reviewed by {slots[lens]['submitted_by']}" if slots[lens]["submitted_by"] else "closed")
                    + f"; open lenses: {', '.join(open_) or 'none'}"
                )
            issues = _with_refs(review["round"], f"agent:{lens}", critique.issues)
            earlier = next(
                (
                    json.loads(r[0])
                    for r in db.execute(
                        "SELECT c.issues FROM critiques c JOIN reviews r ON r.id = c.review_id WHERE r.task_id = ? "
                        "AND r.id < ? AND c.round = ? AND c.critic = ? AND c.status = 'ok' ORDER BY r.id DESC LIMIT 1",
                        [review["task_id"], review_id, review["round"] - 1, f"agent:{lens}"],
                    )
                ),
                [],
            )
            resolutions = judged(critique.resolutions, [i["ref"] for i in earlier])
            db.execute(
                "UPDATE critiques SET status = 'ok', verdict = ?, score = ?, summary = ?, issues = ?, "
                "issue_count = ?, resolutions = ?, submitted_by = ?, followed = ?, resolved = ?, "
                "finished_at = ? WHERE review_id = ? AND critic = ?",
                [
                    critique.verdict,
                    critique.score,
                    critique.summary,
                    json.dumps([i.model_dump() for i in issues]),
                    len(issues),
                    json.dumps([r.model_dump() for r in resolutions]),
                    agent,
                    *_tally(resolutions, self._blocking_refs(db, review["task_id"], review_id)),
                    ts,
                    review_id,
                    f"agent:{lens}",
                ],
            )
            self.store.emit(ReviewChanged(review_id, review["task_id"]))
            return _record(
                next(
                    db.query("SELECT * FROM critiques WHERE review_id = ? AND critic = ?", [review_id, f"agent:{lens}"])
                )
            )

    def close_slots(self, job: ReviewJob, worker: str) -> None:
        """The deadline passed: lenses no agent took are recorded as missed, not dropped."""
        with self.store.write(scopes.review(job.id)) as db:
            if self._held(db, job.id, worker):
                self._withdraw_requests(db, job.id)
                db.execute(
                    "UPDATE critiques SET status = 'missed', error = 'no critic agent submitted this lens "
                    "before the deadline', finished_at = ? WHERE review_id = ? AND status = 'pending'",
                    [now(), job.id],
                )

    # ----------------------------------------------------------------- reading

    def critiques(self, review_id: int) -> list[CritiqueRecord]:
        return [
            _record(r)
            for r in self.store.db.query("SELECT * FROM critiques WHERE review_id = ? ORDER BY id", [review_id])
        ]

    def _before(self, job: ReviewJob) -> int | None:
        """The review of the round before this one in the same cycle: of the same claim (a FAIL hands the card
        back with its token; a new claim is a new cycle, though the round count goes on)."""
        if job.round <= 1:
            return None
        return self.store.db.execute(
            "SELECT max(id) FROM reviews WHERE task_id = ? AND id < ? AND round = ? AND fencing_token = ?",
            [job.task_id, job.id, job.round - 1, job.fencing_token],
        ).fetchone()[0]

    def previous(self, job: ReviewJob) -> dict[str, CritiqueRecord]:
        """The critiques of the round before this one in the same cycle, by critic."""
        prev = self._before(job)
        return {c.critic: c for c in self.critiques(prev)} if prev else {}

    def previous_commit(self, job: ReviewJob) -> Commit | None:
        """The commit the round before this one in the same cycle was handed in as, if it was one."""
        prev = self._before(job)
        return Commits.of_review(self.store.db, prev) if prev else None

    def previous_artifacts(self, job: ReviewJob) -> list[Artifact]:
        """The work's files as submitted in the round before this one in the same cycle ([] in round 1): with
        this round's, what the author changed."""
        prev = self._before(job)
        row = self.store.db.execute("SELECT artifacts FROM reviews WHERE id = ?", [prev]).fetchone() if prev else None
        return [Artifact(**a) for a in json.loads(row[0])] if row else []

    def told_hidden(self, task_id: int, before_review: int | None = None, db: Database | None = None) -> bool:
        """Whether a round of the card (before `before_review`) had an issue its hidden tests shaped: its author was
        told of them, if only sealed, so nothing taken from the card's later work is free of them (no lesson, and
        its output does not join the shared memory)."""
        return any(
            any(i.get("hidden") for i in json.loads(issues))
            for (issues,) in (db or self.store.db).execute(
                "SELECT issues FROM critiques WHERE task_id = ? AND review_id < ? AND hidden = 1",
                [task_id, before_review if before_review is not None else 2**62],
            )
        )

    def remember_output(self, db: Database, row: dict, came_from: str) -> None:
        """A card reached done: its work joins the shared memory (Knowledge.remember_output), unless the card's
        hidden tests shaped what its author was told (`told_hidden`; a card handed straight to done, with no review,
        was told nothing). A canary's never does: its work is not work anyone should learn from."""
        if row.get("canary"):
            return
        if came_from == "in_progress" or not self.told_hidden(row["id"], db=db):
            self.knowledge.remember_output(db, row)

    def hand_ins(self, task_id: int, last: int = 2) -> list[HandIn]:
        """The card's latest `last` hand-ins of work, newest first, with their files (what a person at the
        approval gate reads, beside the hand-in before it)."""
        with self.store.read() as db:
            return self.hand_ins_of(db, cards.row(db, task_id), last)

    @staticmethod
    def hand_ins_of(db: Database, row: dict, last: int) -> list[HandIn]:
        """`hand_ins` of the card `row` inside a transaction: each review round's snapshot, and before them the
        current claim's files when its latest completion went to no review round (done, or to a person's
        approval, unreviewed). A review round is queued in its completion's transaction, at its time."""
        rows = list(
            db.query(
                "SELECT id, round, status, verdict, created_at, artifacts FROM reviews WHERE task_id = ? "
                "ORDER BY id DESC LIMIT ?",
                [row["id"], last],
            )
        )
        found = [
            HandIn(
                key=f"review-{r['id']}",
                review_id=r["id"],
                round=r["round"],
                status=r["status"],
                verdict=r["verdict"],
                at=iso(r["created_at"]),
                artifacts=[Artifact(**a) for a in json.loads(r["artifacts"])],
            )
            for r in rows
        ]
        completed = next(
            iter(
                db.query(
                    "SELECT id, at FROM task_history WHERE task_id = ? AND action = ? ORDER BY id DESC LIMIT 1",
                    [row["id"], COMPLETED],
                )
            ),
            None,
        )
        if completed is not None and (not rows or rows[0]["created_at"] < completed["at"]):
            # its files were written in the completion's own transaction, at its time (a later claim may hold the
            # card now, with none of its own yet)
            files = db.query(
                "SELECT name, kind, content FROM artifacts WHERE task_id = ? AND created_at = ? ORDER BY id",
                [row["id"], completed["at"]],
            )
            found.insert(
                0,
                HandIn(
                    key=f"hand-in-{completed['id']}", at=iso(completed["at"]), artifacts=[Artifact(**a) for a in files]
                ),
            )
        return found[:last]

    def rounds(self, task_id: int, since_review: int = 0, reveal: bool = False) -> list[ReviewRound]:
        """A card's rounds; a running round's critiques are sealed (status only) unless `reveal`."""
        out = []
        for r in self.store.db.query(
            "SELECT * FROM reviews WHERE task_id = ? AND id > ? ORDER BY id", [task_id, since_review]
        ):
            out.append(
                ReviewRound(
                    review_id=r["id"],
                    round=r["round"],
                    status=r["status"],
                    verdict=r["verdict"],
                    outcome=r["outcome"],
                    queued_at=iso(r["created_at"]),
                    started_at=iso(r["started_at"]),
                    finished_at=iso(r["finished_at"]),
                    attempts=r["attempts"],
                    agent_deadline=iso(r["agent_deadline"]),
                    summary=r["summary"],
                    open_lenses=self.open_lenses(r["id"]) if r["status"] == "running" else [],
                    critiques=self.critiques(r["id"])
                    if r["status"] == "finished" or reveal
                    else [_sealed(c) for c in self.critiques(r["id"])],
                    synthesis=Synthesis.model_validate_json(r["synthesis"]) if r["synthesis"] else None,
                )
            )
        return out

    def trail(self, task_id: int) -> ReviewTrail:
        """Every round of a card's review, oldest first."""
        self.machine.sweep_expired()  # as board.get does, so an expired lease shows as todo
        with self.store.read() as db:  # the card and its rounds as one moment saw them (a verdict moves both)
            row = cards.row(db, task_id)  # the card's header only: this runs on every wake-up
            rounds = self.rounds(task_id)
            merge = self.merges.waiting(db, task_id) if row["status"] == "review" else None
        return ReviewTrail(
            task_id=task_id,
            title=row["title"],
            task_type=row["task_type"],
            status=row["status"],
            agent=row["assignee"],
            waiting_for=_merge_step(merge),
            rounds=rounds,
            scores=[r.synthesis.score for r in rounds if r.status == "finished" and r.synthesis],
        )

    def reveals(self, agent: str | None, task_id: int) -> bool:
        """Whether `agent` sees what the card's hidden tests shaped in its review: its creator (who wrote them) and
        people (an operator role) do; its author, bystanders and agent critics see it `sealed`."""
        if agent is None:
            return False
        creator = self.store.db.execute("SELECT created_by FROM tasks WHERE id = ?", [task_id]).fetchone()
        return (creator is not None and creator[0] == agent) or self.machine.operator(agent)

    @staticmethod
    def sealed(trail: ReviewTrail) -> ReviewTrail:
        """The trail with nothing the card's hidden tests shaped (review_models.sealed)."""
        return sealed_trail(trail)

    @staticmethod
    def referenced(trail: ReviewTrail) -> ReviewTrail:
        """Each finding written once: a synthesis' merged issues name the critiques' issues by ref (with rank,
        severity, place and who found them) instead of repeating their description and suggestion, which the
        critiques of the same round hold; the brief keeps its one-read summary."""
        rounds = [
            r
            if r.synthesis is None
            else r.model_copy(
                update={
                    "synthesis": r.synthesis.model_copy(
                        update={
                            "issues": [
                                m.model_copy(update={"description": None, "suggestion": None})
                                for m in r.synthesis.issues
                            ]
                        }
                    )
                }
            )
            for r in trail.rounds
        ]
        return trail.model_copy(update={"rounds": rounds})

    @staticmethod
    def compact(trail: ReviewTrail) -> ReviewTrail:
        """The latest round only, with only blocking issues (critiques' and the synthesis's, the latter by ref)
        and no resolutions: what an agent needs to act; the full trail is one call away."""
        if not trail.rounds:
            return trail
        last = trail.rounds[-1]
        critiques = [
            c.model_copy(update={"issues": [i for i in c.issues if i.severity in BLOCKING], "resolutions": []})
            for c in last.critiques
        ]
        synthesis = last.synthesis and last.synthesis.model_copy(
            update={"issues": [i for i in last.synthesis.issues if i.severity in BLOCKING], "contradictions": []}
        )
        return Reviews.referenced(
            trail.model_copy(
                update={
                    "rounds": [last.model_copy(update={"critiques": critiques, "synthesis": synthesis})],
                    "rounds_omitted": len(trail.rounds) - 1,
                }
            )
        )

    def review_of(self, review_id: int) -> int:
        """The task id of a review."""
        found = self.store.db.execute("SELECT task_id FROM reviews WHERE id = ?", [review_id]).fetchone()
        if found is None:
            raise NotFound(
                f"review {review_id} does not exist; get_review(task_id=..., full=true) lists a card's reviews "
                "with their review_id"
            )
        return found[0]

    # ----------------------------------------------------------------- the verdict

    def finish(
        self, job: ReviewJob, worker: str, synthesis: Synthesis, outcome: Outcome, message: str, decisive: list[str]
    ) -> bool:
        """Store the synthesis and move the card: done, back to its agent, or to a human."""
        ts = now()
        with self.store.write(scopes.review(job.id)) as db:
            if not self._held(db, job.id, worker):
                return False
            row = cards.row(db, job.task_id)
            # the verdict moves the card only while it still waits for this round (not after a human took it)
            if row["status"] == "review" and row["fencing_token"] == job.fencing_token:
                sets: dict = {
                    "unverified": synthesis.unverified if outcome == "done" else None,
                    "evidence": synthesis.evidence if outcome == "done" else None,
                }
                if outcome == "in_progress":
                    sets["assignee"] = job.agent
                note = (
                    f"{synthesis.verdict}: {_noted(synthesis.brief, job.task_id)}"
                    if synthesis.verdict == "FAIL"
                    else synthesis.verdict
                )
                intent = {"done": "approval", "in_progress": "critique", "needs_human": "needs_human"}[outcome]
                merging = self.merges.to_merge(db, job.id) if outcome == "done" else None
                if merging is not None:  # passed: done once the merge queue has merged it
                    self.merges.enqueue(
                        db, row, merging, "review", "review", ts, f"{note}: reviewed round {job.round}", sets
                    )
                    intent = "status_update"  # the approval is the merge's, when the base holds the commit
                    head, _, rest = message.partition("\n")
                    message = f"{head}; it waits in the merge queue of {merging.repo}" + (f"\n{rest}" if rest else "")
                else:
                    if outcome == "done" and job.commit is not None:  # its repository leaves the merge to a person
                        note += (
                            f"; commit {job.commit.sha} ({job.commit.ref}) is left unmerged for a person to merge into "
                            f"{job.commit.repo}'s base branch (merge_mode manual)"
                        )
                    self.machine.move(
                        db,
                        row,
                        outcome,
                        "review",
                        "review",
                        ts=ts,
                        action=f"reviewed round {job.round}",
                        reason=message[: self.limits.note] if outcome == "needs_human" else None,
                        sets=sets,
                        note=note,
                    )
                # to the pool: the card's author (its holder), its creator and the task's subscribers
                self.messages.event(db, "review", intent, job.task_id, message.split("\n", 1)[0], message)
            if decisive:
                marks = placeholders(decisive)
                db.execute(
                    f"UPDATE critiques SET decisive = 1 WHERE review_id = ? AND critic IN ({marks})",
                    [job.id, *decisive],
                )
            db.execute(
                "UPDATE reviews SET status = 'finished', verdict = ?, outcome = ?, synthesis = ?, "
                "finished_at = ?, leased_until = NULL WHERE id = ?",
                [synthesis.verdict, outcome, synthesis.model_dump_json(), ts, job.id],
            )
            for c in self.critiques(job.id):
                # memory is everyone's: nothing the card's hidden tests shaped goes there, not even sealed
                if c.status == "ok" and not c.hidden and (c.issues or c.summary):
                    text = f"{c.summary or ''}\n" + "\n".join(
                        f"[{i.severity}] {i.category} {i.location}: {i.description} — {i.suggestion}" for i in c.issues
                    )
                    self.knowledge.add(
                        db,
                        kind="critique",
                        text=text.strip(),
                        created_by=c.submitted_by or c.critic,
                        task_type=job.task_type,
                        task_id=job.task_id,
                        title=f"{c.lens} critique of task {job.task_id} round {job.round}: {c.verdict}",
                        tags=[c.lens, c.verdict.lower() if c.verdict else "none"],
                        source=f"review:{job.id}:{c.critic}",
                        trust="reviewed",  # a critique of a decided round
                        review_id=job.id,
                    )
            self.store.emit(ReviewChanged(job.id, job.task_id))
            return True

    def record_person(
        self, db: Database, task_id: int, person: str, verdict: str, summary: str, note: str, ts: float
    ) -> None:
        """A person's decision on a card its last review sent to a human, kept as that round's human lens
        (so the trail and the per-critic figures show who decided). Nothing when no review sent it there."""
        last = db.execute(
            "SELECT id, round, outcome FROM reviews WHERE task_id = ? ORDER BY id DESC LIMIT 1", [task_id]
        ).fetchone()
        if last is None or last[2] != "needs_human":
            return
        db.execute(
            "INSERT INTO critiques (review_id, task_id, round, critic, lens, backend, status, "
            "verdict, summary, submitted_by, decisive, started_at, finished_at) VALUES "
            "(?, ?, ?, ?, 'human', 'person', 'ok', ?, ?, ?, 1, ?, ?) ON CONFLICT DO NOTHING",
            [
                last[0],
                task_id,
                last[1],
                person,
                verdict,
                (summary + (f": {note}" if note else ""))[:2000],
                person,
                ts,
                ts,
            ],
        )
        self.store.emit(ReviewChanged(last[0], task_id))

    @staticmethod
    def state(db: Database, row: dict) -> ReviewState:
        """Where the card's current work stands with its review: passed (its last round passed and moved it to
        done, or a person then approved it), awaiting a person's approval, or not passed (failed, never
        reviewed, or the card moved on since: a later claim has a new fencing token)."""
        last = db.execute(
            "SELECT verdict, outcome, fencing_token FROM reviews WHERE task_id = ? AND status = "
            "'finished' ORDER BY id DESC LIMIT 1",
            [row["id"]],
        ).fetchone()
        if last is None or last[0] != "PASS" or last[2] != row["fencing_token"]:
            return "not passed"
        if row["status"] == "done":
            return "passed"
        return "awaiting approval" if row["status"] == "needs_human" and last[1] == "needs_human" else "not passed"

    def review_state(self, task_id: int) -> ReviewState:
        """Where one card's work stands with its review (see `state`)."""
        with self.store.read() as db:
            return self.state(db, cards.row(db, task_id))

    # ----------------------------------------------------------------- metrics

    def stats(self) -> BoardStats:
        db = self.store.db
        sql = self.store.dialect
        score = sql.json_number("synthesis", "score")
        counts = dict(db.execute("SELECT status, count(*) FROM reviews GROUP BY status").fetchall())
        firsts = db.execute(
            "SELECT created_at, verdict FROM reviews WHERE round = 1 AND status = 'finished' ORDER BY id"
        ).fetchall()
        by_day: dict[str, list[int]] = {}
        for created, verdict in firsts:
            day = datetime.fromtimestamp(created, UTC).date().isoformat()
            tally = by_day.setdefault(day, [0, 0])
            tally[0] += 1
            tally[1] += verdict == "PASS"
        # a card's review has ended when its last round sent it to done or to a human
        ended = db.execute(
            "SELECT round FROM reviews WHERE status = 'finished' AND outcome IN ('done', 'needs_human')"
        ).fetchall()
        latencies = [
            r[0]
            for r in db.execute(
                "SELECT finished_at - created_at FROM reviews WHERE status = 'finished' ORDER BY id DESC LIMIT 10000"
            )
        ]
        followed, resolved = db.execute(
            "SELECT coalesce(sum(followed), 0), coalesce(sum(resolved), 0) FROM critiques"
        ).fetchone()
        critics = []
        for name, lens, ok, failed, decisive, issues in db.execute(
            "SELECT critic, lens, count(*) FILTER (WHERE status = 'ok'), "
            "count(*) FILTER (WHERE status IN ('error', 'timeout', 'missed')), "
            "sum(decisive), sum(issue_count) FROM critiques GROUP BY critic, lens ORDER BY critic"
        ):
            critics.append(
                CriticStats(
                    critic=name,
                    lens=lens,
                    critiques=ok,
                    failures=failed,
                    issues=issues,
                    decisive=decisive,
                    contribution_rate=_rate(decisive, ok),
                )
            )
        tasks, messages = db.execute(
            "SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM messages WHERE task_id IS NOT NULL)"
        ).fetchone()
        unverified = dict(
            db.execute(
                "SELECT outcome, count(*) FROM reviews WHERE status = 'finished' AND "
                f"{sql.json_field('synthesis', 'unverified')} IS NOT NULL GROUP BY outcome"
            ).fetchall()
        )
        surfaced, useful = self.knowledge.reuse()
        p95 = (
            statistics.quantiles(latencies, n=20, method="inclusive")[18]
            if len(latencies) >= 2
            else (latencies or [None])[0]
        )
        return BoardStats(
            reviews=counts.get("finished", 0),
            queued=counts.get("queued", 0),
            running=counts.get("running", 0),
            cards_reviewed=db.execute("SELECT count(DISTINCT task_id) FROM reviews").fetchone()[0],
            first_pass_pass_rate=_rate(sum(v == "PASS" for _, v in firsts), len(firsts)),
            first_pass_by_day=[
                DayRate(day=d, reviewed=n, passed=p, rate=_rate(p, n)) for d, (n, p) in sorted(by_day.items())
            ][-30:],
            rounds_per_card=round(statistics.fmean(r[0] for r in ended), 2) if ended else None,
            score_by_round=[
                round(r[1], 2)
                for r in db.execute(
                    f"SELECT round, avg({score}) FROM reviews WHERE status = 'finished' AND "
                    f"{score} IS NOT NULL GROUP BY round ORDER BY round LIMIT 20"
                )
            ],
            max_rounds_seen=max((r[0] for r in ended), default=0),
            needs_human=db.execute("SELECT count(*) FROM reviews WHERE outcome = 'needs_human'").fetchone()[0],
            unverified_needs_human=unverified.get("needs_human", 0),
            unverified_passed=unverified.get("done", 0),
            critique_success_rate=_rate(resolved, followed),
            issues_followed_up=followed,
            review_latency_p50=round(statistics.median(latencies), 3) if latencies else None,
            review_latency_p95=round(p95, 3) if p95 is not None else None,
            critics=critics,
            messages_per_task=_rate(messages, tasks),
            memory_surfaced=surfaced,
            memory_useful=useful,
            memory_reuse_rate=_rate(useful, surfaced),
            memory_pending=self.knowledge.pending(),
        )


def _noted(brief: str, task_id: int, limit: int = 500) -> str:
    """A round's brief in the card's history: cut to `limit` characters, saying where the rest is."""
    if len(brief) <= limit:
        return brief
    return brief[:limit].rstrip() + f"… (the whole brief: get_review(task_id={task_id}, full=true))"


def _with_refs(round_: int, critic: str, issues: list[ReviewIssue]) -> list[ReviewIssue]:
    """Stable ids (r<round>:<critic>#<n>), most severe first; at most MAX_ISSUES per critique. Issues the card's
    hidden tests shaped come after the others and are numbered apart (#h<n>), so the refs anyone sees say
    nothing of how many there are."""
    kept = [
        *sorted((i for i in issues if not i.hidden), key=lambda i: -SEVERITY_RANK[i.severity])[:MAX_ISSUES],
        *sorted((i for i in issues if i.hidden), key=lambda i: -SEVERITY_RANK[i.severity])[:MAX_ISSUES],
    ]
    counts = {False: 0, True: 0}
    out = []
    for i in kept:
        counts[i.hidden] += 1
        out.append(i.model_copy(update={"ref": f"r{round_}:{critic}#{'h' if i.hidden else ''}{counts[i.hidden]}"}))
    return out


def _shown_count(issues: list[ReviewIssue]) -> int:
    """A critique's issues as `sealed` shows them (board_stats counts these): those of hidden tests as one."""
    return sum(not i.hidden for i in issues) + any(i.hidden for i in issues)


def _tally(resolutions: list[Resolution], blocking: set[str]) -> tuple[int, int]:
    """(earlier blocking issues judged, of which resolved): the critique-success counts. Minor findings
    nobody had to fix would otherwise dominate the rate."""
    judged_ = [r for r in resolutions if r.ref in blocking]
    return len(judged_), sum(r.status == "resolved" for r in judged_)


def _sealed(c: CritiqueRecord) -> CritiqueRecord:
    """A critique of a round still running: who and how far, not what (critics stay independent)."""
    return c.model_copy(update=dict(verdict=None, score=None, summary=None, issues=[], resolutions=[]))


def _record(r: dict) -> CritiqueRecord:
    seconds = r["finished_at"] - r["started_at"] if r["finished_at"] and r["started_at"] else None
    return CritiqueRecord(
        critic=r["critic"],
        lens=r["lens"],
        backend=r["backend"],
        model=r["model"],
        status=r["status"],
        verdict=r["verdict"],
        score=r["score"],
        summary=r["summary"],
        issues=[ReviewIssue(**i) for i in json.loads(r["issues"])],
        resolutions=[Resolution(**x) for x in json.loads(r["resolutions"])],
        error=r["error"],
        submitted_by=r["submitted_by"],
        seconds=round(seconds, 3) if seconds is not None else None,
        hidden=bool(r["hidden"]),
    )
