"""Path reservations: an agent says which paths (globs) it is about to edit, so that others see it, a claim
warns about it, and a git hook refuses others' commits to them (server/guard.py).

Patterns are paths relative to a repository's root, `/` between segments: `*` matches within one segment,
`**` any number of whole segments (none included), `?` one character, `[abc]` `[a-z]` `[!a-z]` one of (or
none of) a class, and a backslash makes the next character literal. A directory covers everything under it:
a pattern ending in `/`, or a plain path (no wildcard) whose last segment has no '.' after its first character,
so `src/api`, `src/api/` and `src/api/**` are one reservation (kept as `src/api/**`), while `src/app.py` is one
file and `src/*` the entries of src, not what is deeper. (Which plain paths are directories cannot be known
from the board: a file without an extension, such as `Makefile`, is taken as a directory too, which can only
make it overlap more; a directory with a dot in its name is written with a trailing `/`.) Matching is
case-sensitive, as git is by default.

Two patterns overlap when some path matches both. That is decided exactly, on the patterns themselves (never
by trying sample paths): each pattern is an automaton over segments whose segment tests are automata over
characters, and the walk over their product looks for an accepting state, each state visited once (`overlap`).

A reservation is live while it is not released, not past its TTL and, when it is tied to a card, while its
agent still holds that card (in progress with its lease running, blocked, or in review). A card that ends (done,
back to todo by a release or its lease running out, or handed to a person in needs_human) releases its
reservations as it moves (`card_ended`, a hook of the state machine). Reservations are kept per scope: the
card's repository (tasks.repo), or '' for the board when the card names none or there is no card.

`reserve` checks and writes in one write transaction: every requested pattern against the live reservations of
the other agents that the git guard would weigh with it (its scope and the board's; on the board, every scope's);
an overlap where either side is exclusive refuses the whole call, naming the holder, its pattern, its card and
until when, and nothing is written. Two agents racing for overlapping paths
are serialised by the store's write lock, so one of them sees the other's reservation.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache

from . import cards
from ._sqlite_utils import Database
from .agents import is_operator
from .db import Store, iso, now, placeholders, rows
from .errors import Conflict, Forbidden, InvalidInput
from .machine import Machine
from .models import Released, Reservation, Reserved
from .quotas import Quotas

MAX_PATTERNS = 50  # per call, and per card's declared paths
PATTERN_CHARS = 300
MAX_LIVE = 200  # live reservations one agent holds at once
MAX_TTL = 7 * 86_400
DEFAULT_TTL = 3_600
REASON_CHARS = 500
SHOWN = 20  # reservations a card or the board lists (with the count of all)
# states the overlap walks may visit for one call inside the write lock (about a second of work): a pair of
# patterns costs at most the product of their lengths, so hostile patterns could otherwise hold the lock long
STEPS = 1_000_000
HOLDING = ("in_progress", "blocked", "review")  # a card its agent holds, for its reservations to stay live
ENDS = ("todo", "done", "needs_human", "cancelled")  # a card moving here releases its reservations

# ----------------------------------------------------------------------------- patterns

STAR = "*"  # a token of a segment: any characters (none included)
GLOBSTAR = "**"  # a segment of a pattern: any number of whole segments (none included)
TOP = 0x10FFFF
SLASH = ord("/")
ANY = ((0, SLASH - 1), (SLASH + 1, TOP))  # `?`: one character, never '/'
_DRIVE = re.compile(r"^[A-Za-z]:([/\\]|$)")  # C:/x, C:\x, C:
WILD = "*?[\\"  # what makes a segment more than its literal text


def normalize(raw: str) -> str:
    """The canonical form of a pattern (no `./`, `.` or empty segments, one `**` where there were several in a
    row, and `/**` after a directory: a pattern ending in `/`, or a path without wildcards whose last segment has
    no '.' after its first character, such as `src/api` or `.github`), or InvalidInput in one sentence: empty,
    too long, a control character, an absolute path, a `..` segment, an unclosed `[`, a trailing backslash, or a
    pattern that no path matches."""
    shown = raw if len(raw) <= 80 else raw[:77] + "..."
    if not raw:
        raise InvalidInput("a path pattern is empty; give a path relative to the repository's root, e.g. src/app.py")
    if len(raw) > PATTERN_CHARS:
        raise InvalidInput(f"path pattern {shown!r} is {len(raw)} characters; at most {PATTERN_CHARS}")
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise InvalidInput(f"path pattern {shown!r} contains a control character; send the path without it")
    if raw.startswith(("/", "~")) or _DRIVE.match(raw):
        raise InvalidInput(
            f"path pattern {shown!r} is absolute; give it relative to the repository's root, e.g. src/app.py"
        )
    segments: list[str] = []
    parts = raw.split("/")
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            raise InvalidInput(f"path pattern {shown!r} has a '..' segment; name paths inside the repository only")
        if part == GLOBSTAR and segments and segments[-1] == GLOBSTAR:
            continue
        segments.append(part)
    if not segments:
        raise InvalidInput(f"path pattern {shown!r} names no path; use ** for the whole repository")
    last = segments[-1]
    literal = not any(c in part for part in segments for c in WILD)
    if last != GLOBSTAR and (parts[-1] in ("", ".") or (literal and "." not in last[1:])):
        segments.append(GLOBSTAR)  # a directory: everything under it
    canonical = "/".join(segments)
    for part in segments:
        if part != GLOBSTAR:
            _segment(part, shown)
    if not overlap(canonical, GLOBSTAR):
        raise InvalidInput(f"path pattern {shown!r} matches no path (an empty [...] class); correct the class")
    return canonical


def normalize_all(raws: Iterable[str], what: str = "paths") -> list[str]:
    """Each pattern's canonical form, duplicates dropped, in order; at most MAX_PATTERNS."""
    raws = list(raws)
    if len(raws) > MAX_PATTERNS:
        raise InvalidInput(f"{what} has {len(raws)} patterns; at most {MAX_PATTERNS}")
    return list(dict.fromkeys(normalize(raw) for raw in raws))


def whole_repository(pattern: str) -> bool:
    """Whether a (normalised) pattern covers every path: only `**` and `*` segments, one `**` at least."""
    segments = pattern.split("/")
    return GLOBSTAR in segments and all(s in (GLOBSTAR, "*") for s in segments)


def overlap(a: str, b: str) -> bool:
    """Whether some path matches both canonical patterns."""
    return _paths_meet(_pattern(a), _pattern(b))


def covers(pattern: str, path: str) -> bool:
    """Whether the canonical `pattern` covers the file `path` (a path as git names it, not a pattern)."""
    segments = tuple(tuple(((ord(c), ord(c)),) for c in part) for part in path.split("/") if part)
    return bool(segments) and _paths_meet(_pattern(pattern), segments)


class TooComplex(InvalidInput):
    """The overlap walks of one call went past their budget of steps."""


_budget = threading.local()  # per thread


@contextmanager
def budget(steps: int = STEPS) -> Iterator[None]:
    """Bound the states the overlap walks of this thread visit until the block ends (TooComplex past it)."""
    _budget.left = steps
    try:
        yield
    finally:
        _budget.left = None


def _charge(steps: int) -> None:
    left = getattr(_budget, "left", None)
    if left is not None:
        _budget.left = left - steps
        if _budget.left < 0:
            raise TooComplex(f"more than {STEPS:,} steps")


def literal_prefix(pattern: str) -> tuple[str, ...]:
    """The leading segments of a canonical pattern that hold no wildcard (a cheap first test of overlap)."""
    out = []
    for part in pattern.split("/"):
        if any(c in part for c in WILD):
            break
        out.append(part)
    return tuple(out)


def _may_meet(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return all(x == y for x, y in zip(a, b))


@lru_cache(maxsize=4096)
def _pattern(canonical: str) -> tuple:
    """A canonical pattern as segments: GLOBSTAR, or a segment's tokens."""
    return tuple(GLOBSTAR if part == GLOBSTAR else _segment(part, canonical) for part in canonical.split("/"))


def _segment(text: str, shown: str) -> tuple:
    """One segment's tokens: STAR, or a set of characters as sorted disjoint ranges of code points."""
    tokens: list = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 == len(text):
                raise InvalidInput(
                    f"path pattern {shown!r} ends a segment with a backslash; a backslash makes the next "
                    "character literal (write \\\\ for a backslash)"
                )
            tokens.append(_chars([(ord(text[i + 1]),) * 2]))
            i += 2
        elif c == "*":
            if not tokens or tokens[-1] is not STAR:
                tokens.append(STAR)
            i += 1
        elif c == "?":
            tokens.append(ANY)
            i += 1
        elif c == "[":
            token, i = _class(text, i, shown)
            tokens.append(token)
        else:
            tokens.append(_chars([(ord(c), ord(c))]))
            i += 1
    return tuple(tokens)


def _class(text: str, start: int, shown: str) -> tuple[tuple, int]:
    """The class `[...]` at `start`: its set of characters, and where the pattern goes on after it."""
    i = start + 1
    negated = i < len(text) and text[i] in "!^"
    i += negated
    ranges: list[tuple[int, int]] = []
    first = True
    while True:
        if i >= len(text):
            raise InvalidInput(
                f"path pattern {shown!r} has a '[' that is never closed; close the class with ']' or write \\[ "
                "for a literal ["
            )
        c = text[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\" and i + 1 < len(text):
            c, i = text[i + 1], i + 2
        else:
            i += 1
        low = high = ord(c)
        if i + 1 < len(text) and text[i] == "-" and text[i + 1] != "]":
            end = text[i + 1]
            if end == "\\" and i + 2 < len(text):
                end, i = text[i + 2], i + 3
            else:
                i += 2
            high = ord(end)
        if low <= high:
            ranges.append((low, high))
    chars = _chars(ranges)
    if negated:
        chars = _complement(chars)
    return _chars(list(chars)), i


def _without_slash(low: int, high: int) -> list[tuple[int, int]]:
    if low <= SLASH <= high:
        return [r for r in ((low, SLASH - 1), (SLASH + 1, high)) if r[0] <= r[1]]
    return [(low, high)]


def _chars(ranges: list[tuple[int, int]]) -> tuple:
    """Ranges sorted and merged (a '/' in them stays out: it is never part of a segment)."""
    merged: list[list[int]] = []
    for low, high in sorted(part for given in ranges for part in _without_slash(*given)):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return tuple((low, high) for low, high in merged)


def _complement(chars: tuple) -> tuple:
    out, at = [], 0
    for low, high in chars:
        if low > at:
            out.append((at, low - 1))
        at = high + 1
    if at <= TOP:
        out.append((at, TOP))
    return tuple(out)


def _chars_meet(a: tuple, b: tuple) -> bool:
    """Whether two sets of characters share one."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def _paths_meet(a: tuple, b: tuple) -> bool:
    """Whether some path (one or more segments) matches both segment sequences: a walk over the product of the
    two, from (0, 0) to (len(a), len(b)), each state visited once."""
    n, m = len(a), len(b)
    seen = {(0, 0)}
    stack = [(0, 0)]
    while stack:
        i, j = stack.pop()
        if i == n and j == m:
            _charge(len(seen))
            return True
        x = a[i] if i < n else None
        y = b[j] if j < m else None
        steps = []
        if x is GLOBSTAR:
            steps.append((i + 1, j))  # ** matches no segment
            if y is not None and y is not GLOBSTAR and _segments_meet(y, (STAR,)):
                steps.append((i, j + 1))  # ** takes the segment y matches, and may take more
        if y is GLOBSTAR:
            steps.append((i, j + 1))
            if x is not None and x is not GLOBSTAR and _segments_meet(x, (STAR,)):
                steps.append((i + 1, j))
        if x not in (None, GLOBSTAR) and y not in (None, GLOBSTAR) and _segments_meet(x, y):
            steps.append((i + 1, j + 1))
        for step in steps:
            if step not in seen:
                seen.add(step)
                stack.append(step)
    _charge(len(seen))
    return False


@lru_cache(maxsize=65536)
def _segments_meet(a: tuple, b: tuple) -> bool:
    """Whether some segment (one or more characters, no '/') matches both token sequences: the same walk over
    (position in a, position in b, whether a character was taken yet)."""
    n, m = len(a), len(b)
    seen = {(0, 0, False)}
    stack = [(0, 0, False)]
    while stack:
        i, j, took = stack.pop()
        if i == n and j == m:
            if took:
                _charge(len(seen))
                return True
            continue
        x = a[i] if i < n else None
        y = b[j] if j < m else None
        steps = []
        if x is STAR:
            steps.append((i + 1, j, took))  # * takes no character
            if y is not None and y is not STAR and y:
                steps.append((i, j + 1, True))  # * takes the character y matches, and may take more
        if y is STAR:
            steps.append((i, j + 1, took))
            if x is not None and x is not STAR and x:
                steps.append((i + 1, j, True))
            if x is STAR:
                steps.append((i, j, True))  # both take the same character
        if x not in (None, STAR) and y not in (None, STAR) and _chars_meet(x, y):
            steps.append((i + 1, j + 1, True))
        for step in steps:
            if step not in seen:
                seen.add(step)
                stack.append(step)
    _charge(len(seen))
    return False


# ----------------------------------------------------------------------------- the store

# a reservation is live: not released, not past its TTL, and its card (if any) still held by its agent
LIVE = (
    "r.released_at IS NULL AND r.expires_at > ? AND (r.task_id IS NULL OR EXISTS (SELECT 1 FROM tasks t WHERE "
    "t.id = r.task_id AND t.assignee = r.agent AND (t.status IN ('blocked', 'review') OR (t.status = "
    "'in_progress' AND t.lease_expires_at >= ?))))"
)


def reservation(row: dict) -> Reservation:
    return Reservation(
        pattern=row["pattern"],
        agent=row["agent"],
        exclusive=bool(row["exclusive"]),
        task_id=row["task_id"],
        repo=row["scope"] or None,
        reason=row["reason"],
        until=iso(row["expires_at"]),
    )


def scope_of(card: dict | None) -> str:
    """A reservation's scope: its card's repository, else '' (the board)."""
    return (card.get("repo") or "") if card else ""


def one_line(text: str, width: int = 120) -> str:
    """A reason as a refusal quotes it: on one line, cut to `width` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(row: dict) -> str:
    """A reservation as a refusal names it: whose, which pattern, for which card, until when."""
    card = f" for task {row['task_id']}" if row["task_id"] is not None else ""
    why = f" ({one_line(row['reason'])})" if row["reason"] else ""
    kind = "exclusively" if row["exclusive"] else "shared"
    return f"{row['pattern']}, held {kind} by {row['agent']}{card} until {iso(row['expires_at'])}{why}"


class Reservations:
    """Reserving and releasing paths, and what is live where; the transactions are the board's write
    transactions, with the lease sweep first (so a card whose lease ran out has released its reservations)."""

    def __init__(self, store: Store, machine: Machine, quotas: Quotas | None = None):
        """`quotas`: the board's caps (how long a reservation tied to no card may last); None: none."""
        self.store = store
        self.machine = machine
        self.quotas = quotas

    # ------------------------------------------------------------------ writing

    def reserve(
        self,
        actor: str,
        paths: list[str],
        ttl_seconds: int = DEFAULT_TTL,
        exclusive: bool = True,
        reason: str | None = None,
        task_id: int | None = None,
    ) -> Reserved:
        """Reserve `paths` for `actor`, tied to the card `task_id` (default: the one card it holds; none: only
        the TTL ends it), in one write transaction: an overlap with another agent's live reservation where either
        side is exclusive refuses the whole call and nothing is written; the agent's own live reservation of the
        same pattern is extended."""
        patterns = normalize_all(paths)
        if not patterns:
            raise InvalidInput("paths is empty; give the path patterns to reserve, e.g. ['src/api/**']")
        if not 1 <= ttl_seconds <= MAX_TTL:
            raise InvalidInput(f"ttl_seconds must be 1 to {MAX_TTL} (a week); got {ttl_seconds}")
        if reason is not None and len(reason) > REASON_CHARS:
            raise InvalidInput(f"reason is {len(reason)} characters; at most {REASON_CHARS}")
        ts = now()
        with self.store.write() as db:
            self.machine.sweep(db, ts)
            # reservations past their TTL are marked ended, so that the index of the unreleased stays the live ones
            db.execute(
                "UPDATE reservations SET released_at = expires_at WHERE released_at IS NULL AND expires_at <= ?", [ts]
            )
            card = self._card(db, actor, task_id)
            self._capped(db, actor, patterns, card, ttl_seconds)
            scope = scope_of(card)
            # the others' reservations the git guard would hold against this one's holder or theirs: a repository's
            # guard checks its own scope and the board's (''), so a reservation in a repository meets the board's
            # too, and one on the board meets every repository's (else the check grants what the guard refuses)
            within = "" if not scope else "r.scope IN (?, '') AND "
            live = rows(
                db,
                f"SELECT r.* FROM reservations r WHERE {within}{LIVE} ORDER BY r.id",
                [*([scope] if scope else []), ts, ts],
            )
            mine = {r["pattern"]: r for r in live if r["agent"] == actor and r["scope"] == scope}
            others = [r for r in live if r["agent"] != actor]
            try:
                with budget():
                    conflicts = _conflicts(patterns, others, exclusive)
            except TooComplex:
                raise InvalidInput(
                    f"checking these patterns against the {len(others)} live reservations here takes more than "
                    f"{STEPS:,} steps; reserve fewer patterns, or patterns with fewer wildcards (nothing was reserved)"
                ) from None
            if conflicts:
                asked, held = conflicts[0]
                more = f" (and {len(conflicts) - 1} more overlaps)" if len(conflicts) > 1 else ""
                raise Conflict(_refusal(asked, held, exclusive, more))
            fresh = [p for p in patterns if p not in mine]
            if len(mine) + len(fresh) > MAX_LIVE:
                raise InvalidInput(
                    f"you would hold {len(mine) + len(fresh)} live reservations here, at most {MAX_LIVE}; release "
                    "some with release_paths, or reserve a directory instead of its files (nothing was reserved)"
                )
            task = card["id"] if card else None
            until = ts + ttl_seconds
            out = []
            for pattern in patterns:
                held = mine.get(pattern)
                if held is not None:
                    row = rows(
                        db,
                        "UPDATE reservations SET expires_at = ?, exclusive = ?, reason = ?, task_id = ? WHERE id = ? "
                        "RETURNING *",
                        [max(held["expires_at"], until), int(exclusive), reason, task, held["id"]],
                    )[0]
                else:
                    # the agent's own reservation of it that is no longer live (expired, its card ended) makes way
                    db.execute(
                        "UPDATE reservations SET released_at = ? WHERE scope = ? AND agent = ? AND pattern = ? "
                        "AND released_at IS NULL",
                        [ts, scope, actor, pattern],
                    )
                    row = rows(
                        db,
                        "INSERT INTO reservations (scope, agent, task_id, pattern, exclusive, reason, created_at, "
                        "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
                        [scope, actor, task, pattern, int(exclusive), reason, ts, until],
                    )[0]
                out.append(reservation(row))
        tied = f" for task {task} (released when it ends)" if task is not None else ""
        return Reserved(
            reservations=out,
            message=f"reserved {len(out)} pattern(s){tied} until {iso(until)}; release_paths when done",
        )

    def _capped(self, db: Database, actor: str, patterns: list[str], card: dict | None, ttl_seconds: int) -> None:
        """Refuse what would let one agent stop everyone's commits: a pattern that covers every path of the
        repository unless an operator asks, and a reservation tied to no card longer than the
        board allows (one tied to a card ends with it)."""
        wide = next((p for p in patterns if whole_repository(p)), None)
        if wide is not None and not is_operator(db, actor):
            raise Forbidden(
                f"{wide!r} reaches every directory of the repository and only an operator may reserve that; nothing "
                "was reserved: reserve the directories you edit, e.g. 'src/api/**'"
            )
        most = self.quotas.cap("reservation_seconds_without_card") if self.quotas is not None else 0
        if card is None and most and ttl_seconds > most:
            raise InvalidInput(
                f"a reservation tied to no card lasts at most {most} s "
                f"(HIVEBOARD_QUOTAS__RESERVATION_SECONDS_WITHOUT_CARD={most}); nothing was reserved: claim the card "
                f"the edit is for, or ask for ttl_seconds up to {most}"
            )

    def _card(self, db: Database, actor: str, task_id: int | None) -> dict | None:
        """The card a reservation is tied to: `task_id`, which the agent must hold, else the one card it holds,
        else None; refused when it holds several and did not say which."""
        marks = placeholders(HOLDING)
        if task_id is not None:
            row = cards.row(db, task_id)
            if row["assignee"] != actor or row["status"] not in HOLDING:
                raise InvalidInput(
                    f"task {task_id} is not a card you hold (it is {row['status']}"
                    + (f", held by {row['assignee']}" if row["assignee"] and row["status"] in HOLDING else "")
                    + "); claim it first, or reserve without task_id (then only ttl_seconds ends it)"
                )
            return row
        held = rows(
            db, f"SELECT * FROM tasks WHERE assignee = ? AND status IN ({marks}) ORDER BY id", [actor, *HOLDING]
        )
        if len(held) > 1:
            ids = ", ".join(str(r["id"]) for r in held[:10])
            raise InvalidInput(f"you hold tasks {ids}; say which one the reservation is for with task_id")
        return held[0] if held else None

    def release(self, actor: str, paths: list[str]) -> Released:
        """Release the agent's own reservations of these patterns (in every scope) at once; refuse the whole call,
        naming what the agent holds, if one is not its own."""
        asked = {normalize(raw): raw for raw in paths[:MAX_PATTERNS]}
        patterns = normalize_all(paths)
        if not patterns:
            raise InvalidInput("paths is empty; give the patterns to release, as reserve_paths answered them")
        ts = now()
        with self.store.write() as db:
            marks = placeholders(patterns)
            held = rows(
                db,
                f"SELECT id, pattern FROM reservations WHERE agent = ? AND released_at IS NULL AND pattern IN ({marks})",
                [actor, *patterns],
            )
            unknown = [p for p in patterns if p not in {r["pattern"] for r in held}]
            if unknown:
                live = [
                    r["pattern"]
                    for r in rows(
                        db,
                        f"SELECT r.pattern FROM reservations r WHERE r.agent = ? AND {LIVE} ORDER BY r.id LIMIT ?",
                        [actor, ts, ts, SHOWN + 1],
                    )
                ]
                holds = (", ".join(live[:SHOWN]) + (" …" if len(live) > SHOWN else "")) if live else "nothing"
                name = repr(asked[unknown[0]]) + (f" ({unknown[0]})" if asked[unknown[0]] != unknown[0] else "")
                raise InvalidInput(
                    f"you hold no reservation of {name}; you hold {holds}: release patterns as listed "
                    "(nothing was released)"
                )
            ids = [r["id"] for r in held]
            db.execute(f"UPDATE reservations SET released_at = ? WHERE id IN ({placeholders(ids)})", [ts, *ids])
        return Released(released=patterns, message=f"released {len(patterns)} pattern(s)")

    def card_ended(self, db: Database, row: dict, came_from: str) -> None:
        """A state machine hook: a card that ended (ENDS) releases the reservations tied to it (sent with the
        transaction's next statement)."""
        db.execute(
            "UPDATE reservations SET released_at = ? WHERE task_id = ? AND released_at IS NULL",
            [row["updated_at"], row["id"]],
        )

    # ------------------------------------------------------------------ reading (inside the caller's read)

    @staticmethod
    def live_statements(ts: float, limit: int = SHOWN) -> list[tuple[str, list]]:
        """The reads of the live reservations, soonest to end first (at most `limit`), and how many there are
        (live_from makes the answer of their rows)."""
        return [
            (f"SELECT count(*) AS n FROM reservations r WHERE {LIVE}", [ts, ts]),
            (f"SELECT r.* FROM reservations r WHERE {LIVE} ORDER BY r.expires_at, r.id LIMIT ?", [ts, ts, limit]),
        ]

    @staticmethod
    def live_from(counted: list[dict], found: list[dict]) -> tuple[list[Reservation], int]:
        return [reservation(r) for r in found], counted[0]["n"]

    @staticmethod
    def of_card(db: Database, card: dict, ts: float) -> tuple[list[Reservation], int]:
        """The live reservations in the card's scope that are tied to it or overlap its declared paths (at most
        SHOWN), and how many there are."""
        paths = json.loads(card.get("paths") or "[]")
        live = rows(
            db, f"SELECT r.* FROM reservations r WHERE r.scope = ? AND {LIVE} ORDER BY r.id", [scope_of(card), ts, ts]
        )
        found = _matching(live, paths, card["id"])
        return [reservation(r) for r in found[:SHOWN]], len(found)

    @staticmethod
    def others_on(db: Database, card: dict, agent: str, ts: float) -> list[Reservation]:
        """The live reservations of agents other than `agent` overlapping the card's declared paths (at most
        SHOWN): what a claim of the card warns about."""
        paths = json.loads(card.get("paths") or "[]")
        if not paths:
            return []
        live = rows(
            db,
            f"SELECT r.* FROM reservations r WHERE r.scope = ? AND r.agent != ? AND {LIVE} ORDER BY r.id",
            [scope_of(card), agent, ts, ts],
        )
        return [reservation(r) for r in _matching(live, paths)[:SHOWN]]


def blocking(
    db: Database, files: list[str], agent: str | None, scopes: list[str] | None, ts: float | None = None
) -> list[tuple[str, dict]]:
    """(file, reservation row) for each file that a live reservation of an agent other than `agent` covers, in
    the `scopes` (None: every scope), an exclusive one named before a shared one: what the git guard refuses
    (exclusive) or mentions (shared). `agent` None: nobody's reservations are the committer's own."""
    ts = now() if ts is None else ts
    where, params = LIVE, [ts, ts]
    if agent is not None:
        where += " AND r.agent != ?"
        params.append(agent)
    if scopes is not None:
        where += f" AND r.scope IN ({placeholders(scopes)})"
        params += scopes
    live = rows(db, f"SELECT r.* FROM reservations r WHERE {where} ORDER BY r.exclusive DESC, r.id", params)
    out = []
    for path in files:
        parts = tuple(p for p in path.split("/") if p)
        for r in live:
            if _may_meet(literal_prefix(r["pattern"]), parts) and covers(r["pattern"], path):
                out.append((path, r))
                break
    return out


def _matching(live: list[dict], paths: list[str], task_id: int | None = None) -> list[dict]:
    """The reservations tied to the card `task_id` or overlapping one of `paths`; within the budget of steps
    (a read's answer then lists those found before it ran out)."""
    found = []
    try:
        with budget():
            for r in live:
                prefix = literal_prefix(r["pattern"])
                if (task_id is not None and r["task_id"] == task_id) or any(
                    _may_meet(prefix, literal_prefix(p)) and overlap(r["pattern"], p) for p in paths
                ):
                    found.append(r)
    except TooComplex:
        pass
    return found


def _conflicts(patterns: list[str], others: list[dict], exclusive: bool) -> list[tuple[str, dict]]:
    """(asked pattern, another's live reservation) for each overlap where either side is exclusive."""
    found = []
    for pattern in patterns:
        prefix = literal_prefix(pattern)
        for held in others:
            if (exclusive or held["exclusive"]) and _may_meet(prefix, literal_prefix(held["pattern"])):
                if overlap(pattern, held["pattern"]):
                    found.append((pattern, held))
    return found


def _refusal(asked: str, held: dict, exclusive: bool, more: str) -> str:
    if exclusive and not held["exclusive"]:
        fix = "reserve it shared (exclusive=false), reserve other paths, or wait"
    else:
        fix = "reserve other paths, wait for it to end, or ask its holder (publish_message)"
    return f"{asked} overlaps {describe(held)}{more}: nothing was reserved; {fix}"
