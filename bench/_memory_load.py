"""Memory items into a board the way the memory benches load them: vectors of the corpus embedded for real, reused
ones with noise beyond them (embedding 100k texts for real is too slow for a bench run), Knowledge.add in
transactions of 1,000, and letting go of an embedded Chroma between runs.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BULK_BATCH = 8  # on the 2-core VM, batches past ~8 texts got slower per text, not faster


def real_vectors(texts: list[str], embedder, batch: int = BULK_BATCH) -> tuple[np.ndarray, float]:
    """Embed texts for real, in batches of similar length so padding stays small; (vectors, texts/s)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    t0 = last = time.perf_counter()
    for k in range(0, len(order), batch):
        idx = order[k : k + batch]
        out[idx] = embedder.embed([texts[i] for i in idx])
        if time.perf_counter() - last > 15:
            last = time.perf_counter()
            print(f"     {k + len(idx)}/{len(texts)} embedded…", flush=True)
    return out, len(texts) / (time.perf_counter() - t0)


def noisy_vectors(items, real: np.ndarray, start: int, stop: int, sigma: float, seed: int) -> tuple[np.ndarray, float]:
    """Vectors for items start..stop-1: the real vector of an item with the same pattern and kind, plus noise;
    also their mean cosine to their sources."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    groups: dict[tuple[int, str], list[int]] = {}
    by_pattern: dict[int, list[int]] = {}
    for i in range(len(real)):
        groups.setdefault((items[i].pattern, items[i].kind), []).append(i)
        by_pattern.setdefault(items[i].pattern, []).append(i)
    src = np.empty(stop - start, dtype=np.int64)
    for j, i in enumerate(range(start, stop)):
        pool = groups.get((items[i].pattern, items[i].kind)) or by_pattern.get(items[i].pattern) or [i % len(real)]
        src[j] = pick.choice(pool)
    out = real[src] + rng.normal(0.0, sigma, size=(stop - start, real.shape[1])).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out, float(np.mean(np.sum(out * real[src], axis=1)))


def reused_vectors(real: np.ndarray, n: int, seed: int, sigma: float = 0.02) -> np.ndarray:
    """n vectors: the real ones, then for each further item a random real one plus noise, renormalised (only
    latency and memory are read where these are used, so there is no same-pattern pairing)."""
    src = np.array([random.Random(seed + i).randrange(len(real)) for i in range(len(real), n)], dtype=np.int64)
    if not len(src):
        return real[:n]
    noisy = real[src] + np.random.default_rng(seed).normal(0, sigma, size=(len(src), real.shape[1])).astype(np.float32)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    return np.vstack([real, noisy])


def add_items(
    board,
    items,
    vectors: np.ndarray | None = None,
    model: str | None = None,
    *,
    created_by: str = "bench",
    batch: int = 1_000,
    refresh_stats: bool = True,
) -> list[int]:
    """Items in through Knowledge.add (the product's insert, FTS5 trigger and outbox), with their precomputed
    vectors if given, one write transaction per `batch`; their ids.

    Store() ran ANALYZE on the empty schema, which records memory_fts_data as a 2-row table; the planner then
    runs FTS5's segment-merge DELETE (id BETWEEN ?) as a full scan and every insert costs O(items). With
    `refresh_stats` the statistics are refreshed after the first batch, as the server's next ANALYZE does."""
    ids: list[int] = []
    for k in range(0, len(items), batch):
        with board.store.write() as db:
            for n, it in enumerate(items[k : k + batch], k):
                vector = {} if vectors is None else dict(embedding=vectors[n], model=model)
                ids.append(
                    board.knowledge.add(
                        db,
                        kind=it.kind,
                        text=it.text,
                        created_by=created_by,
                        task_type=it.task_type,
                        title=it.title,
                        tags=it.tags,
                        **vector,
                    )
                )
        if k == 0 and refresh_stats:
            board.store.optimize()
    if vectors is not None:
        second_readings(board, items, ids, vectors, model)
    return ids


def second_readings(board, items, ids: list[int], vectors: np.ndarray, model: str | None, sigma: float = 0.02) -> None:
    """The second reading (memory.service.body_text: a titled item's or a lesson's content alone) of the items
    that have one, as the indexer would store it: here a copy of the item's vector with noise (sigma per
    dimension, renormalised), not embedded (for the same reason as the noisy items); the others marked as
    having none. The drain then indexes both readings without embedding, as a server does items it embedded."""
    try:
        from hiveboard.memory.service import body_text
    except ImportError:  # code from before items had two readings (a before/after run)
        return
    rng = np.random.default_rng(7)
    bodies = {}
    for item_id, it, vector in zip(ids, items, vectors):
        if body_text(it.kind, it.title or "", it.text) is None:
            bodies[item_id] = None
        else:
            noisy = vector + rng.normal(0, sigma, size=vector.shape).astype(np.float32)
            bodies[item_id] = noisy / np.linalg.norm(noisy)
    board.knowledge.record_bodies(bodies, model)


def release_chroma() -> None:
    """Let go of this process's embedded Chroma (its files go with the temp directory)."""
    try:
        from chromadb.api.client import SharedSystemClient

        SharedSystemClient.clear_system_cache()
    except Exception:
        pass


# ----------------------------------------------------------------------------- a level: the corpus in a fresh memory


@dataclass
class Corpus:
    """The memory bench's items, the searches, and a vector per item (the first `real` embedded for real)."""

    items: list
    queries: list
    vectors: np.ndarray
    real: int
    rate: float  # texts/s of the bulk embedding
    noisy_cosine: float | None = None  # mean cosine of the reused vectors to their sources


def build_corpus(seed: int, top: int, n_queries: int, n_real: int, noise: float, threads: int) -> Corpus:
    """`top` items of bench/_memory_corpus.py, `n_queries` searches drawn from a pool of paraphrases, and their
    vectors: the first n_real by a `threads`-thread instance of the product's model (setup only), the rest
    reusing the real vector of a same-pattern item plus gaussian noise."""
    from _memory_corpus import PATTERNS, item, query_pool

    from hiveboard.memory.embeddings import MiniLM

    items = [item(seed, i) for i in range(top)]
    pool = query_pool(seed, 4 * n_queries)
    queries = random.Random(seed).sample(pool, n_queries)
    print(
        f"corpus: {len(PATTERNS)} problem/fix patterns; {top} items generated, "
        f"{len({it.text for it in items[:n_real]})} distinct texts among the first {n_real}; "
        f"{n_queries} queries per row from a pool of {len(pool)} paraphrases",
        flush=True,
    )
    print(
        f"\n[vectors] embedding {n_real} items for real (MiniLM threads={threads}, length-sorted batches of "
        f"{BULK_BATCH})",
        flush=True,
    )
    real, rate = real_vectors([f"{it.title}\n{it.text}" for it in items[:n_real]], MiniLM(threads=threads))
    print(f"  {n_real} real vectors at {rate:.0f} texts/s", flush=True)
    if top <= n_real:
        return Corpus(items, queries, real, n_real, rate)
    noisy, cosine = noisy_vectors(items, real, n_real, top, noise, seed)
    print(
        f"  items {n_real}..{top - 1}: REUSED real vectors of same-pattern items + gaussian noise "
        f"(sigma {noise}/dim, renormalised; mean cosine {cosine:.3f} to the source); not embedded",
        flush=True,
    )
    return Corpus(items, queries, np.vstack([real, noisy]), n_real, rate, cosine)


@dataclass
class LevelMemory:
    board: object
    memory: object
    ids: list[int]
    load_s: float
    drain_s: float


@contextmanager
def level_memory(home: Path, items, vectors: np.ndarray, refresh_stats: bool = True) -> Iterator[LevelMemory]:
    """A fresh board and the embedded Chroma opened as `hiveboard serve` opens it (this process owns the index),
    the items loaded through Knowledge.add (timed) and Memory.drain()'s loop (timed); closed at the end."""
    from _harness import BenchError

    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.service import open_memory

    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    embedder = get_embedder()
    memory = open_memory(board, embedder, home)
    try:
        if memory.index.index is None:
            raise BenchError("this process did not become the owner of the memory index")
        plan = board.store.db.execute(
            "EXPLAIN QUERY PLAN DELETE FROM memory_fts_data WHERE id >= ? AND id <= ?", [1, 2]
        ).fetchall()[0][-1]
        if plan.startswith("SCAN"):
            print(
                f"  note: on a fresh data directory FTS5's segment-merge DELETE plans as {plan!r} (ANALYZE ran on "
                "the empty schema); the bench refreshes statistics after the first 1000 items"
                + ("" if refresh_stats else " (not: --stale-stats)"),
                flush=True,
            )
        t0 = time.perf_counter()
        ids = add_items(board, items, vectors, embedder.name, refresh_stats=refresh_stats)
        stored = board.knowledge.embeddings(ids, embedder.name).values()
        expected = len(items) + sum(len(v) - 1 for v in stored if v.ndim == 2)  # 1-d: code before two readings
        load_s = time.perf_counter() - t0
        t0 = last = time.perf_counter()
        done = 0
        while n := memory.index_pending(256):  # Memory.drain(), with progress
            done += n
            if time.perf_counter() - last > 20:
                last = time.perf_counter()
                print(f"     {done}/{len(items)} indexed…", flush=True)
        drain_s = time.perf_counter() - t0
        count = memory.index.index.count()
        if count != expected or board.knowledge.pending():
            raise BenchError(
                f"after drain Chroma holds {count} vectors, outbox {board.knowledge.pending()}; expected "
                f"{expected} (an item's readings) and 0"
            )
        board.store.optimize()
        yield LevelMemory(board, memory, ids, load_s, drain_s)
    finally:
        memory.stop()
        board.store.close()
        release_chroma()
        gc.collect()


# ----------------------------------------------------------------------------- the command line of a memory bench


def add_corpus_args(p, levels: str = "1k,10k,100k", quick_levels: str = "1k,10k") -> None:
    """bench_memory's arguments: which levels, how many searches, the corpus."""
    p.add_argument("--levels", help=f"comma-separated item counts (default {levels}; --quick {quick_levels})")
    p.add_argument("--queries", type=int, help="searches per row (200; --quick 60)")
    p.add_argument(
        "--real", type=int, help="items embedded for real (10000; --quick 1000); the rest reuse one plus noise"
    )
    p.add_argument("--noise", type=float, default=0.02, help="gaussian sigma per dimension for reused vectors")
    p.add_argument(
        "--embed-threads",
        type=int,
        default=2,
        help="onnxruntime threads of the bench's own embedder for the bulk setup (2); the measured "
        "query path always uses the product's get_embedder()",
    )
    p.add_argument(
        "--stale-stats",
        action="store_true",
        help="load without refreshing planner statistics after the first batch (what a fresh data "
        "directory does until its next ANALYZE): shows the O(items) insert cost; slow at 100k",
    )
    p.add_argument(
        "--row-seconds",
        type=float,
        default=20.0,
        help="stop a row after this long once it has 30 samples (20); keeps the 100k level, where a query can "
        "take 100+ ms, in bounds",
    )
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(default_levels=levels, quick_levels=quick_levels)


def corpus_settings(args) -> dict:
    """The settings those arguments come to (the --quick defaults applied)."""
    from _harness import parse_count

    q = args.quick
    text = args.levels or (args.quick_levels if q else args.default_levels)
    levels = sorted({parse_count(x) for x in text.split(",") if x})
    real = args.real if args.real is not None else (1_000 if q else 10_000)
    return dict(
        levels=levels,
        queries=args.queries or (60 if q else 200),
        real=min(real, max(levels)),
        noise=args.noise,
        embed_threads=args.embed_threads,
        seed=args.seed,
        quick=q,
        row_seconds=args.row_seconds,
        stale_stats=args.stale_stats,
        load_batch=1_000,
    )
