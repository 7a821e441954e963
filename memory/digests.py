"""Digests per task type: once a task type has enough lessons, a short list of rules with counts.

The PRD's example: after ten tasks on web scraping, "Common Web Scraping Techniques". A task type's live
lessons are grouped by meaning (their fixes' embeddings, greedily, against each group's weighted centroid);
each group becomes one rule, quoted from the lesson nearest its centroid (the first sentence of its fix) and
counted by the distinct authors behind its lessons (for lessons the review mined: distinct cards), so one agent's
copies count once. Only reviewed lessons make a digest: it is handed at every claim without being asked for. That is the offline, extractive digest. When the
server has a model configured, a `DigestWriter` (critics/llm.py; passed in, since memory does not import
critics) rewrites the groups' rules and the title; the groups and counts stay the ones computed here, and
a writer that fails leaves the extractive digest.

A digest is written in the background, never on a read: when a task type reaches `min_lessons`, then
again each time `refresh_after` more lessons came in. claim_task hands it before single lessons; it is the
resource hiveboard://digest/{task_type}.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from hiveboard.board.digest_store import Digest, DigestRule, Lesson
from hiveboard.board.events import Event, MemoryAdded
from hiveboard.board.tasks import Board
from hiveboard.board.worker import Worker

if TYPE_CHECKING:
    import numpy as np

    from .embeddings import Embedder

log = logging.getLogger("hiveboard.memory")

MIN_LESSONS = 10  # the PRD's "after 10 tasks"
REFRESH_AFTER = 3
MAX_RULES = 8
# Lessons are grouped by their fixes alone: a rule is a fix, and problems that read alike ("rate limited",
# "blocked") often have different fixes (whole lessons put unrelated fixes as close as paraphrases). A
# lesson joins a group when its fix's cosine to the group's centroid reaches this: the middle of the gap
# between paraphrased and different fixes on the web-scraping lessons of tests/memory/test_digests.py,
# which hold it to that. Near-duplicates (>= 0.9 on the whole lesson) were merged when recorded.
GROUP_SIMILARITY = 0.45
MAX_LESSONS = 500  # the newest lessons a digest reads: recent work, and a rebuild that stays cheap
CACHED_VECTORS = 20_000  # fix embeddings kept between rebuilds (~30 MB at 384-d), so a rebuild embeds only new ones
RULE_CHARS = 240
LEASE_SECONDS = 300  # how long one process may hold a rebuild (a model call included)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class LessonGroup(BaseModel):
    """Lessons of one meaning, as a writer sees them: the extractive rule and the members' texts."""

    rule: str
    problem: str
    count: int
    lessons: list[int]
    texts: list[str] = Field(description="members' texts, the quoted one first (at most 5, each cut)")


class WrittenDigest(BaseModel):
    """What a writer returns: a title and one rule per group, in the groups' order."""

    title: str
    rules: list[str]


DigestWriter = Callable[[str, list[LessonGroup]], WrittenDigest]


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    first = _SENTENCE.split(text, maxsplit=1)[0]
    first = first[:1].upper() + first[1:]
    return first if len(first) <= RULE_CHARS else first[: RULE_CHARS - 1].rstrip() + "…"


def _parts(text: str) -> tuple[str, str]:
    """(problem, fix) of a lesson's text ("Problem: …\\nFix: …"); another shape is all fix."""
    found = re.match(r"\s*Problem:\s*(.*?)\s*\nFix:\s*(.*)", text, re.S)
    return (found.group(1), found.group(2)) if found else ("", text)


def title_for(task_type: str) -> str:
    words = re.sub(r"[_\-]+", " ", task_type).strip()
    return f"Common {words.title()} Techniques"


def group(lessons: list[Lesson], vectors: np.ndarray, similarity: float = GROUP_SIMILARITY) -> list[list[int]]:
    """Indexes of `lessons` grouped by meaning, largest group first.

    Greedy and deterministic: the most-counted lessons first (then the oldest), each joining the group whose
    count-weighted centroid it is most similar to, if that reaches `similarity`, else starting a group.
    """
    import numpy as np

    order = sorted(range(len(lessons)), key=lambda i: (-lessons[i].count, lessons[i].id))
    groups: list[list[int]] = []
    sums: list[np.ndarray] = []
    for i in order:
        v = vectors[i]
        if sums:
            centroids = np.vstack([s / max(np.linalg.norm(s), 1e-12) for s in sums])
            sims = centroids @ v
            best = int(np.argmax(sims))
            if sims[best] >= similarity:
                groups[best].append(i)
                sums[best] = sums[best] + lessons[i].count * v
                continue
        groups.append([i])
        sums.append(lessons[i].count * v.astype(np.float64))
    weight = [sum(lessons[i].count for i in g) for g in groups]
    ranked = sorted(range(len(groups)), key=lambda g: (-weight[g], min(lessons[i].id for i in groups[g])))
    # the member nearest its group's centroid first: the one a rule is quoted from
    out = []
    for g in ranked:
        centroid = sums[g] / max(np.linalg.norm(sums[g]), 1e-12)
        out.append(sorted(groups[g], key=lambda i: (-float(vectors[i] @ centroid), lessons[i].id)))
    return out


class Digester(Worker):
    """Writes the digests of the task types that are due, in a background thread (`start`) or when asked
    (`refresh`): at start, after new memory items (once they settle, so a burst of lessons gives one rebuild;
    a near-duplicate merged from another author counts too), and every `poll_seconds`."""

    def __init__(
        self,
        board: Board,
        embedder: Embedder,
        *,
        min_lessons: int = MIN_LESSONS,
        refresh_after: int = REFRESH_AFTER,
        max_rules: int = MAX_RULES,
        writer: DigestWriter | None = None,
        writer_name: str | None = None,
        similarity: float = GROUP_SIMILARITY,
        poll_seconds: float = 300,
        settle_seconds: float = 1.0,
    ):
        super().__init__(
            board.store.notifier,
            name="hiveboard-digests",
            # a digest comes due only through new lessons, which wake it: the poll catches those whose
            # events this process did not hear (another process's, while no watcher ran)
            poll_seconds=poll_seconds,
            log=log,
            failure="writing digests failed; retrying later",
            # a burst of new items gives one rebuild, which may call a model
            settle_seconds=settle_seconds,
            # a rebuild may be waiting on the digest model, within its timeout
            join_timeout=30,
        )
        self.board = board
        self.digests = board.digests
        self.embedder = embedder
        self.min_lessons = min_lessons
        self.refresh_after = refresh_after
        self.max_rules = max_rules
        self.writer = writer
        self.writer_name = writer_name or "llm"
        self.similarity = similarity
        self._vectors: dict[int, np.ndarray] = {}  # lesson id -> its fix's embedding (a fix is never edited)
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- what is due

    def due(self) -> list[str]:
        """Task types with at least min_lessons lessons whose digest is missing or refresh_after lessons behind."""
        built = self.digests.built()
        return sorted(
            t
            for t, n in self.digests.accrued().items()
            if n >= self.min_lessons and (t not in built or n - built[t] >= self.refresh_after)
        )

    # ----------------------------------------------------------------- writing

    def groups(self, task_type: str) -> tuple[list[LessonGroup], int]:
        """The task type's live lessons grouped by meaning, most counted first, and the lessons' total count."""
        import numpy as np

        lessons = self.digests.lessons(task_type, MAX_LESSONS)
        if not lessons:
            return [], 0
        missing = [lesson for lesson in lessons if lesson.id not in self._vectors]
        if missing:
            if len(self._vectors) + len(missing) > CACHED_VECTORS:
                self._vectors.clear()
                missing = lessons
            fresh = self.embedder.embed([_parts(lesson.text)[1][:1000] for lesson in missing])
            self._vectors.update({lesson.id: v for lesson, v in zip(missing, fresh)})
        vectors = np.vstack([self._vectors[lesson.id] for lesson in lessons]).astype(np.float32)
        out = []
        for members in group(lessons, vectors, self.similarity):
            first = lessons[members[0]]
            problem, fix = _parts(first.text)
            out.append(
                LessonGroup(
                    rule=_first_sentence(fix),
                    problem=_first_sentence(problem),
                    count=sum(lessons[i].count for i in members),
                    lessons=[lessons[i].id for i in members],
                    texts=[lessons[i].text[:600] for i in members[:5]],
                )
            )
        return out, sum(lesson.count for lesson in lessons)

    def build(self, task_type: str) -> tuple[str, list[DigestRule], int, str]:
        """(title, rules, lessons, written_by) of a task type's digest as it would be written now."""
        groups, total = self.groups(task_type)
        groups = groups[: self.max_rules]
        title, rules, written_by = title_for(task_type), [g.rule for g in groups], "extractive"
        if self.writer is not None and groups:
            try:
                written = self.writer(task_type, groups)
                if len(written.rules) != len(groups):
                    raise ValueError(f"the writer gave {len(written.rules)} rules for {len(groups)} groups")
                title = written.title.strip()[:120] or title
                rules = [" ".join(r.split())[: RULE_CHARS * 2] or g.rule for r, g in zip(written.rules, groups)]
                written_by = self.writer_name
            except Exception:
                log.exception("the digest writer failed for task type %s; keeping the extractive digest", task_type)
        return (
            title,
            [DigestRule(rule=r, problem=g.problem, count=g.count, lessons=g.lessons) for r, g in zip(rules, groups)],
            total,
            written_by,
        )

    def refresh(self, task_types: list[str] | None = None) -> list[Digest]:
        """Write the digests that are due (or of these task types); a rebuild another process holds is skipped."""
        with self._lock:  # one rebuild at a time in this process (the lease covers the others)
            return self._refresh(task_types)

    def _refresh(self, task_types: list[str] | None) -> list[Digest]:
        written = []
        for task_type in self.due() if task_types is None else task_types:
            if not self.digests.claim(task_type, LEASE_SECONDS):
                continue
            try:
                accrued = self.digests.accrued().get(task_type, 0)  # before reading: later lessons make it due again
                title, rules, total, written_by = self.build(task_type)
                written.append(self.digests.save(task_type, title, rules, total, accrued, written_by))
            except BaseException:
                self.digests.release(task_type)
                raise
        return written

    # ----------------------------------------------------------------- in the background

    def heard(self, events: list[Event]) -> bool:
        return any(isinstance(event, MemoryAdded) for event in events)

    def step(self, n: int) -> bool:
        self.refresh()
        return False  # a refresh writes every digest that is due: the next comes due with new lessons
