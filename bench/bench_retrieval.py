"""Retrieval quality on labelled sets: hybrid, vector and keyword search as shipped, next to a plain BM25 and the
raw model's cosine computed in the same run; with `--backend both`, on SQLite and on PostgreSQL side by side.

    .venv/bin/python bench/bench_retrieval.py                      # the three sets (a few minutes on 2 cores)
    .venv/bin/python bench/bench_retrieval.py --sets retrieval_set --misses
    .venv/bin/python bench/bench_retrieval.py --sets /tmp/cosqa.json --json out.json
    .venv/bin/python bench/bench_retrieval.py --backend both       # each set on SQLite, then on PostgreSQL
    .venv/bin/python bench/bench_retrieval.py --sets cosqa_web,algorithms_docstrings --loads remember,lesson
    .venv/bin/python bench/bench_retrieval.py --shapes --loads set,remember,lesson  # what an item's vector reads

Per set (bench/_labelled.py: its items go in through the product — as the set gives them, or as an agent's
`remember` or `record_lesson` stores them, `--loads` — and the indexing worker's drain into the embedded
Chroma, its queries through Memory.query): R@1, R@5, R@10 and MRR@10 of hybrid, vector and keyword search with
the product's embedder, of a plain Okapi BM25 and of the raw model's exact cosine on each item's text alone.
Targets (PASS/FAIL per set): hybrid's R@5 and MRR@10 at least the better of its two halves' less 0.01; vector's
at least the raw model's less 0.005, and hybrid's at least vector's (issue 26).

`--shapes` measures instead what an item's vector is made of (_labelled.shapes): for each set and load, the
raw model's exact cosine ranking with each item embedded as its raw text, as "title\\ntext" (what the indexer
embedded before issue 26), as memory.service.embedded_text (what it embeds now), in windows of 254 tokens
scored by the best, and cut at 126 tokens.

On PostgreSQL (`--backend postgresql` or `both`) each set gets a new database on a throwaway cluster
(tests/pg_cluster.py, as bench_postgres.py) and its vectors a collection on a Chroma server (`chroma run`
started here, or `--chroma-url`): the keyword half runs on the tsvector column, the vector half on the
server, as a node of a PostgreSQL board does. With both, a second table puts each mode's figures on the two
stores side by side. Target: every mode's R@k and MRR@10 on PostgreSQL within 0.01 of SQLite's.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import _labelled
from _harness import LoggedServer, bench_parser, from_tests, machine_info, machine_line, write_json

from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory

BACKENDS = {"sqlite": ("sqlite",), "postgresql": ("postgresql",), "both": ("sqlite", "postgresql")}
MODES = ("hybrid", "vector", "keyword")  # what the store changes; bm25 and cosine are computed outside it
TOLERANCE = 0.01


def chroma_server(stack: ExitStack, home: Path) -> str:
    """A `chroma run` on a free loopback port, stopped when `stack` closes; its URL."""
    chroma = Path(sys.executable).with_name("chroma")
    server = stack.enter_context(LoggedServer(home / "chroma.log"))
    argv = [str(chroma), "run", "--path", str(home / "chroma"), "--host", "127.0.0.1", "--port", str(server.port)]
    server.start(argv, dict(os.environ), timeout=120)
    return server.base


def on_postgresql(stack: ExitStack, chroma_url: str | None) -> dict:
    """evaluate()'s arguments for a board on PostgreSQL: a new database per set on a throwaway cluster, and a
    collection of its own on the Chroma server."""
    PostgresCluster = from_tests("pg_cluster").PostgresCluster

    home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hiveboard-bench-pg-")))
    cluster = PostgresCluster(home)
    stack.callback(cluster.stop)
    url = chroma_url or chroma_server(stack, home)

    def memory(board, embedder, data_dir):
        return open_memory(board, embedder, data_dir, chroma_url=url, collection=f"bench-{uuid.uuid4().hex[:12]}")

    return dict(target=lambda _home: cluster.database(), memory_factory=memory)


def print_comparison(lite: list[_labelled.SetResult], pg: list[_labelled.SetResult]) -> None:
    """Each mode's figures on SQLite and PostgreSQL, their difference, and per mode whether all are within
    TOLERANCE."""
    cols = [f"R@{c}" for c in _labelled.CUTS] + ["MRR@10"]
    print(
        "\nSQLite (FTS5, embedded Chroma) against PostgreSQL (tsvector, Chroma server): the same sets in the same "
        "run;\ndiff = PostgreSQL - SQLite"
    )
    width = 8 * len(cols)
    print(f"\n{'set':<15} {'mode':<8} {'SQLite':<{width}}   {'PostgreSQL':<{width}}   diff")
    worst: dict[str, tuple[float, str]] = {mode: (0.0, "") for mode in MODES}
    for a, b in zip(lite, pg):
        for n, mode in enumerate(MODES):
            x, y = a.metrics[mode], b.metrics[mode]
            diffs = {c: y[c] - x[c] for c in cols}
            for c, d in diffs.items():
                if abs(d) > abs(worst[mode][0]):
                    worst[mode] = (d, f"{a.name} {c}")
            print(
                f"{(a.name if a.load == 'set' else f'{a.name}/{a.load}') if n == 0 else '':<15} {mode:<8}"
                + "".join(f" {x[c]:>7.3f}" for c in cols)
                + "   "
                + "".join(f" {y[c]:>7.3f}" for c in cols)
                + "   "
                + "".join(f" {d:>+7.3f}" for d in diffs.values())
            )
    print()
    for mode, (d, where) in worst.items():
        print(
            f"{'PASS' if abs(d) <= TOLERANCE + 1e-9 else 'FAIL'}  {mode}: R@1/R@5/R@10/MRR@10 on PostgreSQL within "
            f"{TOLERANCE} of SQLite's on every set (largest difference {d:+.3f}{f', {where}' if where else ''})"
        )


def print_shapes(sets: list[str], loads: list[str], json_path) -> int:
    found = {}
    for name in sets:
        for load in loads:
            print(f"\n[labelled set {name}, loaded by {load}] reading back and embedding", flush=True)
            found[f"{name}/{load}"] = _labelled.shapes(name, get_embedder(), load)
    print("\nwhat an item's vector is made of: the raw model's exact cosine, R@5/MRR@10 (set/load)")
    print(f"{'set/load':<32}" + "".join(f" {shape:>22}" for shape in _labelled.SHAPES))
    for where, metrics in found.items():
        print(f"{where:<32}" + "".join(f"           {m['R@5']:.3f}/{m['MRR@10']:.3f}" for m in metrics.values()))
    write_json(json_path, found)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="retrieval_set only", keep=None)
    p.add_argument(
        "--sets",
        default=None,
        help=f"labelled sets (default: {','.join(_labelled.SETS)}; a path names a set file of the same shape)",
    )
    p.add_argument(
        "--loads",
        default="set",
        help=f"how the items go in, comma-separated: {', '.join(f'{k} ({v})' for k, v in _labelled.LOADS.items())}",
    )
    p.add_argument("--shapes", action="store_true", help="compare what an item's vector is made of (see above)")
    p.add_argument(
        "--misses", action="store_true", help="list the queries vector search has in its top 5 and hybrid not"
    )
    p.add_argument(
        "--backend",
        choices=list(BACKENDS),
        default="sqlite",
        help="the board's store: SQLite (default), PostgreSQL (a throwaway cluster), or both, compared",
    )
    p.add_argument(
        "--chroma-url", help="PostgreSQL: the Chroma server for the vectors (default: a `chroma run` started here)"
    )
    args = p.parse_args(argv)
    print(machine_line(machine_info("chromadb", "onnxruntime", "numpy", "psycopg")))
    logging.getLogger("hiveboard").setLevel(logging.WARNING)  # "this process owns the memory index", per set
    sets = ["retrieval_set"] if args.quick else (args.sets.split(",") if args.sets else _labelled.default_sets())
    if args.shapes:
        return print_shapes(sets, args.loads.split(","), args.json)
    found: dict[str, list[_labelled.SetResult]] = {}
    with ExitStack() as stack:
        for backend in BACKENDS[args.backend]:
            options = on_postgresql(stack, args.chroma_url) if backend == "postgresql" else {}
            # the baselines do not depend on the store: computed once, beside the first backend's modes
            methods = _labelled.METHODS if not found else MODES
            for name in sets:
                for load in args.loads.split(","):
                    print(f"\n[labelled set {name} on {backend}, loaded by {load}] loading and searching", flush=True)
                    found.setdefault(backend, []).append(
                        _labelled.evaluate(name, get_embedder(), methods=methods, load=load, **options)
                    )
    for backend, results in found.items():
        if len(found) > 1:
            print(f"\n===== {backend}")
        _labelled.print_results(results, args.misses)
    if len(found) == 2:
        print_comparison(found["sqlite"], found["postgresql"])
    runs = {backend: [asdict(r) for r in results] for backend, results in found.items()}
    write_json(args.json, runs if len(runs) > 1 else next(iter(runs.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
