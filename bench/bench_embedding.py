"""The embedder's throughput: the product's model at several batch sizes, next to the export as shipped.

    .venv/bin/python bench/bench_embedding.py              # 128 texts per row
    .venv/bin/python bench/bench_embedding.py --quick      # 48 texts per row

Texts are items of the memory bench's corpus (bench/_memory_corpus.py) as the indexing worker embeds them
(title + text). Rows: the product's embedder (`get_embedder()`: all-MiniLM-L6-v2 int8 on onnxruntime,
quantized for int8 arithmetic, 1 thread) at batch sizes 1, 8, 16 and 64; the export as shipped (fp32
arithmetic, the baseline the quantization is measured against) at 1 and 8; and the --embed-threads instance
the memory benches use for their own setup, at 1, 8 and 64. Texts/s over the row, and the p50 of one batch.
"""

from __future__ import annotations

import random
import sys
import time

from _harness import Col, bench_parser, machine_info, machine_line, pct, table, timed_raw, write_json
from _memory_corpus import item
from _memory_load import BULK_BATCH

from hiveboard.memory.embeddings import MiniLM, get_embedder


def embedding_throughput(embedder, texts: list[str], batches: tuple[int, ...], rows: list[dict], tag: str) -> None:
    embedder.embed(texts[:8])  # warm up
    for bs in batches:
        t0 = time.perf_counter()
        per_batch = timed_raw([lambda k=k: embedder.embed(texts[k : k + bs]) for k in range(0, len(texts), bs)])
        wall = time.perf_counter() - t0
        entry = dict(embedder=tag, batch=bs, texts=len(texts), per_s=len(texts) / wall, batch_p50_ms=pct(per_batch, 50))
        rows.append(entry)
        print(
            f"  .. {tag:<34} batch {bs:>3}: {entry['per_s']:7.1f} texts/s  "
            f"(p50 {entry['batch_p50_ms']:.1f} ms per batch)",
            flush=True,
        )


def throughput_sample(seed: int, top: int, n: int) -> list[str]:
    """n item texts (title + text, as the indexing worker embeds them) drawn from the first `top` items."""
    from _memory_corpus import item

    return [
        f"{it.title}\n{it.text}"
        for it in (item(seed, i) for i in random.Random(seed + 1).sample(range(top), min(top, n)))
    ]


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="48 texts per row", keep=None)
    p.add_argument("--texts", type=int, help="texts per row (128; --quick 48)")
    p.add_argument("--embed-threads", type=int, default=2, help="threads of the bench-setup instance (2; 1 skips it)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    n = args.texts or (48 if args.quick else 128)
    print(machine_line(machine_info("onnxruntime")))
    pick = random.Random(args.seed + 1).sample(range(10_000), n)
    texts = [f"{it.title}\n{it.text}" for it in (item(args.seed, i) for i in pick)]
    rows: list[dict] = []
    print("\n[embedding] the product's embedder (get_embedder(): MiniLM int8, quantized, onnxruntime, 1 thread)")
    embedding_throughput(get_embedder(), texts, (1, 8, 16, 64), rows, "get_embedder() (1 thread)")
    embedding_throughput(MiniLM(quantized=False), texts, (1, 8), rows, "export, fp32 math (1 thread)")
    if args.embed_threads != 1:
        tag = f"MiniLM(threads={args.embed_threads}) (bench setup)"
        embedding_throughput(MiniLM(threads=args.embed_threads), texts, (1, BULK_BATCH, 64), rows, tag)
    table(
        [Col("embedder", 36, left=True), Col("batch", 5), Col("texts", 6), Col("texts/s", 8, ".1f")]
        + [Col("ms/batch p50", 13, ".1f")],
        [(e["embedder"], e["batch"], e["texts"], e["per_s"], e["batch_p50_ms"]) for e in rows],
        "embedding throughput (texts/s; items as the indexing worker embeds them: title + text)",
    )
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
