"""What-if rows for query_memory: the requirement's row with earlier code paths and candidate changes patched in.

    .venv/bin/python bench/bench_memory_whatif.py              # levels 1k, 10k, 100k
    .venv/bin/python bench/bench_memory_whatif.py --quick      # 1k and 10k, 60 queries
    .venv/bin/python bench/bench_memory_whatif.py --levels 10k --queries 100

Each level is loaded as bench_memory.py loads it (bench/_memory_load.py: the same corpus, vectors and a fresh
data directory) and queried through an in-process MCP client. query_memory hybrid, and hybrid + task_type, run
with earlier code paths ("before: …") and candidate changes patched into this process (never into the
product's files), interleaved query by query with "as shipped", so drift on a noisy machine hits them all
alike; each row gives its share of on-topic top-5 results (an item of the query's pattern), so a faster
variant that finds worse items shows it, and its p50 against as shipped. The baseline of the "vs chroma"
column is raw Chroma (collection.query with a precomputed vector, n_results=50), measured at each level in
the same run, as in bench_memory.py. At most 100 queries per row; a workload stops after twice
--row-seconds once it has 30 queries.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass

import anyio
import onnxruntime as ort
from _harness import (
    Col,
    Lat,
    bench_parser,
    call,
    count_label,
    in_process,
    machine_info,
    machine_line,
    pct,
    ratio,
    scratch,
    stats,
    table,
    timed_raw,
    write_json,
)
from _memory_load import add_corpus_args, build_corpus, corpus_settings, level_memory

from hiveboard.board import knowledge as knowledge_mod
from hiveboard.memory import service as memory_service
from hiveboard.memory.embeddings import MiniLM, minilm_files, quantized_minilm

MAX_QUERIES = 100


@dataclass
class Row:
    level: int
    measurement: str
    n: int
    p50_ms: float
    p99_ms: float
    cpu_ms: float | None = None
    vs_chroma: float | None = None  # p50 / raw Chroma p50 at the same level
    note: str = ""


def raw_chroma(memory, queries) -> Lat:
    """The baseline: Chroma's own query with a precomputed vector, as bench_memory's first row."""
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

    def keyword(query: str, *, task_type=None, kinds=None, tags=None, include_deprecated=False, limit=50):
        match = knowledge_mod.fts_query(query)
        if match is None:
            return []
        where, params = knowledge._filters(task_type, kinds, tags, include_deprecated)
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


async def whatif_level(level: int, loaded, items, queries, cfg: dict) -> list[Row]:
    """query_memory hybrid through MCP (the requirement's row) with the earlier code paths ("before: …") and
    candidate changes patched in, in this process only (product code is untouched). Variants are interleaved
    query by query, so drift on a noisy machine hits them all alike; "as shipped" is measured the same way
    and every variant is compared with it."""
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


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="levels 1k and 10k, 60 queries", keep="keep the data directories")
    add_corpus_args(p)
    args = p.parse_args(argv)
    cfg = corpus_settings(args)
    n_queries = min(cfg["queries"], MAX_QUERIES)
    print(machine_line(machine_info("chromadb", "onnxruntime", "numpy")))
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per level
    rows: list[Row] = []
    with scratch("hiveboard-bench-whatif-", args.keep) as tmp:
        corpus = build_corpus(
            args.seed, max(cfg["levels"]), cfg["queries"], cfg["real"], args.noise, args.embed_threads
        )
        for level in cfg["levels"]:
            print(
                f"\n[{count_label(level)} items] what-if rows ({n_queries} queries, variants interleaved)", flush=True
            )
            items, home = corpus.items[:level], tmp / f"level-{count_label(level)}"
            with level_memory(home, items, corpus.vectors[:level], not args.stale_stats) as loaded:
                loaded.memory.start()  # the worker, idle, as the server runs it
                gc.collect()
                gc.freeze()
                try:
                    rows += anyio.run(whatif_level, level, loaded, items, corpus.queries[:n_queries], cfg)
                finally:
                    gc.unfreeze()
    cols = [Col("level", 6), Col("measurement", 64, left=True, clip=True), Col("n", 5), Col("p50 ms", 8, ".2f")]
    cols += [Col("p99 ms", 8, ".2f"), Col("vs chroma", 9, ".1f", suffix="x"), Col("cpu ms", 7, ".2f", blank="")]
    table(
        cols,
        [(count_label(r.level), r.measurement, r.n, r.p50_ms, r.p99_ms, r.vs_chroma, r.cpu_ms, r.note) for r in rows],
        "vs chroma: row p50 / raw Chroma p50 at the same level; on topic: queries with an item of their pattern in "
        "the top 5",
    )
    write_json(args.json, dict(settings=cfg, rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
