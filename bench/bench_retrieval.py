"""Retrieval quality on labelled sets: hybrid, vector and keyword search as shipped, next to a plain BM25 and the
raw model's cosine computed in the same run.

    .venv/bin/python bench/bench_retrieval.py                      # the three sets (a few minutes on 2 cores)
    .venv/bin/python bench/bench_retrieval.py --sets retrieval_set --misses
    .venv/bin/python bench/bench_retrieval.py --sets /tmp/cosqa.json --json out.json

Per set (bench/_labelled.py: its items go in through Knowledge.add and the indexing worker's drain into the
embedded Chroma, its queries through Memory.query): R@1, R@5, R@10 and MRR@10 of hybrid, vector and keyword
search with the product's embedder, of a plain Okapi BM25 and of the raw model's exact cosine. Target: hybrid's
R@5 and MRR@10 at least the better of its two halves' less 0.01 (PASS/FAIL per set).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict

import _labelled
from _harness import bench_parser, machine_info, machine_line, write_json

from hiveboard.memory.embeddings import get_embedder


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="retrieval_set only", keep=None)
    p.add_argument(
        "--sets",
        default=",".join(_labelled.SETS),
        help=f"labelled sets (default: {','.join(_labelled.SETS)}; a path names a set file of the same shape)",
    )
    p.add_argument(
        "--misses", action="store_true", help="list the queries vector search has in its top 5 and hybrid not"
    )
    args = p.parse_args(argv)
    print(machine_line(machine_info("chromadb", "onnxruntime", "numpy")))
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per set
    sets = ["retrieval_set"] if args.quick else [s for s in args.sets.split(",") if s]
    found = []
    for name in sets:
        print(f"\n[labelled set {name}] loading and searching", flush=True)
        found.append(_labelled.evaluate(name, get_embedder()))
    _labelled.print_results(found, args.misses)
    write_json(args.json, [asdict(r) for r in found])
    return 0


if __name__ == "__main__":
    sys.exit(main())
