"""The offline embedder, and the indexing worker around it, stay in bounded memory on the worst batches."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# Run in a fresh interpreter, so the measurement is this embedder's alone: load the model, embed one short
# text, then the worst the indexer can hand it, three times over: texts long enough to fill MAX_TOKENS (the
# longest runs) and texts of half that, 32 in one call. Peak and resident growth are read from the kernel.
PRELUDE = """
import json, resource
from hiveboard.memory.embeddings import MAX_TOKENS, get_embedder

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3

longest = " ".join(f"identifier_{n} retried the request after a timeout" for n in range(120))  # > MAX_TOKENS
half = " ".join(f"identifier_{n} retried" for n in range(25))  # ~MAX_TOKENS / 2
worst = [f"{n} {longest}" for n in range(16)] + [f"{n} {half}" for n in range(16)]
embedder = get_embedder()
embedder.embed(["warm up"])
"""
EMBED = (
    PRELUDE
    + """
start, start_peak = rss_mb(), peak_mb()
for _ in range(3):
    vectors = embedder.embed(worst)
assert vectors.shape == (len(worst), embedder.dim)
print(json.dumps(dict(start=start, start_peak=start_peak, end=rss_mb(), peak=peak_mb())))
"""
)
# The same texts through the indexing worker as the server runs it: SQLite, the outbox, the embedder, Chroma.
INDEX = (
    PRELUDE
    + """
import sys, tempfile
from pathlib import Path
from hiveboard.board.db import Store
from hiveboard.board.tasks import Board
from hiveboard.memory.service import open_memory

with tempfile.TemporaryDirectory() as tmp:
    board = Board(Store(Path(tmp) / "hiveboard.db"))
    memory = open_memory(board, embedder, Path(tmp))
    with board.store.write() as db:
        for n, text in enumerate(worst * 2):
            board.knowledge.add(db, kind="output", text=text, title=f"item {n}", created_by="test")
    memory.index_pending(1)  # Chroma's first write sets itself up: not the batch's cost
    start, start_peak = rss_mb(), peak_mb()
    indexed = memory.drain()
    assert indexed == 2 * len(worst) - 1 and board.knowledge.pending() == 0, indexed
    print(json.dumps(dict(start=start, start_peak=start_peak, end=rss_mb(), peak=peak_mb())))
    memory.stop()
"""
)


def measure(script: str) -> dict:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_worst_batches_do_not_grow_the_embedder_past_a_bound():
    rss = measure(EMBED)
    # 64 long texts in one onnxruntime run with its CPU arena on took the process up 2.6 GB and kept it;
    # 8 per run with the arena off up 380 MB; runs within 1,024 padded tokens ~210 MB; one text a run, less
    grew_peak = rss["peak"] - max(rss["start"], rss["start_peak"])
    assert grew_peak < 400, f"embedding the worst batches raised the peak RSS by {grew_peak:.0f} MB: {rss}"
    kept = rss["end"] - rss["start"]
    assert kept < 200, f"the process kept {kept:.0f} MB after embedding: {rss}"


def test_indexing_the_worst_items_keeps_the_process_under_a_gigabyte():
    rss = measure(INDEX)
    grew_peak = rss["peak"] - max(rss["start"], rss["start_peak"])
    assert grew_peak < 450, f"indexing the worst items raised the peak RSS by {grew_peak:.0f} MB: {rss}"
    assert rss["peak"] < 1000, f"the indexing process peaked at {rss['peak']:.0f} MB: {rss}"
