"""The offline embedder stays in bounded memory on the worst batch the indexer can hand it."""

from __future__ import annotations

import json
import subprocess
import sys

# Run in a fresh interpreter, so the measurement is this embedder's alone: load the model, embed one short
# text, then 64 texts long enough to fill MAX_TOKENS (what `index_pending(64)` or a reindex's 256-item lease
# gives it), three times over. Peak and resident growth are read from the kernel.
SCRIPT = """
import json, resource
from hiveboard.memory.embeddings import get_embedder

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6

embedder = get_embedder()
embedder.embed(["warm up"])
start, start_peak = rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
long = " ".join(f"identifier_{n} retried the request after a timeout" for n in range(120))
for _ in range(3):
    vectors = embedder.embed([f"{n} {long}" for n in range(64)])
assert vectors.shape == (64, embedder.dim)
print(json.dumps(dict(start=start, start_peak=start_peak, end=rss_mb(),
                      peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)))
"""


def test_a_worst_case_batch_does_not_grow_the_process_past_a_bound():
    if not sys.platform.startswith("linux"):
        import pytest
        pytest.skip("reads /proc")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, check=True)
    rss = json.loads(out.stdout.strip().splitlines()[-1])
    # 64 such texts in one onnxruntime run with its CPU arena on took the process up 2.6 GB and kept it
    grew_peak = rss["peak"] - max(rss["start"], rss["start_peak"])
    assert grew_peak < 800, f"embedding one worst-case batch raised the peak RSS by {grew_peak:.0f} MB: {rss}"
    kept = rss["end"] - rss["start"]
    assert kept < 300, f"the process kept {kept:.0f} MB after embedding: {rss}"
