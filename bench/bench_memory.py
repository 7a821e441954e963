"""Shared memory at 1k, 10k and 100k items: query_memory latency next to raw Chroma, and load rates.

    .venv/bin/python bench/bench_memory.py               # full run: 1k, 10k, 100k (about 10 min on 2 cores)
    .venv/bin/python bench/bench_memory.py --quick       # smoke run: 1k and 10k, 60 queries (about 1 min)
    .venv/bin/python bench/bench_memory.py --levels 10k --queries 300 --json out.json
    .venv/bin/python bench/bench_memory.py --whatif       # earlier code paths patched in, at 1k, 10k, 100k

One process. Each level gets its own temp data directory (removed at the end; --keep keeps them) with
a fresh SQLite board and the embedded Chroma opened the way `hiveboard serve` opens it
(`open_memory`: this process owns the index). Tools are called through an in-process MCP client,
`mcp.Client(build_server(board, identity, memory=memory))`, as the tests do; a bare `noop` tool on the
same server is the MCP baseline.

1. Items (bench/_memory_corpus.py, loaded by bench/_memory_load.py): lessons, critiques, task outputs,
   messages and notes generated from ~100 problem/fix patterns × kinds × wordings, with modules,
   identifiers, libraries and versions filled in; task types code/test/docs/refactor/bug. The first --real
   items (10,000; --quick 1,000) are embedded for real, by a 2-thread instance of the same model (setup
   only). Beyond that an item REUSES the real vector of an item of the same pattern and kind plus gaussian
   noise (sigma --noise per dimension, renormalised): embedding 100k texts for real is too slow
   for a bench run. Its text is its own, so keyword search is real.
2. Load, per level: rows go in through `Knowledge.add` (the product's insert + FTS5 trigger + outbox)
   with the precomputed vector, one `store.write()` transaction per 1,000 items; then
   `Memory.drain()`'s loop (the indexing worker's path: lease 256 from the outbox, upsert into Chroma,
   mark indexed) builds the vector index. Both are timed (items/s). Planner statistics are refreshed
   after the first 1,000 items and at the end (see --stale-stats); the worker is started as the server
   runs it, and the heap is frozen (gc.freeze) as `hiveboard serve` does.
3. Queries, per level: the same --queries search texts for every row, drawn from a pool of
   paraphrases (not item texts). Rows: query_memory through MCP (hybrid, hybrid + task_type,
   vector, keyword, hybrid with the client's output-schema check off); Memory.query directly; the
   parts of a hybrid query on their own (query embedding, FTS5 BM25 candidates, the vector index
   call as Memory makes it, and Chroma with its where clause); raw Chroma `collection.query(query_embeddings=[v], n_results=50)` with
   a precomputed vector (the baseline every row's p50 is divided by), and with
   where={"task_type": …}; exact numpy top-50 over all vectors (with Chroma's recall@50 against it).
   A row stops early after --row-seconds (20) once it has 30 samples, so slow rows at 100k stay
   bounded; its n says how many ran.

4. With --whatif, instead of the rows of 3: query_memory hybrid and hybrid + task_type with earlier code paths
   ("before: …") and candidate changes patched into this process (never into the product's files), interleaved
   query by query with "as shipped", so drift on a noisy machine hits them all alike; each row gives its share
   of on-topic top-5 results (an item of the query's pattern) and its p50 against as shipped; raw Chroma is
   the baseline of "vs chroma", as in 3. At most 100 queries per row; a workload stops after twice
   --row-seconds once it has 30 queries.

The embedder's
throughput at several batch sizes: bench_embedding.py. Retrieval quality on the labelled sets:
bench_retrieval.py. RSS while the indexing worker embeds: bench_rss.py.

Targets (issue, on 2 cores): query_memory p50 through MCP, hybrid, query embedding included,
≤ 15 ms at 10k items and ≤ 30 ms at 100k. PASS/FAIL is printed; the exit code is 1 only for a wrong
answer (an empty hybrid result, a filter that let another task type through, an index with the
wrong count), not for a missed target.
"""

from __future__ import annotations

import cProfile
import gc
import logging
import pstats
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

import anyio
import numpy as np
import onnxruntime as ort
from _harness import (
    BenchError,
    Col,
    Lat,
    bench_parser,
    call,
    commit,
    count_label,
    finish,
    freeze_heap,
    in_process,
    loadavg,
    machine_info,
    machine_line,
    pct,
    ratio,
    scratch,
    stats,
    table,
    timed_calls,
    timed_raw,
)
from _memory_load import add_corpus_args, build_corpus, corpus_settings, level_memory

from hiveboard.board import knowledge as knowledge_mod
from hiveboard.memory import service as memory_service
from hiveboard.memory.embeddings import MiniLM, minilm_files, quantized_minilm

TARGETS_P50_MS = {10_000: 15.0, 100_000: 30.0}  # query_memory hybrid through MCP, query embedding included
WHATIF_QUERIES = 100


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


@dataclass
class Results:
    machine: dict
    settings: dict
    levels: list[Level] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    targets: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    load_before: str = ""
    load_after: str = ""
    total_s: float = 0.0


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def exact_top(matrix: np.ndarray, vec: np.ndarray, n: int) -> np.ndarray:
    sims = matrix @ vec
    top = np.argpartition(-sims, n)[:n]
    return top[np.argsort(-sims[top])]


async def measure_level(level: int, loaded, items, matrix: np.ndarray, queries, cfg: dict, lv: Level) -> list[Row]:
    board, memory, ids = loaded.board, loaded.memory, loaded.ids
    embedder = memory.embedder
    collection = memory.index.index.collection  # this process owns the embedded index
    pattern_of = {i: it.pattern for i, it in zip(ids, items)}
    texts = [q.text for q in queries]
    qvecs = [embedder.embed([t])[0] for t in texts]  # untimed: for the rows that take a precomputed vector
    budget = dict(seconds=cfg["row_seconds"])
    rows: list[Row] = []

    def add(name: str, lat: Lat, note: str = "") -> None:
        rows.append(Row(level, name, **stats(lat), note=note))
        print(f"  .. {name:<44} p50 {rows[-1].p50_ms:7.2f} ms  p99 {rows[-1].p99_ms:7.2f} ms", flush=True)

    on_topic: list[bool] = []
    vector_empty: list[dict] = []

    def check_hybrid(args: dict, out: dict) -> None:
        if not out["hits"]:
            raise BenchError(f"query_memory {args} found nothing at {level} items")
        q = next(q for q in queries if q.text == args["query"])
        on_topic.append(any(pattern_of.get(h["id"]) == q.pattern for h in out["hits"]))

    def check_typed(args: dict, out: dict) -> None:
        wrong = {h["task_type"] for h in out["hits"]} - {args["task_type"]}
        if wrong:
            raise BenchError(f"task_type={args['task_type']} returned items of {wrong}")

    def count_empty(args: dict, out: dict) -> None:
        # vector search may rightly find nothing above its similarity floor (0.2) for a vague query;
        # hybrid still has the keyword half, so only an empty hybrid result is a wrong answer
        if not out["hits"]:
            vector_empty.append(args)

    def nonempty(args: dict, out: dict) -> None:
        if not out["hits"]:
            raise BenchError(f"query_memory {args} found nothing at {level} items")

    def chroma(v, **where):
        return collection.query(query_embeddings=[v], n_results=50, include=["distances"], **where)

    hybrid = [dict(query=t) for t in texts]
    typed = [dict(query=q.text, task_type=q.task_type) for q in queries]
    async with in_process(board, memory=memory, with_noop=True) as client:
        for k in range(20):  # warm up: tool listing, worker threads' SQLite connections, page cache, ORT
            await call(client, "noop")
            await call(client, "query_memory", query=texts[k % len(texts)])
            chroma(qvecs[k % len(qvecs)])
        freeze_heap(cfg["gc_freeze"])

        # baselines first
        add("raw Chroma query n=50 (precomputed vector)", timed_raw([lambda v=v: chroma(v) for v in qvecs], **budget))
        add(
            "raw Chroma query n=50 where task_type",
            timed_raw(
                [lambda v=v, q=q: chroma(v, where={"task_type": q.task_type}) for v, q in zip(qvecs, queries)], **budget
            ),
        )
        add("noop tool through MCP", await timed_calls(client, "noop", [{} for _ in texts], **budget))
        # the requirement's row first among the MCP rows
        add(
            "query_memory hybrid (MCP, embeds query)",
            await timed_calls(client, "query_memory", hybrid, check=check_hybrid, **budget),
        )
        lv.on_topic_top5 = sum(on_topic) / len(on_topic)
        add(
            "query_memory hybrid + task_type (MCP)",
            await timed_calls(client, "query_memory", typed, check=check_typed, **budget),
        )
        vector = [dict(query=t, mode="vector") for t in texts]
        add("query_memory vector (MCP)", await timed_calls(client, "query_memory", vector, check=count_empty, **budget))
        if vector_empty:
            rows[-1].note = f"{len(vector_empty)} found nothing above similarity 0.2"
        keyword = [dict(query=t, mode="keyword") for t in texts]
        add("query_memory keyword (MCP)", await timed_calls(client, "query_memory", keyword, **budget))
        schemas = getattr(client.session, "_tool_output_schemas", None)
        if isinstance(schemas, dict) and schemas.get("query_memory"):  # full profile only
            saved, schemas["query_memory"] = schemas["query_memory"], None
            try:
                add(
                    "query_memory hybrid, no client schema check",
                    await timed_calls(client, "query_memory", hybrid, check=nonempty, **budget),
                )
            finally:
                schemas["query_memory"] = saved

    # no MCP: the service and its parts, in this thread
    add("Memory.query hybrid (direct, embeds query)", timed_raw([lambda t=t: memory.query(t) for t in texts], **budget))
    add(
        "Memory.query hybrid + task_type (direct)",
        timed_raw([lambda q=q: memory.query(q.text, task_type=q.task_type) for q in queries], **budget),
    )
    add(
        "  part: embed the query (embedder.embed)",
        timed_raw([lambda t=t: embedder.embed([t]) for t in texts], **budget),
    )
    add(
        "  part: FTS5 BM25 top-50 (Knowledge.keyword)",
        timed_raw([lambda t=t: board.knowledge.keyword(t, limit=memory_service.CANDIDATES) for t in texts], **budget),
    )
    overfetch = getattr(memory_service, "OVERFETCH", None)
    # without a filter Memory asks for SMALL_FETCH first (the over-fetch only when too few survive)
    first = getattr(memory_service, "SMALL_FETCH", overfetch)
    if overfetch:  # Memory asks Chroma for an unfiltered over-fetch and checks the filters in SQLite
        add(
            f"  part: vector top-{first} unfiltered (Memory's call)",
            timed_raw([lambda v=v: memory.index.query(v, first, include_deprecated=True) for v in qvecs], **budget),
        )
    add(
        f"  part: vector top-{memory_service.CANDIDATES} with Chroma where",
        timed_raw(
            [lambda v=v: memory.index.query(v, memory_service.CANDIDATES, include_deprecated=False) for v in qvecs],
            **budget,
        ),
        note='where={"deprecated": False}'
        + (": Memory's fallback when too few survive" if overfetch else ": Memory's call"),
    )
    chroma_top = [collection.query(query_embeddings=[v], n_results=50, include=[])["ids"][0] for v in qvecs]
    # every vector Chroma holds, named as it names them: an item's first reading by its id, a second by ID:b
    stored = board.knowledge.embeddings(ids, embedder.name)
    rows_of = [(i, r) for i in ids for r in range(len(stored[i]) if stored[i].ndim == 2 else 1)]
    if len(rows_of) > len(ids):
        matrix = np.vstack([stored[i][r] for i, r in rows_of])
    id_at = np.asarray([f"{i}:b" if r else str(i) for i, r in rows_of])
    exact_ids = []
    exact = timed_raw([lambda v=v: exact_top(matrix, v, 50) for v in qvecs], check=lambda top: exact_ids.append(top))
    exact_ids = [set(id_at[top]) for top in exact_ids]
    lv.chroma_recall_at_50 = sum(len(set(c) & e) for c, e in zip(chroma_top, exact_ids)) / (50 * len(qvecs))
    add(
        "exact numpy top-50 over all vectors (readings)",
        exact,
        note=f"Chroma recall@50 vs exact: {lv.chroma_recall_at_50:.3f}",
    )

    for r in rows:
        r.vs_chroma = ratio(r.p50_ms, rows[0].p50_ms)
    rows[3].note = f"top-5 on topic: {lv.on_topic_top5:.0%}"
    if cfg["profile"]:
        prof = cProfile.Profile()
        prof.enable()
        for t in texts:
            memory.query(t)
        prof.disable()
        out = StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
        print(f"\n  cProfile of {len(texts)} Memory.query hybrid calls at {count_label(level)} items (by own time):")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[:40] if line.strip()))
    return rows


# ----------------------------------------------------------------------------- --whatif


def raw_chroma(memory, queries) -> Lat:
    """The baseline: Chroma's own query with a precomputed vector, as the first row of the standard rows."""
    collection = memory.index.index.collection

    def query(v):
        return collection.query(query_embeddings=[v], n_results=50, include=["distances"])

    qvecs = [memory.embedder.embed([q.text])[0] for q in queries]
    for v in qvecs[:20]:  # warm up
        query(v)
    return timed_raw([lambda v=v: query(v) for v in qvecs])


def full_join_keyword(board):
    """What-if for Knowledge.keyword: how it was before commit 6126064 — every word of the query, every match
    joined to memory_items (rows that carry a 1.5 KB embedding) before BM25 sorts them."""
    knowledge = board.knowledge

    def keyword(query: str, *, task_type=None, kinds=None, tags=None, include_deprecated=False, trust=None, limit=50):
        match = knowledge_mod.fts_query(query)
        if match is None:
            return []
        where, params = knowledge._filters(task_type, kinds, tags, include_deprecated, trust)
        return [
            r[0]
            for r in knowledge.store.db.execute(
                f"SELECT m.id FROM memory_fts f JOIN memory_items m ON m.id = f.rowid WHERE memory_fts MATCH ?{where} "
                f"ORDER BY bm25(memory_fts, 2.0, 1.0) LIMIT ?",
                [match, *params, limit],
            )
        ]

    return keyword


class InlineExecutor:
    """What-if for Memory's search pool: run the keyword half in the calling thread, after the vector half."""

    def submit(self, fn, *args, **kwargs):
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


async def whatif_level(level: int, loaded, items, matrix, queries, cfg: dict, lv: Level) -> list[Row]:
    """--whatif: query_memory hybrid through MCP (the requirement's row) with the earlier code paths ("before: …")
    and candidate changes patched in, in this process only (product code is untouched). Variants are interleaved
    query by query, so drift on a noisy machine hits them all alike; "as shipped" is measured the same way
    and every variant is compared with it. At most WHATIF_QUERIES queries."""
    queries = queries[:WHATIF_QUERIES]
    board, memory = loaded.board, loaded.memory
    pattern_of = {i: it.pattern for i, it in zip(loaded.ids, items)}
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
                    board.knowledge.keyword(query, limit=memory_service.CANDIDATES, **filters),
                    None,
                )
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
        ("keyword without a word budget", use(scored_rows=10**12)),
        ("ORT threads=2, no spinning", use(embedder=nospin)),
    ]
    restore = use()
    rows = [Row(level, "raw Chroma query n=50 (precomputed vector)", **stats(raw_chroma(memory, queries)))]
    chroma_p50 = rows[0].p50_ms
    workloads = [
        ("hybrid", [dict(query=q.text) for q in queries]),
        ("hybrid + task_type", [dict(query=q.text, task_type=q.task_type) for q in queries]),
    ]
    async with in_process(board, memory=memory) as client:
        for _, apply in variants:  # warm up each variant
            apply()
            for k in range(5):
                await call(client, "query_memory", query=queries[k].text)
        restore()
        freeze_heap(cfg["gc_freeze"])
        try:
            for workload, arg_list in workloads:
                lat = {name: Lat() for name, _ in variants}
                on_topic = {name: 0 for name, _ in variants}
                started = time.perf_counter()
                for k, (q, args) in enumerate(zip(queries, arg_list)):
                    if k >= 30 and time.perf_counter() - started > 2 * cfg["row_seconds"]:
                        break
                    order = variants[k % len(variants) :] + variants[: k % len(variants)]
                    for name, apply in order:
                        apply()
                        with lat[name].timing():
                            out = await call(client, "query_memory", args)
                        on_topic[name] += any(pattern_of.get(h["id"]) == q.pattern for h in out["hits"])
                restore()
                base = pct(lat["as shipped"], 50)
                for name, _ in variants:
                    r = Row(level, f"what-if {workload}: {name}", **stats(lat[name]))
                    r.vs_chroma = ratio(r.p50_ms, chroma_p50)
                    r.note = f"on topic {on_topic[name] / len(lat[name]):.0%}"
                    if name != "as shipped":
                        r.note += f", {r.p50_ms / base - 1:+.0%} p50 vs as shipped"
                    rows.append(r)
                    print(
                        f"  .. {r.measurement:<64} p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms  {r.note}", flush=True
                    )
        finally:
            restore()
    return rows


def run_level(level: int, corpus, tmp: Path, cfg: dict, res: Results) -> None:
    t_level = time.perf_counter()
    home = tmp / f"level-{count_label(level)}"
    print(f"\n[{count_label(level)} items] data directory {home}", flush=True)
    items, vectors = corpus.items[:level], corpus.vectors[:level]
    try:
        with level_memory(home, items, vectors, not cfg["stale_stats"]) as loaded:
            lv = Level(
                items=level,
                real_vectors=min(level, corpus.real),
                load_s=loaded.load_s,
                load_per_s=level / loaded.load_s,
                drain_s=loaded.drain_s,
                drain_per_s=level / loaded.drain_s,
                chroma_count=loaded.memory.index.index.count(),
                db_mb=dir_mb(home) - dir_mb(home / "chroma"),
                chroma_mb=dir_mb(home / "chroma"),
            )
            res.levels.append(lv)
            print(
                f"  loaded {level} items into SQLite in {lv.load_s:.1f} s ({lv.load_per_s:.0f}/s), indexed into "
                f"Chroma in {lv.drain_s:.1f} s ({lv.drain_per_s:.0f}/s)",
                flush=True,
            )
            loaded.memory.start()  # the worker, idle, as the server runs it
            rows_of = whatif_level if cfg["whatif"] else measure_level
            res.rows += anyio.run(rows_of, level, loaded, items, vectors, corpus.queries, cfg, lv)
            lv.measure_s = time.perf_counter() - t_level
            print(f"  level {count_label(level)} took {lv.measure_s:.0f} s", flush=True)
    finally:
        gc.unfreeze()


def print_tables(res: Results) -> None:
    table(
        [Col("level", 6), Col("real vecs", 9), Col("sqlite s", 9, ".1f"), Col("sqlite/s", 9, ".0f")]
        + [Col("index s", 8, ".1f"), Col("index/s", 8, ".0f"), Col("db MB", 7, ".1f"), Col("chroma MB", 9, ".1f")],
        [
            (count_label(lv.items), lv.real_vectors, lv.load_s, lv.load_per_s, lv.drain_s, lv.drain_per_s)
            + (lv.db_mb, lv.chroma_mb)
            for lv in res.levels
        ],
        "loading (items/s): SQLite = Knowledge.add with the vector, 1,000 per transaction; "
        "index = Memory.drain() into Chroma",
    )
    print(
        "\nvs chroma: row p50 / raw Chroma p50 (collection.query, precomputed vector, n_results=50) at the same "
        "level.\ncpu ms: this process's CPU per call, all threads (client, server, SQLite, ONNX and Chroma all run "
        "here).\n"
    )
    cols = [Col("level", 6), Col("measurement", 64, left=True, clip=True), Col("n", 5), Col("p50 ms", 8, ".2f")]
    cols += [Col("p99 ms", 8, ".2f"), Col("vs chroma", 9, ".1f", suffix="x"), Col("cpu ms", 7, ".2f", blank="")]
    lines: list = []
    for r in res.rows:
        if lines and r.level != lines[-1][-1]:
            lines.append("")
        lines.append(
            (count_label(r.level), r.measurement, r.n, r.p50_ms, r.p99_ms, r.vs_chroma, r.cpu_ms, r.note, r.level)
        )
    table(cols, [row if isinstance(row, str) else row[:-1] for row in lines])


def verdict(res: Results) -> list[str]:
    lines = []
    for level, limit in TARGETS_P50_MS.items():
        r = next(
            (r for r in res.rows if r.level == level and r.measurement.startswith("query_memory hybrid (MCP")), None
        )
        if r is None:
            continue
        ok = r.p50_ms <= limit
        target = (
            f"query_memory p50 <= {limit:g} ms at {count_label(level)} items (MCP, hybrid, query embedding included)"
        )
        res.targets.append(dict(target=target, value_ms=r.p50_ms, ok=ok))
        lines.append(f"  {'PASS' if ok else 'FAIL'}  {target}: {r.p50_ms:.2f} ms")
    for level in sorted({r.level for r in res.rows if r.measurement.startswith("query_memory hybrid (MCP")}):
        got = {r.measurement: r.p50_ms for r in res.rows if r.level == level}

        def p(prefix: str) -> float:
            return next((v for k, v in got.items() if k.startswith(prefix)), float("nan"))

        total = p("query_memory hybrid (MCP")
        parts = [
            ("embed", p("  part: embed")),
            ("FTS5", p("  part: FTS5")),
            ("vector", p("  part: vector")),
            ("MCP noop", p("noop tool")),
        ]
        rest = total - sum(v for _, v in parts)
        lines.append(
            f"  (info) {count_label(level)}: hybrid {total:.1f} ms ≈ "
            + " + ".join(f"{name} {v:.1f}" for name, v in parts)
            + f" + rest {rest:.1f} (p50s; FTS5 runs beside embed + vector on a second thread, so rest can be negative)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="levels 1k and 10k, 60 queries per row (< 2 min)", keep="keep the data directories")
    add_corpus_args(p)
    p.add_argument("--profile", action="store_true", help="print a cProfile of Memory.query at each level")
    p.add_argument(
        "--whatif",
        action="store_true",
        help=f"instead of the standard rows: query_memory with earlier code paths and candidate changes patched in "
        f"(at most {WHATIF_QUERIES} queries a row)",
    )
    p.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="skip gc.freeze() before the timed rows (`hiveboard serve` freezes its start-up heap)",
    )
    args = p.parse_args(argv)
    cfg = dict(corpus_settings(args), profile=args.profile, gc_freeze=args.gc_freeze, whatif=args.whatif)
    cfg["candidates"] = memory_service.CANDIDATES
    levels = cfg["levels"]
    started = time.perf_counter()
    res = Results(
        machine=dict(hiveboard_commit=commit(), **machine_info("chromadb", "onnxruntime", "numpy")), settings=cfg
    )
    print(machine_line(res.machine))
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per level
    res.load_before = loadavg()
    if float(res.load_before.split()[0]) > 1.0:
        print(f"warning: load average {res.load_before} at start: something else is running, latencies will be noisy")
    code = 0
    with scratch("hiveboard-bench-mem-", args.keep) as tmp:
        try:
            corpus = build_corpus(args.seed, max(levels), cfg["queries"], cfg["real"], args.noise, args.embed_threads)
            cfg["bulk_embed_per_s"], cfg["noisy_mean_cosine_to_source"] = corpus.rate, corpus.noisy_cosine
            for level in levels:
                run_level(level, corpus, tmp, cfg, res)
            print_tables(res)
            if any(lv.items > lv.real_vectors for lv in res.levels):
                print(
                    f"\nnote: levels above {corpus.real} items use {corpus.real} real embeddings; the other items "
                    f"reuse one of them (same pattern and kind) plus gaussian noise (sigma {args.noise}/dim), "
                    "renormalised."
                )
        except BenchError as exc:
            res.problems.append(str(exc))
            print(f"\nPROBLEM: {exc}", file=sys.stderr)
            code = 1
            print_tables(res)
    finish(res, started, [] if code else verdict(res), args.json)
    return code


if __name__ == "__main__":
    sys.exit(main())
