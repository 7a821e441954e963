"""What agents' sessions cost in tokens, as `hiveboard hook stop|session-end` recorded it (token_usage): totals,
and the largest spenders by card, agent and task type, for board_stats."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ._sqlite_utils import Database

TOP = 5


class TokenUse(BaseModel):
    key: str = Field(description="the card ('#12'), agent or task type; 'no card' for work outside any")
    input: int
    output: int
    cache_creation: int
    cache_read: int
    messages: int


class TokenStats(BaseModel):
    total: TokenUse
    by_card: list[TokenUse] = Field(description=f"the {TOP} cards that cost the most output tokens")
    by_agent: list[TokenUse]
    by_task_type: list[TokenUse]


SUMS = (
    "coalesce(sum(u.input_tokens), 0), coalesce(sum(u.output_tokens), 0), coalesce(sum(u.cache_creation_tokens), 0), "
    "coalesce(sum(u.cache_read_tokens), 0), coalesce(sum(u.messages), 0)"
)


def token_stats(db: Database) -> TokenStats | None:
    """None while nothing was recorded."""
    total = db.execute(f"SELECT 'all', {SUMS} FROM token_usage u").fetchone()
    if not total[5]:
        return None

    def top(key: str, joined: str = "") -> list[TokenUse]:
        found = db.execute(
            f"SELECT {key}, {SUMS} FROM token_usage u {joined} GROUP BY {key} "
            f"ORDER BY coalesce(sum(u.output_tokens), 0) DESC LIMIT {TOP}"
        ).fetchall()
        return [_use(r) for r in found]

    return TokenStats(
        total=_use(total),
        by_card=[
            u.model_copy(update={"key": f"#{u.key}" if u.key not in ("None", "") else "no card"})
            for u in top("u.task_id")
        ],
        by_agent=top("u.agent"),
        by_task_type=[
            u.model_copy(update={"key": u.key if u.key not in ("None", "") else "no card"})
            for u in top("t.task_type", "LEFT JOIN tasks t ON t.id = u.task_id")
        ],
    )


def _use(row) -> TokenUse:
    return TokenUse(
        key=str(row[0]), input=row[1], output=row[2], cache_creation=row[3], cache_read=row[4], messages=row[5]
    )
