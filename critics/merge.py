"""The merge queue's worker: a passed commit merged into its repository's base branch, one merge at a time per
repository (the queue, its leases and the card's moves: board/merges.py).

The base only ever holds what was tested (the "not rocket science" rule): the tree that becomes the base is the
one the card's checks passed on. For each merge: the base branch's tip, checked against where hiveboard left it
(critics/base_branch.py: a base moved by anything else stops the merge and names the commits that arrived
unreviewed); when it already holds the commit the merge is done (a worker before this one merged it and died
before saying so); otherwise `git merge-tree --write-tree` of the tip and the commit (conflicts: the card goes back
to its holder with a brief naming the files, as a FAIL does), a merge commit of the result (`commit-tree`), and on
its tree, in the sandbox, the same checks the review ran on the commit (critics/acceptance.py): the repository's
test command, the card's acceptance tests, hidden or not (their failures as opaque as in the review), and its `$`
criteria (not again when the result's tree is the reviewed commit's own and they passed on it in the review: a
base that had not moved). Red: back to the holder with what failed. A merge result that cannot be tested (no sandbox) is not
made: a person decides. Only then the base moves to that tested commit: by a compare-and-swap of the branch
(`update-ref BRANCH NEW OLD`), or, when the branch is checked out in a worktree (the main one, typically), by
`git merge --ff-only` there if that worktree is clean (else a person is asked to commit or stash there and approve
again). A base that moved meanwhile is merged, and tested, again. Every git command runs in the sandbox, the
content ones in the repository's clean view (critics/commits.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

from hiveboard.board.events import Event, ReviewChanged, TaskChanged
from hiveboard.board.merges import Merge
from hiveboard.board.review_models import ReviewJob
from hiveboard.board.tasks import Board
from hiveboard.board.worker import Worker, keep_leased

from .acceptance import AcceptanceCritic, checks
from .base import Skipped, Unverified, Work
from .base_branch import base_moved, tell
from .commits import Repository, changed_files
from .config import ReviewConfig
from .git import Git

log = logging.getLogger("hiveboard.critics")
RACES = 5  # merges again when the base moved meanwhile, at most this often
MAX_ATTEMPTS = 3  # a merge whose run crashed this often goes to a human


class MergeQueue:
    """Merges one queued commit at a time (see the module docstring)."""

    def __init__(self, board: Board, config: ReviewConfig, git: Git, tests: AcceptanceCritic):
        self.board = board
        self.config = config
        self.git = git
        self.tests = tests  # runs the repository's test command in the sandbox

    def merge(self, m: Merge, worker: str) -> None:
        """Merge `m`, and move its card by how it ended."""
        base, short = self.board.repos.get(m.repo).base, m.sha[:12]
        job = self.board.reviews.job(m.review_id) if m.review_id is not None else None
        for _ in range(RACES):
            repository = Repository(self.git, self.board.repos.get(m.repo), self.config.repo)  # its record, now
            old, moved = base_moved(self.board, repository)
            if moved is not None:
                said = tell(self.board, repository, moved, m.task_id)
                self._blocked(
                    m,
                    worker,
                    f"task {m.task_id}: its commit {short} ({m.ref}) is not merged: {said}; then approve "
                    "this card again",
                )
                return
            if m.pending is not None and old == m.pending:
                self._merged(m, worker, m.repo, base, old, "a worker before this one advanced it and stopped")
                return
            scratch = Path(tempfile.mkdtemp(prefix="hiveboard-merge-"))
            try:
                with repository.view(old) as view:
                    if repository.is_ancestor(view, m.sha, old):
                        self._merged(m, worker, m.repo, base, old, "its base branch already holds it")
                        return
                    tree, conflicts = repository.merge_tree(view, old, m.sha)
                    if tree is None:
                        self._back(m, worker, "conflict", self._conflict(m, base, conflicts))
                        return
                    new = repository.commit_tree(
                        view,
                        tree,
                        [old, m.sha],
                        f"Merge task #{m.task_id}: {m.title}\n\n{m.ref} ({m.sha}) passed review round {m.round} "
                        "(hiveboard merge queue)",
                    )
                    # fast-forward: the merge result's tree is the reviewed commit's, on which its checks passed
                    reviewed = tree == repository.tree_of(view, m.sha) and self._passed_in_review(m)
                    if not reviewed:
                        repository.export(view, new, scratch)
                if not reviewed and not self._tested(m, worker, job, scratch, repository):
                    return
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            # written on the merge before the base moves: a worker that takes it over, and the base's check, then
            # know the move for the queue's own
            if not self.board.merges.landing(m.id, worker, new):  # cancelled (the card left review) or taken over
                return
            where = repository.worktree_of(base)
            if where is None:
                if repository.advance(base, new, old):
                    self._merged(m, worker, m.repo, base, new, f"{base} advanced from {old[:12]}")
                    return
                continue  # the base moved meanwhile: look again
            dirty = repository.dirty(where, untracked=False)
            if dirty:
                self._blocked(
                    m,
                    worker,
                    f"task {m.task_id}: its commit {short} ({m.ref}) merges cleanly into {base} and passes its "
                    f"checks there, but {base} is checked out in {where}, which has {len(dirty)} uncommitted "
                    f"change(s); commit or stash there, then approve again",
                )
                return
            refused = repository.fast_forward(where, new)
            if refused is None:
                self._merged(m, worker, m.repo, base, new, f"{base} fast-forwarded in {where}")
                return
            if repository.base_tip() == old:  # git would not move the worktree for another reason
                self._blocked(
                    m,
                    worker,
                    f"task {m.task_id}: its commit {short} ({m.ref}) merges cleanly into {base} and passes its "
                    f"checks there, but git would not fast-forward {where} ({refused}); clear that there, then "
                    "approve again",
                )
                return
        self._blocked(
            m,
            worker,
            f"task {m.task_id}: {base} moved {RACES} times while its commit {short} ({m.ref}) was being merged; "
            "approve again to merge it",
        )

    def _tested(self, m: Merge, worker: str, job: ReviewJob | None, tree: Path, repository: Repository) -> bool:
        """Whether the merge result passes the checks the review ran on the commit (False: the card was moved by
        what they said). The same acceptance check as the review's, on the merge result's tree."""
        base = repository.repo.base
        if job is None or job.commit is None:  # a merge queued before its round was kept: the repository's tests
            command = repository.repo.test_command
            if not command:
                return True
            try:
                issues, detail = self.tests.run_tests(tree, command)
            except Unverified as exc:
                return self._untested(m, worker, base, str(exc))
            failed = [f"the repository's tests ({detail})"] if issues else []
        else:
            work = Work(**{**dict(job), "artifacts": changed_files(job.commit, tree)}, tree=str(tree))
            try:
                critique = self.tests.review(work, [])
            except Skipped:
                return True  # nothing to run: the review had no check either
            except Unverified as exc:
                return self._untested(m, worker, base, str(exc))
            issues = critique.issues
            rules = {i.rule for i in issues}
            failed = [c.label for c in checks(work) if c.label[:40] in rules] or [critique.summary]
        if not issues:
            return True
        shown = "\n".join(f"- {i.location + ': ' if i.location else ''}{i.description}" for i in issues)
        self._back(
            m,
            worker,
            "failed",
            f"task {m.task_id}: merged into the current {base}, its commit {m.sha[:12]} ({m.ref}) fails "
            f"{'; '.join(failed)}; {base} did not move.\n{shown[: self.config.brief_chars * 4]}\n"
            + self._again(m, base),
        )
        return False

    def _passed_in_review(self, m: Merge) -> bool:
        """Whether the round that passed the commit ran its checks and they all passed (not unverified, not
        skipped)."""
        if m.review_id is None:
            return False
        found = self.board.reviews.critiques(m.review_id)
        return any(c.backend == "acceptance" and c.status == "ok" and c.verdict == "PASS" for c in found)

    def _untested(self, m: Merge, worker: str, base: str, why: str) -> bool:
        """A merge result whose checks cannot run here is not made, whatever review.unverified says: a person
        decides."""
        self._blocked(
            m,
            worker,
            f"task {m.task_id}: the merge of {m.sha[:12]} ({m.ref}) into {base} is not made because its checks could "
            f"not run on the merge result ({why}); a human decides (the operator can install bubblewrap, see "
            "hiveboard doctor)",
        )
        return False

    def _conflict(self, m: Merge, base: str, files: list[str]) -> str:
        names = ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")
        return (
            f"task {m.task_id}: its commit {m.sha[:12]} ({m.ref}) conflicts with the current {base} in {names}; "
            f"{base} did not move.\n" + self._again(m, base)
        )

    def _again(self, m: Merge, base: str) -> str:
        return (
            f"Merge {base} into your branch (or rebase onto it), resolve and test, commit, and call complete_task "
            f"again with task_id={m.task_id}, your token and ref=<your branch>."
        )

    def _back(self, m: Merge, worker: str, status: str, message: str) -> None:
        """A merge that failed goes back to the card's holder, as a FAIL does; at the last round, to a human."""
        limit = max(self.config.max_rounds, m.round_limit or 0)  # the card's rounds, as the review counts them
        last = m.round >= limit or m.holder is None
        if last:
            head, _, rest = message.partition("\n")
            message = f"{head}; round {m.round} of {limit} was the last, so a human decides\n{rest}"
        self.board.merges.finish(
            m, worker, status, "needs_human" if last else "in_progress", message, message.split("\n", 1)[0]
        )

    def _blocked(self, m: Merge, worker: str, message: str) -> None:
        self.board.merges.finish(m, worker, "blocked", "needs_human", message, message)

    def give_up(self, m: Merge, worker: str, error: str) -> None:
        """A merge that crashed MAX_ATTEMPTS times goes to a human with the error."""
        self._blocked(
            m,
            worker,
            f"task {m.task_id}: merging its commit {m.sha[:12]} ({m.ref}) failed {m.attempts} times "
            f"({error}); a human decides",
        )

    def _merged(self, m: Merge, worker: str, repo: str, base: str, sha: str, how: str) -> None:
        message = f"task {m.task_id} is merged: {repo}'s {base} holds {m.ref} ({m.sha[:12]}) as {sha[:12]} ({how})"
        self.board.merges.finish(m, worker, "merged", "done", message, f"merged into {base} as {sha}", merged_sha=sha)


class MergeWorker(Worker):
    """A background thread that takes queued merges (leased: a merge whose worker died is taken over)."""

    def __init__(self, queue: MergeQueue, name: str | None = None):
        super().__init__(
            queue.board.store.notifier,
            name="merge-worker",
            poll_seconds=queue.config.poll_seconds,  # leases that ran out, merges queued by other processes
            log=log,
            failure="could not take a merge",
        )
        self.queue = queue
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}:merge"

    def heard(self, events: list[Event]) -> bool:
        # a merge is queued by a review's verdict (ReviewChanged) or a person's approval (the card back in review)
        return any(
            isinstance(e, ReviewChanged) or (isinstance(e, TaskChanged) and e.status == "review") for e in events
        )

    def step(self, n: int) -> bool:
        merges, lease = self.queue.board.merges, self.queue.config.worker_lease
        m = merges.claim(self.name, lease)
        if m is None:
            return False
        with keep_leased(lambda: merges.heartbeat(m.id, self.name, lease), lease / 3, f"merge {m.id}", log):
            try:
                if m.attempts > MAX_ATTEMPTS:
                    raise RuntimeError("see the server log")
                self.queue.merge(m, self.name)
            except Exception as exc:  # the lease runs out and the merge is retried, up to MAX_ATTEMPTS
                log.exception("merge %s of task %s failed", m.id, m.task_id)
                if m.attempts >= MAX_ATTEMPTS:
                    self.queue.give_up(m, self.name, f"{type(exc).__name__}: {exc}")
        return True
