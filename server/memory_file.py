"""The shared memory as a JSON Lines file, on the operator's side: `hiveboard memory export` and `import`.

One item a line, the fields `hiveboard://memory/{id}` shows. Import checks every line against the same
bounds as the `remember` tool (kinds beyond notes allowed, longer texts, the original author and time
kept) before it writes anything; then it writes in chunks, so a server sharing the data directory is
never locked out for the whole file, and indexes what it wrote when no running server owns the index.
Ids are given anew and `superseded_by` follows them; task, message and review ids are kept as they were.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from hiveboard.board.knowledge import KINDS, NewItem

from .boundary import MAX_ID, MAX_STRING, check_text
from .memory import MAX_TAGS, Tag, stored_item

if TYPE_CHECKING:
    from hiveboard.board.tasks import Board

    from .config import Settings

CHUNK = 500  # items per write transaction
MAX_ERRORS = 20  # bad lines listed before "and N more"


class ImportedItem(BaseModel):
    """One line of a memory file (what export writes)."""

    model_config = ConfigDict(extra="forbid")

    id: int | None = Field(None, ge=1, le=MAX_ID)
    kind: str = "note"
    text: str = Field(min_length=1, max_length=MAX_STRING)
    title: str | None = Field(None, max_length=MAX_STRING)  # none: the first line, as `remember` does
    task_type: str | None = Field(None, max_length=40)
    task_id: int | None = Field(None, ge=1, le=MAX_ID)
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = []
    source: str | None = Field(None, max_length=200)
    created_by: str | None = Field(None, min_length=1, max_length=200)
    created_at: AwareDatetime | None = None
    deprecated: bool = False
    superseded_by: int | None = Field(None, ge=1, le=MAX_ID)
    merged_count: int = Field(1, ge=1, le=MAX_ID)
    # what export writes of an item's provenance, read and set aside: whatever a file says, what comes in through
    # it is imported (a file claiming "reviewed" is no review)
    trust: str | None = Field(None, max_length=20)
    review_id: int | None = Field(None, ge=1, le=MAX_ID)
    held: str | None = Field(None, max_length=200)
    witnesses: int | None = Field(None, ge=1, le=MAX_ID)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        return kind

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is blank")
        return text

    def new_item(self) -> NewItem:  # a title given empty stays empty (export writes what was stored)
        return stored_item(
            text=self.text,
            title=self.title,
            task_type=self.task_type,
            tags=self.tags,
            kind=self.kind,
            task_id=self.task_id,
            source=self.source,
            created_by=self.created_by,
            merged_count=self.merged_count,
            deprecated=self.deprecated,
            created_at=self.created_at.timestamp() if self.created_at else None,
        )


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal; elsewhere (a log, a pipe) one line when it
    ends, since a line per update would fill the log with bars. `finish()` ends one that stopped short."""

    def __init__(self, label: str, total: int, unit: str = "items", stream: IO[str] | None = None):
        self.label, self.total, self.unit, self.done = label, total, unit, 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._shown = -1
        self._ended = False
        self._draw()

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def finish(self) -> None:
        """The last line, if it has not been written (the work ended before the total, or with none)."""
        self._draw(end=True)

    def _draw(self, end: bool = False) -> None:
        if self._ended:
            return
        share = min(self.done / self.total, 1.0) if self.total else 1.0
        end = end or share >= 1
        step = int(share * 100)
        if not end and (not self.live or step == self._shown):
            return
        self._shown, self._ended = step, end
        line = f"{self.label} [{'#' * int(share * 30):<30}] {self.done}/{self.total} {self.unit} ({share:.0%})"
        self.stream.write((f"\r{line}" if self.live else line) + ("\n" if end else ""))
        self.stream.flush()


def _lines(path: Path) -> Iterator[tuple[int, int, str | None, str | None]]:
    """(line number, bytes read, the line, why it is unreadable) for each line."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield number, len(raw), raw.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                yield number, len(raw), None, f"not UTF-8 ({exc.reason} at byte {exc.start})"


def _parse(line: str) -> ImportedItem:
    """One line as an item; raises ValueError with one sentence (without the line number)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError('not a JSON object; each line holds one item, e.g. {"text": "…", "kind": "note"}')
    try:
        for key, field in value.items():
            check_text(key, "a field name")
            check_text(field, f"field {key!r}")
    except ToolError as exc:  # the boundary's sentence about NUL characters and lone surrogates
        raise ValueError(str(exc)) from None
    try:
        return ImportedItem.model_validate(value)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        raise ValueError(f"field {where!r}: {message}") from None


def check_file(path: Path) -> tuple[int, list[str]]:
    """Read the whole file once, writing nothing: (how many items, each problem as "line N: …")."""
    count, problems, ids = 0, [], {}
    bar = Progress("checking", path.stat().st_size, "bytes")
    for number, size, line, unreadable in _lines(path):
        bar.advance(size)
        if line is not None and not line.strip():
            continue
        try:
            if unreadable:
                raise ValueError(unreadable)
            item = _parse(line)
            if item.id is not None:
                if item.id in ids:
                    raise ValueError(f"id {item.id} is also on line {ids[item.id]}")
                ids[item.id] = number
            count += 1
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
    bar.finish()
    return count, problems


def import_file(path: Path, board: Board, count: int, actor: str = "import") -> list[int]:
    """Write the items of a file check_file passed, CHUNK per transaction; their new ids in file order."""
    knowledge = board.knowledge
    new_ids: list[int] = []
    renumbered: dict[int, int] = {}  # an id in the file -> the item's id here
    replaced: list[tuple[int, int]] = []  # (new id, the file's id of the item that superseded it)
    chunk: list[ImportedItem] = []
    bar = Progress("importing", count)

    def flush() -> None:
        with board.store.write() as db:
            ids = knowledge.add_many(db, [item.new_item() for item in chunk], actor, "imported")
        for item, new in zip(chunk, ids):
            if item.id is not None:
                renumbered[item.id] = new
            if item.superseded_by is not None:
                replaced.append((new, item.superseded_by))
        new_ids.extend(ids)
        bar.advance(len(chunk))
        chunk.clear()

    for _, _, line, _ in _lines(path):
        if line.strip():
            chunk.append(_parse(line))
            if len(chunk) == CHUNK:
                flush()
    if chunk:
        flush()
    bar.finish()
    # a replacement outside the file is not here: the item stays deprecated, pointing nowhere
    links = {new: renumbered[old] for new, old in replaced if old in renumbered}
    if links:
        with board.store.write() as db:
            knowledge.link_superseded(db, links)
    return new_ids


def export_file(board: Board, out: IO[str]) -> int:
    """Every item, in id order, one JSON object a line; returns how many."""
    knowledge = board.knowledge
    bar = Progress("exporting", knowledge.count())
    after, written = 0, 0
    while page := knowledge.page(after):
        for item in page:
            out.write(json.dumps(item.model_dump(exclude_none=True), ensure_ascii=False) + "\n")
        written += len(page)
        after = page[-1].id
        bar.advance(len(page))
    bar.finish()
    out.flush()
    return written


def index_imported(settings: Settings, board: Board) -> str:
    """Index what waits, when this process can own the index; a sentence saying what happened."""
    from hiveboard.memory.lazy import OPEN_ERRORS

    from .stores import open_memory_for, shared_memory_problem

    waiting = board.knowledge.pending()
    if not waiting:
        return "nothing waits for the vector index"
    if problem := shared_memory_problem(settings):  # indexed here, they would be taken off every node's queue
        return (
            f"the items are stored but not indexed by meaning yet: {problem} (the nodes serving the board index "
            "them; keyword search sees them now)"
        )
    try:
        memory = open_memory_for(settings, board)
    except OPEN_ERRORS as exc:
        return f"the items are stored but not indexed by meaning yet: {exc}"
    try:
        bar = Progress("indexing", waiting)
        while done := memory.index_pending(64):
            bar.advance(done)
        bar.finish()
        left = memory.pending()
    finally:
        memory.stop()
    if left:
        return (
            f"{left} items wait for the vector index: the hiveboard server that owns it indexes them "
            "(hiveboard board shows how many wait); keyword search sees them now"
        )
    return "all items are indexed by meaning"
