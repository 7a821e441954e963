"""A memory that opens on first use, or when the server opens it in the background once it answers.

Opening the memory imports Chroma and onnxruntime and loads the embedding model, which takes longer
than everything else a server does before it can answer `initialize`. The server holds a `LazyMemory`
instead: the first search, lesson or claim opens it (and waits for it), and `hiveboard serve` calls
`get()` in a thread right after `initialize`, so that usually nobody waits. Memory items written
before then sit in SQLite's outbox and are indexed when the indexing worker starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import EmbeddingError, EmbeddingMismatch, IndexUnavailable

if TYPE_CHECKING:
    from hiveboard.board._sqlite_utils import Database
    from hiveboard.board.models import Task

    from .service import Hit, Memory, Recorded, Results

log = logging.getLogger("hiveboard.memory")

# what stops a memory from opening at all: the operator has to act (reindex, install, start Chroma)
OPEN_ERRORS = (EmbeddingMismatch, EmbeddingError, IndexUnavailable)


class LazyMemory:
    """The `Memory` that `open()` returns, opened (and its indexing worker started) when first needed."""

    def __init__(self, open: Callable[[], Memory]):
        self._open = open
        self._memory: Memory | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def get(self) -> Memory:
        """The open memory; the first caller opens it, callers meanwhile wait for it. Raises OPEN_ERRORS."""
        with self._lock:
            if self._memory is None:
                if self._stopped:
                    raise IndexUnavailable("the memory is closed: the server is stopping")
                memory = self._open()
                memory.start()
                self._memory = memory
            return self._memory

    def query(self, query: str, **options) -> Results:
        """`Memory.query`, once the memory is open."""
        return self.get().query(query, **options)

    def record_lesson(self, actor: str, **lesson) -> Recorded:
        """`Memory.record_lesson`, once the memory is open."""
        return self.get().record_lesson(actor, **lesson)

    def pending(self, queued_by: float | None = None) -> int:
        """`Memory.pending`, once the memory is open (and indexing)."""
        return self.get().pending(queued_by)

    def lessons_ahead(self, agent: str, task: Task, db: Database | None = None) -> list[Hit] | None:
        """`Memory.lessons_ahead` when the memory is open; None (search them: `context_for`) until then."""
        memory = self._memory
        return None if memory is None else memory.lessons_ahead(agent, task, db)

    def context_for(self, agent: str, task: Task, k: int = 3) -> list[Hit]:
        """As `Memory.context_for`, which never fails: a claim made stands even when the memory cannot open."""
        try:
            memory = self.get()
        except Exception:
            log.exception("could not open the memory for task %s; the claim stands without lessons", task.id)
            return []
        return memory.context_for(agent, task, k)

    def stop(self) -> None:
        """Stop the indexing worker if the memory was opened; it is not opened after this."""
        with self._lock:
            self._stopped = True
            memory, self._memory = self._memory, None
        if memory is not None:
            memory.stop()
