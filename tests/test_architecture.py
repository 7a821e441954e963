"""docs/ARCHITECTURE.md's checklist for adding a card field names every place a card field passes through.

How "every place" is found without anyone listing it twice: the card fields a creator sets are the arguments of
`create_task` in the checked-in wire snapshot (tests/server/tools_list.json) that are also columns of `tasks` in
board/schema.py (title, priority, acceptance_tests, budget_tokens, paths, canary, …). A file that names every one
of them, as a whole word, is a place each field was added to on its way from the database to the wire: the
declaration, both migration chains, the models, the command, the tool, the snapshot, the reference. Such a file
that no numbered step of the checklist starts with fails this test, and so does a named file that no longer
exists, or a step's file that names none of the fields. A file that uses only some fields (a field's behaviour,
such as the budget check) is not a place every field needs, and is left to the checklist's prose.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from hiveboard.board.schema import table

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
SUFFIXES = {".py", ".md", ".json", ".html", ".js", ".toml"}


def checklist() -> str:
    start = ARCHITECTURE.index("### Add a card field")
    return ARCHITECTURE[start : ARCHITECTURE.index("\n### ", start + 1)]


def places(text: str) -> set[str]:
    """The file each numbered step starts with."""
    return set(re.findall(r"^\d+\. `([\w./-]+)`", text, re.M))


def named_files(text: str) -> set[str]:
    return set(re.findall(r"`([\w./-]+\.(?:py|md|json|html|js|toml))", text))


def card_fields() -> list[str]:
    tools = json.loads((ROOT / "tests" / "server" / "tools_list.json").read_text())["tools"]
    arguments = tools["create_task"]["inputSchema"]["properties"]
    return sorted(set(arguments) & {c.name for c in table("tasks").columns})


def project_files() -> list[Path]:
    """The repository's text files, not its hidden folders (.git, .venv) nor what builds leave behind."""
    found = []
    for folder, folders, files in os.walk(ROOT):
        folders[:] = [
            f for f in folders if not f.startswith(".") and f != "__pycache__" and not f.endswith(".egg-info")
        ]
        found += [Path(folder, f) for f in files if Path(f).suffix in SUFFIXES]
    return found


def test_the_card_field_checklist_names_every_file_each_card_field_passes_through():
    fields = card_fields()
    assert len(fields) >= 8, f"too few card fields found to tell the places apart: {fields}"
    words = [re.compile(rf"\b{f}\b") for f in fields]
    texts = {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in project_files()}
    every = {name for name, text in texts.items() if all(f in text and w.search(text) for f, w in zip(fields, words))}
    steps = places(checklist())
    assert every - steps == set(), (
        f"add these as steps of docs/ARCHITECTURE.md's card field checklist: {sorted(every - steps)}"
    )
    assert {n for n in named_files(checklist()) if n not in texts} == set(), (
        "the checklist names files that do not exist"
    )
    assert {n for n in steps if not any(w.search(texts[n]) for w in words)} == set(), "steps whose file holds no field"
