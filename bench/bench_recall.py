"""The recall screen (board/recall.py `held_reason`) on labelled sets: what it holds back and what it lets pass.

Must be held: bench/labelled/injections.json (prompt-injection payloads from published families; the file names
each one's source; the screen was tuned on it), injections_round2.json (held out in round 1, then tuned on) and
injections_heldout.json (written before round 2's tuning, never tuned on: its rate is the honest estimate). Must pass: the project's own lessons and items (tests/memory/retrieval_set.json, the library
documentation sets in bench/labelled/*.json used by the retrieval bench) and code-review comments near the payload
shapes (bench/labelled/review_comments.json). Prints a table: per set, items, held, and the rate that matters
(held for payloads, passed for the rest), then the payloads that got through and the honest items held, so a
change to the screen shows what it costs. The baseline in the same run is a screen of one rule (any of "curl",
"wget", "ignore" or "instructions" in the text), which shows why shapes, not words, are matched.

    .venv/bin/python bench/bench_recall.py
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from hiveboard.board.recall import held_reason

ROOT = Path(__file__).resolve().parent.parent
LABELLED = ROOT / "bench" / "labelled"
WORDS = re.compile(r"\b(curl|wget|ignore|instructions?)\b", re.I)


def texts(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    items = data["items"] if isinstance(data, dict) else data
    return [f"{i.get('title', '')}\n{i['text']}".strip() for i in items if isinstance(i, dict) and "text" in i]


def main() -> None:
    held = {
        name: texts(LABELLED / name)
        for name in ("injections.json", "injections_round2.json", "injections_heldout.json")
    }
    passing = {
        "retrieval_set.json (tests/memory)": texts(ROOT / "tests" / "memory" / "retrieval_set.json"),
        "review_comments.json": texts(LABELLED / "review_comments.json"),
    }
    for path in sorted(LABELLED.glob("*.json")):
        if path.name not in (*held, "review_comments.json") and not path.name.startswith("queries_"):
            passing[path.name] = texts(path)
    rows, missed, false = [], [], []
    start = time.perf_counter()
    screened = 0
    for name, items in [*held.items(), *passing.items()]:
        must_hold = name in held
        got = [held_reason(t) is not None for t in items]
        words = [bool(WORDS.search(t)) for t in items]
        screened += len(items)
        right = sum(g == must_hold for g in got)
        base = sum(w == must_hold for w in words)
        rows.append((name, "held" if must_hold else "passed", len(items), right, base))
        (missed if must_hold else false).extend(t for t, g in zip(items, got) if g != must_hold)
    took = (time.perf_counter() - start) * 1e6 / max(screened, 1)
    print(f"{'set':38} {'must be':8} {'items':>6} {'screen':>14} {'word baseline':>14}")
    for name, want, n, right, base in rows:
        print(f"{name:38} {want:8} {n:6} {right:6} ({right / n:5.1%}) {base:6} ({base / n:5.1%})")
    print(f"\nscreen time: {took:.0f} µs per item (all sets, {screened} items)")
    for title, found in (("payloads that passed", missed), ("honest items held", false)):
        print(f"\n{title}: {len(found)}")
        for t in found:
            print("  -", " ".join(t.split())[:150], "|", held_reason(t))


if __name__ == "__main__":
    main()
