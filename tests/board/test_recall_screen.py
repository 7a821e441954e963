"""The recall screen (board/recall.py) on labelled text it was not tuned on: payloads held back, honest text let
through, at the rates bench/bench_recall.py measures (bench/README.md, "bench_recall.py").

Floors, not targets: each is below the measured rate by about two standard errors of its sample, and above what
the pattern screen alone reached, so a screen that stops generalising fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hiveboard.board.recall import MODEL_PATH, Classifier, classifier, held_reason

ROOT = Path(__file__).resolve().parents[2]
LABELLED = ROOT / "bench" / "labelled"
PUBLIC = LABELLED / "recall"  # built by bench/labelled/build_recall_sets.py from public mirrors; not committed


def texts(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    items = data["items"] if isinstance(data, dict) else data
    return [f"{i.get('title', '')}\n{i['text']}".strip() for i in items if "text" in i]


def held_share(items: list[str]) -> float:
    return sum(held_reason(t) is not None for t in items) / len(items)


def test_payloads_written_before_any_tuning_are_mostly_held():
    # 15 payloads never tuned on, by patterns or classifier: the patterns alone held 7 (47 %); with the classifier 12
    assert held_share(texts(LABELLED / "injections_heldout.json")) >= 0.6


def test_the_projects_own_lessons_and_library_documentation_pass():
    assert held_share(texts(ROOT / "tests" / "memory" / "retrieval_set.json")) == 0  # 73 lessons and notes
    docs = [t for name in ("boltons.json", "more_itertools.json") for t in texts(LABELLED / name)]
    assert held_share(docs) <= 0.005  # 375 docstrings of two libraries: none held when measured


def test_the_shipped_model_is_read_and_a_damaged_one_is_refused(tmp_path):
    model = classifier()
    assert model.buckets == len(model.weights) and 0.5 <= model.threshold < 1
    assert model.score("") == 0.0
    cut = tmp_path / "model.bin"
    cut.write_bytes(MODEL_PATH.read_bytes()[:-10])
    with pytest.raises(ValueError, match="weights for 131072 buckets; rebuild it"):
        Classifier(cut)


def public(name: str) -> list[str]:
    path = PUBLIC / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not built: python bench/labelled/build_recall_sets.py MIRRORS")
    data = json.loads(path.read_text())
    assert data["split"] == "heldout"  # only sources the screen was never tuned on estimate what it meets
    return [i["text"] for i in data["items"]]


def test_public_payloads_of_sources_never_tuned_on_are_held_at_the_measured_rate():
    # 90 payloads of PayloadsAllTheThings and llm-guard's tests: patterns alone 29 %, the screen 50 %
    assert held_share(public("payloads_patt") + public("payloads_llm_guard")) >= 0.40


def test_public_review_comments_and_commit_messages_never_tuned_on_pass():
    honest = public("honest_codereviewer_reviews") + public("honest_httpx_commits")[::3]  # 342 + 450
    assert held_share(honest) <= 0.005
