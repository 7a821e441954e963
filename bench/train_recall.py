"""Train the recall screen's classifier (board/recall.py `Classifier`) on the `tune` sets only, and write
board/recall_model.bin.

    python bench/labelled/build_recall_sets.py MIRRORS      # once: the public sets (bench/_recall_sets.py)
    .venv/bin/python bench/train_recall.py                  # writes board/recall_model.bin, prints its choices
    .venv/bin/python bench/train_recall.py --dry-run        # prints, writes nothing

Logistic regression over the hashed n-grams `features` gives (binary, each text's vector of unit length), classes
weighted to count equally, L2-regularised, full-batch gradient descent in numpy. The held-out sets are never read.

The threshold is chosen for no false holds on honest text the model has not seen: the tune items are split in
FOLDS, each fold is scored by a model trained on the others, and the threshold is set just above the highest score
any honest text reached out of fold. (Leaving a whole source out instead was tried: without the one review-comment
source, review comments score like payloads, and the threshold it asks for held under 10 % of payloads.) The
held-out sources measure what this costs on text of sources never seen. Weights are stored as int8 with one
scale.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recall_sets import load  # noqa: E402

from hiveboard.board.recall import MODEL_PATH, features  # noqa: E402

BUCKETS = 1 << 17
CHAR_SIZES = (3, 5)
L2 = 1e-4
STEPS = 150
FOLDS = 5
MARGIN = 0.02  # added to the highest left-out honest score


def matrix(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indptr, indices = [0], []
    for text in texts:
        found = sorted(features(text, BUCKETS, CHAR_SIZES))
        indices.extend(found)
        indptr.append(len(indices))
    indptr_a = np.array(indptr, dtype=np.int64)
    lengths = np.maximum(np.diff(indptr_a), 1)
    values = np.repeat(1.0 / np.sqrt(lengths), np.diff(indptr_a))
    return indptr_a, np.array(indices, dtype=np.int64), values


def margins(x, w: np.ndarray, b: float) -> np.ndarray:
    indptr, indices, values = x
    prod = w[indices] * values
    sums = np.add.reduceat(prod, indptr[:-1]) if len(prod) else np.zeros(len(indptr) - 1)
    sums[np.diff(indptr) == 0] = 0.0
    return sums + b


def train(x, y: np.ndarray) -> tuple[np.ndarray, float]:
    indptr, indices, values = x
    n = len(y)
    weight = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    w, b = np.zeros(BUCKETS), 0.0
    m_w, v_w, m_b, v_b = np.zeros(BUCKETS), np.zeros(BUCKETS), 0.0, 0.0
    rows = np.repeat(np.arange(n), np.diff(indptr))
    for step in range(1, STEPS + 1):  # Adam, full batch
        p = 1.0 / (1.0 + np.exp(-np.clip(margins(x, w, b), -60, 60)))
        g = (p - y) * weight
        grad_w = np.bincount(indices, weights=values * g[rows], minlength=BUCKETS) + L2 * w
        grad_b = g.sum()
        m_w, v_w = 0.9 * m_w + 0.1 * grad_w, 0.999 * v_w + 0.001 * grad_w**2
        m_b, v_b = 0.9 * m_b + 0.1 * grad_b, 0.999 * v_b + 0.001 * grad_b**2
        lr = 0.1 * math.sqrt(1 - 0.999**step) / (1 - 0.9**step)
        w -= lr * m_w / (np.sqrt(v_w) + 1e-8)
        b -= lr * m_b / (math.sqrt(v_b) + 1e-8)
    return w, b


def quantised(w: np.ndarray) -> tuple[np.ndarray, float]:
    scale = float(np.abs(w).max() / 127) or 1.0
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), scale


def probability(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the choices, write nothing")
    args = parser.parse_args()
    sets, missing = load("tune")
    if missing:
        sys.exit(f"build the public sets first (bench/labelled/build_recall_sets.py): missing {', '.join(missing)}")
    texts, labels, groups = [], [], []
    for s in sets:
        texts += s.texts
        labels += [int(s.must_hold)] * len(s.texts)
        groups += [s.name] * len(s.texts)
    y, groups_a = np.array(labels, dtype=float), np.array(groups)
    x = matrix(texts)
    print(f"tune: {int(y.sum())} payloads, {int((1 - y).sum())} honest texts, {len(sets)} sources, {BUCKETS} buckets")

    def rows(mask: np.ndarray):
        indptr, indices, values = x
        keep = np.flatnonzero(mask)
        starts, ends = indptr[keep], indptr[keep + 1]
        pick = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(keep) else np.array([], int)
        return np.concatenate([[0], np.cumsum(ends - starts)]), indices[pick], values[pick]

    left_out = np.zeros(len(y))
    fold = np.random.default_rng(48).integers(0, FOLDS, len(y))
    for k in range(FOLDS):
        mask = fold == k
        w, b = train(rows(~mask), y[~mask])
        left_out[mask] = probability(margins(rows(mask), *quantised_float(w, b)))
    print(f"\n{'source (out-of-fold scores)':30} {'role':8} {'items':>6} {'max score':>10} {'held at 0.5':>12}")
    for s in sets:
        scores = left_out[groups_a == s.name]
        print(f"{s.name:30} {s.role:8} {len(scores):6} {scores.max():10.3f} {int((scores >= 0.5).sum()):12}")
    threshold = min(float(left_out[y == 0].max()) + MARGIN, 0.99)
    caught = {s.name: float((left_out[groups_a == s.name] >= threshold).mean()) for s in sets if s.must_hold}
    print(
        f"\nthreshold {threshold:.3f}: left-out payloads held " + ", ".join(f"{k} {v:.0%}" for k, v in caught.items())
    )
    w, b = train(x, y)
    q, scale = quantised(w)
    final = probability(margins(x, q.astype(float) * scale, b))
    print(
        f"final model on its own tune data: payloads held {(final[y == 1] >= threshold).mean():.1%}, "
        f"honest held {(final[y == 0] >= threshold).mean():.2%}"
    )
    if args.dry_run:
        return
    header = {"buckets": BUCKETS, "char_sizes": list(CHAR_SIZES), "scale": scale, "bias": b, "threshold": threshold}
    MODEL_PATH.write_bytes(json.dumps(header).encode() + b"\n" + q.tobytes())
    print(f"wrote {MODEL_PATH} ({MODEL_PATH.stat().st_size // 1024} KiB)")


def quantised_float(w: np.ndarray, b: float) -> tuple[np.ndarray, float]:
    """The weights as the shipped file will hold them (int8 and a scale), back as floats, with the bias."""
    q, scale = quantised(w)
    return q.astype(float) * scale, b


if __name__ == "__main__":
    main()
