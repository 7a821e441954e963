"""What agents' sessions cost, as `hiveboard hook stop|session-end` recorded it (token_usage): totals and the
largest spenders by card, agent and task type (board_stats, the web's metrics), one card's tokens (its web page),
an estimated cost in USD, and per-card token budgets.

A cost is an estimate from a price table passed in (the server's `prices` setting: USD per million tokens per
model): a model is priced by the longest key its name starts with, and a model no key starts is never guessed:
its tokens are reported as unpriced and add nothing to the cost.

A card's budget counts every token recorded against it (input, output, cache creation and cache reads). The
first time the recorded tokens reach it, `Usage.check_budgets` notes the card (once: `budget_noted_at`), sends
its creator a `budget` message, and with the action "needs_human" moves the card to needs_human by the state
machine's budget rows, when its state has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from . import cards, scopes
from ._sqlite_utils import Database
from .db import Store, now, placeholders
from .machine import Machine, find
from .messages import Messages

TOP = 5
MAX_BUDGET = 2**53 - 1  # what a JSON client sends exactly (as ids are bounded)
MILLION = 1_000_000
BudgetAction = Literal["message", "needs_human"]


class Price(BaseModel):
    """What one model costs, in USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="input tokens not read from the cache")
    output: float = Field(ge=0)
    cache_read: float = Field(ge=0, description="input tokens read from the prompt cache")
    cache_creation: float = Field(ge=0, description="input tokens written to the prompt cache")


def _p(input: float, output: float, cache_read: float, cache_creation: float) -> Price:
    return Price(input=input, output=output, cache_read=cache_read, cache_creation=cache_creation)


# Anthropic's list prices when this table was written (2026-11; the 5-minute cache write, prompts of the lowest
# price band), keyed by the start of the model ids Claude Code writes in its transcripts. The server's `prices`
# setting adds to these and overrides them key by key (docs/reference.md).
DEFAULT_PRICES: dict[str, Price] = {
    "claude-3-haiku": _p(0.25, 1.25, 0.03, 0.30),
    "claude-3-5-haiku": _p(0.80, 4, 0.08, 1),
    "claude-haiku-4-5": _p(1, 5, 0.10, 1.25),
    "claude-haiku-5-5": _p(0.10, 0.50, 0.01, 0.125),
    "claude-3-5-sonnet": _p(3, 15, 0.30, 3.75),
    "claude-3-7-sonnet": _p(3, 15, 0.30, 3.75),
    "claude-sonnet-4": _p(3, 15, 0.30, 3.75),
    "claude-sonnet-5": _p(2, 10, 0.20, 2.50),
    "claude-sonnet-5-5": _p(2, 10, 0.10, 2.50),
    "claude-3-opus": _p(15, 75, 1.50, 18.75),
    "claude-opus-4": _p(15, 75, 1.50, 18.75),
    "claude-opus-4-5": _p(5, 25, 0.50, 6.25),
    "claude-opus-4-6": _p(5, 25, 0.50, 6.25),
    "claude-opus-4-7": _p(5, 25, 0.50, 6.25),
    "claude-opus-4-8": _p(5, 25, 0.50, 6.25),
    "claude-opus-5": _p(5, 25, 0.50, 6.25),
    "claude-opus-5-5": _p(4, 20, 0.20, 5),
}


@dataclass(frozen=True)
class ModelTokens:
    """Tokens one model spent (a usage row, or a sum of them)."""

    model: str
    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_creation + self.cache_read


@dataclass(frozen=True)
class Estimate:
    cost_usd: float
    unpriced: int  # tokens of models the table has no price for (not in cost_usd)
    unpriced_models: tuple[str, ...]


def price_of(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The price under the longest key `model` starts with (case aside); None when no key does."""
    name = model.lower()
    best = max((key for key in prices if name.startswith(key.lower())), key=len, default=None)
    return None if best is None else prices[best]


def estimate(rows: Iterable[ModelTokens], prices: Mapping[str, Price]) -> Estimate:
    """The estimated cost of `rows` at `prices`; tokens of a model without a price are counted as unpriced."""
    cost, unpriced, models = 0.0, 0, set()
    for r in rows:
        price = price_of(r.model, prices)
        if price is None:
            unpriced += r.total
            if r.total:
                models.add(r.model or "(no model named)")
            continue
        cost += (
            r.input * price.input
            + r.output * price.output
            + r.cache_creation * price.cache_creation
            + r.cache_read * price.cache_read
        ) / MILLION
    return Estimate(round(cost, 6), unpriced, tuple(sorted(models)))


class TokenUse(BaseModel):
    key: str = Field(description="the card ('#12'), agent or task type; 'no card' for work outside any")
    input: int
    output: int
    cache_creation: int
    cache_read: int
    messages: int
    cost_usd: float = Field(0.0, description="estimated from the price table (list prices)")
    unpriced: int = Field(0, description="tokens of models the price table does not know (not in cost_usd)")


class TokenStats(BaseModel):
    total: TokenUse
    by_card: list[TokenUse] = Field(description=f"the {TOP} cards that cost the most output tokens")
    by_agent: list[TokenUse]
    by_task_type: list[TokenUse]
    unpriced_models: list[str] = Field([], description="models without a price: add them to the prices setting")


class CardUsage(TokenUse):
    """One card's tokens, its estimated cost and its budget."""

    tokens: int = Field(description="all its tokens: input, output, cache creation and cache reads")
    budget_tokens: int | None = None


SUMS = (
    "coalesce(sum(u.input_tokens), 0), coalesce(sum(u.output_tokens), 0), coalesce(sum(u.cache_creation_tokens), 0), "
    "coalesce(sum(u.cache_read_tokens), 0), coalesce(sum(u.messages), 0)"
)
# every token of one card, against its budget
SPENT = (
    "(SELECT coalesce(sum(u.input_tokens + u.output_tokens + u.cache_creation_tokens + u.cache_read_tokens), 0) "
    "FROM token_usage u WHERE u.task_id = t.id)"
)


def token_stats(db: Database, prices: Mapping[str, Price] | None = None) -> TokenStats | None:
    """Totals and the top spenders, priced at `prices` (the defaults when None); None while nothing was recorded."""
    prices = DEFAULT_PRICES if prices is None else prices
    total = db.execute(f"SELECT u.model, {SUMS} FROM token_usage u GROUP BY u.model").fetchall()
    if not sum(r[5] for r in total):
        return None

    def top(key: str, joined: str = "") -> list[TokenUse]:
        # the top keys by output tokens, then what each of their models spent, to price it
        ranked = [
            r[0]
            for r in db.execute(
                f"SELECT {key} FROM token_usage u {joined} GROUP BY {key} "
                f"ORDER BY coalesce(sum(u.output_tokens), 0) DESC, {key} LIMIT {TOP}"
            ).fetchall()
        ]
        known = [k for k in ranked if k is not None]
        where = [f"{key} IN ({placeholders(known)})"] if known else []
        if None in ranked:
            where.append(f"{key} IS NULL")
        found = db.execute(
            f"SELECT {key}, u.model, {SUMS} FROM token_usage u {joined} WHERE {' OR '.join(where)} "
            f"GROUP BY {key}, u.model",
            known,
        ).fetchall()
        return [_use(_label(k), [r[1:] for r in found if r[0] == k], prices) for k in ranked]

    return TokenStats(
        total=_use("all", total, prices),
        by_card=top("u.task_id"),
        by_agent=top("u.agent"),
        by_task_type=top("t.task_type", "LEFT JOIN tasks t ON t.id = u.task_id"),
        unpriced_models=list(estimate(_tokens(total), prices).unpriced_models[:TOP]),
    )


def _label(key) -> str:
    """A card as '#12', an agent or task type as itself; nothing (usage outside any card) as 'no card'."""
    if key is None or key == "":
        return "no card"
    return f"#{key}" if isinstance(key, int) else str(key)


def _tokens(rows) -> list[ModelTokens]:
    """(model, input, output, cache creation, cache read, messages) rows as ModelTokens (PostgreSQL's sums of
    bigints are decimals)."""
    return [ModelTokens(r[0] or "", int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]


def _use(key: str, rows, prices: Mapping[str, Price]) -> TokenUse:
    """One key's TokenUse from its rows per model: (model, input, output, cache creation, cache read, messages)."""
    spent = _tokens(rows)
    priced = estimate(spent, prices)
    return TokenUse(
        key=key,
        input=sum(m.input for m in spent),
        output=sum(m.output for m in spent),
        cache_creation=sum(m.cache_creation for m in spent),
        cache_read=sum(m.cache_read for m in spent),
        messages=sum(int(r[5]) for r in rows),
        cost_usd=priced.cost_usd,
        unpriced=priced.unpriced,
    )


class Usage:
    """Token usage on one store, priced with one table, and the budget check the hook asks for."""

    def __init__(
        self, store: Store, machine: Machine, messages: Messages, prices: Mapping[str, Price] | None = None
    ) -> None:
        self.store = store
        self.machine = machine
        self.messages = messages
        self.prices: dict[str, Price] = dict(DEFAULT_PRICES if prices is None else prices)

    def stats(self) -> TokenStats | None:
        """Totals and the top spenders by card, agent and task type; None while nothing was recorded."""
        with self.machine.reading() as db:
            return token_stats(db, self.prices)

    def card(self, task_id: int) -> CardUsage | None:
        """One card's tokens and estimated cost; None when nothing was recorded for it and it has no budget."""
        with self.store.read() as db:
            found = db.execute(
                f"SELECT u.model, {SUMS} FROM token_usage u WHERE u.task_id = ? GROUP BY u.model", [task_id]
            ).fetchall()
            budget = db.execute("SELECT budget_tokens FROM tasks WHERE id = ?", [task_id]).fetchone()
        budget_tokens = budget[0] if budget else None
        if not found and budget_tokens is None:
            return None
        use = _use(f"#{task_id}", found, self.prices)
        tokens = use.input + use.output + use.cache_creation + use.cache_read
        return CardUsage(**use.model_dump(), tokens=tokens, budget_tokens=budget_tokens)

    def check_budgets(self, task_ids: list[int], action: BudgetAction = "message") -> list[int]:
        """Note each of these cards whose recorded tokens reached its budget for the first time: a `budget`
        message to its creator, and with "needs_human" the card waits for a person (when its state allows the
        move). Returns the cards noted now; a card already noted is never noted again."""
        if not task_ids:
            return []
        noted = []
        with self.store.write(scopes.BUDGETS) as db:
            over = cards_over_budget(db, task_ids)
            for task_id, spent in over:
                row = cards.row(db, task_id)
                ts = now()
                said = f"card #{task_id} used {spent:,} tokens of its budget of {row['budget_tokens']:,}"
                waits = action == "needs_human" and find(row["status"], "needs_human", "budget") is not None
                # the event first: it names the card as it is, with its holder, before it may leave in_progress
                self.messages.event(
                    db,
                    "system",
                    "budget",
                    task_id,
                    said + ("; it waits for a person now" if waits else ""),
                    f"'{row['title']}': {said} (input, output and cache tokens recorded from its agents' sessions)."
                    + (" It was moved to needs_human: decide whether it goes on." if waits else ""),
                    recipient=row["created_by"],
                    metadata={"tokens": spent, "budget_tokens": row["budget_tokens"]},
                    row=row,
                )
                if waits:
                    self.machine.move(
                        db,
                        row,
                        "needs_human",
                        "budget",
                        "system",
                        reason=f"over budget: {said}",
                        sets={"budget_noted_at": ts},
                        ts=ts,
                    )
                else:
                    self.machine.edit(db, row, "system", "over budget", {"budget_noted_at": ts}, said, ts)
                noted.append(task_id)
        return noted


def cards_over_budget(db: Database, task_ids: list[int]) -> list[tuple[int, int]]:
    """(card, tokens spent) for each of these cards whose tokens reached a budget not noted yet."""
    return [
        (r[0], int(r[1]))
        for r in db.execute(
            f"SELECT t.id, {SPENT} FROM tasks t WHERE t.id IN ({placeholders(task_ids)}) AND t.budget_tokens IS NOT "
            f"NULL AND t.budget_noted_at IS NULL AND {SPENT} >= t.budget_tokens ORDER BY t.id",
            list(task_ids),
        ).fetchall()
    ]
