"""LLM critics and the optional LLM synthesiser, through the `openai` package.

Any OpenAI-compatible endpoint works (OpenAI, Ollama, vLLM, LM Studio): each critic has its own model
and base_url. The answer is asked for as JSON by schema; a reply that is not valid JSON for the
schema is repaired locally when it only wraps the JSON (code fences, prose around it), else the model
is shown its error and asked again, a bounded number of times.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, TypeVar, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field, ValidationError

from hiveboard.board.optional import LLM_CRITICS, need
from hiveboard.board.review_models import Critique, CritiqueRecord, Resolution, ReviewIssue, Severity, Verdict
from hiveboard.memory.digests import LessonGroup, WrittenDigest

from .base import Critic, CriticFailed, CriticTimeout, Work
from .config import Endpoint

if TYPE_CHECKING:
    import openai

B = TypeVar("B", bound=BaseModel)  # a structured reply's model
SEVERITIES = list(get_args(Severity))
RESOLUTION_STATUSES = list(get_args(Resolution.model_fields["status"].annotation))
ISSUE_SCHEMA = {
    "type": "object",
    "properties": {
        "severity": {"type": "string", "enum": SEVERITIES},
        "category": {"type": "string"},
        "location": {"type": "string"},
        "description": {"type": "string"},
        "suggestion": {"type": "string"},
    },
    "required": ["severity", "category", "location", "description", "suggestion"],
    "additionalProperties": False,
}
CRITIQUE_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": list(get_args(Verdict))},
        "score": {"type": "integer", "minimum": 1, "maximum": 10},
        "summary": {"type": "string"},
        "issues": {"type": "array", "items": ISSUE_SCHEMA},
        "resolutions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "ref": {"type": "string"},
                    "status": {"type": "string", "enum": RESOLUTION_STATUSES},
                    "note": {"type": "string"},
                },
                "required": ["ref", "status", "note"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["verdict", "score", "summary", "issues", "resolutions"],
    "additionalProperties": False,
}

SYSTEM = """You are the {lens} critic in a review team. Each critic reviews the same work through one lens
and never sees the others. Stay strictly inside your lens:
{rubric}

Severity: critical = must not ship (exploitable, broken, data loss); major = must fix before done;
minor = should fix; info = optional. Verdict: FAIL if any critical or major issue, CONDITIONAL if only
minor ones, PASS otherwise. Score 1-10: 10 excellent, 7-9 good but improvable, 4-6 significant issues,
1-3 major problems. Point each issue at a location (file:line or section) and give a concrete suggestion.
Reply with one JSON object only, matching this schema:
{schema}"""


class _SynthesisReply(BaseModel):
    verdict: str = Field(pattern="^(PASS|FAIL)$")
    brief: str
    contradictions: list[str] = []


JSON_OBJECT = re.compile(r"\{.*\}", re.S)


def _client(base_url: str | None, api_key_env: str | None, timeout: float) -> openai.OpenAI:
    # openai checks URLs against the legacy httpx module whenever sys.modules holds it, even half-imported:
    # `serve` opens the memory (whose Chroma client imports httpx) on another thread while it builds the
    # critics. Importing httpx here waits for that import to finish instead of failing on its partial module.
    import httpx  # noqa: F401

    # when a critic is built (a server builds its critics after `initialize`), not on import; the `llm` extra
    openai = need("openai", LLM_CRITICS)

    key = os.environ.get(api_key_env) if api_key_env else None
    # Local servers (Ollama, vLLM) ignore the key, but the client insists on one.
    return openai.OpenAI(base_url=base_url, api_key=key or "not-needed", timeout=timeout, max_retries=0)


def _shown(url) -> str:
    """An endpoint for messages every agent can read: without user:password@ in it."""
    parts = urlsplit(str(url))
    return (
        urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
        if parts.hostname
        else str(url)
    )


def _parse(text: str, model: type[BaseModel]) -> BaseModel:
    """Validate a reply; on failure try the JSON object inside it (fences or prose around it)."""
    try:
        return model.model_validate_json(text)
    except ValidationError:
        found = JSON_OBJECT.search(text)
        if found is None:
            raise
        return model.model_validate_json(found.group(0))


def _ask(
    client: openai.OpenAI,
    model: str,
    messages: list[dict],
    schema: dict,
    name: str,
    reply: type[BaseModel],
    temperature: float,
    attempts: int,
) -> BaseModel:
    """One structured answer, asking again with the error when the reply does not validate."""
    import openai

    last = ""
    for _ in range(attempts + 1):
        try:
            response = client.chat.completions.create(
                model=model,
                messages=messages,
                temperature=temperature,
                response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
            )
        except openai.APITimeoutError as exc:
            raise CriticTimeout(f"model {model} did not answer within {client.timeout} s") from exc
        except openai.APIConnectionError as exc:
            raise CriticFailed(
                f"could not reach model {model} at {_shown(client.base_url)}: {exc.__cause__ or exc}"
            ) from exc
        except openai.APIStatusError as exc:
            raise CriticFailed(
                f"model {model} at {_shown(client.base_url)} answered HTTP {exc.status_code}: {exc.message}"
            ) from exc
        text = (response.choices[0].message.content or "") if response.choices else ""
        try:
            return _parse(text, reply)
        except ValidationError as exc:
            last = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
            messages = [
                *messages,
                {"role": "assistant", "content": text[:4000]},
                {
                    "role": "user",
                    "content": f"That reply was not valid ({last}). Reply again with only "
                    "the JSON object, matching the schema exactly.",
                },
            ]
    raise CriticFailed(f"model {model} gave malformed output {attempts + 1} time(s); last problem: {last}")


class _Model:
    """A model at an OpenAI-compatible endpoint, asked for structured answers: what the critic, meta-reviewer,
    referee, synthesiser and digest writer share."""

    def __init__(self, endpoint: Endpoint, timeout: float, repair_attempts: int):
        self.endpoint = endpoint
        self.repair_attempts = repair_attempts
        self.client = _client(endpoint.base_url, endpoint.api_key_env, endpoint.timeout or timeout)

    def structured(self, messages: list[dict], schema: dict, name: str, reply: type[B]) -> B:
        """`_ask` this endpoint's model with its temperature and repair attempts."""
        return _ask(
            self.client,
            self.endpoint.model,
            messages,
            schema,
            name,
            reply,
            self.endpoint.temperature,
            self.repair_attempts,
        )


class LLMCritic(Critic, _Model):
    backend = "llm"

    def __init__(self, name: str, lens: str, rubric: str, endpoint: Endpoint, timeout: float, repair_attempts: int):
        Critic.__init__(self, name, lens, endpoint.model)
        _Model.__init__(self, endpoint, timeout, repair_attempts)
        self.rubric = rubric

    def messages(self, work: Work, earlier: list[ReviewIssue]) -> list[dict]:
        system = SYSTEM.format(lens=self.lens, rubric=self.rubric, schema=json.dumps(CRITIQUE_SCHEMA))
        user = work.render()
        if work.context:
            user += "\n\n## From the team's memory (past lessons and critiques of similar work)\n" + "\n".join(
                f"- {c}" for c in work.context
            )
        if earlier:
            user += (
                "\n\n## Your issues from the previous round\nFor each, add a resolution with its ref: resolved, "
                "partial or not_addressed. Then review the whole work again.\n"
                + "\n".join(f"- ref {i.ref}: [{i.severity}] {i.location} {i.description}" for i in earlier)
            )
        else:
            user += "\n\nThis is the first round: resolutions is an empty list."
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def review(self, work: Work, earlier: list[ReviewIssue]) -> Critique:
        return self.structured(self.messages(work, earlier), CRITIQUE_SCHEMA, "critique", Critique)


SYNTHESIS_SYSTEM = """You consolidate independent critiques of one piece of work into one verdict.
Precedence when critics contradict: {precedence}. Grade the critiques, not the work; do not add issues
of your own; never drop a critic's input; surface contradictions instead of smoothing them.
FAIL if any critic's critical or major issue stands. The brief tells the author what to fix, most
important first. Reply with JSON: {{"verdict": "PASS"|"FAIL", "brief": "...", "contradictions": ["..."]}}"""


META_SYSTEM = """You are the meta critic: you check other critics' blocking issues against the card and the
work. For each issue, decide whether it is real for THIS card: keep it, or downgrade it to minor or info
when the card asks for exactly that, the issue misreads the code, or it cannot cause harm here. Give a
short concrete reason. Reply with JSON: {"judgements": [{"rank": <issue rank>, "keep": true|false,
"severity": "critical"|"major"|"minor"|"info", "reason": "..."}]}"""


class _Judgement(BaseModel):
    rank: int
    keep: bool
    severity: str = Field(pattern="^(critical|major|minor|info)$")
    reason: str = Field(max_length=2000)


class _MetaReply(BaseModel):
    judgements: list[_Judgement]


class MetaReviewer(_Model):
    """The optional critic of the critics (review.meta): judges each blocking issue of a FAIL."""

    def judge(self, work: Work, issues: list) -> list[_Judgement]:
        listed = [
            i.model_dump(include={"rank", "severity", "lens", "category", "location", "description", "suggestion"})
            for i in issues
        ]
        messages = [
            {"role": "system", "content": META_SYSTEM},
            {"role": "user", "content": f"{work.render(40_000)}\n\nBlocking issues:\n{json.dumps(listed)}"},
        ]
        schema = {
            "type": "object",
            "properties": {
                "judgements": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "rank": {"type": "integer"},
                            "keep": {"type": "boolean"},
                            "severity": {"type": "string", "enum": SEVERITIES},
                            "reason": {"type": "string"},
                        },
                        "required": ["rank", "keep", "severity", "reason"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["judgements"],
            "additionalProperties": False,
        }
        reply = self.structured(messages, schema, "meta_review", _MetaReply)
        return reply.judgements


REFEREE_SYSTEM = """You are the referee critic: two attempts at the same card compete. Compare them on what
the card asks for: correctness first, then completeness, then clarity. Reply with JSON:
{"winner": "A" or "B", "reason": "one or two sentences"}"""


class _RefereeReply(BaseModel):
    winner: str = Field(pattern="^(A|B)$")
    reason: str = Field(max_length=2000)


class Referee(_Model):
    """The optional model referee of competing attempts (review.referee)."""

    def prefer(self, card: str, first: str, second: str) -> tuple[str, str]:
        """Which of two attempts wins ("A" = first, "B" = second), and why."""
        messages = [
            {"role": "system", "content": REFEREE_SYSTEM},
            {"role": "user", "content": f"{card}\n\n## Attempt A\n{first}\n\n## Attempt B\n{second}"},
        ]
        schema = {
            "type": "object",
            "properties": {"winner": {"type": "string", "enum": ["A", "B"]}, "reason": {"type": "string"}},
            "required": ["winner", "reason"],
            "additionalProperties": False,
        }
        reply = self.structured(messages, schema, "referee", _RefereeReply)
        return reply.winner, reply.reason


class LLMSynthesiser(_Model):
    """The optional model-written verdict and brief (configured with review.synthesis)."""

    def __init__(self, endpoint: Endpoint, timeout: float, repair_attempts: int, precedence: tuple[str, ...]):
        super().__init__(endpoint, timeout, repair_attempts)
        self.precedence = precedence

    def synthesise(self, work: Work, critiques: list[CritiqueRecord]) -> tuple[str, str, list[str]]:
        bundle = [
            c.model_dump(include={"critic", "lens", "status", "verdict", "score", "summary", "issues", "error"})
            for c in critiques
        ]
        messages = [
            {"role": "system", "content": SYNTHESIS_SYSTEM.format(precedence=" > ".join(self.precedence))},
            {
                "role": "user",
                "content": f"Task {work.task_id} round {work.round}: {work.title}\n\nCritiques:\n{json.dumps(bundle)}",
            },
        ]
        schema = {
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["PASS", "FAIL"]},
                "brief": {"type": "string"},
                "contradictions": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["verdict", "brief", "contradictions"],
            "additionalProperties": False,
        }
        reply = self.structured(messages, schema, "synthesis", _SynthesisReply)
        return reply.verdict, reply.brief, reply.contradictions


DIGEST_SYSTEM = """You write a team's digest of lessons for one type of task: a title and one rule per group
of lessons. The groups were formed from the lessons' meaning; keep them as given, one rule each, in the
same order. A rule is one imperative sentence an agent can follow (at most 30 words), in the words of the
lessons, adding nothing they do not say. The title names the task type's common techniques, e.g.
"Common Web Scraping Techniques". Reply with JSON: {"title": "...", "rules": ["...", ...]}"""


class _DigestReply(BaseModel):
    title: str = Field(max_length=200)
    rules: list[str]


class DigestWriter(_Model):
    """The model-written digest of a task type's lessons (memory/digests.py groups them; this writes the rules)."""

    def __init__(self, endpoint: Endpoint, timeout: float, repair_attempts: int):
        super().__init__(endpoint, timeout, repair_attempts)
        self.name = f"llm:{endpoint.model}"

    def __call__(self, task_type: str, groups: list[LessonGroup]) -> WrittenDigest:
        listed = [{"group": n, "lessons": g.count, "examples": g.texts} for n, g in enumerate(groups, 1)]
        messages = [
            {"role": "system", "content": DIGEST_SYSTEM},
            {
                "role": "user",
                "content": f"Task type: {task_type}\n\n{len(groups)} groups:\n{json.dumps(listed, ensure_ascii=False)}",
            },
        ]
        schema = {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "rules": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": len(groups),
                    "maxItems": len(groups),
                },
            },
            "required": ["title", "rules"],
            "additionalProperties": False,
        }
        reply = self.structured(messages, schema, "digest", _DigestReply)
        return WrittenDigest(title=reply.title, rules=reply.rules)
