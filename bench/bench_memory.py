"""Shared memory at 1k, 10k and 100k items: query_memory latency next to raw Chroma, embedding throughput.

    /work/venv/bin/python bench/bench_memory.py               # full run: 1k, 10k, 100k (about 10 min on 2 cores)
    /work/venv/bin/python bench/bench_memory.py --quick       # smoke run: 1k and 10k, 60 queries (about 1 min)
    /work/venv/bin/python bench/bench_memory.py --whatif      # also time earlier code paths patched in (+3 min)
    /work/venv/bin/python bench/bench_memory.py --levels 10k --queries 300 --json out.json
    /work/venv/bin/python bench/bench_memory.py --sets-only --misses   # labelled sets' quality only (a few min)

One process. Each level gets its own temp data directory (removed at the end; --keep keeps them) with
a fresh SQLite board and the embedded Chroma opened the way `hiveboard serve` opens it
(`open_memory`: this process owns the index). Tools are called through an in-process MCP client,
`mcp.Client(build_server(board, identity, memory=memory))`, as the tests do; a bare `noop` tool on the
same server is the MCP baseline.

1. Embedding throughput of the product's embedder (`get_embedder()`: all-MiniLM-L6-v2 int8 on
   onnxruntime, quantized for int8 arithmetic, 1 thread) at batch sizes 1, 8, 16 and 64, on item texts
   as the indexing worker embeds them (title + text); of the export as shipped (fp32 arithmetic) at 1
   and 8; and of the 2-thread instance the bench uses for its own setup.
2. Items (bench/_memory_corpus.py): lessons, critiques, task outputs, messages and notes generated
   from ~100 problem/fix patterns × kinds × wordings, with modules, identifiers, libraries and
   versions filled in; task types code/test/docs/refactor/bug. The first --real items (10,000;
   --quick 1,000) are embedded for real, by a 2-thread instance of the same model (setup only).
   Beyond that an item REUSES the real vector of an item of the same pattern and kind plus gaussian
   noise (sigma --noise per dimension, renormalised; cosine ≈ 0.93 to its source): embedding 100k
   texts for real would take ~25 min here. Its text is its own, so keyword search is real.
3. Load, per level: rows go in through `Knowledge.add` (the product's insert + FTS5 trigger + outbox)
   with the precomputed vector, one `store.write()` transaction per 1,000 items; then
   `Memory.drain()`'s loop (the indexing worker's path: lease 256 from the outbox, upsert into Chroma,
   mark indexed) builds the vector index. Both are timed (items/s). Planner statistics are refreshed
   after the first 1,000 items and at the end (see --stale-stats); the worker is started as the server
   runs it, and the heap is frozen (gc.freeze) as `hiveboard serve` does.
4. Queries, per level: the same --queries search texts for every row, drawn from a pool of
   paraphrases (not item texts). Rows: query_memory through MCP (hybrid, hybrid + task_type,
   vector, keyword, hybrid with the client's output-schema check off); Memory.query directly; the
   parts of a hybrid query on their own (query embedding, FTS5 BM25 candidates, the vector index
   call as Memory makes it, and Chroma with its where clause); raw Chroma `collection.query(query_embeddings=[v], n_results=50)` with
   a precomputed vector (the baseline every row's p50 is divided by), and with
   where={"task_type": …}; exact numpy top-50 over all vectors (with Chroma's recall@50 against it).
   A row stops early after --row-seconds (20) once it has 30 samples, so slow rows at 100k stay
   bounded; its n says how many ran.
5. --whatif: the requirement's row (and its task_type twin) again with earlier code paths ("before: …")
   and candidate changes patched into this process (never into the product's files), interleaved query
   by query with "as shipped", each with its share of on-topic top-5 results so a faster variant that
   finds worse items shows it.

6. RSS while indexing (--rss-items, 512): sampled every 50 ms while the worker embeds and indexes long
   items (each fills the model's 256 tokens), then while `reindex` rebuilds the index; start, peak, end.
7. Retrieval quality per labelled set (bench/_labelled.py; --sets, --sets-only): R@1/R@5/R@10/MRR@10 of
   hybrid, vector and keyword search as shipped, a plain BM25 and the raw model's cosine, all in this run.

Targets (issue, on 2 cores): query_memory p50 through MCP, hybrid, query embedding included,
≤ 15 ms at 10k items and ≤ 30 ms at 100k. PASS/FAIL is printed; the exit code is 1 only for a wrong
answer (an empty hybrid result, a filter that let another task type through, an index with the
wrong count), not for a missed target.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import os
import pstats
import random
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from io import StringIO
from pathlib import Path

import anyio
import numpy as np
import onnxruntime as ort
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info as common_machine_info  # noqa: E402
from _common import Lat, payload, pct, remove_unless_kept  # noqa: E402
from _memory_corpus import PATTERNS, Item, item, query_pool  # noqa: E402
import _labelled  # noqa: E402
from hiveboard.board import Board, Store  # noqa: E402
from hiveboard.board import knowledge as knowledge_mod  # noqa: E402
from hiveboard.memory import service as memory_service  # noqa: E402
from hiveboard.memory.embeddings import (  # noqa: E402
    MiniLM,
    get_embedder,
    minilm_files,
    quantized_minilm,
)
from hiveboard.memory.service import Memory, open_memory  # noqa: E402
from hiveboard.server.app import build_server  # noqa: E402
from hiveboard.server.identity import Identity  # noqa: E402

TARGETS_P50_MS = {10_000: 15.0, 100_000: 30.0}  # query_memory hybrid through MCP, query embedding included
LOAD_BATCH = 1_000
GC_FREEZE = True
REFRESH_STATS = True  # --stale-stats turns it off: load with the statistics a fresh data directory has
TRUE_TOP: dict[int, list[set[str]]] = {}  # level -> exact top-50 ids (as Chroma's string ids) per query


# ----------------------------------------------------------------------------- results


@dataclass
class Row:
    level: int
    measurement: str
    n: int
    p50_ms: float
    p99_ms: float
    cpu_ms: float | None = None  # this process's CPU (all threads) per call
    vs_chroma: float | None = None  # p50 / raw Chroma p50 at the same level
    note: str = ""


@dataclass
class Level:
    items: int
    real_vectors: int
    load_s: float
    load_per_s: float
    drain_s: float
    drain_per_s: float
    chroma_count: int
    db_mb: float
    chroma_mb: float
    on_topic_top5: float | None = None  # share of hybrid queries whose top 5 hold an item of the query's pattern
    chroma_recall_at_50: float | None = None
    measure_s: float = 0.0  # load + measurements of this level
    whatif_s: float = 0.0


@dataclass
class Results:
    machine: dict
    settings: dict
    embedding: list[dict] = field(default_factory=list)
    levels: list[Level] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    targets: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    quality: list[dict] = field(default_factory=list)  # per labelled set: method -> R@1/R@5/R@10/MRR@10
    rss: list[dict] = field(default_factory=list)  # RSS while indexing / reindexing
    total_s: float = 0.0


class BenchError(RuntimeError):
    """Something the bench checks came out wrong (a wrong answer, not a slow one)."""


def make_row(level: int, name: str, lat: Lat, note: str = "") -> Row:
    cpu = lat.cpu_s / len(lat) * 1000 if lat.cpu_s is not None and lat else None
    return Row(level=level, measurement=name, n=len(lat), p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), cpu_ms=cpu,
               note=note)


def machine_info() -> dict:
    import subprocess
    try:
        here = Path(__file__).resolve().parent
        commit = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return dict(hiveboard_commit=commit, **common_machine_info("chromadb", "onnxruntime", "numpy"))


def parse_count(text: str) -> int:
    text = text.strip().lower()
    mult = 1_000 if text.endswith("k") else 1
    return int(float(text.rstrip("k")) * mult)


def label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


# ----------------------------------------------------------------------------- 1. embedding


def embedding_throughput(embedder, texts: list[str], batches: tuple[int, ...], res: Results, tag: str) -> None:
    embedder.embed(texts[:8])  # warm up
    for bs in batches:
        t0 = time.perf_counter()
        per_batch = []
        for k in range(0, len(texts), bs):
            t = time.perf_counter()
            embedder.embed(texts[k:k + bs])
            per_batch.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        entry = dict(embedder=tag, batch=bs, texts=len(texts), per_s=len(texts) / wall,
                     batch_p50_ms=pct(per_batch, 50))
        res.embedding.append(entry)
        print(f"  .. {tag:<34} batch {bs:>3}: {entry['per_s']:7.1f} texts/s  "
              f"(p50 {entry['batch_p50_ms']:.1f} ms per batch)", flush=True)


BULK_BATCH = 8  # on the 2-core VM, batches past ~8 texts got slower per text, not faster


def real_vectors(texts: list[str], threads: int) -> tuple[np.ndarray, float]:
    """Embed texts for real (batches of similar length, so padding stays small); returns (vectors, texts/s)."""
    bulk = MiniLM(threads=threads)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), bulk.dim), dtype=np.float32)
    t0 = time.perf_counter()
    last = t0
    for k in range(0, len(order), BULK_BATCH):
        idx = order[k:k + BULK_BATCH]
        out[idx] = bulk.embed([texts[i] for i in idx])
        if time.perf_counter() - last > 15:
            last = time.perf_counter()
            print(f"     {k + len(idx)}/{len(texts)} embedded…", flush=True)
    return out, len(texts) / (time.perf_counter() - t0)


def noisy_vectors(items: list[Item], real: np.ndarray, start: int, stop: int, sigma: float, seed: int
                  ) -> tuple[np.ndarray, float]:
    """Vectors for items start..stop-1: the real vector of an item with the same pattern and kind, plus noise."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    groups: dict[tuple[int, str], list[int]] = {}
    for i in range(len(real)):
        groups.setdefault((items[i].pattern, items[i].kind), []).append(i)
    by_pattern: dict[int, list[int]] = {}
    for i in range(len(real)):
        by_pattern.setdefault(items[i].pattern, []).append(i)
    src = np.empty(stop - start, dtype=np.int64)
    for j, i in enumerate(range(start, stop)):
        pool = groups.get((items[i].pattern, items[i].kind)) or by_pattern.get(items[i].pattern) or [i % len(real)]
        src[j] = pick.choice(pool)
    out = real[src] + rng.normal(0.0, sigma, size=(stop - start, real.shape[1])).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out, float(np.mean(np.sum(out * real[src], axis=1)))


# ----------------------------------------------------------------------------- 3. load


def load_level(board: Board, memory: Memory, items: list[Item], vectors: np.ndarray, model: str
               ) -> tuple[list[int], float, float]:
    """Insert through Knowledge.add (precomputed vectors), then drain the outbox into Chroma."""
    knowledge = board.knowledge
    ids: list[int] = []
    t0 = time.perf_counter()
    for k in range(0, len(items), LOAD_BATCH):
        with board.store.write() as db:
            for it, vec in zip(items[k:k + LOAD_BATCH], vectors[k:k + LOAD_BATCH]):
                ids.append(knowledge.add(db, kind=it.kind, text=it.text, created_by="bench", task_type=it.task_type,
                                         title=it.title, tags=it.tags, embedding=vec, model=model))
        if k == 0 and REFRESH_STATS:
            # Store() ran ANALYZE on the empty schema, which records memory_fts_data as a 2-row table; the
            # planner then runs FTS5's segment-merge DELETE (id BETWEEN ?) as a full scan and every insert
            # costs O(items) (see the README). Fresh statistics, as the server's next ANALYZE gives them.
            board.store.optimize()
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    last = t0
    done = 0
    while (n := memory.index_pending(256)):  # Memory.drain(), with progress
        done += n
        if time.perf_counter() - last > 20:
            last = time.perf_counter()
            print(f"     {done}/{len(items)} indexed…", flush=True)
    drain_s = time.perf_counter() - t0
    return ids, load_s, drain_s


# ----------------------------------------------------------------------------- 4. queries


def noop() -> str:
    """Do nothing (benchmark baseline)."""
    return "ok"


async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise BenchError(f"{tool}({args}) failed: {result.content[0].text if result.content else result}")
    return payload(result)


ROW_SECONDS = 20.0  # --row-seconds: a row stops early once it has run this long (and has MIN_SAMPLES)
MIN_SAMPLES = 30


def over_budget(started: float, n: int) -> bool:
    return n >= MIN_SAMPLES and time.perf_counter() - started > ROW_SECONDS


async def timed_calls(client: Client, tool: str, arg_list: list[dict], check=None) -> Lat:
    lat = Lat()
    started = time.perf_counter()
    for args in arg_list:
        if over_budget(started, len(lat)):
            break
        with lat.timing():
            out = await call(client, tool, args)
        if check is not None:
            check(args, out)
    return lat


def timed_raw(fns: list, check=None) -> Lat:
    lat = Lat()
    started = time.perf_counter()
    for fn in fns:
        if over_budget(started, len(lat)):
            break
        with lat.timing():
            out = fn()
        if check is not None:
            check(out)
    return lat


def exact_top(matrix: np.ndarray, vec: np.ndarray, n: int) -> np.ndarray:
    sims = matrix @ vec
    top = np.argpartition(-sims, n)[:n]
    return top[np.argsort(-sims[top])]


async def measure_level(level: int, board: Board, memory: Memory, ids: list[int], items: list[Item],
                        matrix: np.ndarray, queries, cfg: dict, res: Results, lv: Level) -> None:
    embedder = memory.embedder
    collection = memory.index.index.collection  # this process owns the embedded index
    pattern_of = {i: it.pattern for i, it in zip(ids, items)}
    texts = [q.text for q in queries]
    qvecs = [embedder.embed([t])[0] for t in texts]  # untimed: for the rows that take a precomputed vector
    server = build_server(board, Identity(board.agents, "memory", agent="bench"), memory=memory)
    server.add_tool(noop, name="noop")
    rows: list[Row] = []

    def add(name: str, lat: Lat, note: str = "") -> None:
        r = make_row(level, name, lat, note)
        rows.append(r)
        print(f"  .. {name:<44} p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms", flush=True)

    on_topic: list[bool] = []

    def check_hybrid(args: dict, out: dict) -> None:
        hits = out["hits"]
        if not hits:
            raise BenchError(f"query_memory {args} found nothing at {level} items")
        q = next(q for q in queries if q.text == args["query"])
        on_topic.append(any(pattern_of.get(h["id"]) == q.pattern for h in hits))

    def check_typed(args: dict, out: dict) -> None:
        wrong = {h["task_type"] for h in out["hits"]} - {args["task_type"]}
        if wrong:
            raise BenchError(f"task_type={args['task_type']} returned items of {wrong}")

    vector_empty: list[dict] = []

    def count_empty(args: dict, out: dict) -> None:
        # vector search may rightly find nothing above its similarity floor (0.2) for a vague query;
        # hybrid still has the keyword half, so only an empty hybrid result is a wrong answer
        if not out["hits"]:
            vector_empty.append(args)

    def nonempty(args: dict, out: dict) -> None:
        if not out["hits"]:
            raise BenchError(f"query_memory {args} found nothing at {level} items")

    hybrid = [dict(query=t) for t in texts]
    typed = [dict(query=q.text, task_type=q.task_type) for q in queries]
    async with Client(server) as client:
        for k in range(20):  # warm up: tool listing, worker threads' SQLite connections, page cache, ORT
            await call(client, "noop", {})
            await call(client, "query_memory", dict(query=texts[k % len(texts)]))
            collection.query(query_embeddings=[qvecs[k % len(qvecs)]], n_results=50, include=["distances"])
        if GC_FREEZE:
            gc.collect()
            gc.freeze()

        # baselines first
        add("raw Chroma query n=50 (precomputed vector)", timed_raw(
            [lambda v=v: collection.query(query_embeddings=[v], n_results=50, include=["distances"]) for v in qvecs]))
        chroma_p50 = rows[-1].p50_ms
        add("raw Chroma query n=50 where task_type", timed_raw(
            [lambda v=v, q=q: collection.query(query_embeddings=[v], n_results=50, include=["distances"],
                                               where={"task_type": q.task_type}) for v, q in zip(qvecs, queries)]))
        add("noop tool through MCP", await timed_calls(client, "noop", [{} for _ in texts]))

        # the requirement's row first among the MCP rows
        add("query_memory hybrid (MCP, embeds query)", await timed_calls(client, "query_memory", hybrid, check_hybrid))
        lv.on_topic_top5 = sum(on_topic) / len(on_topic)
        add("query_memory hybrid + task_type (MCP)", await timed_calls(client, "query_memory", typed, check_typed))
        add("query_memory vector (MCP)", await timed_calls(
            client, "query_memory", [dict(query=t, mode="vector") for t in texts], count_empty))
        if vector_empty:
            rows[-1].note = f"{len(vector_empty)} found nothing above similarity 0.2"
        add("query_memory keyword (MCP)", await timed_calls(
            client, "query_memory", [dict(query=t, mode="keyword") for t in texts]))
        schemas = getattr(client.session, "_tool_output_schemas", None)
        if isinstance(schemas, dict) and schemas.get("query_memory"):  # full profile only
            saved, schemas["query_memory"] = schemas["query_memory"], None
            try:
                add("query_memory hybrid, no client schema check", await timed_calls(
                    client, "query_memory", hybrid, nonempty))
            finally:
                schemas["query_memory"] = saved

    # no MCP: the service and its parts, in this thread
    add("Memory.query hybrid (direct, embeds query)", timed_raw([lambda t=t: memory.query(t) for t in texts]))
    add("Memory.query hybrid + task_type (direct)", timed_raw(
        [lambda q=q: memory.query(q.text, task_type=q.task_type) for q in queries]))
    add("  part: embed the query (embedder.embed)", timed_raw([lambda t=t: embedder.embed([t]) for t in texts]))
    add("  part: FTS5 BM25 top-50 (Knowledge.keyword)", timed_raw(
        [lambda t=t: board.knowledge.keyword(t, limit=memory_service.CANDIDATES) for t in texts]))
    overfetch = getattr(memory_service, "OVERFETCH", None)
    # without a filter Memory asks for SMALL_FETCH first (the over-fetch only when too few survive)
    first = getattr(memory_service, "SMALL_FETCH", overfetch)
    if overfetch:  # Memory asks Chroma for an unfiltered over-fetch and checks the filters in SQLite
        add(f"  part: vector top-{first} unfiltered (Memory's call)", timed_raw(
            [lambda v=v: memory.index.query(v, first, include_deprecated=True) for v in qvecs]))
    add(f"  part: vector top-{memory_service.CANDIDATES} with Chroma where", timed_raw(
        [lambda v=v: memory.index.query(v, memory_service.CANDIDATES, include_deprecated=False) for v in qvecs]),
        note='where={"deprecated": False}' + (": Memory's fallback when too few survive" if overfetch else
                                               ": Memory's call"))
    chroma_top = [collection.query(query_embeddings=[v], n_results=50, include=[])["ids"][0] for v in qvecs]
    id_at = np.asarray(ids)
    exact = Lat()
    exact_ids = []
    for v in qvecs:
        t0 = time.perf_counter()
        top = exact_top(matrix, v, 50)
        exact.append(time.perf_counter() - t0)
        exact_ids.append({str(i) for i in id_at[top]})
    TRUE_TOP[level] = exact_ids
    recall = sum(len(set(c) & e) for c, e in zip(chroma_top, exact_ids)) / (50 * len(qvecs))
    lv.chroma_recall_at_50 = recall
    add("exact numpy top-50 over all vectors", exact, note=f"Chroma recall@50 vs exact: {recall:.3f}")

    for r in rows:
        r.vs_chroma = r.p50_ms / chroma_p50 if chroma_p50 else None
    rows[3].note = f"top-5 on topic: {lv.on_topic_top5:.0%}"
    res.rows += rows

    if cfg["profile"]:
        prof = cProfile.Profile()
        prof.enable()
        for t in texts:
            memory.query(t)
        prof.disable()
        out = StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
        print(f"\n  cProfile of {len(texts)} Memory.query hybrid calls at {label(level)} items (by own time):")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[:40] if line.strip()))


# ----------------------------------------------------------------------------- 5. what-if (--whatif)


def full_join_keyword(board: Board):
    """What-if for Knowledge.keyword: how it was before commit 6126064 — every word of the query, every match
    joined to memory_items (rows that carry a 1.5 KB embedding) before BM25 sorts them."""
    knowledge = board.knowledge

    def keyword(query: str, *, task_type=None, kinds=None, tags=None, include_deprecated=False, limit=50):
        match = knowledge_mod.fts_query(query)
        if match is None:
            return []
        where, params = knowledge._filters(task_type, kinds, tags, include_deprecated)
        return [r[0] for r in knowledge.store.db.execute(
            f"SELECT m.id FROM memory_fts f JOIN memory_items m ON m.id = f.rowid WHERE memory_fts MATCH ?{where} "
            f"ORDER BY bm25(memory_fts, 2.0, 1.0) LIMIT ?", [match, *params, limit])]

    return keyword


class InlineExecutor:
    """What-if for Memory's search pool: run the keyword half in the calling thread, after the vector half."""

    def submit(self, fn, *args, **kwargs):
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


async def whatif_level(level: int, board: Board, memory: Memory, ids: list[int], items: list[Item], queries,
                       res: Results, n_queries: int) -> None:
    """query_memory hybrid through MCP (the requirement's row) with the earlier code paths ("before: …") and
    candidate changes patched in, in this process only (product code is untouched). Variants are interleaved
    query by query, so drift on a noisy machine hits them all alike; "as shipped" is measured the same way
    and every variant is compared with it."""
    queries = queries[:n_queries]
    pattern_of = {i: it.pattern for i, it in zip(ids, items)}
    server = build_server(board, Identity(board.agents, "memory", agent="bench"), memory=memory)
    shipped_embedder = memory.embedder
    nospin = MiniLM(threads=2)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    nospin.session = ort.InferenceSession(quantized_minilm(minilm_files()[0]), opts, providers=["CPUExecutionProvider"])
    export = MiniLM(quantized=False)  # the export as shipped: int8 weights, fp32 arithmetic
    shipped_rows, shipped_pool = knowledge_mod.SCORED_ROWS, memory_service._search_pool
    old_keyword = full_join_keyword(board)
    inline = InlineExecutor()

    def rrf(rankings, similarity, vector, words, k):  # the fusion before the labelled sets: equal-weight RRF, k=60
        scores: dict[int, float] = {}
        for ranked in rankings.values():
            for rank, item_id in enumerate(ranked):
                scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (60 + rank + 1)
        return scores

    def use(embedder=None, keyword=None, scored_rows=None, sequential=False, fuse=None):
        def apply():
            if fuse is None:
                memory.__dict__.pop("_fuse", None)
                memory.__dict__.pop("_keyword", None)
            else:  # the keyword thread as it was: BM25's ranking only
                memory._fuse = fuse
                memory._keyword = lambda query, mode, filters: (
                    board.knowledge.keyword(query, limit=memory_service.CANDIDATES, **filters), None)
            memory.embedder = embedder or shipped_embedder
            knowledge_mod.SCORED_ROWS = scored_rows or shipped_rows
            memory_service._search_pool = (lambda: inline) if sequential else shipped_pool
            if keyword is None:
                board.knowledge.__dict__.pop("keyword", None)
            else:
                board.knowledge.keyword = keyword
        return apply

    variants = [
        ("as shipped", use()),
        ("before: reciprocal-rank fusion k=60 (no coverage, no stored sims)", use(fuse=rrf)),
        ("before: the export's fp32 arithmetic (query embedding)", use(embedder=export)),
        ("before: keyword full join, every word", use(keyword=old_keyword)),
        ("keyword and vector halves in sequence", use(sequential=True)),
        ("before: all three", use(embedder=export, keyword=old_keyword, sequential=True)),
        ("keyword word budget 20k rows", use(scored_rows=20_000)),
        ("keyword without a word budget", use(scored_rows=10 ** 12)),
        ("ORT threads=2, no spinning", use(embedder=nospin)),
    ]
    restore = use()
    chroma_p50 = next(r.p50_ms for r in res.rows if r.level == level and r.measurement.startswith("raw Chroma query"))
    workloads = [("hybrid", [dict(query=q.text) for q in queries]),
                 ("hybrid + task_type", [dict(query=q.text, task_type=q.task_type) for q in queries])]
    async with Client(server) as client:
        for _, apply in variants:  # warm up each variant
            apply()
            for k in range(5):
                await call(client, "query_memory", dict(query=queries[k].text))
        restore()
        try:
            for workload, arg_list in workloads:
                lat = {name: Lat() for name, _ in variants}
                on_topic = {name: 0 for name, _ in variants}
                started = time.perf_counter()
                for k, (q, args) in enumerate(zip(queries, arg_list)):
                    if k >= MIN_SAMPLES and time.perf_counter() - started > 2 * ROW_SECONDS:
                        break
                    order = variants[k % len(variants):] + variants[:k % len(variants)]
                    for name, apply in order:
                        apply()
                        with lat[name].timing():
                            out = await call(client, "query_memory", args)
                        on_topic[name] += any(pattern_of.get(h["id"]) == q.pattern for h in out["hits"])
                restore()
                base = pct(lat["as shipped"], 50)
                for name, _ in variants:
                    r = make_row(level, f"what-if {workload}: {name}", lat[name])
                    r.vs_chroma = r.p50_ms / chroma_p50 if chroma_p50 else None
                    r.note = f"on topic {on_topic[name] / len(lat[name]):.0%}"
                    if name != "as shipped":
                        r.note += f", {r.p50_ms / base - 1:+.0%} p50 vs as shipped"
                    res.rows.append(r)
                    print(f"  .. {r.measurement:<64} p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms  {r.note}",
                          flush=True)
        finally:
            restore()


# ----------------------------------------------------------------------------- printing


def print_tables(res: Results) -> None:
    print("\nembedding throughput (texts/s; items as the indexing worker embeds them: title + text)")
    print(f"{'embedder':<36} {'batch':>5} {'texts':>6} {'texts/s':>8} {'ms/batch p50':>13}")
    for e in res.embedding:
        print(f"{e['embedder']:<36} {e['batch']:>5} {e['texts']:>6} {e['per_s']:>8.1f} {e['batch_p50_ms']:>13.1f}")

    print("\nloading (items/s): SQLite = Knowledge.add with the vector, 1,000 per transaction; "
          "index = Memory.drain() into Chroma")
    print(f"{'level':>6} {'real vecs':>9} {'sqlite s':>9} {'sqlite/s':>9} {'index s':>8} {'index/s':>8} "
          f"{'db MB':>7} {'chroma MB':>9}")
    for lv in res.levels:
        print(f"{label(lv.items):>6} {lv.real_vectors:>9} {lv.load_s:>9.1f} {lv.load_per_s:>9.0f} {lv.drain_s:>8.1f} "
              f"{lv.drain_per_s:>8.0f} {lv.db_mb:>7.1f} {lv.chroma_mb:>9.1f}")

    print("\nvs chroma: row p50 / raw Chroma p50 (collection.query, precomputed vector, n_results=50) at the same "
          "level.\ncpu ms: this process's CPU per call, all threads (client, server, SQLite, ONNX and Chroma all run "
          "here).")
    head = f"{'level':>6} {'measurement':<64} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'vs chroma':>9} {'cpu ms':>7}"
    print()
    print(head)
    print("-" * len(head))
    current = None
    for r in res.rows:
        if r.level != current:
            if current is not None:
                print()
            current = r.level
        vs = f"{r.vs_chroma:>8.1f}x" if r.vs_chroma is not None else f"{'-':>9}"
        cpu = f"{r.cpu_ms:>7.2f}" if r.cpu_ms is not None else f"{'':>7}"
        note = f"  {r.note}" if r.note else ""
        print(f"{label(r.level):>6} {r.measurement[:64]:<64} {r.n:>5} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {vs} {cpu}{note}")


def verdict(res: Results) -> list[str]:
    lines = []
    for level, limit in TARGETS_P50_MS.items():
        r = next((r for r in res.rows if r.level == level and r.measurement.startswith("query_memory hybrid (MCP")),
                 None)
        if r is None:
            continue
        ok = r.p50_ms <= limit
        target = f"query_memory p50 <= {limit:g} ms at {label(level)} items (MCP, hybrid, query embedding included)"
        res.targets.append(dict(target=target, value_ms=r.p50_ms, ok=ok))
        lines.append(f"  {'PASS' if ok else 'FAIL'}  {target}: {r.p50_ms:.2f} ms")
    for level in sorted({r.level for r in res.rows}):
        got = {r.measurement: r.p50_ms for r in res.rows if r.level == level}

        def p(prefix: str) -> float:
            return next((v for k, v in got.items() if k.startswith(prefix)), float("nan"))

        total = p("query_memory hybrid (MCP")
        parts = [("embed", p("  part: embed")), ("FTS5", p("  part: FTS5")), ("vector", p("  part: vector")),
                 ("MCP noop", p("noop tool"))]
        rest = total - sum(v for _, v in parts)
        lines.append(f"  (info) {label(level)}: hybrid {total:.1f} ms ≈ " +
                     " + ".join(f"{name} {v:.1f}" for name, v in parts) + f" + rest {rest:.1f} (p50s; FTS5 runs "
                     "beside embed + vector on a second thread, so rest can be negative)")
    return lines


# ----------------------------------------------------------------------------- main


def run_level(level: int, items: list[Item], vectors: np.ndarray, n_real: int, queries, tmp: Path, cfg: dict,
              res: Results) -> None:
    t_level = time.perf_counter()
    home = tmp / f"level-{label(level)}"
    print(f"\n[{label(level)} items] data directory {home}", flush=True)
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    embedder = get_embedder()
    memory = open_memory(board, embedder, home)
    try:
        if memory.index.index is None:
            raise BenchError("this process did not become the owner of the memory index")
        plan = board.store.db.execute("EXPLAIN QUERY PLAN DELETE FROM memory_fts_data WHERE id >= ? AND id <= ?",
                                      [1, 2]).fetchall()[0][-1]
        if plan.startswith("SCAN"):
            print(f"  note: on a fresh data directory FTS5's segment-merge DELETE plans as {plan!r} (ANALYZE ran on the "
                  f"empty schema); the bench refreshes statistics after the first {LOAD_BATCH} items"
                  + ("" if REFRESH_STATS else " (not: --stale-stats)"), flush=True)
        ids, load_s, drain_s = load_level(board, memory, items[:level], vectors[:level], embedder.name)
        count = memory.index.index.count()
        if count != level or board.knowledge.pending():
            raise BenchError(f"after drain Chroma holds {count} vectors, outbox {board.knowledge.pending()}; "
                             f"expected {level} and 0")
        board.store.optimize()
        lv = Level(items=level, real_vectors=min(level, n_real), load_s=load_s, load_per_s=level / load_s,
                   drain_s=drain_s, drain_per_s=level / drain_s, chroma_count=count,
                   db_mb=dir_mb(home) - dir_mb(home / "chroma"), chroma_mb=dir_mb(home / "chroma"))
        res.levels.append(lv)
        print(f"  loaded {level} items into SQLite in {load_s:.1f} s ({lv.load_per_s:.0f}/s), indexed into Chroma "
              f"in {drain_s:.1f} s ({lv.drain_per_s:.0f}/s)", flush=True)
        memory.start()  # the worker, idle, as the server runs it
        anyio.run(measure_level, level, board, memory, ids, items[:level], vectors[:level], queries, cfg, res, lv)
        lv.measure_s = time.perf_counter() - t_level
        if cfg["whatif"]:
            print(f"  what-if rows ({min(cfg['queries'], cfg['whatif_queries'])} queries, variants interleaved):",
                  flush=True)
            t_whatif = time.perf_counter()
            anyio.run(whatif_level, level, board, memory, ids, items[:level], queries, res, cfg["whatif_queries"])
            lv.whatif_s = time.perf_counter() - t_whatif
        print(f"  level {label(level)} took {lv.measure_s:.0f} s" +
              (f" + {lv.whatif_s:.0f} s of what-if rows" if lv.whatif_s else ""), flush=True)
    finally:
        if GC_FREEZE:
            gc.unfreeze()
        memory.stop()
        board.store.close()
        try:  # let go of this level's Chroma (its files are removed with the temp directory)
            from chromadb.api.client import SharedSystemClient
            SharedSystemClient.clear_system_cache()
        except Exception:
            pass
        gc.collect()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def sampled_rss(work) -> dict:
    """Run work() while a thread samples this process's RSS every 50 ms: start, peak and end in MB."""
    import threading
    samples = [rss_mb()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            samples.append(rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    try:
        work()
    finally:
        done.set()
        sampler.join()
    return dict(start_mb=samples[0], peak_mb=max(samples), end_mb=rss_mb(), seconds=time.perf_counter() - t0)


def indexing_rss(n: int, tmp: Path, res: Results) -> None:
    """RSS while the indexing worker embeds n long items (each fills the model's 256 tokens), then while
    `reindex` rebuilds the index from SQLite (stored vectors reused, nothing embedded)."""
    if not Path("/proc/self/statm").exists():
        return
    home = tmp / "rss"
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    memory = open_memory(board, get_embedder(), home)
    long = " ".join(f"identifier_{k} retried the request after a timeout" for k in range(120))
    try:
        with board.store.write() as db:
            for i in range(n):
                board.knowledge.add(db, kind="message", text=f"{i} {long}", title=f"long item {i}", created_by="bench")
        gc.collect()
        for name, work in ((f"index {n} new long items (embedding them)", memory.drain),
                           (f"reindex {n} items (stored vectors reused)", memory.reindex)):
            row = dict(measurement=name, **sampled_rss(work))
            res.rss.append(row)
            print(f"  {name}: RSS {row['start_mb']:.0f} -> peak {row['peak_mb']:.0f} -> {row['end_mb']:.0f} MB "
                  f"({row['seconds']:.1f} s)", flush=True)
    finally:
        memory.stop()
        board.store.close()


def quality(sets: list[str], res: Results, misses: bool) -> None:
    """Retrieval quality per labelled set (bench/_labelled.py), printed and kept in the results."""
    found = []
    for name in sets:
        print(f"\n[labelled set {name}] loading and searching", flush=True)
        found.append(_labelled.evaluate(name, get_embedder()))
        res.quality.append(asdict(found[-1]))
    if found:
        _labelled.print_results(found, misses)


def main(argv: list[str] | None = None) -> int:
    global GC_FREEZE, ROW_SECONDS, REFRESH_STATS
    p = argparse.ArgumentParser(description="hiveboard shared memory: query_memory at 1k/10k/100k items vs raw Chroma")
    p.add_argument("--quick", action="store_true", help="levels 1k and 10k, 60 queries per row (< 2 min)")
    p.add_argument("--levels", help="comma-separated item counts, e.g. 1k,10k,100k (default; --quick 1k,10k)")
    p.add_argument("--queries", type=int, help="searches per row (200; --quick 60)")
    p.add_argument("--real", type=int,
                   help="items embedded for real (10000; --quick 1000); items beyond reuse a real vector plus noise")
    p.add_argument("--noise", type=float, default=0.02, help="gaussian sigma per dimension for reused vectors")
    p.add_argument("--embed-threads", type=int, default=2,
                   help="onnxruntime threads of the bench's own embedder for the bulk setup (2); the measured "
                   "query path always uses the product's get_embedder()")
    p.add_argument("--profile", action="store_true", help="print a cProfile of Memory.query at each level")
    p.add_argument("--whatif", action="store_true",
                   help="also time query_memory with earlier code paths and candidate changes patched into this "
                   "process (the export's fp32 arithmetic, the full-join keyword search, the halves in sequence, "
                   "other word budgets, ORT threads=2), interleaved query by query with as-shipped")
    p.add_argument("--stale-stats", action="store_true",
                   help="load without refreshing planner statistics after the first batch (what a fresh data "
                   "directory does until its next ANALYZE): shows the O(items) insert cost; slow at 100k")
    p.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                   help="skip gc.freeze() before the timed rows (`hiveboard serve` freezes its start-up heap)")
    p.add_argument("--row-seconds", type=float, default=ROW_SECONDS,
                   help=f"stop a row after this long once it has {MIN_SAMPLES} samples ({ROW_SECONDS:g}; what-if "
                   "workloads get twice this); keeps the 100k level, where a query can take 100+ ms, in bounds")
    p.add_argument("--sets", default=",".join(_labelled.SETS),
                   help=f"labelled sets whose retrieval quality is printed (default: {','.join(_labelled.SETS)}; "
                   "a path names a set file of the same shape; '' for none)")
    p.add_argument("--sets-only", action="store_true", help="only the labelled sets' quality tables (a few minutes)")
    p.add_argument("--misses", action="store_true", help="list the queries vector search has in its top 5 and hybrid not")
    p.add_argument("--rss-items", type=int, default=512, help="long items embedded while RSS is sampled (512)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the temp data directories")
    args = p.parse_args(argv)
    GC_FREEZE = args.gc_freeze
    ROW_SECONDS = args.row_seconds
    REFRESH_STATS = not args.stale_stats

    q = args.quick
    levels = sorted({parse_count(x) for x in (args.levels or ("1k,10k" if q else "1k,10k,100k")).split(",") if x})
    real = args.real if args.real is not None else (1_000 if q else 10_000)
    cfg = dict(levels=levels, queries=args.queries or (60 if q else 200), real=min(real, max(levels)),
               noise=args.noise, embed_threads=args.embed_threads, seed=args.seed, quick=q, profile=args.profile,
               gc_freeze=args.gc_freeze, whatif=args.whatif, whatif_queries=100, row_seconds=args.row_seconds,
               stale_stats=args.stale_stats, throughput_texts=48 if q else 128, load_batch=LOAD_BATCH,
               candidates=memory_service.CANDIDATES)
    started = time.perf_counter()
    res = Results(machine=machine_info(), settings=cfg)
    m = res.machine
    print(f"machine: {m['cpu_count']} cpus ({m['usable_cpus']} usable), {m['implementation']} {m['python']}, "
          f"hiveboard {m['hiveboard_commit']}, "
          f"mcp {m['mcp']}, chromadb {m['chromadb']}, onnxruntime {m['onnxruntime']}, sqlite {m['sqlite']}, "
          f"{m['platform']}")
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per level
    load = os.getloadavg()[0]
    res.machine["loadavg_start"] = load
    if load > 1.0:
        print(f"warning: 1-min load average {load:.2f} at start: something else is running, latencies will be noisy")

    sets = [s for s in args.sets.split(",") if s]
    if args.sets_only:
        with tempfile.TemporaryDirectory(prefix="hiveboard-bench-rss-") as scratch:
            print("\n[memory] RSS while indexing (sampled every 50 ms)", flush=True)
            indexing_rss(args.rss_items, Path(scratch), res)
        quality(sets, res, args.misses)
        if args.json:
            Path(args.json).write_text(json.dumps(asdict(res), indent=2, ensure_ascii=False, default=float))
        return 0

    top = max(levels)
    items = [item(args.seed, i) for i in range(top)]
    pool = query_pool(args.seed, 4 * cfg["queries"])
    queries = random.Random(args.seed).sample(pool, cfg["queries"])
    print(f"corpus: {len(PATTERNS)} problem/fix patterns; {top} items generated, "
          f"{len({it.text for it in items[:cfg['real']]})} distinct texts among the first {cfg['real']}; "
          f"{cfg['queries']} queries per row from a pool of {len(pool)} paraphrases", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="hiveboard-bench-mem-"))
    code = 0
    try:
        print("\n[embedding] the product's embedder (get_embedder(): MiniLM int8, quantized, onnxruntime, 1 thread)",
              flush=True)
        sample = [f"{it.title}\n{it.text}" for it in random.Random(args.seed + 1).sample(items, min(len(items),
                                                                                                   cfg["throughput_texts"]))]
        embedding_throughput(get_embedder(), sample, (1, 8, 16, 64), res, "get_embedder() (1 thread)")
        embedding_throughput(MiniLM(quantized=False), sample, (1, 8), res, "export, fp32 math (1 thread)")
        if args.embed_threads != 1:
            embedding_throughput(MiniLM(threads=args.embed_threads), sample, (1, BULK_BATCH, 64), res,
                                 f"MiniLM(threads={args.embed_threads}) (bench setup)")

        print("\n[memory] RSS while indexing (sampled every 50 ms; the process holds the bench's data too)",
              flush=True)
        indexing_rss(args.rss_items, tmp, res)

        n_real = cfg["real"]
        print(f"\n[vectors] embedding {n_real} items for real (MiniLM threads={args.embed_threads}, length-sorted "
              f"batches of {BULK_BATCH})", flush=True)
        real, rate = real_vectors([f"{it.title}\n{it.text}" for it in items[:n_real]], args.embed_threads)
        res.embedding.append(dict(embedder=f"bulk setup, threads={args.embed_threads}, length-sorted", batch=BULK_BATCH,
                                  texts=n_real, per_s=rate, batch_p50_ms=float("nan")))
        print(f"  {n_real} real vectors at {rate:.0f} texts/s", flush=True)
        if top > n_real:
            noisy, cos = noisy_vectors(items, real, n_real, top, args.noise, args.seed)
            vectors = np.vstack([real, noisy])
            cfg["noisy_mean_cosine_to_source"] = cos
            print(f"  items {n_real}..{top - 1}: REUSED real vectors of same-pattern items + gaussian noise "
                  f"(sigma {args.noise}/dim, renormalised; mean cosine {cos:.3f} to the source); not embedded",
                  flush=True)
        else:
            vectors = real

        for level in levels:
            run_level(level, items, vectors, n_real, queries, tmp, cfg, res)

        quality(sets, res, args.misses)
        print_tables(res)
        if any(lv.items > lv.real_vectors for lv in res.levels):
            print(f"\nnote: levels above {n_real} items use {n_real} real embeddings; the other items reuse one of "
                  f"them (same pattern and kind) plus gaussian noise (sigma {args.noise}/dim), renormalised.")
        print()
        for line in verdict(res):
            print(line)
    except BenchError as exc:
        res.problems.append(str(exc))
        print(f"\nPROBLEM: {exc}", file=sys.stderr)
        code = 1
        print_tables(res)
    finally:
        res.total_s = time.perf_counter() - started
        res.machine["loadavg_end"] = os.getloadavg()[0]
        print(f"total {res.total_s:.1f} s (load average {res.machine['loadavg_start']:.2f} at start, "
              f"{res.machine['loadavg_end']:.2f} at end)")
        if args.json:
            Path(args.json).write_text(json.dumps(asdict(res), indent=2, ensure_ascii=False, default=float))
            print(f"wrote {args.json}")
        remove_unless_kept(tmp, args.keep)
    return code


if __name__ == "__main__":
    sys.exit(main())
