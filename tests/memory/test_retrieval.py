"""Retrieval quality of the shared memory on a small labelled set (retrieval_set.json): recall@5 by mode.

The items go in through the product (Knowledge.add in a write transaction, then the indexing worker's
drain) and are searched with Memory.query, with the real offline embedding model and embedded Chroma.
The table is written to the terminal in a normal `pytest` run; the assertions are about behaviour:
fusing the two rankings must not lose what either one finds, and each ranking must find something.
On both stores, each with a keyword search of its own (SQLite's FTS5 BM25, PostgreSQL's ts_rank).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.backends("sqlite", "postgresql")

SET = json.loads((Path(__file__).parent / "retrieval_set.json").read_text())
MODES = ("hybrid", "vector", "keyword")
K = 5


def _check_set() -> None:
    items = {item["key"]: item for item in SET["items"]}
    assert len(items) == len(SET["items"]), "item keys must be unique"
    for q in SET["queries"]:
        assert 1 <= len(q["relevant"]) <= 3, q["query"]
        for key in q["relevant"]:
            assert key in items, f"{q['query']!r} names unknown item {key!r}"
            if q.get("task_type"):
                assert items[key]["task_type"] == q["task_type"], f"{key} cannot match {q['query']!r}'s filter"


def load(board, memory) -> dict[int, str]:
    """Store every item as an agent's write would, index them all; returns item id -> key."""
    _check_set()
    keys: dict[int, str] = {}
    with board.store.write() as db:
        for item in SET["items"]:
            item_id = board.knowledge.add(
                db,
                kind=item["kind"],
                text=item["text"],
                title=item["title"],
                task_type=item["task_type"],
                created_by="curator",
            )
            keys[item_id] = item["key"]
    assert memory.drain() == len(keys)
    return keys


def search(memory, keys: dict[int, str], query: dict, mode: str) -> list[str]:
    hits = memory.query(query["query"], task_type=query.get("task_type"), k=K, mode=mode).hits
    return [keys[h.id] for h in hits]


def test_recall_at_5_by_search_mode(board, memory, capsys):
    keys = load(board, memory)
    queries = SET["queries"]
    per_query: dict[str, list[float]] = {}
    top: dict[str, list[list[str]]] = {}
    for mode in MODES:
        top[mode] = [search(memory, keys, q, mode) for q in queries]
        per_query[mode] = [
            len(set(q["relevant"]) & set(found)) / len(q["relevant"]) for q, found in zip(queries, top[mode])
        ]
    recall = {mode: sum(r) / len(r) for mode, r in per_query.items()}

    styles = sorted({q.get("style", "-") for q in queries})
    by_style: dict[str, dict[str, list[float]]] = {mode: defaultdict(list) for mode in MODES}
    for mode in MODES:
        for q, r in zip(queries, per_query[mode]):
            by_style[mode][q.get("style", "-")].append(r)
    lines = [
        f"recall@{K} on {len(SET['items'])} items, {len(queries)} queries",
        f"{'mode':<8} {'all':>6}" + "".join(f" {s + f' ({len(by_style[MODES[0]][s])})':>16}" for s in styles),
    ]
    for mode in MODES:
        lines.append(
            f"{mode:<8} {recall[mode]:>6.3f}"
            + "".join(f" {sum(by_style[mode][s]) / len(by_style[mode][s]):>16.3f}" for s in styles)
        )
    misses = [(i, q) for i, q in enumerate(queries) if min(per_query[m][i] for m in MODES) < 1]
    if misses:
        lines.append("queries not fully found (recall per mode h/v/k; hybrid's top 5):")
        for i, q in misses:
            marks = "/".join(f"{per_query[m][i]:.1f}".rstrip("0").rstrip(".") for m in MODES)
            lines.append(f"  {marks:<11} {q['query'][:60]!r} -> {', '.join(top['hybrid'][i])}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))

    for mode in ("vector", "keyword"):
        assert recall["hybrid"] >= recall[mode] - 0.01, f"hybrid loses what {mode} search finds: {recall}"
        assert recall[mode] > 0.3, f"{mode} search finds almost nothing: {recall}"
    assert recall["hybrid"] >= 0.8, recall


def test_task_type_filter_holds_in_every_mode(board, memory):
    load(board, memory)
    filtered = [q for q in SET["queries"] if q.get("task_type")]
    assert filtered
    for mode in MODES:
        for q in filtered:
            hits = memory.query(q["query"], task_type=q["task_type"], k=K, mode=mode).hits
            # vector search may rightly find nothing above its similarity floor (a bare identifier);
            # hybrid must still find the item, and no mode may leak another task type
            if mode == "hybrid":
                assert hits, f"nothing of type {q['task_type']} for {q['query']!r} ({mode})"
            assert {h.task_type for h in hits} <= {q["task_type"]}, (mode, q["query"], [h.title for h in hits])
