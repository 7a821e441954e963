"""Fair shares: how much one agent may write in a minute and in an hour, how large the database may grow,
and how many agents may register themselves.

What is limited is what an agent sends that the board keeps in bulk: messages (broadcasts above all),
remembered items, lessons and the artifacts of `complete_task`. Each such write is charged inside its own
write transaction, before anything of it is written: the agent's usage of the last minute and hour is read
from `quota_usage`, the call is refused if it would pass a limit, else its row is added. The store's write
lock serialises writers across threads, processes and (on PostgreSQL) nodes, so reading the usage and adding
the row is atomic everywhere, and a refused call writes nothing (its transaction rolls back).

`quota_usage` holds one row per charged call in a series (agent, kind), with the series' running totals of
calls (or items) and characters. A window's usage is the newest row's total minus the total before the
window's first row: two lookups on the primary key, whatever the agent wrote, so a busy agent's check (and a
runaway's refusal) costs what an idle one's does.

Decisions, kept in one place:

- windows slide: a limit counts what was written in the last 60 s, 600 s or 3600 s, exactly (rows are pruned
  an hour after they were written), not in fixed buckets that reset;
- a broadcast ('everyone' or 'role:…') is one message to each of its recipients: its characters count once
  per recipient against the message characters, and it also has its own, lower call limits;
- agents with an operator role (board/agents.py OPERATOR_ROLES) get `operator_factor` times every agent
  limit, not an exemption: a lead's runaway loop is bounded too. The board's own writers (its events, the
  review's lessons) are never charged;
- the database's size is measured every `size_check_seconds` (not per call); from 80 % of `max_db_mb` a
  warning is logged (and board_stats shows it), and at 100 % the bulk writes are refused while claims,
  completions without artifacts and moves go on;
- self-registration (whoami with a new name) is capped board-wide: so many in 10 minutes, and none once the
  board has `max_agents` agents. The server turns it off altogether when it has a server token.

A Board made without a QuotaConfig has no quotas: `hiveboard serve` passes the [quotas] settings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from .agents import OPERATOR_ROLES
from .db import Store, rows_many
from .errors import OverQuota

if TYPE_CHECKING:
    from ._sqlite_utils import Database

log = logging.getLogger("hiveboard")

MESSAGE, BROADCAST, REMEMBER, LESSON, ARTIFACT, REGISTER = (
    "message",
    "broadcast",
    "remember",
    "lesson",
    "artifact",
    "register",
)
BOARD_ACTORS = frozenset({"system", "review"})  # the names the board itself writes as (board/agents.py)
EVERYONE = "*"  # the usage row of a board-wide limit (no agent name starts with it)
KEEP_SECONDS = 3600  # the longest window: older rows count for nothing
PRUNE_EVERY = 1000  # charges of this process between two sweeps of rows older than that
MB = 1_000_000  # characters in a "MB" of the character limits, bytes in one of the database's ceiling
WARN_AT = 0.8


class QuotaConfig(BaseModel):
    """The [quotas] table (HIVEBOARD_QUOTAS__MESSAGES_PER_MINUTE=120 and so on); 0 turns a limit off."""

    enabled: bool = Field(True, description="false: no quotas, no size ceiling, no cap on self-registration")
    operator_factor: int = Field(
        10, ge=1, le=1000, description="agents with the role lead or human get this × each limit"
    )
    messages_per_minute: int = Field(120, ge=0, description="messages one agent sends (broadcasts included)")
    messages_per_hour: int = Field(2000, ge=0)
    message_mb_per_hour: float = Field(
        2.0, ge=0, description="millions of characters of messages an hour; a broadcast counts once per recipient"
    )
    broadcasts_per_minute: int = Field(20, ge=0, description="messages to 'everyone' or 'role:…'")
    broadcasts_per_hour: int = Field(200, ge=0)
    remember_items_per_hour: int = Field(600, ge=0, description="items one agent stores with remember")
    remember_mb_per_hour: float = Field(5.0, ge=0, description="millions of characters remembered an hour")
    lessons_per_hour: int = Field(60, ge=0, description="record_lesson calls (merged ones too)")
    artifact_mb_per_hour: float = Field(20.0, ge=0, description="millions of characters of complete_task artifacts")
    max_db_mb: float = Field(
        2000.0, ge=0, description="the database's size ceiling in MB (10^6 bytes): bulk writes stop there"
    )
    size_check_seconds: float = Field(30.0, gt=0, le=3600, description="how often the database's size is measured")
    registrations_per_10_minutes: int = Field(50, ge=0, description="agents registering themselves with whoami")
    max_agents: int = Field(200, ge=0, description="no self-registration once the board has this many agents")
    # caps on the surfaces outside the write quotas above (issue 48): each refusal is one sentence, nothing written
    running_tasks_per_agent: int = Field(
        16, ge=0, description="MCP tasks (wait_for_work, waits for messages or a verdict) one agent has working at once"
    )
    worktrees_per_agent: int = Field(4, ge=0, description="live git worktrees one agent has (one per card it holds)")
    worktrees_per_repository: int = Field(32, ge=0, description="live git worktrees of one repository, all agents")
    worktree_mb_per_agent: float = Field(
        2000.0, ge=0, description="MB (10^6 bytes) of checkouts one agent's live worktrees hold, the new one included"
    )
    worktree_mb_per_repository: float = Field(
        8000.0, ge=0, description="MB of checkouts the live worktrees of one repository hold, all agents"
    )
    reservation_seconds_without_card: int = Field(
        3600, ge=0, description="the longest reserve_paths tied to no card (one tied to a card ends with the card)"
    )
    usage_records_per_hour: int = Field(
        120, ge=0, description="token-usage records (the hook's record-usage rows) one agent posts in an hour"
    )


# the series each kind of write is counted in: a broadcast is a message, and a broadcast besides
SERIES: dict[str, tuple[str, ...]] = {
    MESSAGE: (MESSAGE,),
    BROADCAST: (MESSAGE, BROADCAST),
    REMEMBER: (REMEMBER,),
    LESSON: (LESSON,),
    ARTIFACT: (ARTIFACT,),
    REGISTER: (REGISTER,),
}


@dataclass(frozen=True)
class Budget:
    """One limit: at most `limit` calls or items (or characters, `chars`) of one series within `seconds`, named
    by its setting."""

    series: str
    seconds: int
    limit: int
    chars: bool
    what: str  # "messages", "characters of messages", …
    setting: str  # its key in [quotas]

    def env(self, config: QuotaConfig) -> str:
        return f"HIVEBOARD_QUOTAS__{self.setting.upper()}={getattr(config, self.setting):g}"


def budgets(config: QuotaConfig) -> dict[str, list[Budget]]:
    """Each series and the limits on it (those set to 0 left out)."""
    mb = {name: round(getattr(config, name) * MB) for name in ("message_mb_per_hour", "remember_mb_per_hour")}
    found = [
        Budget(MESSAGE, 60, config.messages_per_minute, False, "messages", "messages_per_minute"),
        Budget(MESSAGE, 3600, config.messages_per_hour, False, "messages", "messages_per_hour"),
        Budget(MESSAGE, 3600, mb["message_mb_per_hour"], True, "characters of messages", "message_mb_per_hour"),
        Budget(BROADCAST, 60, config.broadcasts_per_minute, False, "broadcasts", "broadcasts_per_minute"),
        Budget(BROADCAST, 3600, config.broadcasts_per_hour, False, "broadcasts", "broadcasts_per_hour"),
        Budget(REMEMBER, 3600, config.remember_items_per_hour, False, "remembered items", "remember_items_per_hour"),
        Budget(REMEMBER, 3600, mb["remember_mb_per_hour"], True, "characters remembered", "remember_mb_per_hour"),
        Budget(LESSON, 3600, config.lessons_per_hour, False, "lessons", "lessons_per_hour"),
        Budget(
            ARTIFACT,
            3600,
            round(config.artifact_mb_per_hour * MB),
            True,
            "characters of artifacts",
            "artifact_mb_per_hour",
        ),
        Budget(REGISTER, 600, config.registrations_per_10_minutes, False, "agents", "registrations_per_10_minutes"),
    ]
    return {series: [b for b in found if b.series == series and b.limit > 0] for series in SERIES}


def size_text(size: float) -> str:
    """Bytes as people read them: 2.0 GB, 750.3 MB, 50 kB (powers of ten, as max_db_mb counts)."""
    if size >= 1e9:
        return f"{size / 1e9:.1f} GB"
    return f"{size / MB:.1f} MB" if size >= MB else f"{size / 1e3:.0f} kB"


def _window(seconds: int) -> str:
    return {60: "minute", 600: "10 minutes", 3600: "hour"}.get(seconds, f"{seconds} s")


def _after(seconds: float) -> str:
    return f"{max(1, round(seconds))} s" if seconds < 120 else f"{round(seconds / 60)} min"


class DatabaseSize(BaseModel):
    """The database's size against its ceiling (board_stats)."""

    bytes: int
    limit_bytes: int | None = Field(None, description="quotas.max_db_mb; null: no ceiling")
    percent: float | None = None
    note: str | None = Field(None, description="from 80 %: what happens at the ceiling")


class Quotas:
    """The limits of one board (`config` None or disabled: none), charged inside its write transactions.
    `clock`: the time the windows are measured in (tests move it)."""

    def __init__(self, store: Store, config: QuotaConfig | None = None, clock: Callable[[], float] = time.time):
        self.store = store
        self.config = config if config is not None else QuotaConfig(enabled=False)
        self.on = self.config.enabled
        self.clock = clock
        self.budgets = budgets(self.config)
        self.max_bytes = round(self.config.max_db_mb * MB) if self.on else 0
        self._size: int | None = None
        self._measured = float("-inf")  # time.monotonic() of the last measurement
        self._warned = False
        self._charges = 0
        self._lock = threading.Lock()
        # refusals this process answered, by (agent, kind), for /metrics: a refused write leaves no row to count
        self.refused: Counter[tuple[str, str]] = Counter()

    # ----------------------------------------------------------------- charging

    def charge(
        self,
        db: Database,
        agent: str,
        kind: str,
        units: int = 1,
        chars: int = 0,
        per: int = 1,
        record: bool = True,
        reads: list[tuple[str, list]] = (),
        seen: Callable[[list[list[dict]]], None] | None = None,
    ) -> None:
        """Inside the write transaction of a bulk write, before it writes anything: refuse it (OverQuota, one
        sentence) if the database is at its ceiling or the write would pass one of the agent's limits for
        `kind`, else record it. `units`: calls or items; `chars`: its characters; `per`: how many times they
        count (a broadcast's recipients); `record=False`: the refusal only (`check`). `reads`: the caller's own
        reads, read with the agent's usage (one round trip on a database server); `seen` gets their rows
        (`rows_many`) before a refusal is decided, and may refuse the write itself."""
        if not self.on or agent in BOARD_ACTORS:
            if seen is not None:
                seen(rows_many(db, list(reads)))
            return
        self._check_size(db)
        self._spend(db, agent, kind, units, chars * per, per, record=record, reads=reads, seen=seen)

    def check(self, db: Database, agent: str, kind: str, units: int = 1, chars: int = 0) -> None:
        """`charge`'s refusal, recording nothing: for a call to find out before costly work (embedding a
        lesson) whether its write would be refused; the write still charges in its own transaction."""
        self.charge(db, agent, kind, units, chars, record=False)

    def admit(self, db: Database, name: str) -> None:
        """Inside the write that registers a new agent by itself (whoami): refuse it past the board's caps."""
        if not self.on:
            return
        ask = f"ask the operator for a token (`hiveboard agent add {name}`)"
        most = self.config.max_agents
        if most and db.execute("SELECT count(*) FROM agents").fetchone()[0] >= most:
            raise OverQuota(
                f"the board has {most} agents, the most that may register themselves (HIVEBOARD_QUOTAS__MAX_AGENTS"
                f"={most}); nothing was written; {ask}"
            )
        self._spend(db, EVERYONE, REGISTER, 1, 0, 1, ask)

    def _spend(
        self,
        db: Database,
        agent: str,
        kind: str,
        units: int,
        chars: int,
        per: int,
        ask: str = "",
        record: bool = True,
        reads: list[tuple[str, list]] = (),
        seen: Callable[[list[list[dict]]], None] | None = None,
    ) -> None:
        if units < 1:  # nothing is written
            if seen is not None:
                seen(rows_many(db, list(reads)))
            return
        series = SERIES[kind]
        limits = [b for name in series for b in self.budgets[name]]
        ts = self.clock()
        latest, used, read = self._usage(db, agent, series, limits, ts, reads)
        if seen is not None:
            seen(read)
        over = self._over(limits, used, units, chars, 1)
        factor = self.config.operator_factor
        if over is not None and agent != EVERYONE and factor > 1 and self._operator(db, agent):
            over = self._over(limits, used, units, chars, factor)
        else:
            factor = 1
        if over is not None:
            with self._lock:
                self.refused[(agent, kind)] += 1
            raise OverQuota(self._refusal(db, agent, kind, over, used, latest, units, chars, per, factor, ts, ask))
        if not record:
            return
        for name in series:
            at, total_units, total_chars = latest.get(name, (ts, 0, 0))
            db.execute(
                "INSERT INTO quota_usage (agent, kind, at, total_units, total_chars, units, chars) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                # never before the series' newest row (another node's clock may run ahead): the totals stay in order
                [agent, name, max(ts, at), total_units + units, total_chars + chars, units, chars],
            )
        with self._lock:
            self._charges += 1
            sweep = self._charges % PRUNE_EVERY == 0
        if sweep:
            db.execute("DELETE FROM quota_usage WHERE at <= ?", [ts - KEEP_SECONDS])

    def _usage(
        self,
        db: Database,
        agent: str,
        series: tuple[str, ...],
        limits: list[Budget],
        ts: float,
        reads: list[tuple[str, list]] = (),
    ) -> tuple[dict[str, tuple[float, int, int]], dict[tuple[str, int], tuple[int, int]], list[list[dict]]]:
        """({series: (at, total units, total characters) of its newest row}, {(series, window seconds): (units,
        characters) written within it}, the rows of `reads`), in one statement of two primary-key lookups per series
        and window, and `reads` with it."""
        arms, params, keys = [], [], []
        for name in series:
            arms.append(
                f"SELECT {len(arms)} AS arm, at, total_units, total_chars FROM (SELECT at, total_units, total_chars "
                "FROM quota_usage WHERE agent = ? AND kind = ? ORDER BY at DESC, total_units DESC LIMIT 1) AS q"
                f"{len(arms)}"
            )
            params += [agent, name]
            keys.append((name, None))
            for seconds in sorted({b.seconds for b in limits if b.series == name}):
                # the totals before the window's first row
                arms.append(
                    f"SELECT {len(arms)}, at, total_units - units, total_chars - chars FROM (SELECT at, total_units, "
                    "total_chars, units, chars FROM quota_usage WHERE agent = ? AND kind = ? AND at > ? ORDER BY at, "
                    f"total_units LIMIT 1) AS q{len(arms)}"
                )
                params += [agent, name, ts - seconds]
                keys.append((name, seconds))
        usage, *read = rows_many(db, [(" UNION ALL ".join(arms), params), *reads])
        found = {row["arm"]: tuple(row.values())[1:] for row in usage}
        latest = {name: found[n] for n, (name, seconds) in enumerate(keys) if seconds is None and n in found}
        used = {}
        for n, (name, seconds) in enumerate(keys):
            if seconds is not None and n in found:
                _, before_units, before_chars = found[n]
                _, total_units, total_chars = latest[name]
                used[(name, seconds)] = (total_units - before_units, total_chars - before_chars)
        return latest, used, read

    @staticmethod
    def _total(budget: Budget, used: dict, units: int = 0, chars: int = 0) -> int:
        spent = used.get((budget.series, budget.seconds), (0, 0))[budget.chars]
        return spent + (chars if budget.chars else units)

    def _over(self, limits: list[Budget], used: dict, units: int, chars: int, factor: int) -> Budget | None:
        return next((b for b in limits if self._total(b, used, units, chars) > b.limit * factor), None)

    def cap(self, name: str) -> int | float:
        """One of the caps above (0: off; always 0 while quotas are off)."""
        return getattr(self.config, name) if self.on else 0

    @staticmethod
    def _operator(db: Database, agent: str) -> bool:
        row = db.execute("SELECT role FROM agents WHERE name = ?", [agent]).fetchone()
        return row is not None and row[0] in OPERATOR_ROLES

    def _refusal(
        self,
        db: Database,
        agent: str,
        kind: str,
        budget: Budget,
        used: dict,
        latest: dict,
        units: int,
        chars: int,
        per: int,
        factor: int,
        ts: float,
        ask: str,
    ) -> str:
        """One sentence: the limit, what was written within it, that nothing was written, and what to do."""
        limit = budget.limit * factor
        adds = chars if budget.chars else units
        spent = self._total(budget, used)
        setting = budget.env(self.config) + (f", ×{factor} for role lead or human" if factor > 1 else "")
        window = _window(budget.seconds)
        retry = ""
        if adds <= limit:
            retry = f"retry in {_after(self._wait(db, agent, budget, latest, limit - adds, ts))}"
        if agent == EVERYONE:
            return (
                f"{spent:,} agents registered themselves on this board in the last {window}, the quota ({setting}); "
                f"nothing was written; {ask}, or {retry}"
            )
        counted = " (a broadcast counts once per recipient)" if budget.chars and kind == BROADCAST and per > 1 else ""
        if not retry:
            return (
                f"this call alone adds {adds:,} {budget.what}{counted}, more than the quota of {limit:,} per "
                f"{window} ({setting}); nothing was written; send less"
                + (", or to fewer agents" if kind == BROADCAST else "")
            )
        return (
            f"{agent}'s {budget.what} in the last {window} come to {spent:,} and this call adds {adds:,}{counted}, "
            f"over the quota of {limit:,} ({setting}); nothing was written; {retry}"
            + (", or send less" if budget.chars else "")
        )

    def _wait(self, db: Database, agent: str, budget: Budget, latest: dict, room: int, ts: float) -> float:
        """Seconds until the agent's usage within the budget's window is down to `room`: once the first row whose
        total reaches the newest total less `room` has left the window, what remains in it fits."""
        measure = "total_chars" if budget.chars else "total_units"
        enough = latest[budget.series][2 if budget.chars else 1] - room
        found = db.execute(
            f"SELECT at FROM quota_usage WHERE agent = ? AND kind = ? AND at > ? AND {measure} >= ? ORDER BY at, "
            "total_units LIMIT 1",
            [agent, budget.series, ts - budget.seconds, enough],
        ).fetchone()
        return found[0] + budget.seconds - ts if found else budget.seconds

    # ----------------------------------------------------------------- the database's size

    def _check_size(self, db: Database) -> None:
        if not self.max_bytes:
            return
        if time.monotonic() - self._measured >= self.config.size_check_seconds:
            self._measure(db)
        if self._size is not None and self._size >= self.max_bytes:
            raise OverQuota(
                f"the board's database is at its size limit ({size_text(self.max_bytes)}); nothing was written; an "
                "operator must archive or raise HIVEBOARD_QUOTAS__MAX_DB_MB"
            )

    def _measure(self, db: Database) -> int:
        size = self.store.dialect.size(db)
        with self._lock:
            self._size, self._measured = size, time.monotonic()
            near = bool(self.max_bytes) and size >= WARN_AT * self.max_bytes
            warn, self._warned = near and not self._warned, near
        if warn:
            log.warning(
                "the board's database is %s, %d %% of its size limit (%s, HIVEBOARD_QUOTAS__MAX_DB_MB): at the limit "
                "messages, remember, lessons and artifacts are refused; archive or raise the limit",
                size_text(size),
                100 * size // self.max_bytes,
                size_text(self.max_bytes),
            )
        return size

    def database(self) -> DatabaseSize:
        """The database's size now, against the ceiling (measured afresh: board_stats)."""
        size = self._measure(self.store.db)
        if not (self.on and self.max_bytes):
            return DatabaseSize(bytes=size)
        share = size / self.max_bytes
        note = None
        if share >= 1:
            note = "at its size limit: messages, remember, lessons and artifacts are refused until an operator acts"
        elif share >= WARN_AT:
            note = "over 80 % of its size limit: at the limit messages, remember, lessons and artifacts are refused"
        return DatabaseSize(bytes=size, limit_bytes=self.max_bytes, percent=round(100 * share, 1), note=note)
