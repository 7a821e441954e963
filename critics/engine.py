"""The review engine: fan-out to the critics of a card's lenses, synthesis, the card's next move, lessons.

A `ReviewWorker` (started by `hiveboard serve`) takes queued jobs from SQLite and hands each to
`ReviewEngine.run`. Critics run in parallel threads and each result is stored the moment it is in;
agent critics (role `critic`) are asked through the message pool and have until a deadline. While a
job runs its worker renews the job's lease; if the process dies, another worker (or the restarted
server) takes the job after the lease and re-runs only the critics that had not finished.

Work handed in as a commit (complete_task ref=) is exported from its repository for the round (critics/
commits.py): the acceptance check runs the repository's test command and the card's checks against the whole
tree, the analysers read the changed files, the models the diff and the changed files, and every finding that
names a line of a changed file says whether the diff changed it. The worker also runs the merge queue
(critics/merge.py) that a passed commit goes through before done.
"""

from __future__ import annotations

import contextvars
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hiveboard.board import scopes, tracing
from hiveboard.board.db import iso, now
from hiveboard.board.errors import BoardError
from hiveboard.board.events import Event, ReviewChanged, TaskChanged
from hiveboard.board.models import Artifact
from hiveboard.board.optional import LLM_CRITICS, need
from hiveboard.board.review_models import (
    BLOCKING,
    Critique,
    CritiqueRecord,
    ReviewIssue,
    ReviewJob,
    Synthesis,
    judged,
    sealed,
)
from hiveboard.board.tasks import CREATOR_ASKED, Board
from hiveboard.board.worker import Worker, keep_leased

from .acceptance import EXIT_STATUS_ONLY, AcceptanceCritic
from .base import Critic, CriticFailed, CriticTimeout, Skipped, Unverified, Work
from .base_branch import base_moved, tell
from .commits import Repository, changed_files, on_diff
from .config import NEVER_LOWERED, PRECEDENCE, CriticConfig, Endpoint, ReviewConfig
from .git import Git, GitError
from .integrity import IntegrityCritic
from .lessons import Lesson, hidden, lessons
from .llm import LLMCritic, LLMSynthesiser, MetaReviewer, Referee
from .merge import MergeQueue, MergeWorker
from .policy import Policy, policy
from .sandbox import Bare, Box, Detected, detect
from .static import BanditCritic, RuffCritic
from .synthesis import (
    blocking_findings,
    convergence_summary,
    downgrade,
    for_a_person,
    mark_repeated,
    rescore,
    synthesise,
)

if TYPE_CHECKING:  # the memory loads its models on first use, not with the review engine
    from hiveboard.memory.service import Memory

log = logging.getLogger("hiveboard.critics")
MAX_ATTEMPTS = 3  # a job whose run crashed this often goes to a human instead of looping
LESSONS_PER_REVIEW = 10
# on a commit, these analysers' blocking findings count on the lines it changed only (but never a security or
# integrity finding: a card's creator can waive such a rule instead)
ANALYSERS = ("ruff", "bandit", "integrity")


def execution(config: ReviewConfig, sandbox: Detected) -> tuple[Box | None, str]:
    """Where the acceptance check runs (None: nowhere), and why, for the operator and the critique."""
    if config.execute == "off":
        return None, 'review.execute = "off"'
    if config.execute == "unsafe":
        return Bare(), 'review.execute = "unsafe": tests run as plain subprocesses of the server, NOT sandboxed'
    if sandbox.box is None:
        return None, f"no sandbox works here: {sandbox.reason}"
    return sandbox.box, f"tests run in the {sandbox.box.name} sandbox"


def execution_line(config: ReviewConfig, sandbox: Detected) -> str:
    """One line on where submitted tests run and what happens to work whose tests cannot run."""
    box, why = execution(config, sandbox)
    if box is not None and box.isolated:
        return f"execution: sandbox ({why})"
    if box is not None:
        return f"execution: UNSAFE ({why})"
    then = (
        "goes to needs_human"
        if config.unverified == "needs_human"
        else 'passes marked unverified (review.unverified = "pass")'
    )
    return f"execution: off ({why}); work with tests {then}"


def describe(config: ReviewConfig, sandbox: Detected, critics: dict[str, Critic]) -> str:
    """Two lines: the critics that will run, and where tests run."""
    parts = [f"{c.name} ({c.lens}, {c.backend}{': ' + c.model if c.model else ''})" for c in critics.values()]
    if not any(c.backend == "llm" for c in critics.values()):
        parts.append("no LLM critic configured")
    return "review critics: " + "; ".join(parts) + f"\n{execution_line(config, sandbox)}"


@dataclass(frozen=True)
class Build:
    """What a backend's builder gets: the critic's name and settings, the review configuration, the box that
    reads submitted work, and the runner of the acceptance tests (or why there is none)."""

    name: str
    spec: CriticConfig
    config: ReviewConfig
    reader: Box
    runner: Box | None
    why_not: str | None

    @property
    def timeout(self) -> float:
        return self.spec.timeout or self.config.critic_timeout


def _ruff(b: Build) -> tuple[Critic, float]:
    c = b.spec
    return RuffCritic(b.name, c.lens, b.timeout, b.reader, b.config.limits, c.rules, b.config.honour_suppressions), (
        b.timeout
    )


def _bandit(b: Build) -> tuple[Critic, float]:
    return BanditCritic(b.name, b.spec.lens, b.timeout, b.reader, b.config.limits, b.config.honour_suppressions), (
        b.timeout
    )


def _acceptance(b: Build) -> tuple[Critic, float]:
    timeout = b.spec.timeout or b.config.execute_timeout  # running tests, not reading code
    return AcceptanceCritic(b.name, b.spec.lens, b.runner, b.why_not, timeout, b.config.limits), timeout


def _integrity(b: Build) -> tuple[Critic, float]:
    return IntegrityCritic(b.name, b.spec.lens, b.timeout, b.reader, b.config.limits, b.config.integrity), b.timeout


def _llm(b: Build) -> tuple[Critic, float]:
    c, config = b.spec, b.config
    endpoint = Endpoint(
        model=c.model, base_url=c.base_url, api_key_env=c.api_key_env, timeout=c.timeout, temperature=c.temperature
    )
    critic = LLMCritic(b.name, c.lens, config.rubric(c.lens), endpoint, b.timeout, config.repair_attempts)
    return critic, b.timeout * (config.repair_attempts + 1)  # each re-ask of a malformed answer has its own timeout


# a critic's backend (critics/config.py's Backend) -> what builds it and how long it may take; a new backend
# is one builder registered here
BACKENDS: dict[str, Callable[[Build], tuple[Critic, float]]] = {
    "ruff": _ruff,
    "bandit": _bandit,
    "acceptance": _acceptance,
    "integrity": _integrity,
    "llm": _llm,
}


def build_critics(config: ReviewConfig, sandbox: Detected) -> dict[str, Critic]:
    """The configured critics, built-in ones included, by name. Analysers read the work in the sandbox
    when there is one, else in a bare subprocess (they never run it); the acceptance check as `execution`
    says."""
    critics: dict[str, Critic] = {}
    reader = sandbox.box or Bare()
    runner, why_not = execution(config, sandbox)
    for name, c in config.all_critics().items():
        critic, timeout = BACKENDS[c.backend](Build(name, c, config, reader, runner, why_not))
        critic.deadline = timeout + 5  # the backend's own timeout fires first; this is the backstop
        critics[name] = critic
    return critics


def _judged(critique: Critique, earlier: list[ReviewIssue]) -> Critique:
    """Keep resolutions of this critic's own earlier issues only, and name any it did not judge."""
    return critique.model_copy(update={"resolutions": judged(critique.resolutions, [i.ref for i in earlier])})


class _Dropped(Exception):
    """The round's job was cancelled or taken over while its critics ran."""


@dataclass
class AttemptStanding:
    """Where one competing attempt stands after its review."""

    task_id: int
    passed: bool
    tests_passed: bool
    blocking: int
    score: float
    rounds: int

    def key(self) -> tuple:
        return (self.passed, self.tests_passed, -self.blocking, self.score, -self.rounds, -self.task_id)

    def describe(self) -> str:
        return (
            f"{'passed' if self.passed else 'did not pass'} review, tests "
            f"{'passed' if self.tests_passed else 'did not pass or did not run'}, {self.blocking} blocking "
            f"issue(s), score {self.score:g}, {self.rounds} round(s)"
        )


class ReviewEngine:
    """Runs one review round of a card."""

    def __init__(
        self,
        board: Board,
        config: ReviewConfig,
        memory: Memory | None = None,
        critics: dict[str, Critic] | None = None,
        hidden: list | None = None,
    ):
        """`hidden`: paths the sandbox must not show (the data directory and config; the board's database
        directory is always hidden)."""
        self.board = board
        self.config = config
        board.require_approval(config.human_approval.wants)  # a card's need for a person is decided when it is made
        self.memory = memory
        self._hidden = [Path(board.store.path).resolve().parent, *(Path(p) for p in hidden or [])]
        self._sandbox: Detected | None = None
        self._critics = critics
        self._detecting = threading.Lock()
        self.git = Git.for_machine(self._hidden, unsafe=config.execute == "unsafe")  # commits (critics/git.py)
        if critics is None and any(c.backend == "llm" for c in config.all_critics().values()):
            need("openai", LLM_CRITICS)  # refused at start, not at the first review (which builds the critics)
        synth = config.synthesis
        self.synthesiser = (
            LLMSynthesiser(synth.endpoint, config.critic_timeout, config.repair_attempts, PRECEDENCE)
            if synth.backend == "llm" and synth.endpoint
            else None
        )
        self.meta = MetaReviewer(config.meta, config.critic_timeout, config.repair_attempts) if config.meta else None
        self.referee = (
            Referee(config.referee, config.critic_timeout, config.repair_attempts) if config.referee else None
        )
        self._wakers: set[threading.Event] = set()  # one per running round: woken when a review event commits
        self._contest_lock = threading.Lock()
        self._wakers_lock = threading.Lock()

    @property
    def sandbox(self) -> Detected:
        """This machine's sandbox, probed on first use: the probe starts a Python inside it, which a
        server does after it has answered `initialize`, not before."""
        with self._detecting:
            if self._sandbox is None:
                self._sandbox = detect(self._hidden)
            return self._sandbox

    @property
    def critics(self) -> dict[str, Critic]:
        if self._critics is None:
            sandbox = self.sandbox
            with self._detecting:
                if self._critics is None:
                    self._critics = build_critics(self.config, sandbox)
        return self._critics

    def merge_queue(self) -> MergeQueue:
        """The merge queue of passed commits, testing merge results where the acceptance check runs tests."""
        runner, why_not = execution(self.config, self.sandbox)
        tests = AcceptanceCritic("merge", "tests", runner, why_not, self.config.execute_timeout, self.config.limits)
        return MergeQueue(self.board, self.config, self.git, tests)

    def wants_review(self, task) -> bool:
        return self.config.enabled

    def describe(self) -> str:
        """Which critics will run and where tests run, for the operator's log."""
        return describe(self.config, self.sandbox, self.critics)

    # ----------------------------------------------------------------- one round

    def repository(self, name: str) -> Repository:
        """A registered repository, for git in the sandbox."""
        return Repository(self.git, self.board.repos.get(name), self.config.repo)

    @contextmanager
    def _exported(self, job: ReviewJob) -> Iterator[Work | None]:
        """The round's commit exported for its critics (removed afterwards): the Work's tree, changed lines and
        artifacts (its diff, then the changed files); None for work handed in as artifacts."""
        commit = job.commit
        if commit is None:
            yield None
            return
        tree = Path(tempfile.mkdtemp(prefix="hiveboard-tree-"))
        try:
            repository = self.repository(commit.repo)
            _, moved = base_moved(self.board, repository)
            if moved is not None:  # the review goes on (it judges the change against the recorded base); merges stop
                tell(self.board, repository, moved, job.task_id)
            with repository.view(commit.sha) as view:
                skipped = repository.export(view, commit.sha, tree)
                lines = repository.changed_lines(view, commit.base_sha, commit.sha)
            if skipped:
                log.info("review %s: links out of the tree left out of the export: %s", job.id, skipped[:20])
            yield Work(**{**dict(job), "artifacts": changed_files(commit, tree)}, tree=str(tree), changed_lines=lines)
        finally:
            shutil.rmtree(tree, ignore_errors=True)

    def _work(self, job: ReviewJob, exported: Work | None = None) -> Work:
        context = []
        if self.memory is not None:
            try:
                hits = self.memory.query(
                    f"{job.title}\n{job.description}\n{job.summary or ''}",
                    task_type=job.task_type,
                    kinds=["lesson", "critique"],
                    k=6,
                ).hits
                # not this card's own critiques: a critic must not see the other critics' views of this work
                context = [f"{h.kind} #{h.id} ({h.title}): {h.snippet}" for h in hits if h.task_id != job.task_id][:5]
            except Exception:
                log.exception("memory context for review %s failed; critics go on without it", job.id)
        if exported is not None:
            return exported.model_copy(update={"context": context})
        return Work(**dict(job), context=context)

    def changed(self) -> None:
        """A review event committed (an agent's critique, a cancellation, here or in another process): every
        running round looks again."""
        with self._wakers_lock:
            wakers = list(self._wakers)
        for wake in wakers:
            wake.set()

    def _one(
        self,
        job: ReviewJob,
        worker: str,
        critic: Critic,
        work: Work,
        earlier: list[ReviewIssue],
        done: set[str],
        wake: threading.Event,
    ) -> None:
        """Run one critic on its own thread and store what it gave, whatever happened."""
        started = time.monotonic()
        critique, error, status = None, None, "ok"
        try:
            secret = bool(work.acceptance_tests and work.acceptance_tests.hidden)
            if secret and not critic.reads_tests:  # what a critic is never given, it cannot pass on
                work = work.model_copy(update={"acceptance_tests": None})
            with tracing.span(f"critic {critic.name}", attributes={"hiveboard.critic": critic.name}):
                critique = _judged(critic.review(work, earlier), earlier)
            if secret and critic.reads_tests:  # the taint starts here: whatever it says, the hidden tests shaped
                critique = critique.model_copy(update={"hidden": True})
            if work.commit is not None:
                demote = critic.backend in ANALYSERS and critic.lens not in NEVER_LOWERED
                critique = on_diff(critique, work.commit, work.changed_lines, demote=demote)
        except Skipped as exc:
            status, error = "skipped", str(exc)
        except Unverified as exc:
            status, error = "unverified", str(exc)
        except CriticTimeout as exc:
            status, error = "timeout", str(exc)
        except CriticFailed as exc:
            status, error = "error", str(exc)
        except Exception as exc:  # a critic's bug is recorded against it, never silently dropped
            log.exception("critic %s crashed on review %s", critic.name, job.id)
            status, error = "error", f"{type(exc).__name__}: {exc}"
        try:
            self.board.reviews.record(job, worker, critic.name, status, critique, error, time.monotonic() - started)
        except Exception:  # fail_unfinished records the gap against this critic
            log.exception("review %s: the result of %s was not stored", job.id, critic.name)
        done.add(critic.name)  # before the wake-up: the round looks at `done`, not at the thread
        wake.set()

    def _leased(self, job: ReviewJob, worker: str):
        """Renew the job's lease in the background while it runs."""
        lease = self.config.worker_lease
        return keep_leased(
            lambda: self.board.reviews.heartbeat(job.id, worker, lease), lease / 3, f"review {job.id}", log
        )

    def run(self, job: ReviewJob, worker: str) -> Synthesis | None:
        """Review one round; returns the synthesis, or None if another worker took the job meanwhile."""
        reviews = self.board.reviews
        agents = (
            reviews.critic_agents(job.task_id, job.agent, self.config.critic_presence)
            if self.config.agent_deadline > 0
            else []
        )
        deadline = job.agent_deadline or now() + self.config.agent_deadline
        with self._leased(job, worker), self._exporting(job, worker) as exported:
            if exported is False:  # the commit could not be exported: the card went to a human
                return None
            # the one place a round's lenses, bar and approval are decided: from what the work touches, the card's
            # type being only the floor (critics/policy.py)
            rules = policy(self.config, exported or job)
            lenses = rules.lenses
            chosen = [c for c in self.critics.values() if c.lens in lenses]
            agent_lenses = lenses if agents else []
            to_run = set(
                reviews.begin(
                    job,
                    worker,
                    [(c.name, c.lens, c.backend, c.model) for c in chosen],
                    agent_lenses,
                    deadline if agent_lenses else None,
                )
            )
            work = self._work(job, exported)
            self._announce(job, chosen, agent_lenses, deadline, work.context)
            previous = reviews.previous(job)
            running = [c for c in chosen if c.name in to_run]
            started = time.monotonic()
            # Daemon threads, not an executor: a critic that overran its timeout (or whose job was cancelled) is
            # abandoned, and it never keeps the process alive at shutdown (executor threads are joined at exit).
            done: set[str] = set()
            wake = threading.Event()
            with self._wakers_lock:
                self._wakers.add(wake)
            threads = [
                threading.Thread(
                    target=contextvars.copy_context().run,  # each critic's span is a child of the review's
                    name=f"review-{job.id}-{c.name}",
                    daemon=True,
                    args=(
                        self._one,
                        job,
                        worker,
                        c,
                        work,
                        previous[c.name].issues if c.name in previous and previous[c.name].status == "ok" else [],
                        done,
                        wake,
                    ),
                )
                for c in running
            ]
            for thread in threads:
                thread.start()
            limit = {c.name: c.deadline or self.config.critic_timeout for c in running}
            try:
                self._await_round(job, worker, running, limit, started, done, wake, agent_lenses, deadline)
            except _Dropped:
                return None
            finally:
                with self._wakers_lock:
                    self._wakers.discard(wake)
            for critic in running:
                if critic.name not in done:  # recorded as a timeout; its late answer will be refused
                    reviews.record(
                        job, worker, critic.name, "timeout", None, f"no critique within {limit[critic.name]:.0f} s"
                    )
            reviews.close_slots(job, worker)
            # a critic whose result never got stored (or one no longer configured, on a resumed job) is a
            # failure on the record, never a silent gap
            reviews.fail_unfinished(job, worker, "the critic's result was not stored (see the server log)")
            critiques = reviews.critiques(job.id)
            # what the card's hidden tests shaped never leaves the review: the synthesis, its brief, the messages
            # and the score are made from the critiques as the author sees them (review_models.sealed)
            shown = [sealed(c) for c in critiques]
            synthesis = self._meta_review(work, shown, self._synthesise(work, shown, rules))
            before = self._blocking_before(job)
            synthesis = mark_repeated(synthesis, before, job.round)
            stalled = bool(before) and before <= blocking_findings(synthesis)  # no blocking finding resolved
            outcome, message = self._decide(job, synthesis, shown, critiques, rules, stalled)
            if outcome == "needs_human" and synthesis.verdict == "FAIL":  # the brief matches where the card is
                synthesis.brief = for_a_person(synthesis.brief, job.round, self.config.brief_chars)
            synthesis = rescore(synthesis, shown, rules.bar)  # agrees with the verdict
            # lessons before the verdict: whoever sees the verdict can already find them (a re-run
            # after a crash here merges them as near-duplicates)
            self._mine_lessons(job, work, critiques, previous)
            if not reviews.finish(job, worker, synthesis, outcome, message, synthesis.decisive):
                return None
        return synthesis

    # ----------------------------------------------------------------- competing attempts

    def _standing(self, attempt: dict) -> AttemptStanding:
        rounds = [r for r in self.board.reviews.rounds(attempt["id"], reveal=True) if r.status == "finished"]
        last = rounds[-1] if rounds else None
        synthesis = last.synthesis if last else None
        tests = [c for c in (last.critiques if last else []) if c.backend == "acceptance" and c.status == "ok"]
        return AttemptStanding(
            task_id=attempt["id"],
            passed=self.board.reviews.review_state(attempt["id"]) == "passed",
            tests_passed=bool(tests) and all(c.verdict == "PASS" for c in tests),
            blocking=sum(i.severity in BLOCKING for i in synthesis.issues) if synthesis else 0,
            score=(synthesis.score if synthesis and synthesis.score is not None else 0.0),
            rounds=len(rounds),
        )

    def decide_contest(self, task_id: int) -> bool:
        """Once every competing attempt of this card's contest has ended, pick the winner: by the review
        results (passed, tests passed, fewest blocking issues, highest score, fewest rounds, earliest), or,
        with review.referee, by a model that sees the two best side by side, asked twice with the order
        swapped (two answers that disagree leave it to the results). True if this call decided it. The review
        worker calls it when a card reaches done or needs_human, by a verdict or by hand."""
        with self._contest_lock:  # one decision at a time in this process (the board refuses a second anyway)
            return self._decide_contest(task_id)

    def _decide_contest(self, task_id: int) -> bool:
        card = self.board.summary(task_id)
        if card.contest is None:
            return False
        attempts = self.board.contests.attempts(card.contest)
        if any(a["status"] not in ("done", "needs_human") or a["contest_result"] for a in attempts):
            return False
        if any(self.board.reviews.review_state(a["id"]) == "awaiting approval" for a in attempts):
            return False  # a person's approval is part of the result: decided once they have given it
        ranked = sorted((self._standing(a) for a in attempts), key=AttemptStanding.key, reverse=True)
        table = "; ".join(f"task {s.task_id}: {s.describe()}" for s in ranked)
        passing = [s for s in ranked if s.passed]
        if not passing:  # only work that passed its review can win: without any, each attempt is a person's
            return self.board.contests.decide(
                card.contest,
                None,
                f"no attempt passed review, so none wins and a person decides each. Ranking: {table}",
            )
        winner, how = passing[0], "by the review results"
        if self.referee is not None and len(passing) > 1:
            winner, how = self._referee_pick(card.contest, passing[0], passing[1])
        return self.board.contests.decide(card.contest, winner.task_id, f"decided {how}. Ranking: {table}")

    def _referee_pick(self, contest: int, a: AttemptStanding, b: AttemptStanding) -> tuple[AttemptStanding, str]:
        first, second = (self.board.get(s.task_id, history=0) for s in (a, b))
        brief = f"# {first.title.rsplit(' (attempt', 1)[0]}\n{first.description}\n" + "\n".join(
            f"- {c}" for c in first.acceptance_criteria
        )

        def shown(task) -> str:
            return "\n".join([task.output or "", *(f"--- {x.name}\n{x.content[:20_000]}" for x in task.artifacts)])

        try:
            one, why_one = self.referee.prefer(brief, shown(first), shown(second))
            two, why_two = self.referee.prefer(brief, shown(second), shown(first))  # the same two, swapped
        except (CriticFailed, CriticTimeout) as exc:
            return a, f"by the review results (the referee model failed: {exc})"
        pick_one = a if one == "A" else b
        pick_two = b if two == "A" else a
        if pick_one is not pick_two:
            return a, ("by the review results: the referee model's two answers disagreed when the order was swapped")
        return pick_one, f"by the referee model, the same with the order swapped: {why_one}"

    def _await_round(
        self,
        job: ReviewJob,
        worker: str,
        running: list[Critic],
        limit: dict[str, float],
        started: float,
        done: set[str],
        wake: threading.Event,
        agent_lenses: list[str],
        deadline: float,
    ) -> None:
        """Until every critic has answered or run out of time and every agent lens is taken or its deadline
        passed. Woken by a critic finishing or a review event (the store's notifier, which also relays other
        processes' commits); otherwise only when a deadline comes due. _Dropped if the job stopped being ours."""
        reviews = self.board.reviews
        while True:
            elapsed = time.monotonic() - started
            waiting_on = [limit[c.name] - elapsed for c in running if c.name not in done and elapsed < limit[c.name]]
            agents_busy = bool(agent_lenses) and now() < deadline and bool(reviews.open_lenses(job.id))
            if not (waiting_on or agents_busy):
                return
            if not reviews.held(job.id, worker):  # cancelled (the card left review) or taken over
                log.info("review %s: no longer ours; its critics are abandoned", job.id)
                raise _Dropped
            due = waiting_on + ([deadline - now()] if agents_busy else [])
            wake.wait(min(max(0.01, min(due)), 5.0))
            wake.clear()

    def _announce(
        self, job: ReviewJob, chosen: list[Critic], agent_lenses: list[str], deadline: float, context: list[str]
    ) -> None:
        reviews = self.board.reviews
        names = ", ".join(f"{c.name} ({c.lens})" for c in chosen) or "no automatic critic"
        if job.attempts > 1:
            reviews.announce(
                job.task_id,
                "review.resumed",
                f"review {job.id} of task {job.task_id} resumed "
                f"(attempt {job.attempts}); critics that had finished keep their critiques",
            )
            return
        reviews.announce(
            job.task_id,
            "review.started",
            f"review round {job.round} of task {job.task_id} started: "
            f"{names}" + (f"; agent critics until {iso(deadline)}" if agent_lenses else ""),
        )
        if agent_lenses:
            reviews.announce(
                job.task_id,
                "review.request",
                f'review {job.id}: critique task {job.task_id} ({job.task_type}) "{job.title}" round {job.round}; '
                f"lenses {', '.join(agent_lenses)}; deadline {iso(deadline)}",
                f"Read the work with get_task(task_id={job.task_id}) and your earlier issues with "
                f"get_review(task_id={job.task_id}). Then call submit_critique(review_id={job.id}, lens=<one of "
                f"{', '.join(agent_lenses)}>, verdict, score, summary, issues). First submission per lens counts; "
                "stay inside your lens."
                + (
                    "\n\nFrom the team's memory (past lessons and critiques of similar "
                    "work):\n" + "\n".join(f"- {c}" for c in context)
                    if context
                    else ""
                ),
                recipient="role:critic",
                metadata={
                    "review_id": job.id,
                    "task_id": job.task_id,
                    "round": job.round,
                    "lenses": agent_lenses,
                    "deadline": iso(deadline),
                },
            )

    def _synthesise(self, work: Work, critiques: list[CritiqueRecord], rules: Policy) -> Synthesis:
        synthesis = synthesise(critiques, rules.lenses, work.round, self.config.brief_chars, rules.bar)
        if self.synthesiser is None or not any(c.status == "ok" for c in critiques):
            return synthesis
        try:
            verdict, brief, contradictions = self.synthesiser.synthesise(work, critiques)
        except CriticFailed as exc:
            note = f"LLM synthesis failed ({exc}); the deterministic synthesis decided"
            return synthesis.model_copy(update={"note": "; ".join(x for x in (synthesis.note, note) if x)})
        if (
            synthesis.verdict == "FAIL"
            and verdict == "PASS"
            and any(i.severity == "critical" and i.lens in NEVER_LOWERED for i in synthesis.issues)
        ):
            verdict = "FAIL"  # a model may not wave through a critical security or integrity issue
        extra = [f"(synthesiser) {c}" for c in contradictions]
        return synthesis.model_copy(
            update={
                "verdict": verdict,
                "brief": brief,
                "synthesiser": f"llm:{self.synthesiser.endpoint.model}",
                "note": "; ".join(x for x in (synthesis.note, *extra) if x) or None,
            }
        )

    def _meta_review(self, work: Work, critiques: list[CritiqueRecord], synthesis: Synthesis) -> Synthesis:
        """The critic of the critics, when configured: may downgrade blocking issues of a FAIL, with reasons."""
        blocking_issues = [m for m in synthesis.issues if m.severity in BLOCKING]
        if self.meta is None or synthesis.verdict != "FAIL" or not blocking_issues:
            return synthesis
        try:
            judgements = self.meta.judge(work, blocking_issues)
        except (CriticFailed, CriticTimeout) as exc:
            note = f"meta-review failed ({exc}); the synthesis stands"
            return synthesis.model_copy(update={"note": "; ".join(x for x in (synthesis.note, note) if x)})
        ranks = {m.rank for m in blocking_issues}
        decisions = {
            j.rank: (
                j.severity if not j.keep else next(m.severity for m in blocking_issues if m.rank == j.rank),
                j.reason,
            )
            for j in judgements
            if j.rank in ranks
        }
        return downgrade(synthesis, critiques, work.round, decisions, self.config.brief_chars)

    def _blocking_before(self, job: ReviewJob) -> set[tuple[str, str, str]]:
        """The blocking findings of the card's round before this one (synthesis.finding), if it failed and sent the
        card back to its author: after a person decided in between (sent it back, granted rounds), the next round is
        the person's call, not a repetition."""
        if job.round < 2:
            return set()
        earlier = [
            r
            for r in self.board.reviews.rounds(job.task_id)
            if r.review_id != job.id and r.status == "finished" and r.round == job.round - 1
        ]
        if not earlier or earlier[-1].outcome != "in_progress":
            return set()
        return blocking_findings(earlier[-1].synthesis)

    def _decide(
        self,
        job: ReviewJob,
        synthesis: Synthesis,
        critiques: list[CritiqueRecord],
        whole: list[CritiqueRecord],
        rules: Policy,
        stalled: bool = False,
    ) -> tuple[str, str]:
        """(card outcome, message) for a synthesis; `critiques` as the author sees them (sealed), `whole` as they
        are (read only for what the card's hidden tests do not shape: which kind of check gave the evidence).
        `stalled`: a FAIL that resolved none of the round before's blocking findings."""
        delivered = [c for c in critiques if c.status == "ok"]
        failed = [c for c in critiques if c.status in ("error", "timeout")]
        ran = (
            f"lenses reviewed: {', '.join(synthesis.lenses_ran) or 'none'}"
            + (f"; not covered: {', '.join(synthesis.lenses_uncovered)}" if synthesis.lenses_uncovered else "")
            + (f"; failed: {', '.join(synthesis.lenses_failed)}" if synthesis.lenses_failed else "")
        )
        if not delivered and failed:
            synthesis.verdict = "FAIL"
            return "needs_human", (
                f"task {job.task_id}: the review could not run ({ran}); a human decides.\n"
                + "\n".join(f"- {c.critic}: {c.status}: {c.error}" for c in failed)
            )
        broken = sorted({c.lens for c in failed} - set(synthesis.lenses_ran))
        if synthesis.verdict == "PASS" and broken and self.config.on_critic_failure == "needs_human":
            synthesis.verdict = "FAIL"
            synthesis.note = "; ".join(
                x
                for x in (
                    synthesis.note,
                    f"no critique for {', '.join(broken)}: its critics failed, so the work is not passed",
                )
                if x
            )
            return "needs_human", (
                f"task {job.task_id}: the critics that ran passed the work, but "
                f"{', '.join(broken)} could not be reviewed ({ran}); a human decides "
                '(review.on_critic_failure = "pass" lets such work through).\n'
                + "\n".join(f"- {c.critic}: {c.status}: {c.error}" for c in failed)
            )
        if synthesis.verdict == "PASS" and not delivered and rules.must_review:
            synthesis.verdict = "FAIL"  # not a pass: nothing looked at it
            synthesis.note = "; ".join(
                x for x in (synthesis.note, f"no critic could review {rules.must_review}, so it is not passed") if x
            )
            return "needs_human", (
                f"task {job.task_id}: no critic could review this work, {rules.must_review} ({ran}); a human "
                "decides. The operator can give these lenses a critic (review.llm, or agents with the role critic)."
            )
        unverified = [c for c in critiques if c.status == "unverified"]
        if unverified:
            synthesis.unverified = "; ".join(f"{c.critic}: {c.error}" for c in unverified)
        weak = [
            c.critic
            for c in whole
            if c.status == "ok" and c.backend == "acceptance" and EXIT_STATUS_ONLY in (c.summary or "")
        ]
        if weak:  # said on the card: a person can tell such a pass from one the judge established
            synthesis.evidence = (
                f"exit status only ({', '.join(weak)}): a creator command the judge cannot run (a shell "
                "command, the work's own script, module or tests, code that starts a process to run the work) "
                "was decided in the work's process, by what the code under test controls"
            )
        if synthesis.verdict == "PASS" and unverified and self.config.unverified == "needs_human":
            synthesis.verdict = "FAIL"
            synthesis.note = "; ".join(
                x for x in (synthesis.note, "the work's tests could not run, so it is not passed as tested") if x
            )
            return "needs_human", (
                f"task {job.task_id}: the critics that ran passed the work, but its tests could "
                f"not run ({synthesis.unverified}); a human decides ({ran}). The operator can "
                'install bubblewrap (see hiveboard doctor), or set review.unverified = "pass" '
                "to pass such work marked unverified."
            )
        if synthesis.verdict == "PASS":
            scores = (
                [
                    r.synthesis.score
                    for r in self.board.reviews.rounds(job.task_id)
                    if r.synthesis is not None and r.round < job.round
                ][-(job.round - 1) :]
                if job.round > 1
                else []
            )
            progression = " → ".join(f"{s:g}" for s in [*scores, synthesis.score] if s is not None)
            head = (
                f"task {job.task_id} passed review round {job.round}"
                + (
                    f" (score {synthesis.score}/10" + (f"; by round {progression}" if scores else "") + ")"
                    if synthesis.score is not None
                    else " without review: no critic could review this work"
                )
                + (f"; UNVERIFIED: its tests did not run ({synthesis.unverified})" if unverified else "")
                + f"; {ran}"
            )
            approval = rules.approval(self.config.human_approval, self.board.summary(job.task_id))
            if not approval and self.board.canaries.of(job.task_id):
                # a canary passed: its work gamed the gate and must not land; it waits for a person, worded as a
                # card its creator asked to approve, so that nothing here tells its author it was a canary
                approval = CREATOR_ASKED
            if approval:
                synthesis.note = "; ".join(
                    x for x in (synthesis.note, f"awaiting a person's approval ({approval})") if x
                )
                return "needs_human", (
                    head + f"; it needs a person's approval ({approval}): approve it "
                    "or send it back on the web board" + ("\n" + synthesis.brief if synthesis.issues else "")
                )
            return "done", head + ("\n" + synthesis.brief if synthesis.issues else "")
        gated = sorted(
            {
                c.critic
                for c in critiques
                if c.lens in NEVER_LOWERED and any(i.hidden and i.severity in BLOCKING for i in c.issues)
            }
        )
        if gated:  # not fed back as a signal the author could iterate on: a person judges the evidence
            synthesis.note = "; ".join(
                x for x in (synthesis.note, f"{', '.join(gated)}: evidence from the hidden tests, for a person") if x
            )
            return "needs_human", (
                f"task {job.task_id}: {', '.join(gated)} found a problem against the card's hidden tests; its "
                "evidence is shown only to the card's creator and people, and a person decides ("
                f"{ran}).\n{synthesis.brief}"
            )
        # the card's rounds, whoever held it (Reviews._round), and any its creator or a person granted since
        limit = max(self.config.max_rounds, job.round_limit or 0)
        if stalled and job.round < limit:  # more rounds would be spent on the same findings
            return "needs_human", (
                f"task {job.task_id}: no progress in round {job.round}: none of round {job.round - 1}'s blocking "
                f"findings was resolved, so its remaining rounds are not spent; a human decides ({ran}).\n"
                f"{synthesis.brief}"
            )
        if job.round >= limit:
            rounds = [
                [sealed(c) for c in r.critiques]
                for r in self.board.reviews.rounds(job.task_id, reveal=True)
                if r.round <= job.round and r.status == "finished" or r.review_id == job.id
            ]
            return "needs_human", f"task {job.task_id}: " + convergence_summary(rounds, limit)
        return "in_progress", (
            f"task {job.task_id} failed review round {job.round} of {limit}; "
            f"{ran}\n{synthesis.brief}\nRevise the work and call complete_task again with "
            f"task_id={job.task_id} and your token; each critic will check its issues."
        )

    def _mine_lessons(
        self, job: ReviewJob, work: Work, critiques: list[CritiqueRecord], previous: dict[str, CritiqueRecord]
    ) -> None:
        """Blocking issues raised last round and resolved in this one become lessons for this task type, each
        named by what the author changed between the two rounds (critics/lessons.py). Nothing the card's hidden
        tests shaped does: not their issues, and no lesson at all once any earlier round told the author something
        of them (the work and its diff may carry what it was told)."""
        if self.board.reviews.told_hidden(job.task_id, job.id) or self.board.canaries.of(job.task_id):
            return
        earlier = {i.ref: (c, i) for c in previous.values() for i in c.issues}
        resolved = []
        for c in critiques:
            for r in c.resolutions:
                if r.status == "resolved" and r.ref in earlier:
                    critic, issue = earlier[r.ref]
                    if issue.severity in BLOCKING and not hidden(issue, work.acceptance_tests):
                        resolved.append((critic.lens, issue))
        if not resolved:
            return
        try:
            before, after = self.board.reviews.previous_artifacts(job), work.artifacts
            if work.commit is not None:  # the same files as the round before's commit held them
                after = [a for a in after if a.kind != "diff"]
                before = self._before(work, [a.name for a in after])
            found = lessons(resolved, before, after, work.summary or "")
        except Exception:
            log.exception("could not read lessons from review %s", job.id)
            return
        for lesson in found[:LESSONS_PER_REVIEW]:
            try:
                self._lesson(job, lesson)
            except Exception:
                log.exception("could not record a lesson from review %s", job.id)

    def _before(self, work: Work, paths: list[str]) -> list[Artifact]:
        """`paths` as the commit of the round before this one held them ([] when that round was no commit)."""
        previous = self.board.reviews.previous_commit(work)
        if previous is None:
            return []
        repository = self.repository(previous.repo)
        with repository.view(previous.sha) as view:
            return repository.files_at(view, previous.sha, paths)

    def _lesson(self, job: ReviewJob, lesson: Lesson) -> None:
        # the card's title says what work the mistake was made in: the next card like it finds the lesson
        problem = f'in "{job.title}": {lesson.problem} (caught by {lesson.caught_by})'
        tags = list(dict.fromkeys(t[:50] for t in lesson.tags if t))
        if self.memory is not None:
            self.memory.record_lesson(
                "review",
                problem=problem,
                fix=lesson.fix,
                task_type=job.task_type,
                title=lesson.title,
                tags=tags,
                task_id=job.task_id,
                review_id=job.id,
            )
            return
        with self.board.store.write(scopes.MEMORY) as db:
            self.board.knowledge.add(
                db,
                kind="lesson",
                text=f"Problem: {problem}\nFix: {lesson.fix}",
                created_by="review",
                task_type=job.task_type,
                task_id=job.task_id,
                title=lesson.title,
                tags=tags,
                source=f"review:{job.id}",
                trust="reviewed",
                review_id=job.id,
            )

    @contextmanager
    def _exporting(self, job: ReviewJob, worker: str) -> Iterator[Work | None | bool]:
        """`_exported`, or False when the commit cannot be exported (its repository gone or unreadable, the tree
        over a bound): the card then goes to a human with why, as a review that could not run does."""
        stack = ExitStack()
        try:
            exported = stack.enter_context(self._exported(job))
        except (GitError, BoardError) as exc:
            problem = str(exc)
        else:
            with stack:
                yield exported
            return
        commit = job.commit
        self.board.reviews.finish(
            job,
            worker,
            Synthesis(verdict="FAIL", note=f"the commit could not be exported for review: {problem}"),
            "needs_human",
            f"task {job.task_id}: its commit {commit.sha[:12]} ({commit.ref}) of {commit.repo} could not be "
            f"reviewed ({problem}); a human decides",
            [],
        )
        yield False

    def give_up(self, job: ReviewJob, worker: str, error: str) -> None:
        """A job that crashed MAX_ATTEMPTS times goes to a human with the error."""
        synthesis = Synthesis(verdict="FAIL", note=f"the review crashed {job.attempts} times: {error}")
        self.board.reviews.finish(
            job,
            worker,
            synthesis,
            "needs_human",
            f"task {job.task_id}: the review failed {job.attempts} times ({error}); a human decides",
            [],
        )


class ReviewWorker(Worker):
    """Background threads that take review jobs from SQLite and run them (several jobs at once)."""

    def __init__(self, engine: ReviewEngine, threads: int = 2, name: str | None = None):
        super().__init__(
            engine.board.store.notifier,
            name="review-worker-{n}",
            # jobs of other processes, and the leases of crashed workers running out, are found on the poll
            poll_seconds=engine.config.poll_seconds,
            log=log,
            # the only failure left to the loop: a failed review is handled in step, which can give its job up
            failure="could not take a review job",
            threads=threads,
        )
        self.engine = engine
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"  # holds the leases
        self._ended: set[int] = set()  # cards that just reached done or needs_human: a contest may be complete
        self._ended_lock = threading.Lock()
        self.merger: MergeWorker | None = None  # the merge queue's worker, started and stopped with this one

    def heard(self, events: list[Event]) -> bool:
        ended = {e.task_id for e in events if isinstance(e, TaskChanged) and e.status in ("done", "needs_human")}
        if ended:  # e.g. an attempt sent to a human by hand: its contest is decided here, off the caller's thread
            with self._ended_lock:
                self._ended |= ended
        reviewed = any(isinstance(event, ReviewChanged) for event in events)
        if reviewed:
            self.engine.changed()
        return bool(ended) or reviewed

    def _decide_contests(self) -> None:
        with self._ended_lock:
            ended, self._ended = self._ended, set()
        for task_id in sorted(ended):
            try:
                self.engine.decide_contest(task_id)
            except Exception:
                log.exception("could not decide the contest of task %s", task_id)

    def start(self) -> ReviewWorker:
        _ = self.engine.critics  # probe the sandbox and build the critics now, not inside the first review
        self.merger = MergeWorker(self.engine.merge_queue(), f"{self.name}/merge").start()
        return super().start()

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        if self.merger is not None:
            self.merger.stop(timeout)

    def step(self, n: int) -> bool:
        worker = f"{self.name}/{n}"
        self._decide_contests()
        job = self.engine.board.reviews.claim_job(worker, self.engine.config.worker_lease, self.engine.config.per_agent)
        if job is None:
            return False
        try:
            if job.attempts > MAX_ATTEMPTS:
                self.engine.give_up(job, worker, "see the server log")
            else:
                # a child of the call that queued the review (its traceparent kept with the job): one trace
                attributes = {
                    "hiveboard.task_id": job.task_id,
                    "hiveboard.round": job.round,
                    "hiveboard.agent": job.agent,
                }
                with tracing.span("review", parent=job.traceparent, attributes=attributes):
                    self.engine.run(job, worker)
        except Exception as exc:  # the lease runs out and the job is retried, up to MAX_ATTEMPTS
            log.exception("review %s failed", job.id)
            if job.attempts >= MAX_ATTEMPTS:
                try:
                    self.engine.give_up(job, worker, f"{type(exc).__name__}: {exc}")
                except Exception:  # the next attempt (after the lease) gives up again; keep this thread
                    log.exception("review %s: could not hand it to a human", job.id)
        return True
