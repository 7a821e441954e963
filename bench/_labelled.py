"""Retrieval quality on labelled sets: hybrid, vector and keyword search as the product runs them, next to a
plain BM25 and the raw model's cosine computed in the same run.

A set is a JSON file {"items": [{key, title, text, kind?, task_type?}], "queries": [{query, relevant: [keys],
task_type?}]}. Its items go in through the product, one of three ways (LOADS): as the set gives them
(Knowledge.add in one write transaction), as an agent's `remember` stores them, or as an agent's
`record_lesson` does; then the indexing worker's drain puts them into the embedded Chroma, and queries go
through Memory.query. The baselines see the same items: BM25 (Okapi, k1 1.2, b 0.75) over lowercased \\w+
words of title and text, no stemming or stopwords; cosine is the raw model: the product's embedder on each
item's text alone (no title, nothing added; one text per run, so no other text of a batch shapes its vector)
and on the query, exact top-k with numpy.

R@k is the share of queries with a relevant item in the top k (a query may name two or three items that answer
it equally well, e.g. `chunked` and `chunked_iter`); MRR@10 is the mean of 1/rank of the first relevant item
within the top 10 (0 when none).
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETS = {
    "retrieval_set": HERE.parent / "tests" / "memory" / "retrieval_set.json",
    "boltons": HERE / "labelled" / "boltons.json",
    "more_itertools": HERE / "labelled" / "more_itertools.json",
    "cosqa_web": HERE / "labelled" / "cosqa_web.json",
    "algorithms_docstrings": HERE / "labelled" / "algorithms_docstrings.json",
}
# Sets built here but kept out of the repository (their data licence is not ours): how to build each. The
# benches skip one that is not built and say how to build it.
KEPT_OUT = {
    "cosqa_web": "python bench/labelled/build_sets.py cosqa_web PATH/TO/CoCLR.git (CoSQA, data licence C-UDA-1.0)",
}
METHODS = ("hybrid", "vector", "keyword", "bm25", "cosine")
# How a set's items go into the memory. `remember` and `lesson` are what an agent's tool calls store: the
# `remember` tool titles an item sent without a title with its first line; record_lesson keeps "Problem: …\nFix: …"
# and merges a near-duplicate of a lesson of the same task type into it (a query naming a merged item then
# counts a hit on the lesson it was merged into).
LOADS = {
    "set": "Knowledge.add with the set's kind and title",
    "remember": "the remember tool's items: kind snippet, the set's title or none (then its first line)",
    "lesson": "record_lesson: problem = the set's title or the text's first line, fix = the text",
}
RAW_TOLERANCE = 0.005  # issue 26: vector search as shipped within this of the raw model's cosine
CUTS = (1, 5, 10)
DEPTH = 10
_WORD = re.compile(r"\w+")


@dataclass
class SetResult:
    name: str
    items: int
    queries: int
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # method -> {"R@1": .., "MRR@10": ..}
    misses: list[str] = field(default_factory=list)  # queries vector has in its top 5 and hybrid does not
    load: str = "set"
    merged: int = 0  # items record_lesson merged into another (load "lesson")


def default_sets() -> list[str]:
    """The registered sets present in this checkout; each one kept out and not built is named on stderr."""
    for name in KEPT_OUT:
        if not SETS[name].exists():
            print(f"skipping {name}: not built here; build it with {KEPT_OUT[name]}", file=sys.stderr)
    return [name for name, path in SETS.items() if path.exists()]


def load_set(name: str) -> dict:
    """A set by its name in SETS, or any file of the same shape by its path (a set you keep outside the repo)."""
    data = json.loads((SETS[name] if name in SETS else Path(name)).read_text())
    keys = {i["key"] for i in data["items"]}
    for q in data["queries"]:
        assert set(q["relevant"]) <= keys, (name, q)
    return data


def score(ranked: list[list[str]], queries: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for cut in CUTS:
        out[f"R@{cut}"] = sum(bool(set(r[:cut]) & set(q["relevant"])) for r, q in zip(ranked, queries)) / len(queries)
    rr = []
    for r, q in zip(ranked, queries):
        rank = next((n for n, key in enumerate(r[:DEPTH], 1) if key in q["relevant"]), None)
        rr.append(1 / rank if rank else 0.0)
    out["MRR@10"] = sum(rr) / len(rr)
    return out


class BM25:
    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75):
        self.tf = [Counter(w.lower() for w in _WORD.findall(d)) for d in docs]
        self.len = [sum(t.values()) for t in self.tf]
        self.avg = sum(self.len) / len(self.len)
        df = Counter(w for t in self.tf for w in t)
        n = len(docs)
        self.idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: str) -> np.ndarray:
        words = [w.lower() for w in _WORD.findall(query)]
        out = np.zeros(len(self.tf))
        for i, (tf, length) in enumerate(zip(self.tf, self.len)):
            s = 0.0
            for w in words:
                f = tf.get(w)
                if f:
                    s += self.idf[w] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * length / self.avg))
            out[i] = s
        return out


def _top(scores: np.ndarray, allowed: np.ndarray, keys: list[str], positive_only: bool = False) -> list[str]:
    s = np.where(allowed, scores, -np.inf)
    order = np.argsort(-s, kind="stable")[:DEPTH]
    return [keys[i] for i in order if np.isfinite(s[i]) and (not positive_only or s[i] > 0)]


def store_items(load: str, board, memory, items: list[dict]) -> dict[str, int]:
    """Put a set's items into the memory the way `load` names (LOADS); returns key -> the item id it went to."""
    if load == "set":
        with board.store.write() as db:
            return {
                it["key"]: board.knowledge.add(
                    db,
                    kind=it.get("kind", "lesson"),
                    text=it["text"],
                    title=it["title"],
                    task_type=it.get("task_type", "code"),
                    created_by="bench",
                )
                for it in items
            }
    if load == "remember":
        from hiveboard.server.memory import MAX_NOTES, stored_item  # what the tool stores, not a copy of it

        ids: dict[str, int] = {}
        for k in range(0, len(items), MAX_NOTES):
            batch = items[k : k + MAX_NOTES]
            notes = [
                stored_item(
                    text=it["text"],
                    title=it["title"] or None,
                    task_type=it.get("task_type", "code"),
                    tags=[],
                    kind="snippet",
                )
                for it in batch
            ]
            ids.update(zip([it["key"] for it in batch], [m.id for m in board.knowledge.remember("bench", notes)]))
        return ids
    if load == "lesson":
        return {
            it["key"]: memory.record_lesson(
                "bench",
                problem=it["title"] or it["text"].strip().splitlines()[0],
                fix=it["text"],
                task_type=it.get("task_type", "code"),
            ).item.id
            for it in items
        }
    raise ValueError(f"load {load!r} is not one of {', '.join(LOADS)}")


def raw_vectors(embed, texts: list[str]) -> np.ndarray:
    """The raw model's vectors of these texts, each embedded alone (as Memory.query embeds a query): `embed`
    is an embedder or its embed_query."""
    embed = getattr(embed, "embed", embed)
    return np.vstack([embed([t]) for t in texts])


def evaluate(name: str, embedder, memory_factory=None, methods=METHODS, target=None, load: str = "set") -> SetResult:
    """Load one set into a fresh board and memory (a temp data directory) and score every method on it.

    `memory_factory(board, embedder, home)` opens the memory (default: open_memory, as `hiveboard serve` does);
    `target(home)` names the store to open (default: a SQLite file in the temp data directory; a bench on
    PostgreSQL hands a new empty database's URL); `load` how the items go in (LOADS).
    """
    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board
    from hiveboard.memory.service import open_memory

    data = load_set(name)
    items, queries = data["items"], data["queries"]
    name = name if name in SETS else Path(name).stem
    res = SetResult(name=name, items=len(items), queries=len(queries), load=load)
    with tempfile.TemporaryDirectory(prefix=f"hiveboard-bench-{name}-") as tmp:
        board = Board(Store(target(Path(tmp)) if target else Path(tmp) / "hiveboard.db"), lease_seconds=300)
        memory = (memory_factory or open_memory)(board, embedder, Path(tmp))
        try:
            stored = store_items(load, board, memory, items)
            ids = {item_id: key for key, item_id in reversed(stored.items())}  # a merged item: its first key
            res.merged = len(stored) - len(ids)
            memory.drain()
            ranked: dict[str, list[list[str]]] = {m: [] for m in methods}
            # a model that embeds queries and documents differently (e5's "query: " prefix) says so with embed_query
            embed_query = getattr(embedder, "embed_query", None)
            for q in queries:
                vector = embed_query([q["query"]])[0] if embed_query else None
                for mode in ("hybrid", "vector", "keyword"):
                    if mode in methods:
                        hits = memory.query(
                            q["query"], task_type=q.get("task_type"), k=DEPTH, mode=mode, vector=vector
                        ).hits
                        ranked[mode].append([ids[h.id] for h in hits])
        finally:
            memory.stop()
            board.store.close()
    # the store's hits name a merged item by its first key: a query naming another key of it names that one
    canonical = {key: ids[item_id] for key, item_id in stored.items()}
    store_queries = [{**q, "relevant": [canonical[k] for k in q["relevant"]]} for q in queries]
    # BM25 and the raw model rank the same items as the store: those a merge left (a lesson merged into
    # another is one item there, so the queries naming it name the one it went into)
    kept = [i for i in items if i["key"] in set(ids.values())]
    keys, types = [i["key"] for i in kept], np.array([i.get("task_type", "code") for i in kept])
    if "bm25" in methods:
        bm25 = BM25([f"{i['title']}\n{i['text']}" for i in kept])
        ranked["bm25"] = [
            _top(bm25.scores(q["query"]), _allowed(types, q), keys, positive_only=True) for q in store_queries
        ]
    if "cosine" in methods:
        matrix = raw_vectors(embedder, [i["text"] for i in kept])
        qv = raw_vectors(getattr(embedder, "embed_query", embedder), [q["query"] for q in store_queries])
        ranked["cosine"] = [_top(matrix @ v, _allowed(types, q), keys) for v, q in zip(qv, store_queries)]
    res.metrics = {m: score(ranked[m], store_queries) for m in methods}
    if "hybrid" in methods and "vector" in methods:
        for q, h, v in zip(store_queries, ranked["hybrid"], ranked["vector"]):
            rel = set(q["relevant"])
            if rel & set(v[:5]) and not rel & set(h[:5]):
                res.misses.append(f"{q['query']!r}: vector {v[:3]} hybrid {h[:5]}")
    return res


SHAPES = ("raw text", "title + text", "embedded_text", "embedded or text, max", "chunks, max", "first 128 tokens")


def shapes(name: str, embedder, load: str = "set") -> dict[str, dict[str, float]]:
    """What an item's vector is made of, compared (issue 26): the set's items go in as `load` says and are
    read back as stored; then, exact cosine with the raw model, each text alone, ranked over the stored items:
    the raw text; "title\\ntext" as stored (what the indexer embedded before); memory.service.embedded_text
    (what it embeds now); two vectors, embedded_text and the stored text alone, an item scoring the better (a
    titled item indexed twice); the whole text in windows of 254 tokens (stride 192), an item scoring its best
    window; and only its first 126 tokens (the model was trained on 128). No filter, no similarity floor."""
    from tokenizers import Tokenizer

    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board
    from hiveboard.memory.embeddings import MAX_TOKENS, minilm_files
    from hiveboard.memory.service import embedded_text, open_memory

    data = load_set(name)
    items, queries = data["items"], data["queries"]
    with tempfile.TemporaryDirectory(prefix=f"hiveboard-bench-{name}-") as tmp:
        board = Board(Store(Path(tmp) / "hiveboard.db"), lease_seconds=300)
        memory = open_memory(board, embedder, Path(tmp))
        try:
            stored = store_items(load, board, memory, items)
            found = board.knowledge.get(sorted(set(stored.values())))
        finally:
            memory.stop()
            board.store.close()
    ids = {item_id: key for key, item_id in reversed(stored.items())}
    canonical = {key: ids[item_id] for key, item_id in stored.items()}
    order = sorted(found)
    keys = [ids[i] for i in order]
    raw = {ids[i]: next(it["text"] for it in items if it["key"] == ids[i]) for i in order}
    tokenizer = Tokenizer.from_file(str(minilm_files()[1]))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def windows(text: str, size: int, stride: int) -> list[str]:
        pieces = tokenizer.encode(text, add_special_tokens=False).ids
        starts = range(0, max(len(pieces) - size, 0) + stride, stride) if stride else [0]
        return [tokenizer.decode(pieces[a : a + size]) for a in starts if a < max(len(pieces), 1)]

    texts = {
        "raw text": [[raw[k]] for k in keys],
        "title + text": [[f"{found[i].title}\n{found[i].text}"] for i in order],
        "embedded_text": [[embedded_text(found[i].kind, found[i].title, found[i].text)] for i in order],
        "embedded or text, max": [
            list(dict.fromkeys([embedded_text(found[i].kind, found[i].title, found[i].text), found[i].text]))
            for i in order
        ],
        "chunks, max": [
            windows(embedded_text(found[i].kind, found[i].title, found[i].text), MAX_TOKENS - 2, 192) for i in order
        ],
        "first 128 tokens": [
            windows(embedded_text(found[i].kind, found[i].title, found[i].text), 126, 0) for i in order
        ],
    }
    qv = raw_vectors(getattr(embedder, "embed_query", embedder), [q["query"] for q in queries])
    store_queries = [{**q, "relevant": [canonical[k] for k in q["relevant"]]} for q in queries]
    out = {}
    for shape, per_item in texts.items():
        vectors = [raw_vectors(embedder, t) for t in per_item]
        ranked = []
        for v in qv:
            best = np.array([float((m @ v).max()) for m in vectors])
            ranked.append([keys[i] for i in np.argsort(-best, kind="stable")[:DEPTH]])
        out[shape] = score(ranked, store_queries)
    return out


def _allowed(types: np.ndarray, query: dict) -> np.ndarray:
    return types == query["task_type"] if query.get("task_type") else np.ones(len(types), dtype=bool)


def print_results(results: list[SetResult], show_misses: bool = False) -> None:
    cols = [f"R@{c}" for c in CUTS] + ["MRR@10"]
    print(
        "\nretrieval quality per labelled set (R@k: a relevant item in the top k; hybrid/vector/keyword = "
        "Memory.query as shipped;\nbm25 = plain Okapi BM25, cosine = the raw model's exact cosine, both in this run)"
    )
    for r in results:
        merged = f", {r.merged} merged into another" if r.merged else ""
        print(f"\n{r.name}: {r.items} items, {r.queries} queries; loaded by {r.load} ({LOADS[r.load]}{merged})")
        print(f"  {'method':<8}" + "".join(f" {c:>7}" for c in cols))
        for method, m in r.metrics.items():
            print(f"  {method:<8}" + "".join(f" {m[c]:>7.3f}" for c in cols))
        if {"hybrid", "vector", "keyword"} <= r.metrics.keys():
            best = {c: max(r.metrics["vector"][c], r.metrics["keyword"][c]) for c in ("R@5", "MRR@10")}
            ok = all(r.metrics["hybrid"][c] >= best[c] - 0.01 for c in best)
            print(
                f"  {'PASS' if ok else 'FAIL'}  hybrid R@5 and MRR@10 >= the better half - 0.01 "
                f"(R@5 {r.metrics['hybrid']['R@5']:.3f} vs {best['R@5']:.3f}, "
                f"MRR@10 {r.metrics['hybrid']['MRR@10']:.3f} vs {best['MRR@10']:.3f})"
            )
        if {"hybrid", "vector", "cosine"} <= r.metrics.keys():
            m = r.metrics
            ok = all(m["vector"][c] >= m["cosine"][c] - RAW_TOLERANCE for c in ("R@5", "MRR@10"))
            ok = ok and all(m["hybrid"][c] >= m["vector"][c] for c in ("R@5", "MRR@10"))
            print(
                f"  {'PASS' if ok else 'FAIL'}  vector R@5 and MRR@10 >= the raw model's cosine - {RAW_TOLERANCE}, "
                f"hybrid >= vector (R@5 {m['hybrid']['R@5']:.3f} / {m['vector']['R@5']:.3f} / "
                f"{m['cosine']['R@5']:.3f}, MRR@10 {m['hybrid']['MRR@10']:.3f} / {m['vector']['MRR@10']:.3f} / "
                f"{m['cosine']['MRR@10']:.3f})"
            )
        if show_misses and r.misses:
            print(f"  in vector's top 5, not in hybrid's ({len(r.misses)}):")
            for line in r.misses:
                print(f"    {line}")
