"""Which review a round's work gets: decided from what the change touches, with the card's type as the floor.

A card's task type is a label its creator picked, and the creator can be the agent whose work is judged. So the
lenses, the pass bar, the approval rule and whether a pass needs a critique at all are read from the change too:
a commit's changed paths (and the paths they were renamed from), an artifact's name and kind, Python blocks of the
output, and content that reads as a program whatever its name (critics/base.py's sniff). Each path is classified by
`review.paths` (kind → patterns, critics/config.py); the round gets the strictest of its card's type and every kind
it touches: the union of their lenses, the highest bar, any approval rule that names one of them. A change to a
repository, or to code, is never passed by default when no critic could review it: a person decides.

Nothing here imports, parses or runs the submitted work: names are matched, and content is read as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from hiveboard.board.models import TaskSummary
from hiveboard.board.review_models import ReviewJob

from .base import FENCE, looks_like_program, safe_path
from .config import HumanApproval, ReviewConfig

# An artifact's declared kind, where its name says nothing: code and diffs are code, prose is docs; data and other
# add nothing (the card's type and the content decide).
ARTIFACT_KINDS = {"code": "code", "test": "test", "diff": "code", "text": "docs", "link": "docs"}
# a pass of work touching these needs a critique: "no critic could review" sends it to a person
REVIEWED = ("code",)
SHOWN = 3  # paths named per kind in a reason


@lru_cache(maxsize=512)
def _pattern(pattern: str) -> re.Pattern:
    """A path pattern as gitignore reads one: without a slash it matches a name in any directory, with one the
    path from the root; `*` and `?` stay within a directory, `**` spans any number of them. Letter case is
    ignored: `CALC.PY` is code too (a kind more never makes a review weaker)."""
    pattern = pattern.lstrip("/")
    anchored = "/" in pattern.rstrip("/")
    segments = pattern.rstrip("/").split("/")
    out = []
    for n, segment in enumerate(segments):
        last = n == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append("".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in segment))
        if not last:
            out.append("/")
    return re.compile(("" if anchored else "(?:.*/)?") + "".join(out), re.IGNORECASE)


def kinds_of(table: dict[str, list[str]], path: str) -> list[str]:
    """Every kind whose patterns match `path` (a relative path with forward slashes)."""
    return [kind for kind, patterns in table.items() if any(_pattern(p).fullmatch(path) for p in patterns)]


@dataclass
class Touched:
    """Kind → the paths or artifact names that made it (the first few), in the order found."""

    kinds: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, what: str) -> None:
        seen = self.kinds.setdefault(kind, [])
        if len(seen) < SHOWN and what not in seen:
            seen.append(what)

    def why(self, kind: str) -> str:
        return f"{kind} ({', '.join(self.kinds[kind])})"


def touched(config: ReviewConfig, work: ReviewJob) -> Touched:
    """What the work changes, by kind: a commit by its paths (a path no pattern matches is `review.unmatched`),
    artifacts by their names and kinds, the output's ```python blocks as code, and any file whose content reads
    as a program as code."""
    table, found = config.path_table, Touched()
    commit = work.commit
    if commit is not None:
        for f in commit.files:
            for path in dict.fromkeys(p for p in (f.path, f.old_path) if p):
                for kind in kinds_of(table, path) or [config.unmatched]:
                    found.add(kind, path)
        if commit.files_omitted:
            found.add(config.unmatched, f"{commit.files_omitted} more file(s)")
    else:
        for a in work.artifacts:
            name, declared = safe_path(a.name), ARTIFACT_KINDS.get(a.kind)
            for kind in kinds_of(table, name) + ([declared] if declared else []):
                found.add(kind, name)
        if FENCE.search(work.output or ""):
            found.add("code", "a ```python block of the output")
    for a in work.artifacts:
        if a.kind != "diff" and looks_like_program(a.name, a.content):
            found.add("code", safe_path(a.name))
    return found


@dataclass(frozen=True)
class Policy:
    """One round's review: its lenses, its bar, why a pass needs a critique (None: it does not), and what it
    touched, for the approval rule."""

    touched: Touched
    lenses: list[str]
    bar: float
    must_review: str | None

    def approval(self, rule: HumanApproval, card: TaskSummary) -> str | None:
        """Why a person must approve this work after the critics pass it, or None: what the card's creator asked
        for or its labels required when it was made, its type and labels now, or any kind the change touches."""
        why = card.needs_approval or rule.wants(card.task_type, card.labels)
        if why:
            return why
        kind = next((k for k in self.touched.kinds if k in rule.task_types), None)
        return f"it changes {self.touched.why(kind)}" if kind else None


def policy(config: ReviewConfig, work: ReviewJob) -> Policy:
    """The review `work` gets: the strictest of its card's type and what it touches."""
    found = touched(config, work)
    types = list(dict.fromkeys([work.task_type, *found.kinds]))
    lenses = list(dict.fromkeys(lens for t in types for lens in config.lenses_for(t)))
    if work.commit is not None:
        must = f"a commit of repository {work.commit.repo}"
    else:
        must = next((found.why(k) for k in REVIEWED if k in found.kinds), None)
    return Policy(found, lenses, max(config.bar_for(t) for t in types), must)
