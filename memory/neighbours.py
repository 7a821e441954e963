"""What a vector search answers, in a module of its own: the index (memory/index.py) makes it, the process
that shares the index (memory/owner.py) relays it, and neither imports the other for it."""

from __future__ import annotations

from typing import NamedTuple


class Neighbours(NamedTuple):
    """A vector search's answer (VectorIndex.query, here or relayed): items with the similarity of their best
    reading, best first, and whether the index may hold more (it gave every vector asked for: the items are
    fewer when it gave two readings of one, or when second readings were dropped)."""

    hits: list[tuple[int, float]]
    more: bool
