"""What every critic shares: the work it reviews, the critic interface, and how a critic declines.

A critic sees only the work, its own lens and rubric, its own earlier issues, and past lessons and
critiques from memory — never another critic's critique of this round.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath

from hiveboard.board.review_models import Critique, ReviewIssue, ReviewJob


class Skipped(Exception):
    """The critic has nothing to review here (e.g. no Python artifact); recorded as skipped, with why."""


class Unverified(Exception):
    """The work has tests the critic could not run (no sandbox here, or execution off); with why."""


class CriticFailed(Exception):
    """The critic could not deliver a critique; recorded as an error with this message."""


class CriticTimeout(CriticFailed):
    """The critic's backend did not answer in time; recorded as a timeout."""


class Work(ReviewJob):
    """One round's work on a card, as the critics see it: the job, plus past lessons and critiques of
    similar work from memory (never this card's own)."""

    context: list[str] = []
    # work handed in as a commit: its files as exported on this machine (a directory the sandbox copies in; the
    # artifacts are then the diff and the changed files), and the lines its diff added or changed, by path
    tree: str | None = None
    changed_lines: dict[str, list[tuple[int, int]]] = {}

    def render(self, limit: int = 60_000) -> str:
        """The work as text for a model or an agent: the card, then the output and each artifact."""
        parts = [f"# Task {self.task_id} ({self.task_type}): {self.title}", self.description or ""]
        if self.acceptance_criteria:
            parts.append("## Acceptance criteria\n" + "\n".join(f"- {c}" for c in self.acceptance_criteria))
        parts.append(f"## Output (round {self.round})\n{self.summary or ''}\n{self.output}")
        if self.commit is not None:
            c = self.commit
            parts.append(
                f"## Commit {c.sha} ({c.ref}) of repository {c.repo}, against {c.base_sha}: {len(c.files)} file(s) "
                "changed; the diff and the changed files follow"
            )
        for a in self.artifacts:
            parts.append(f"## Artifact {a.name} ({a.kind})\n```\n{a.content}\n```")
        text = "\n\n".join(p for p in parts if p)
        return text if len(text) <= limit else text[:limit] + f"\n… cut: {len(text) - limit} more characters"


class Critic(ABC):
    """A lens with a backend. `review` runs on a worker thread, in parallel with the other critics."""

    backend: str = ""
    # given the card creator's tests, hidden ones included: the engine marks such a critic's critique of a card
    # with hidden tests `hidden` (board/review_models.sealed), and the critic marks the issues they shaped. Any
    # other critic is handed the work without hidden tests, so nothing it says can carry them.
    reads_tests: bool = False

    def __init__(self, name: str, lens: str, model: str | None = None):
        self.name = name
        self.lens = lens
        self.model = model
        self.deadline: float | None = None  # seconds the engine waits for it; None: review.critic_timeout

    @abstractmethod
    def review(self, work: Work, earlier: list[ReviewIssue]) -> Critique:
        """A critique of the work; `earlier` are this critic's issues from the previous round, each of
        which the critique's resolutions should judge. Raise Skipped or CriticFailed to decline."""


def is_test_file(name: str, kind: str) -> bool:
    """A test file by its kind or its name (test_*.py, *_test.py)."""
    base = Path(name).name
    return kind == "test" or (base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py")))


FENCE = re.compile(r"```(?:python|py)\s*\n(.*?)```", re.S)
# The sniff reads text only (a regex over the first characters, never a parser or an import): a shebang, or a whole
# line at the left margin that is a Python statement no prose or config file has. Markdown's fenced examples do not
# count. A heuristic against a misleading name, not a proof: code dressed up to dodge it still gets a repository
# file's unmatched kind, and whatever its name says.
SNIFF_CHARS = 64 * 1024
SHEBANG = re.compile(r"\A#!")
PYTHON_SHEBANG = re.compile(r"\A#![^\n]*python")
NAME = r"[A-Za-z_]\w*"
DOTTED = rf"{NAME}(?:\.{NAME})*"
PYTHON_LINE = re.compile(
    rf"^(?:import {DOTTED}(?: as {NAME})?(?:, {DOTTED}(?: as {NAME})?)*"
    rf"|from \.*(?:{DOTTED})? import (?:\*|\(|{NAME}(?: as {NAME})?(?:, {NAME}(?: as {NAME})?)*)"
    rf"|(?:async )?def {NAME}\(.*|class {NAME}(?:\(.*\))?:"
    r"|if __name__ == ['\"]__main__['\"]:)\s*(?:#.*)?$",
    re.M,
)
MARKDOWN = (".md", ".markdown", ".mdx")


def _unfenced(text: str) -> str:
    """Markdown without its fenced blocks (``` or ~~~), line by line (a regex over fences could backtrack)."""
    kept, fence = [], None
    for line in text.splitlines():
        mark = line[:3]
        if fence is None and mark in ("```", "~~~"):
            fence = mark
        elif fence is not None and line.startswith(fence):
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def looks_like_python(name: str, content: str) -> bool:
    """Content that reads as Python whatever its name says (see SNIFF_CHARS above)."""
    head = content[:SNIFF_CHARS]
    if PYTHON_SHEBANG.match(head):
        return True
    if name.lower().endswith(MARKDOWN):
        head = _unfenced(head)
    return PYTHON_LINE.search(head) is not None


def looks_like_program(name: str, content: str) -> bool:
    """Content that is a program of some language: a shebang, or Python."""
    return bool(SHEBANG.match(content)) or looks_like_python(name, content)


def is_python(name: str, content: str) -> bool:
    """A file the analysers read as Python: named *.py or *.pyi, or reading as Python under another name."""
    return name.endswith((".py", ".pyi")) or looks_like_python(name, content)


def python_sources(work: Work) -> dict[str, str]:
    """Python files of the work: artifacts named *.py or reading as Python (`looks_like_python`), plus ```python
    blocks of the output.

    Every artifact is checked: two names that land on one path (`app.py`, `./app.py`) get distinct
    paths instead of one hiding the other."""
    named = [(a.name, a.content) for a in work.artifacts if a.kind != "diff" and is_python(a.name, a.content)]
    named += [(f"output_block_{n}.py", block) for n, block in enumerate(FENCE.findall(work.output), 1)]
    return unique_paths(named)


def unique_paths(named: list[tuple[str, str]]) -> dict[str, str]:
    """Relative paths for (name, content) pairs, none hiding another: a name that repeats, or that
    another name uses as a directory, gets a numbered sibling (`app.py` → `app~2.py`)."""
    files: dict[str, str] = {}
    for name, content in named:
        wanted = path = safe_path(name)
        stem, dot, ext = path.rpartition(".") if "." in PurePosixPath(path).name else (path, "", "")
        n = 1
        while path in files or _clashes(path, files):
            n += 1
            # the same name: a numbered sibling; a file/directory clash: the path under a fresh directory
            path = (f"{stem}~{n}.{ext}" if dot else f"{stem}~{n}") if wanted in files else f"~{n}/{wanted}"
        files[path] = content
    return files


def _clashes(path: str, files: dict[str, str]) -> bool:
    """A file path that is another file's directory, or has another file as its directory."""
    return any(other.startswith(path + "/") or path.startswith(other + "/") for other in files)


def safe_path(name: str) -> str:
    """An artifact name as a relative path that stays inside the review's directory."""
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p not in ("/", "..", ".", "")]
    return "/".join(parts) or "artifact"


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


def verdict_of(issues: list[ReviewIssue]) -> tuple[str, int]:
    """(verdict, score) for an analyser's findings: any critical or major issue fails."""
    worst = max((i.severity for i in issues), key=["info", "minor", "major", "critical"].index, default=None)
    if worst in ("critical", "major"):
        return "FAIL", 2 if worst == "critical" else 4
    if worst == "minor":
        return "CONDITIONAL", 7
    return "PASS", 10 if not issues else 9
