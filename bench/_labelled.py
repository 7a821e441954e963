"""Retrieval quality on labelled sets: hybrid, vector and keyword search as the product runs them, next to a
plain BM25 and the raw model's cosine computed in the same run.

A set is a JSON file {"items": [{key, title, text, kind?, task_type?}], "queries": [{query, relevant: [keys],
task_type?}]}. Its items go in through the product (Knowledge.add in one write transaction, then the indexing
worker's drain into the embedded Chroma); queries go through Memory.query. The baselines see the same items:
BM25 (Okapi, k1 1.2, b 0.75) over lowercased \\w+ words of title and text, no stemming or stopwords; cosine is
the product's embedder on "title\\ntext" (what the indexer embeds) and the query, exact top-k with numpy.

R@k is the share of queries with a relevant item in the top k (a query may name two or three items that answer
it equally well, e.g. `chunked` and `chunked_iter`); MRR@10 is the mean of 1/rank of the first relevant item
within the top 10 (0 when none).
"""

from __future__ import annotations

import json
import math
import re
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
}
METHODS = ("hybrid", "vector", "keyword", "bm25", "cosine")
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


def load(name: str) -> dict:
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


def evaluate(name: str, embedder, memory_factory=None, methods=METHODS, target=None) -> SetResult:
    """Load one set into a fresh board and memory (a temp data directory) and score every method on it.

    `memory_factory(board, embedder, home)` opens the memory (default: open_memory, as `hiveboard serve` does);
    `target(home)` names the store to open (default: a SQLite file in the temp data directory; a bench on
    PostgreSQL hands a new empty database's URL).
    """
    from hiveboard.board import Board, Store
    from hiveboard.memory.service import open_memory

    data = load(name)
    items, queries = data["items"], data["queries"]
    name = name if name in SETS else Path(name).stem
    res = SetResult(name=name, items=len(items), queries=len(queries))
    keys = [i["key"] for i in items]
    types = np.array([i.get("task_type", "code") for i in items])
    with tempfile.TemporaryDirectory(prefix=f"hiveboard-bench-{name}-") as tmp:
        board = Board(Store(target(Path(tmp)) if target else Path(tmp) / "hiveboard.db"), lease_seconds=300)
        memory = (memory_factory or open_memory)(board, embedder, Path(tmp))
        try:
            ids: dict[int, str] = {}
            with board.store.write() as db:
                for it in items:
                    ids[
                        board.knowledge.add(
                            db,
                            kind=it.get("kind", "lesson"),
                            text=it["text"],
                            title=it["title"],
                            task_type=it.get("task_type", "code"),
                            created_by="bench",
                        )
                    ] = it["key"]
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
    docs = [f"{i['title']}\n{i['text']}" for i in items]
    if "bm25" in methods:
        bm25 = BM25(docs)
        ranked["bm25"] = [_top(bm25.scores(q["query"]), _allowed(types, q), keys, positive_only=True) for q in queries]
    if "cosine" in methods:
        matrix = np.vstack([embedder.embed(docs[k : k + 8]) for k in range(0, len(docs), 8)])
        qv = getattr(embedder, "embed_query", embedder.embed)([q["query"] for q in queries])
        ranked["cosine"] = [_top(matrix @ v, _allowed(types, q), keys) for v, q in zip(qv, queries)]
    res.metrics = {m: score(ranked[m], queries) for m in methods}
    if "hybrid" in methods and "vector" in methods:
        for q, h, v in zip(queries, ranked["hybrid"], ranked["vector"]):
            rel = set(q["relevant"])
            if rel & set(v[:5]) and not rel & set(h[:5]):
                res.misses.append(f"{q['query']!r}: vector {v[:3]} hybrid {h[:5]}")
    return res


def _allowed(types: np.ndarray, query: dict) -> np.ndarray:
    return types == query["task_type"] if query.get("task_type") else np.ones(len(types), dtype=bool)


def print_results(results: list[SetResult], show_misses: bool = False) -> None:
    cols = [f"R@{c}" for c in CUTS] + ["MRR@10"]
    print(
        "\nretrieval quality per labelled set (R@k: a relevant item in the top k; hybrid/vector/keyword = "
        "Memory.query as shipped;\nbm25 = plain Okapi BM25, cosine = the raw model's exact cosine, both in this run)"
    )
    for r in results:
        print(f"\n{r.name}: {r.items} items, {r.queries} queries")
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
        if show_misses and r.misses:
            print(f"  in vector's top 5, not in hybrid's ({len(r.misses)}):")
            for line in r.misses:
                print(f"    {line}")
