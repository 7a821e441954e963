"""Which critics review which cards: lenses with rubrics, critics with backends, built-in defaults.

Everything here can be changed in the `[review]` table of hiveboard's config.toml (docs/reference.md, Review settings):
task types map to lenses, lenses carry a rubric, critics bind a lens to a backend (and, for LLM
critics, a model and endpoint each). The defaults run offline: ruff, bandit and the integrity scan on
Python artifacts, and the acceptance check, which runs the card's tests in the OS sandbox (critics/sandbox.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from hiveboard.board.limits import TASK_TYPE_RE

from .integrity_scan import RULES as INTEGRITY_RULES
from .sandbox import SandboxLimits

# When critics contradict, the lens earlier in this list wins (seed 000: safety > correctness > style).
PRECEDENCE: tuple[str, ...] = (
    "security",
    "integrity",
    "correctness",
    "accuracy",
    "performance",
    "tests",
    "docs",
    "clarity",
    "style",
)
# lenses whose critical findings no model (synthesiser or meta-review) may wave through or lower
NEVER_LOWERED: tuple[str, ...] = ("security", "integrity")

RUBRICS: dict[str, str] = {
    "security": "Security only: injection (SQL, shell, template), eval/exec of untrusted input, unsafe "
    "deserialisation, secrets in code, missing authentication or authorisation checks, path "
    "traversal, weak cryptography, unsafe defaults. Not style, not performance.",
    "integrity": "Integrity only: does the code pass its tests honestly? Flag code that patches or hooks the "
    "test runner, skips or ends the run, inspects the caller's frames or the heap, patches the "
    "interpreter, writes to raw file descriptors, returns always-equal objects, or hard-codes the "
    "tests' expected outputs. Not style, not ordinary bugs.",
    "correctness": "Correctness only: does the work do what the card and its acceptance criteria ask? Logic "
    "errors, wrong edge cases, unhandled errors, undefined names, broken contracts, race "
    "conditions. Not style.",
    "performance": "Performance only: algorithmic complexity, needless work in loops, N+1 queries, unbounded "
    "memory or reads, blocking calls on hot paths. Only flag costs that matter at the card's scale.",
    "tests": "Tests only: are the acceptance criteria covered by tests that can fail? Missing edge cases, "
    "assertions that cannot fail, tests that depend on timing or the network.",
    "docs": "Documentation only: are public functions, commands and configuration documented, accurate and "
    "current? Missing usage examples, stale statements.",
    "style": "Style and maintainability only: naming, structure, duplication, dead code, comments that say what "
    "instead of why, overly long functions. Never block on taste alone: use minor or info.",
    "accuracy": "Accuracy only: are the statements, numbers, commands and references correct and verifiable? "
    "Flag claims that are wrong, unsupported or out of date.",
    "clarity": "Clarity only: can the intended reader follow it? Structure, missing context, ambiguity, jargon, "
    "length. Not factual accuracy.",
}

TASK_TYPE_LENSES: dict[str, list[str]] = {
    "code": ["security", "integrity", "correctness", "performance", "tests", "style"],
    "bug": ["security", "integrity", "correctness", "tests", "style"],
    "refactor": ["integrity", "correctness", "performance", "tests", "style"],
    "test": ["integrity", "correctness", "tests", "style"],
    "docs": ["accuracy", "clarity"],
    "design": ["security", "correctness", "performance", "clarity"],
    "research": ["accuracy", "clarity"],
    "ops": ["security", "correctness", "docs"],
    "default": ["correctness", "clarity"],
}

# What a change touches, by path (a repository's changed files, an artifact's name): each kind is a task type whose
# lenses and approval rule the change gets besides its card's own. A path takes every kind whose patterns match it,
# so `docs/conf.py` is docs and code, and `tests/test_app.py` test and code; a repository file no pattern matches
# is `review.unmatched` (code), since builds and tools run files of any name (Makefile, CI workflows, pyproject).
CHANGE_PATHS: dict[str, list[str]] = {
    "code": [
        "*.py",
        "*.pyi",
        "*.pyx",
        "*.pxd",
        "*.sh",
        "*.diff",
        "*.patch",
        "requirements*.txt",
        "constraints*.txt",
    ],
    "test": ["test_*.py", "*_test.py", "conftest.py", "tests/**", "test/**", "**/tests/**"],
    "docs": ["*.md", "*.markdown", "*.mdx", "*.rst", "*.txt", "*.adoc"],
}

Backend = Literal["llm", "ruff", "bandit", "acceptance", "integrity"]

# ruff rule selections per lens: real defects for correctness, conventions for style.
RUFF_RULES: dict[str, list[str]] = {
    "correctness": ["F", "E9", "PLE", "B"],
    "style": ["E", "W", "N", "UP", "SIM", "C4", "RET"],
}


class Endpoint(BaseModel):
    """An OpenAI-compatible chat endpoint and model (OpenAI, Ollama, vLLM, LM Studio, …)."""

    model: str = Field(min_length=1)
    base_url: str | None = Field(None, description="e.g. http://localhost:11434/v1 for Ollama; none: OpenAI")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="environment variable holding the key")
    timeout: float | None = Field(None, gt=0, le=3600, description="seconds; default review.critic_timeout")
    temperature: float = Field(0.0, ge=0, le=2)


class CriticConfig(BaseModel):
    """One critic: a lens and the backend that reviews through it."""

    lens: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    backend: Backend
    enabled: bool = True
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout: float | None = Field(None, gt=0, le=3600)
    temperature: float = Field(0.0, ge=0, le=2)
    rules: list[str] | None = Field(None, description="ruff: rule codes to select (default per lens)")

    @model_validator(mode="after")
    def _llm_needs_model(self) -> CriticConfig:
        if self.backend == "llm" and not self.model:
            raise ValueError('an llm critic needs model= (e.g. model = "gpt-4o-mini" or "llama3.1")')
        return self


class IntegrityConfig(BaseModel):
    """The `[review.integrity]` table: tuning of the integrity scan's rules (critics/integrity.py). A rule is
    named by its id (INT004) or its name (frame-inspection); a card's creator can also waive an id per card."""

    ignore: list[str] = Field([], description='rules never reported, e.g. ["INT006"] where exiting is fine')
    demote: list[str] = Field([], description="rules reported as minor: shown to the author, never blocking")

    @field_validator("ignore", "demote")
    @classmethod
    def _known(cls, rules: list[str]) -> list[str]:
        cls.rule_names(rules)
        return rules

    @staticmethod
    def rule_names(rules: list[str]) -> list[str]:
        """The rule names that `rules` (ids or names) stand for; ValueError naming the known ones."""
        by_code = {rule.code: name for name, rule in INTEGRITY_RULES.items()}
        unknown = [r for r in rules if r not in INTEGRITY_RULES and r.upper() not in by_code]
        if unknown:
            known = ", ".join(f"{rule.code} {name}" for name, rule in INTEGRITY_RULES.items())
            raise ValueError(f"unknown integrity rule(s) {', '.join(map(repr, unknown))}; the rules are: {known}")
        return [r if r in INTEGRITY_RULES else by_code[r.upper()] for r in rules]


class RepoLimits(BaseModel):
    """The `[review.repo]` table: what a commit handed in may change (complete_task ref=; a change over a bound is
    refused, naming it) and how much of a repository a review or a merge exports into the sandbox."""

    files: int = Field(500, ge=1, le=100_000, description="files one change may touch")
    file_mb: float = Field(5, gt=0, le=4096, description="largest file a change may add or change")
    diff_mb: float = Field(16, gt=0, le=1024, description="the change's whole diff")
    shown_chars: int = Field(
        200_000, ge=1000, le=10_000_000, description="of the diff kept with the card (the files cut are named)"
    )
    tree_files: int = Field(20_000, ge=1, le=1_000_000, description="files of a commit the review exports")
    tree_mb: float = Field(256, gt=0, le=16_384, description="bytes of a commit the review exports")
    git_timeout: float = Field(120, gt=0, le=3600, description="seconds one git command may take")


class HumanApproval(BaseModel):
    """Cards a person must approve after the critics pass them (the human lens)."""

    task_types: list[str] = Field([], description='task types whose cards need a person\'s approval, e.g. ["code"]')
    labels: list[str] = Field([], description='labels whose cards need a person\'s approval, e.g. ["release"]')

    def wants(self, task_type: str, labels: list[str]) -> str | None:
        """Why a card needs a person's approval, or None."""
        if task_type in self.task_types:
            return f"task type {task_type}"
        hit = next((label for label in labels if label in self.labels), None)
        return f"label {hit}" if hit else None


class SynthesisConfig(BaseModel):
    backend: Literal["deterministic", "llm"] = "deterministic"
    endpoint: Endpoint | None = None

    @model_validator(mode="after")
    def _llm_needs_endpoint(self) -> SynthesisConfig:
        if self.backend == "llm" and self.endpoint is None:
            raise ValueError("synthesis backend 'llm' needs [review.synthesis.endpoint] with a model")
        return self


BUILTIN_CRITICS: dict[str, CriticConfig] = {
    "bandit": CriticConfig(lens="security", backend="bandit"),
    "ruff": CriticConfig(lens="correctness", backend="ruff"),
    "ruff-style": CriticConfig(lens="style", backend="ruff"),
    "acceptance": CriticConfig(lens="tests", backend="acceptance"),
    "integrity": CriticConfig(lens="integrity", backend="integrity"),
}


class ReviewConfig(BaseModel):
    """The `[review]` table of config.toml."""

    enabled: bool = Field(True, description="false: complete_task moves cards straight to done")
    max_rounds: int = Field(3, ge=1, le=20, description="FAIL rounds before the card goes to needs_human")
    pass_score: float = Field(
        0,
        ge=0,
        le=10,
        description="the bar: PASS also needs the synthesis score (mean of "
        "the critics' scores) at or above it; 0: no bar",
    )
    pass_scores: dict[str, float] = Field(
        {}, description="the bar per task type, e.g. {code = 8}; overrides pass_score"
    )
    critic_timeout: float = Field(120, gt=0, le=3600, description="seconds a critic may take")
    repair_attempts: int = Field(2, ge=0, le=5, description="re-asks of a model whose critique was malformed")
    execute: Literal["sandbox", "off", "unsafe"] = Field(
        "sandbox",
        description="the acceptance check runs the card's tests: in the OS sandbox where one works "
        "(sandbox), never (off), or as a plain subprocess of the server (unsafe: only for agents you trust as much "
        "as yourself)",
    )
    unverified: Literal["needs_human", "pass"] = Field(
        "needs_human",
        description="work whose tests could not run (no sandbox, execution off) that the other "
        "critics passed: to a human (needs_human), or to done marked unverified (pass)",
    )
    execute_timeout: float = Field(120, gt=0, le=3600, description="seconds for all of a round's test runs")
    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="what one sandboxed command may use")
    repo: RepoLimits = Field(
        default_factory=RepoLimits, description="what a commit handed in may change, and what a review exports"
    )
    on_critic_failure: Literal["needs_human", "pass"] = Field(
        "needs_human",
        description="work the critics that ran passed, while a lens's critics all errored or "
        "timed out: needs_human (default), or pass it",
    )
    agent_deadline: float = Field(
        120, ge=0, le=86_400, description="seconds agent critics (role critic) get; 0: do not ask agents"
    )
    brief_chars: int = Field(
        1000, ge=200, le=20_000, description="the revision brief's length: blocking issues first, the rest counted"
    )
    integrity: IntegrityConfig = Field(
        default_factory=IntegrityConfig, description="rules of the integrity scan to ignore or demote to minor"
    )
    honour_suppressions: list[str] = Field(
        [],
        description="rule ids whose inline suppressions by the author "
        '(# noqa, # nosec) are honoured; ["*"]: all. Others are reported '
        "and keep their severity",
    )
    critic_presence: float = Field(
        120,
        gt=0,
        le=86_400,
        description="an agent critic is asked only if it made a "
        "call within this many seconds or is waiting for messages",
    )
    per_agent: int = Field(
        1,
        ge=1,
        le=64,
        description="review jobs of one agent running at once, over every process and node: an agent's backlog "
        "waits for itself, another agent's review takes the next free worker",
    )
    worker_lease: float = Field(
        30,
        ge=1,
        le=3600,
        description="a worker that stops renewing loses the job after this long, and another worker resumes it",
    )
    poll_seconds: float = Field(
        1.0, gt=0, le=60, description="how often a worker looks for jobs another process queued"
    )
    task_types: dict[str, list[str]] = Field({}, description="task type → lenses (merged over the defaults)")
    paths: dict[str, list[str]] = Field(
        {},
        description="what a change touches: kind (a task type) → path patterns, merged over the defaults; a change "
        "gets the lenses and approval rule of every kind it touches besides its card's type",
    )
    unmatched: str = Field(
        "code",
        pattern=TASK_TYPE_RE.pattern,
        description="the kind of a repository file that no pattern of `paths` matches",
    )
    rubrics: dict[str, str] = Field({}, description="lens → rubric (new lenses or overrides)")
    critics: dict[str, CriticConfig] = Field({}, description="name → critic (merged over the built-in ones)")
    llm: Endpoint | None = Field(None, description="a default LLM critic for every lens that has none")
    synthesis: SynthesisConfig = SynthesisConfig()
    referee: Endpoint | None = Field(
        None,
        description="competing attempts: a model that compares the two best "
        "attempts side by side, asked twice with the order swapped; none (or two "
        "answers that disagree): decided by the review results",
    )
    human_approval: HumanApproval = Field(
        default_factory=HumanApproval,
        description="after a PASS, these cards wait in needs_human for a person's approval on the web board",
    )
    meta: Endpoint | None = Field(
        None,
        description="the critic of the critics: a model that checks each blocking "
        "issue against the card and the work and may downgrade it (never a critical "
        "security or integrity finding); none: no meta-review",
    )

    @field_validator("execute", mode="before")
    @classmethod
    def _execute_flag(cls, value):
        """The earlier true/false: true now means run in the sandbox, never unsandboxed."""
        if isinstance(value, bool):
            return "sandbox" if value else "off"
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return "sandbox" if value.lower() == "true" else "off"
        return value

    @field_validator("critics", mode="before")
    @classmethod
    def _over_builtins(cls, critics: dict) -> dict:
        """`[review.critics.bandit] enabled = false` is enough to change a built-in critic."""
        if not isinstance(critics, dict):
            return critics
        return {
            name: {**BUILTIN_CRITICS[name].model_dump(), **value}
            if name in BUILTIN_CRITICS and isinstance(value, dict)
            else value
            for name, value in critics.items()
        }

    @field_validator("paths")
    @classmethod
    def _patterns(cls, paths: dict[str, list[str]]) -> dict[str, list[str]]:
        for kind, patterns in paths.items():
            if not TASK_TYPE_RE.match(kind):
                raise ValueError(f"paths: {kind!r} is not a task type; use a short lowercase word such as code or docs")
            bad = [p for p in patterns if not p.strip("/") or len(p) > 200]
            if bad:
                raise ValueError(f'paths.{kind}: {bad[0]!r} is not a path pattern; use e.g. "*.py" or "docs/**"')
        return paths

    @property
    def path_table(self) -> dict[str, list[str]]:
        """Kind → path patterns: the defaults with the configured entries over them."""
        return {**CHANGE_PATHS, **self.paths}

    @property
    def lens_table(self) -> dict[str, list[str]]:
        """Task type → lenses: the defaults with the configured entries over them."""
        return {**TASK_TYPE_LENSES, **self.task_types}

    def bar_for(self, task_type: str) -> float:
        return self.pass_scores.get(task_type, self.pass_score)

    def lenses_for(self, task_type: str) -> list[str]:
        table = self.lens_table
        return list(table.get(task_type, table["default"]))

    def rubric(self, lens: str) -> str:
        return {**RUBRICS, **self.rubrics}.get(
            lens
        ) or f"{lens.capitalize()} only: review the work through this lens and nothing else."

    def all_critics(self) -> dict[str, CriticConfig]:
        """Built-in critics, the configured ones, and one LLM critic per lens from `llm` if set."""
        merged = {name: c for name, c in {**BUILTIN_CRITICS, **self.critics}.items() if c.enabled}
        if self.llm is not None:
            lenses = {lens for lenses in self.lens_table.values() for lens in lenses}
            covered = {c.lens for c in merged.values() if c.backend == "llm"}
            for lens in sorted(lenses - covered):
                merged[f"llm-{lens}"] = CriticConfig(lens=lens, backend="llm", **self.llm.model_dump())
        return merged
