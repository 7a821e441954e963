"""The shared memory's source of truth in SQLite: items, keyword search (FTS5 BM25), the outbox.

Every item — a critique, a lesson, a task's output, a message — is a row in `memory_items`, with its
embedding once one is computed. Chroma only indexes these rows (see memory/), so it can always be
rebuilt from here. New items are queued in `memory_outbox` in the same transaction as the write
that made them; an indexing worker leases them, embeds them, and removes them when indexed, so an
item is never lost if a process dies half-way.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, get_args

from pydantic import BaseModel, Field

from . import scopes
from ._sqlite_utils import Database
from .agents import is_operator
from .db import Store, iso, now, placeholders, rows
from .dialect import fts5_match, grown
from .errors import Forbidden, InvalidInput, NotFound
from .events import MemoryAdded, MemoryIndexed, encoded_sql
from .quotas import REMEMBER, Quotas
from .recall import Trust, held_reason

if TYPE_CHECKING:
    import numpy as np

MemoryKind = Literal["lesson", "critique", "output", "message", "note", "snippet", "document"]
KINDS: tuple[str, ...] = get_args(MemoryKind)
# what an agent may remember (stored as given, never merged); the other kinds come from the board's own work
NoteKind = Literal["note", "snippet", "document"]
MAX_TAGS = 20  # an item's tags, also after near-duplicates merged theirs into it (the MCP edge bounds one call)
REVIEW_ACTOR = "review"  # the author of what the review writes (a reserved agent name: no agent can take it)
WORD_RE = re.compile(r"\w+")  # any script: FTS5's unicode61 tokenizer splits the same way


class MemoryItem(BaseModel):
    id: int
    kind: str
    task_type: str | None = None
    task_id: int | None = None
    title: str = ""
    text: str
    tags: list[str] = []
    source: str | None = None
    created_by: str
    created_at: str
    deprecated: bool = False
    superseded_by: int | None = None
    merged_count: int = Field(1, description="how many times this was recorded (near-duplicates merged into it)")
    trust: Trust = Field(
        "unreviewed",
        description="reviewed (a passed review, a decided round's critique, a person), unreviewed (an agent's, "
        "found by search only) or imported (from a memory file)",
    )
    review_id: int | None = Field(None, description="the review round it came from")
    held: str | None = Field(None, description="why it is held back for a person (it reads like an instruction)")
    witnesses: int = Field(1, description="distinct authors (and cards, for the review's lessons) behind it")


class NewItem(BaseModel):
    """An item stored as given (remember, import): never merged into another item.

    `created_by`, `created_at`, `merged_count` and `deprecated` are kept from an imported file; a
    remembered item leaves them unset."""

    kind: str = "note"
    text: str
    title: str = ""
    task_type: str | None = None
    tags: list[str] = []
    task_id: int | None = None
    source: str | None = None
    created_by: str | None = None
    created_at: float | None = None
    merged_count: int = 1
    deprecated: bool = False
    trust: Trust = "unreviewed"
    review_id: int | None = None


# Critiques and outputs quote the code they are about (payloads included, when the code holds one) and are never
# handed as advice; what an agent writes as advice (lessons, notes, messages) is screened.
UNSCREENED = frozenset({"critique", "output"})

SOURCE_RE = re.compile(r"(task|message|review):(\d+)")


def source_ids(source: str | None) -> dict[str, int]:
    """The ids an item's source names ("message:12" -> message_id 12, "review:3:bandit" -> review_id 3)."""
    found = SOURCE_RE.match(source or "")
    return {f"{found.group(1)}_id": int(found.group(2))} if found else {}


# the newest lesson's or critique's id, NULL before the first: an expression (Knowledge.guidance)
GUIDANCE_MARK = (
    "(SELECT max(m) FROM (SELECT max(id) AS m FROM memory_items WHERE kind = 'lesson' "
    "UNION ALL SELECT max(id) AS m FROM memory_items WHERE kind = 'critique') AS g)"
)

# how many times an item already stored was changed (kept by triggers on memory_items: m027_memory_revision)
REVISION = "(SELECT n FROM memory_revision)"

# an item's columns that make a MemoryItem (not its vectors: 3 kB a row that nothing here reads)
ITEM = (
    "id, kind, task_type, task_id, title, text, tags, source, created_by, created_at, deprecated, superseded_by, "
    "merged_count, trust, review_id, held, witnesses"
)


def _item(row: dict) -> MemoryItem:
    return MemoryItem(
        id=row["id"],
        kind=row["kind"],
        task_type=row["task_type"],
        task_id=row["task_id"],
        title=row["title"],
        text=row["text"],
        tags=json.loads(row["tags"]),
        source=row["source"],
        created_by=row["created_by"],
        created_at=iso(row["created_at"]),
        deprecated=bool(row["deprecated"]),
        superseded_by=row["superseded_by"],
        merged_count=row["merged_count"],
        trust=row["trust"],
        review_id=row["review_id"],
        held=row["held"],
        witnesses=row["witnesses"],
    )


def witness(author: str, task_id: int | None) -> str:
    """Who vouches for a lesson, for counting: an agent once however many copies it records; the review once per
    card it mined the lesson from."""
    return f"card:{task_id}" if author == REVIEW_ACTOR and task_id is not None else author


STOPWORDS = frozenset(
    "a an and are as at be been but by can do does for from had has have how i if in into is it its me my no "
    "not of on or our so than that the their them then there these they this to was we were what when where "
    "which who why will with you your".split()
)


# The parts of an identifier: capitals before a capitalised word ("HTTP" in "HTTPServer"), capitalised or
# lowercase words, capitals, digits, other letters; what is neither (underscores, dots) separates parts.
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")


def identifier_parts(word: str) -> list[str]:
    """The lowercased parts of an identifier split at camelCase, snake_case and digit boundaries
    ("intToBin" -> int, to, bin; "str2int" -> str, 2, int); [] for a word that does not split."""
    parts = [p.lower() for p in _CAMEL_RE.findall(word)]
    return parts if len(parts) > 1 else []


def code_words(title: str, text: str) -> str:
    """What the keyword index holds besides title and text: the parts of every identifier that splits at
    camelCase or digit boundaries (FTS5 keeps "intToBin" and "str2int" whole), so that "int to bin" finds
    `intToBin`. Underscores and dots need nothing here: FTS5 splits at them itself. Each identifier is split
    once, however often it occurs: its count already weighs in through the text column."""
    parts: list[str] = []
    for word in dict.fromkeys(re.findall(r"[^\W_]+", f"{title} {text}")):
        if not word.islower() or any(c.isdigit() for c in word):
            parts += identifier_parts(word)
    return " ".join(parts)


def query_words(text: str) -> list[str]:
    """The words of free text that keyword search looks for: lowercased, deduplicated, stopwords dropped;
    an identifier is looked for whole and by its parts ("lru_cache" also as "lru" and "cache").

    Stopwords are dropped: matching "the" in fifty items would rank noise next to real matches.
    """
    words = []
    for word in WORD_RE.findall(text):
        words += [word.lower(), *identifier_parts(word)]
    return list(dict.fromkeys(w for w in words if len(w) > 1 and w not in STOPWORDS))[:32]


KEYWORD_MERGE_PAGES = 32  # a step of merging the keyword index: about this many pages written


def fts_query(text: str | list[str]) -> str | None:
    """Free text (or its query_words) to SQLite's FTS5 query: every word quoted (no syntax errors from user
    input), any may match. The store's dialect builds the query it runs (Dialect.keyword_match)."""
    return fts5_match(query_words(text) if isinstance(text, str) else text)


# FTS5 computes BM25 for every row that matches any query word before it can sort them, so that cost
# grows with the memory: in a large one, a paraphrase's ordinary words ("error", "request", "page") match
# a good share of all items. So keyword search keeps a query's rarest words and drops the most common
# ones once the rows they match would pass SCORED_ROWS (always keeping the rarest word). Below that —
# every query on a memory of up to SCORED_ROWS items — nothing is dropped. A common word adds little to
# BM25 (its IDF is low); the vector half of a hybrid search still sees the whole query. The budget trades
# a little keyword recall in a large memory for time: `bench_memory.py --whatif` measures both, and
# bench/README.md has the run that chose it.
SCORED_ROWS = 10_000
PREFETCH = 200  # rows ranked by FTS5 alone before the filters are checked in memory_items
_DF_TTL_SECONDS = 300.0
_DF_CACHE_SIZE = 20_000
_DF_CACHE_MIN = 1_000


class WordMatches:
    """The items that hold each keyword word of one query, and each word's IDF weight (BM25's)."""

    def __init__(self, rows: dict[str, set[int]], total: int):
        self.rows = rows
        self.weight = {w: math.log(1 + (total - len(r) + 0.5) / (len(r) + 0.5)) for w, r in rows.items()}

    def coverage(self, ids: Iterable[int]) -> dict[int, float]:
        """For each item, the IDF-weighted share of the query's words it holds: 1.0 when it holds them all,
        more for a rare word than for a common one. Unlike a BM25 score this is on a fixed scale, so it can
        be added to a cosine similarity (memory/service.py); items holding none of the words are left out."""
        norm = sum(self.weight.values()) or 1.0
        found: dict[int, float] = {}
        for item_id in ids:
            held = sum(w for word, w in self.weight.items() if item_id in self.rows[word])
            if held:
                found[item_id] = held / norm
        return found


def to_blob(vector) -> bytes:
    import numpy as np  # here, not at import: the board's commands and start-up need no numpy

    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32)


def _readings(embedding: bytes, body: bytes | None) -> np.ndarray:
    """An item's stored vectors as rows: the first reading, and its content's when it has one."""
    import numpy as np

    return np.vstack([from_blob(embedding), from_blob(body)]) if body else from_blob(embedding)[None, :]


class Knowledge:
    def __init__(self, store: Store, quotas: Quotas | None = None):
        self.store = store
        self.quotas = quotas or Quotas(store)  # none unless the board was given some
        self._df: dict[str, tuple[int, float]] = {}  # word -> (items matching it, when counted)

    # ----------------------------------------------------------------- writing

    def add(
        self,
        db: Database,
        *,
        kind: str,
        text: str,
        created_by: str,
        task_type: str | None = None,
        task_id: int | None = None,
        title: str = "",
        tags: Iterable[str] = (),
        source: str | None = None,
        embedding=None,
        model: str | None = None,
        unwaited: bool = False,
        trust: Trust = "unreviewed",
        review_id: int | None = None,
    ) -> int | None:
        """Store an item inside the caller's write transaction and queue it for indexing; its id. `unwaited`:
        nobody reads the id, so where the dialect can, the item, its place in the indexing queue and its event are
        written by one statement that is not waited for (then None is returned)."""
        if kind not in KINDS:
            raise InvalidInput(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        item = NewItem(
            kind=kind,
            text=text,
            title=title,
            task_type=task_type,
            task_id=task_id,
            tags=list(tags),
            source=source,
            created_by=created_by,
            trust=trust,
            review_id=review_id,
        )
        blob = None if embedding is None else to_blob(embedding)
        if unwaited and kind != "lesson" and self.store.dialect.writing_ctes:  # a lesson needs its witness row
            sql, params = self._insert_statement(item, blob, model)
            self.store.emit_written(
                db,
                f"WITH i AS ({sql} RETURNING id), o AS (INSERT INTO memory_outbox (item_id, queued_at) SELECT id, ? "
                f"FROM i), e AS (INSERT INTO events (kind, data) SELECT ?::text, {encoded_sql([('item_id', 'i.id::text')])} "
                "FROM i RETURNING id) SELECT i.id, (SELECT id FROM e) AS event_id FROM i",
                [*params, now(), MemoryAdded.kind, self.store.origin],
                lambda found: (found["event_id"], MemoryAdded(found["id"])),
            )
            return None
        item_id = self._insert(db, item, blob, model)
        self.store.emit(MemoryAdded(item_id))
        return item_id

    def _insert(self, db: Database, item: NewItem, embedding: bytes | None = None, model: str | None = None) -> int:
        sql, params = self._insert_statement(item, embedding, model)
        item_id = db.execute(f"{sql} RETURNING id", params).fetchall()[0][0]
        if item.kind == "lesson":
            db.execute(
                "INSERT INTO memory_witnesses (item_id, witness) VALUES (?, ?)",
                [item_id, witness(item.created_by, item.task_id)],
            )
        db.execute("INSERT INTO memory_outbox (item_id, queued_at) VALUES (?, ?)", [item_id, now()])
        return item_id

    @staticmethod
    def _insert_statement(item: NewItem, embedding: bytes | None, model: str | None) -> tuple[str, list]:
        """The INSERT of an item's row (without RETURNING) and its parameters."""
        return (
            "INSERT INTO memory_items (kind, task_type, task_id, title, text, code_words, tags, source, created_by, "
            "created_at, merged_count, deprecated, embedding, embedding_model, trust, review_id, held) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                item.kind,
                item.task_type,
                item.task_id,
                item.title,
                item.text,
                code_words(item.title, item.text),
                json.dumps(item.tags),
                item.source,
                item.created_by,
                item.created_at or now(),
                item.merged_count,
                int(item.deprecated),
                embedding,
                model,
                item.trust,
                item.review_id,
                None if item.kind in UNSCREENED else held_reason(f"{item.title}\n{item.text}"),
            ],
        )

    def add_many(self, db: Database, items: list[NewItem], created_by: str, trust: Trust = "unreviewed") -> list[int]:
        """Store items as given, inside the caller's write transaction, and queue them for indexing (one
        event wakes the indexer for all). Nothing is merged: a note that reads like a lesson stays a note.
        `created_by` stands in for items that do not name their author; `trust` is stamped on every item, whatever
        the items say (what a file claims about itself is not evidence)."""
        for n, item in enumerate(items):
            if item.kind not in KINDS:
                raise InvalidInput(f"items[{n}].kind {item.kind!r} is not one of {', '.join(KINDS)}")
        ids = [
            self._insert(
                db,
                item.model_copy(
                    update={"created_by": item.created_by or created_by, "trust": trust, "review_id": None}
                ),
            )
            for item in items
        ]
        if ids:
            self.store.emit(MemoryAdded(ids[-1]))
        return ids

    def remember(self, actor: str, items: list[NewItem]) -> list[MemoryItem]:
        """Store items for the team in one transaction: all of them, or none when one names a missing task."""
        with self.store.write(scopes.MEMORY, scopes.agent(actor)) as db:
            for n, item in enumerate(items):
                if (
                    item.task_id is not None
                    and db.execute("SELECT 1 FROM tasks WHERE id = ?", [item.task_id]).fetchone() is None
                ):
                    raise InvalidInput(
                        f"items[{n}].task_id: task {item.task_id} does not exist; nothing was stored. "
                        "Omit task_id or use an id from list_tasks"
                    )
            self.quotas.charge(db, actor, REMEMBER, len(items), sum(len(i.text) + len(i.title) for i in items))
            # a person's note (an operator role's) is vouched for by a person; an agent's is not
            ids = self.add_many(db, items, actor, "reviewed" if is_operator(db, actor) else "unreviewed")
        found = self.get(ids)
        return [found[i] for i in ids]

    def link_superseded(self, db: Database, links: dict[int, int]) -> None:
        """Point deprecated items at the items that replaced them ({old id: new id}; import)."""
        db.conn.executemany(
            "UPDATE memory_items SET superseded_by = ? WHERE id = ?", [(new, old) for old, new in links.items()]
        )

    def merge_into(
        self,
        db: Database,
        item_id: int,
        source: str | None,
        tags: Iterable[str] = (),
        *,
        author: str,
        task_id: int | None = None,
    ) -> None:
        """Count a near-duplicate against an existing item instead of storing it twice (its tags join). A copy from
        an author already behind the item adds no witness: one agent saying a thing twice is not agreement."""
        current = json.loads(db.execute("SELECT tags FROM memory_items WHERE id = ?", [item_id]).fetchone()[0])
        merged = list(dict.fromkeys([*current, *tags]))[:MAX_TAGS]
        new_witness = (
            db.execute(
                "INSERT INTO memory_witnesses (item_id, witness) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING item_id",
                [item_id, witness(author, task_id)],
            ).fetchone()
            is not None
        )
        db.execute(
            "UPDATE memory_items SET merged_count = merged_count + 1, witnesses = witnesses + ?, "
            "source = coalesce(source, ?), tags = ? WHERE id = ?",
            [int(new_witness), source, json.dumps(merged), item_id],
        )
        if merged != current:  # the index filters on tags: refresh it
            db.execute(
                "INSERT INTO memory_outbox (item_id, queued_at) VALUES (?, ?) ON CONFLICT (item_id) DO UPDATE SET "
                "queued_at = excluded.queued_at, leased_until = NULL",
                [item_id, now()],
            )
        self.store.emit(MemoryAdded(item_id))  # one more lesson counted: it can make a digest due

    def supersede(self, db: Database, old_id: int, new_id: int, actor: str | None = None) -> None:
        """Hide a live lesson behind the one that replaces it (only lessons of the same task type); `actor`, when
        an agent asks, must be the old lesson's author or an operator."""
        row = db.execute(
            "SELECT kind, task_type, deprecated, created_by FROM memory_items WHERE id = ?", [old_id]
        ).fetchone()
        new_type = db.execute("SELECT task_type FROM memory_items WHERE id = ?", [new_id]).fetchone()[0]
        if row is None:
            raise InvalidInput(f"supersedes names memory item {old_id}, which does not exist")
        if actor is not None and row[3] != actor and not is_operator(db, actor):
            raise Forbidden(
                f"lesson {old_id} is {row[3]}'s: only its author or an operator may supersede it; nothing was "
                "stored. Record your lesson without supersedes, or ask them"
            )
        if row[0] != "lesson" or row[1] != new_type:
            raise InvalidInput(
                f"memory item {old_id} is a {row[0]} of task type {row[1]}; a lesson can "
                f"supersede only a lesson of its own task type ({new_type})"
            )
        if row[2]:
            raise InvalidInput(f"lesson {old_id} is already superseded; supersede the lesson that replaced it")
        db.execute("UPDATE memory_items SET deprecated = 1, superseded_by = ? WHERE id = ?", [new_id, old_id])
        db.execute(
            "INSERT INTO memory_outbox (item_id, queued_at) VALUES (?, ?) ON CONFLICT (item_id) DO UPDATE SET "
            "queued_at = excluded.queued_at, leased_until = NULL",
            [old_id, now()],
        )

    # ----------------------------------------------------------------- provenance and trust

    @staticmethod
    def worked_on(db: Database, agent: str, task_id: int) -> bool:
        """Whether the agent holds the card or held it at some time (the board's history says who claimed it)."""
        return (
            db.execute(
                "SELECT 1 FROM tasks WHERE id = ? AND assignee = ? UNION ALL SELECT 1 FROM task_history "
                "WHERE task_id = ? AND actor = ? AND to_status = 'in_progress' LIMIT 1",
                [task_id, agent, task_id, agent],
            ).fetchone()
            is not None
        )

    def confirm(self, db: Database, ids: list[int], by: str, *, release: bool = False) -> list[int]:
        """Make these items reviewed (a review passed the work they helped, or a person vouched for them), inside the
        caller's write transaction; `release` (a person's action) also lets held items go. Returns the ids changed.
        Items re-queued for indexing: the index filters on nothing trust-related, but a claim's computed-ahead
        lessons are read again (the revision trigger counts the change)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return []
        held = "" if release else " AND held IS NULL"
        changed = [
            r[0]
            for r in db.execute(
                f"UPDATE memory_items SET trust = 'reviewed', held = NULL WHERE id IN ({placeholders(ids)}) AND "
                f"(trust != 'reviewed' OR held IS NOT NULL){held} RETURNING id",
                ids,
            )
        ]
        if changed:
            # cards' lessons computed ahead were chosen without these: chosen again at their claims
            db.execute("DELETE FROM card_context WHERE true")
            self.store.emit(MemoryAdded(changed[-1]))  # a newly trusted lesson can make a digest due
        return changed

    def held(self, limit: int = 50) -> list[MemoryItem]:
        """Items held back for a person, newest first (the web board's memory page)."""
        return [
            _item(r)
            for r in rows(
                self.store.db,
                f"SELECT {ITEM} FROM memory_items WHERE held IS NOT NULL ORDER BY id DESC LIMIT ?",
                [limit],
            )
        ]

    # ----------------------------------------------------------------- reading

    def get(self, ids: list[int]) -> dict[int, MemoryItem]:
        if not ids:
            return {}
        marks = placeholders(ids)
        return {
            r["id"]: _item(r)
            for r in rows(self.store.db, f"SELECT {ITEM} FROM memory_items WHERE id IN ({marks})", ids)
        }

    def item(self, item_id: int) -> MemoryItem:
        found = self.get([item_id])
        if item_id not in found:
            raise NotFound(f"memory item {item_id} does not exist")
        return found[item_id]

    def _filters(
        self,
        task_type: str | None,
        kinds: list[str] | None,
        tags: list[str] | None,
        include_deprecated: bool,
        trust: list[str] | None = None,
    ) -> tuple[str, list]:
        # what is held for a person is in no answer until a person releases it
        where, params = ["m.held IS NULL"], []
        if trust:
            where.append(f"m.trust IN ({placeholders(trust)})"), params.extend(trust)
        if task_type:
            where.append("m.task_type = ?"), params.append(task_type)
        if kinds:
            where.append(f"m.kind IN ({placeholders(kinds)})"), params.extend(kinds)
        for tag in tags or ():
            where.append(self.store.dialect.json_has("m.tags")), params.append(tag)
        if not include_deprecated:
            where.append("m.deprecated = 0")
        return "".join(f" AND {w}" for w in where), params

    def _document_frequency(self, word: str) -> int:
        """How many items match the quoted word (its porter stem, or its phrase for a word FTS5 splits, as
        in "lru_cache"). Common words' counts are cached a few minutes (they only decide which words to
        drop, and move slowly); a rare word is counted afresh each time, which is cheap, so an item
        written a moment ago is found by its rare words at once."""
        ts = now()
        cached = self._df.get(word)
        if cached is not None and ts - cached[1] < _DF_TTL_SECONDS:
            return cached[0]
        if len(self._df) >= _DF_CACHE_SIZE:
            self._df.clear()
        df = self.store.db.execute(
            self.store.dialect.keyword_count(), [self.store.dialect.keyword_match([word])]
        ).fetchone()[0]
        if df >= _DF_CACHE_MIN:
            self._df[word] = (df, ts)
        return df

    def _top_id(self) -> int:
        """The highest item id: at least the number of items, and found at once."""
        return self.store.db.execute("SELECT coalesce(max(id), 0) FROM memory_items").fetchone()[0]

    def keyword_words(self, query: str) -> list[str]:
        """The words keyword search matches for this query: those found in some item, the most common
        dropped while the rows they match would pass SCORED_ROWS (the rarest is always kept)."""
        words = query_words(query)
        if len(words) < 2 or self._top_id() <= SCORED_ROWS:  # no query can match more rows than there are
            return words
        df = {w: self._document_frequency(w) for w in words}
        kept, scored = [], 0
        for word in sorted((w for w in df if df[w]), key=df.__getitem__):
            if kept and scored + df[word] > SCORED_ROWS:
                break
            kept.append(word)
            scored += df[word]
        return [w for w in df if w in kept]  # in the query's order

    def keyword(
        self,
        query: str,
        *,
        task_type: str | None = None,
        kinds: list[str] | None = None,
        tags: list[str] | None = None,
        include_deprecated: bool = False,
        trust: list[str] | None = None,
        limit: int = 50,
    ) -> list[int]:
        """Ids ranked by BM25 over title and text.

        FTS5 ranks first, then the filters are checked against memory_items for the best PREFETCH rows
        only (joining every match to memory_items before sorting cost more than the ranking itself); when
        the filters leave too few of those, the ranking is read on in growing chunks.
        """
        match = self.store.dialect.keyword_match(self.keyword_words(query))
        if match is None:
            return []
        db = self.store.db
        ranked = self.store.dialect.keyword_ranked()
        filters = dict(task_type=task_type, kinds=kinds, tags=tags, include_deprecated=include_deprecated, trust=trust)
        # without a narrowing filter only deprecated items drop out: a few rows to spare are enough
        prefetch = max(limit, PREFETCH) if task_type or kinds or tags or trust else limit + max(8, limit // 4)
        rows = [r[0] for r in db.execute(f"{ranked} LIMIT ?", [match, prefetch])]
        if not self._filters(**filters)[0]:
            return rows[:limit]
        allowed = self.allowed(rows, **filters)
        found = [i for i in rows if i in allowed]
        if len(found) >= limit or len(rows) < prefetch:
            return found[:limit]
        # a selective filter: read the whole ranking in growing chunks until enough rows pass
        cursor = db.execute(ranked, [match])
        found, chunk = [], PREFETCH
        while len(found) < limit and (rows := [r[0] for r in cursor.fetchmany(chunk)]):
            allowed = self.allowed(rows, **filters)
            found += [i for i in rows if i in allowed]
            chunk = min(4 * chunk, 8_000)
        cursor.close()
        return found[:limit]

    def word_matches(self, query: str) -> WordMatches:
        """Which items hold each of the query's keyword words (those `keyword` searches for). One FTS5 doclist
        read per word: on a large memory keyword_words keeps these under SCORED_ROWS rows in all."""
        total = max(self._top_id(), 1)
        return WordMatches(
            {
                word: {
                    r[0]
                    for r in self.store.db.execute(
                        self.store.dialect.keyword_ids(), [self.store.dialect.keyword_match([word])]
                    )
                }
                for word in self.keyword_words(query)
            },
            total,
        )

    def allowed(
        self,
        ids: list[int],
        *,
        task_type: str | None = None,
        kinds: list[str] | None = None,
        tags: list[str] | None = None,
        include_deprecated: bool = False,
        trust: list[str] | None = None,
    ) -> set[int]:
        """Which of these ids pass the filters (vector hits are checked against SQLite, the source of truth)."""
        if not ids:
            return set()
        where, params = self._filters(task_type, kinds, tags, include_deprecated, trust)
        marks = placeholders(ids)
        return {
            r[0]
            for r in self.store.db.execute(
                f"SELECT m.id FROM memory_items m WHERE m.id IN ({marks}){where}", [*ids, *params]
            )
        }

    def vectors(
        self, *, kind: str, task_type: str | None, model: str, author: str | None = None
    ) -> list[tuple[int, np.ndarray]]:
        """Live items of one kind and task type embedded by `model` (for near-duplicate checks), none held back for
        a person (an honest copy must not vanish into a held one): with `author`, only reviewed items and the
        author's own (an agent's copy must not become a witness of another agent's unreviewed text); without, only
        reviewed ones."""
        mine = " OR created_by = ?" if author is not None else ""
        return [
            (r[0], from_blob(r[1]))
            for r in self.store.db.execute(
                f"SELECT id, embedding FROM memory_items WHERE kind = ? AND task_type {self.store.dialect.same} ? "
                f"AND deprecated = 0 AND held IS NULL AND (trust = 'reviewed'{mine}) "
                "AND embedding IS NOT NULL AND embedding_model = ?",
                [kind, task_type, *([author] if author is not None else []), model],
            )
        ]

    def vectors_where(
        self,
        model: str,
        limit: int,
        *,
        task_type: str | None = None,
        kinds: list[str] | None = None,
        tags: list[str] | None = None,
        include_deprecated: bool = False,
        trust: list[str] | None = None,
    ) -> list[tuple[int, np.ndarray]]:
        """Stored vectors (made by `model`) of the newest `limit` items that pass the filters: one row per
        reading (see `embeddings`)."""
        where, params = self._filters(task_type, kinds, tags, include_deprecated, trust)
        return [
            (r[0], _readings(r[1], r[2]))
            for r in self.store.db.execute(
                "SELECT m.id, m.embedding, m.body_embedding FROM memory_items m WHERE m.embedding IS NOT NULL "
                f"AND m.embedding_model = ?{where} ORDER BY m.id DESC LIMIT ?",
                [model, *params, limit],
            )
        ]

    def count(self) -> int:
        return self.store.db.execute("SELECT count(*) FROM memory_items").fetchone()[0]

    def recent(self, per_kind: int = 8) -> tuple[dict[str, int], list[MemoryItem]]:
        """How many items of each kind there are (deprecated ones aside) and the newest `per_kind` of each,
        newest first: what a person browsing the memory sees before searching it."""
        live = "FROM memory_items WHERE deprecated = 0"
        with self.store.read() as db:
            counts = {r["kind"]: r["n"] for r in rows(db, f"SELECT kind, count(*) AS n {live} GROUP BY kind")}
            newest = rows(
                db,
                f"SELECT {ITEM} FROM (SELECT {ITEM}, ROW_NUMBER() OVER (PARTITION BY kind ORDER BY id DESC) AS place "
                f"{live}) AS ranked WHERE place <= ? ORDER BY id DESC",
                [per_kind],
            )
        return counts, [_item(r) for r in newest]

    def page(self, after: int = 0, limit: int = 500) -> list[MemoryItem]:
        """Items in id order after the id `after` (export)."""
        return [
            _item(r)
            for r in self.store.db.query("SELECT * FROM memory_items WHERE id > ? ORDER BY id LIMIT ?", [after, limit])
        ]

    # ----------------------------------------------------------------- the outbox

    def lease(self, limit: int = 64, lease_seconds: float = 120) -> tuple[float, list[MemoryItem]]:
        """Take up to `limit` queued items for indexing: (the lease, the items), in turns by who made them
        (each agent's oldest first, one each round), so one agent's backlog delays its own items, not
        another's new lesson. Items a dead worker leased come back when its lease runs out."""
        ts = now()
        lease = ts + lease_seconds
        with self.store.write(scopes.MEMORY) as db:
            ids = [
                r[0]
                for r in db.execute(
                    "UPDATE memory_outbox SET leased_until = ? WHERE item_id IN (SELECT item_id FROM (SELECT "
                    "o.item_id, row_number() OVER (PARTITION BY m.created_by ORDER BY o.item_id) AS turn FROM "
                    "memory_outbox o JOIN memory_items m ON m.id = o.item_id WHERE o.leased_until IS NULL OR "
                    "o.leased_until < ?) AS q ORDER BY turn, item_id LIMIT ?) RETURNING item_id",
                    [lease, ts, limit],
                ).fetchall()
            ]
        found = self.get(sorted(ids))
        return lease, [found[i] for i in sorted(ids) if i in found]

    def embeddings(self, ids: list[int], model: str) -> dict[int, np.ndarray]:
        """Stored vectors of these items made by `model`, one row per reading: the item as the model reads it
        first, then its content alone when that reads otherwise and is embedded (memory/service.py `body_text`).
        Items not here must be embedded again."""
        if not ids:
            return {}
        marks = placeholders(ids)
        return {
            r[0]: _readings(r[1], r[2])
            for r in self.store.db.execute(
                f"SELECT id, embedding, body_embedding FROM memory_items WHERE id IN ({marks}) "
                "AND embedding IS NOT NULL AND embedding_model = ?",
                [*ids, model],
            )
        }

    def indexed(self, vectors: dict[int, np.ndarray], model: str, lease: float) -> None:
        """Record vectors (each item's readings, as `embeddings` gives them: a second row is its content's) and
        take the items off the outbox — unless they were queued again meanwhile (e.g. superseded while being
        indexed), which resets the lease and keeps them queued."""
        with self.store.write(scopes.MEMORY) as db:
            db.conn.executemany(
                "UPDATE memory_items SET embedding = ?, body_embedding = ?, embedding_model = ? WHERE id = ?",
                [(to_blob(v[0]), to_blob(v[1]) if len(v) > 1 else b"", model, i) for i, v in vectors.items()],
            )
            db.conn.executemany(
                "DELETE FROM memory_outbox WHERE item_id = ? AND leased_until = ?", [(i, lease) for i in vectors]
            )
            self.store.emit(MemoryIndexed(len(vectors)))
        if any(grown(i) for i in vectors):  # here, in the background, not on the path of the write that added it
            self.store.analyze("memory_items")

    def unread_bodies(self, model: str, limit: int) -> list[MemoryItem]:
        """Items embedded by `model` whose content has not been considered for a second reading yet (indexed
        before there were two), newest first."""
        ids = [
            r[0]
            for r in self.store.db.execute(
                "SELECT id FROM memory_items WHERE body_embedding IS NULL AND embedding IS NOT NULL "
                "AND embedding_model = ? ORDER BY id DESC LIMIT ?",
                [model, limit],
            )
        ]
        found = self.get(ids)
        return [found[i] for i in ids if i in found]

    def record_bodies(self, bodies: dict[int, np.ndarray | None], model: str) -> None:
        """Record the second readings of items already embedded by `model` (None: the item has none)."""
        with self.store.write(scopes.MEMORY) as db:
            db.conn.executemany(
                "UPDATE memory_items SET body_embedding = ? WHERE id = ? AND embedding_model = ?",
                [(b"" if v is None else to_blob(v), i, model) for i, v in bodies.items()],
            )

    def pending(self, queued_by: float | None = None) -> int:
        """Items waiting for the vector index (`queued_by`: only those queued by then)."""
        if queued_by is None:
            return self.store.db.execute("SELECT count(*) FROM memory_outbox").fetchone()[0]
        return self.store.db.execute("SELECT count(*) FROM memory_outbox WHERE queued_at <= ?", [queued_by]).fetchone()[
            0
        ]

    def merge_keywords(self, pages: int = KEYWORD_MERGE_PAGES) -> bool:
        """One small step of the keyword index's upkeep (`Dialect.merge_keywords`), for the indexing worker:
        whether there was any to do."""
        if not self.store.dialect.merges_keywords:  # PostgreSQL's keyword index keeps itself
            return False
        with self.store.write(scopes.MEMORY) as db:
            return self.store.dialect.merge_keywords(db, pages)

    def requeue_all(self) -> int:
        """Queue every item for indexing again (reindex)."""
        with self.store.write(scopes.MEMORY) as db:
            db.execute(
                "INSERT INTO memory_outbox (item_id, queued_at) SELECT id, ? FROM memory_items WHERE true "
                "ON CONFLICT (item_id) DO UPDATE SET queued_at = excluded.queued_at, leased_until = NULL",
                [now()],
            )
            return db.execute("SELECT count(*) FROM memory_outbox").fetchone()[0]

    # ----------------------------------------------------------------- cards' lessons, ahead of claims

    def guidance(self) -> tuple[int, int]:
        """(the guidance mark: the newest lesson's or critique's id, 0 before the first; the count of changes to
        stored items so far): read before a card's lessons are computed ahead, what they are as new as
        (memory_kind_id makes each half of the mark one index step)."""
        row = self.store.db.execute(f"SELECT {GUIDANCE_MARK}, {REVISION}").fetchone()
        return row[0] or 0, row[1] or 0

    def card_context(self, task_id: int) -> tuple[int, dict | None]:
        """(the guidance mark (`guidance`), what was computed ahead for the card: model, digest (of the card's text), hits,
        as_of, and the hits as handed (`shown`, None when not kept) while no stored item changed since; None when
        nothing was), read together. `hits` and `shown` are their JSON text (a claim parses the one it uses). Its
        vector is read apart (`card_vector`): a claim that hands what was computed needs none."""
        row = self.store.db.execute(
            f"SELECT {GUIDANCE_MARK}, c.model, c.digest, c.hits, c.as_of, CASE WHEN c.revision = {REVISION} THEN "
            "c.shown END FROM (SELECT 1 AS one) AS o LEFT JOIN card_context c ON c.task_id = ?",
            [task_id],
        ).fetchone()
        if row[1] is None:
            return row[0] or 0, None
        return row[0] or 0, {
            "model": row[1],
            "digest": row[2],
            "hits": row[3],
            "as_of": row[4],
            "shown": row[5],
        }

    def card_vector(self, task_id: int) -> np.ndarray | None:
        """The vector computed ahead for a card's text (None: none was)."""
        row = self.store.db.execute("SELECT vector FROM card_context WHERE task_id = ?", [task_id]).fetchone()
        return None if row is None else from_blob(row[0])

    def save_card_context(
        self, task_id: int, *, model: str, digest: str, vector, hits: list, as_of: int, shown: list, revision: int
    ) -> None:
        """What was computed ahead for a card: `hits` ([id, score, matched, similarity] each), `shown` (the hits as
        a claim hands them), as of the guidance mark `as_of` and the count of item changes `revision` read before
        the items were."""
        with self.store.write(scopes.MEMORY) as db:
            db.execute(
                "INSERT INTO card_context (task_id, model, digest, vector, hits, as_of, computed_at, shown, revision) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET model = excluded.model, "
                "digest = excluded.digest, vector = excluded.vector, hits = excluded.hits, as_of = excluded.as_of, "
                "computed_at = excluded.computed_at, shown = excluded.shown, revision = excluded.revision",
                [task_id, model, digest, to_blob(vector), json.dumps(hits), as_of, now(), json.dumps(shown), revision],
            )

    def cards_needing_context(self, model: str, mark: int, limit: int, ahead: int, revision: int) -> list[dict]:
        """Cards waiting to be claimed (todo), in the order claims take them, whose lessons were never computed
        ahead with `model` or not since the card last changed, and of the first `ahead` of them those computed
        before the guidance as of `mark` or before the stored items' `revision` (a claim reads their items again).
        Each with the vector computed for it with `model` and the digest of the text it was computed from
        (`kept_vector`, `kept_digest`; None when there is none): a card whose text is unchanged needs no
        embedding again."""
        found = rows(
            self.store.db,
            "SELECT t.id, t.title, t.description, t.acceptance_criteria, t.task_type, c.digest AS kept_digest, "
            "c.vector AS kept_vector FROM tasks t LEFT JOIN card_context c ON c.task_id = t.id AND c.model = ? "
            "WHERE t.status = 'todo' AND (c.task_id IS NULL OR c.computed_at < t.updated_at OR ((c.as_of < ? OR "
            "c.revision IS NULL OR c.revision != ?) AND t.id IN "
            "(SELECT id FROM tasks WHERE status = 'todo' ORDER BY priority DESC, id LIMIT ?))) "
            "ORDER BY t.priority DESC, t.id LIMIT ?",
            [model, mark, revision, ahead, limit],
        )
        for card in found:
            card["acceptance_criteria"] = json.loads(card["acceptance_criteria"])
            if card["kept_vector"] is not None:
                card["kept_vector"] = from_blob(card["kept_vector"])
        return found

    # ----------------------------------------------------------------- reuse

    def surfaced(self, agent: str, task_id: int | None, ids: list[int], db: Database | None = None) -> None:
        """Record the items handed to `agent` for a card, once per item, agent and card (a re-claim does not
        count again); in `db`'s write transaction when given, else in one of their own."""
        ids = list(dict.fromkeys(ids))  # one statement sees none of its own rows: an id twice would be two
        if not ids:
            return
        if db is None:
            with self.store.write(scopes.agent(agent)) as db:
                self.surfaced(agent, task_id, ids, db)
            return
        db.execute(  # one statement for all of them
            "INSERT INTO memory_surfaced (item_id, agent, task_id, surfaced_at) SELECT v.column1, ?, ?, ? FROM "
            f"(VALUES {', '.join(['(?)'] * len(ids))}) AS v WHERE NOT EXISTS (SELECT 1 FROM memory_surfaced s WHERE "
            f"s.item_id = v.column1 AND s.agent = ? AND s.task_id {self.store.dialect.same} ?)",
            [agent, task_id, now(), *ids, agent, task_id],
        )

    def remember_output(self, db: Database, row: dict) -> None:
        """A card's work joins the shared memory when it is done: its review passed, a person passed it, or
        it needed no review (an output a review sends back is not something to learn from). Its holder's
        output, summary and artifact excerpts, in the same transaction as the move (its artifacts as the transaction
        noted them when it wrote them, `Board.complete`, else read)."""
        attached = self.store.noted(("artifacts", row["id"], row["fencing_token"]))
        if attached is None:
            attached = db.execute(
                "SELECT name, kind, content FROM artifacts WHERE task_id = ? AND fencing_token = ? ORDER BY id",
                [row["id"], row["fencing_token"]],
            )
        excerpts = "\n".join(f"--- {name} ({kind})\n{content[:2000]}" for name, kind, content in attached)
        text = f"{row['summary'] or ''}\n{(row['output'] or '')[:8000]}\n{excerpts}".strip()
        if text:  # a person may pass a card that was escalated before any output
            self.add(
                db,
                kind="output",
                text=text,
                created_by=row["assignee"] or row["created_by"],
                task_type=row["task_type"],
                task_id=row["id"],
                title=row["title"],
                tags=json.loads(row["labels"]),
                source=f"task:{row['id']}",
                unwaited=True,
            )

    def mark_useful(self, db: Database, agent: str, task_id: int, ids: list[int]) -> None:
        """The agent says these surfaced items helped with this task (inside the caller's transaction)."""
        ids = list(dict.fromkeys(ids))
        marks = placeholders(ids)
        shown = {
            r[0]
            for r in db.execute(
                f"SELECT item_id FROM memory_surfaced WHERE agent = ? AND task_id = ? AND item_id IN ({marks})",
                [agent, task_id, *ids],
            )
        }
        missing = [i for i in ids if i not in shown]
        # a lesson found by search may be named too (how an unreviewed lesson earns trust), but not one's own: an
        # author cannot vouch for itself
        found = {
            r[0]
            for r in db.execute(
                f"SELECT id FROM memory_items WHERE id IN ({placeholders(missing or [0])}) AND kind = 'lesson' "
                "AND created_by != ? AND held IS NULL AND deprecated = 0",
                [*(missing or [0]), agent],
            )
        }
        if set(missing) - found:
            raise InvalidInput(
                f"memory items {[i for i in missing if i not in found]} were not handed to you for task {task_id}; "
                "list only ids from the lessons claim_task gave you, or other agents' lessons query_memory found"
            )
        self.surfaced(agent, task_id, sorted(found), db)
        db.execute(
            f"UPDATE memory_surfaced SET useful_at = coalesce(useful_at, ?) WHERE agent = ? AND task_id = ? "
            f"AND item_id IN ({marks})",
            [now(), agent, task_id, *ids],
        )

    def trust_helpful(self, db: Database, row: dict, came_from: str) -> None:
        """A card's review passed: the lessons its holder named as helpful (other agents', `mark_useful`) are now
        reviewed. A card done without a passed review (no review, or a person's decision) vouches for nothing."""
        if came_from not in ("review", "needs_human"):  # handed straight to done: no review passed it
            return
        # the review's latest word on the card, from its history (the move into done is written before the review's
        # own row is finished, in the same transaction)
        latest = db.execute(
            "SELECT note FROM task_history WHERE task_id = ? AND actor = ? ORDER BY id DESC LIMIT 1",
            [row["id"], REVIEW_ACTOR],
        ).fetchone()
        if latest is None or not (latest[0] or "").startswith("PASS") or not row["assignee"]:
            return
        ids = [
            r[0]
            for r in db.execute(
                "SELECT s.item_id FROM memory_surfaced s JOIN memory_items m ON m.id = s.item_id WHERE s.task_id = ? "
                "AND s.agent = ? AND s.useful_at IS NOT NULL AND m.created_by != ?",
                [row["id"], row["assignee"], row["assignee"]],
            )
        ]
        self.confirm(db, ids, REVIEW_ACTOR)

    def reuse(self) -> tuple[int, int]:
        """(items surfaced to agents, of which marked useful)."""
        return tuple(self.store.db.execute("SELECT count(*), count(useful_at) FROM memory_surfaced").fetchone())
