"""Recall is data, not instructions: what shared memory and messages may hand to an agent, and how.

Two ideas live here. `held_reason` screens a text an agent wrote so that a prompt-injection payload is held back
for a person instead of being handed on. Two screens, either one holds: patterns for the shapes such payloads take
in a coding team's memory (fetch-and-run, hiding a step from the user, overriding the reader's instructions, sending
secrets out), and a small linear classifier over hashed word and character n-grams (`recall_model.bin`, trained
by bench/train_recall.py on public payloads and honest review comments and commit messages) for the wordings no
pattern names: jailbreak personas, prompt stealing, paraphrased overrides. Both run offline in pure Python. It is a
screen, not a proof: a person releases a false alarm with one action; bench/bench_recall.py measures both error
rates on labelled sets from sources the screen was not tuned on. `quoted` frames what is handed as quoted material with its provenance, so that a model reading it
sees who said it and whether anyone checked it, never a bare imperative.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from array import array
from functools import cache
from pathlib import Path
from typing import Literal, get_args

Trust = Literal["reviewed", "unreviewed", "imported"]
TRUST_LEVELS: tuple[str, ...] = get_args(Trust)

_URL = r"(?:https?://|ftp://|\b\d{1,3}(?:\.\d{1,3}){3}\b|\b[\w-]+\.(?:sh|ps1|py|exe|bat)\b)"
_SHELL = r"(?:sh|bash|zsh|dash|python[0-9.]*|perl|ruby|node|iex|invoke-expression|powershell|pwsh|cmd)"
_VERB_FETCH = r"(?:curl|wget|fetch|iwr|irm|invoke-webrequest|invoke-restmethod|download|nc|netcat)"
_HIDE = (
    r"(?:do\s*n[o']?t|don't|never|without)\s+(?:\w+\s+){0,3}"
    r"(?:mention|tell|telling|inform|informing|reveal|revealing|show|showing|report|reporting|disclose|alert|"
    r"notify|log|logging|ask|asking)\b"
)
_AUDIENCE = r"(?:user|human|operator|person|people|anyone|reviewer|them|this|it|the\s+step|this\s+step)(?![\w-])"

# (why, pattern): the reason is what a person reads on the memory page
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (why, re.compile(pattern, re.I | re.S))
    for why, pattern in (
        (
            "it pipes something fetched into a shell",
            rf"{_VERB_FETCH}\b[^\n|]{{0,200}}\|\s*(?:sudo\s+)?{_SHELL}\b"
            rf"|\b(?:curl|wget)\b[^\n|]{{0,200}}(?:&&|;)\s*(?:sudo\s+)?(?:sh|bash|zsh|\./|chmod)",
        ),
        ("it opens a shell to another machine", r"\b(?:nc|ncat|netcat)\b[^\n]{0,60}\s-e\s+/bin/|/dev/tcp/\d"),
        ("it installs a package from a URL", r"\b(?:pip3?|pipx|uv\s+pip)\s+install\b[^\n]{0,40}https?://"),
        ("it runs something fetched", rf"{_SHELL}\s+<\(\s*{_VERB_FETCH}|\beval\s*\(?\s*[\"'$`(]*\s*{_VERB_FETCH}"),
        (
            "it asks to download and run something",
            rf"\b(?:download|fetch|get|pull)\b[^\n]{{0,100}}\b(?:and|then|&&)\s+(?:run|execute|exec|source|install)\b"
            rf"|\b(?:run|execute|source|install)\b[^\n.]{{0,40}}(?:script|binary|payload|installer)\b[^\n.]{{0,40}}{_URL}",
        ),
        (
            "it decodes and runs hidden text",
            r"base64\s+(?:-d|--decode)[^\n]{0,80}\|\s*(?:sh|bash|python)|\bexec\s*\(\s*(?:base64|codecs|bytes\.fromhex|__import__)",
        ),
        (
            "it asks to hide something from the user",
            rf"{_HIDE}[^\n.]{{0,60}}\b{_AUDIENCE}\b|\bsay\s+nothing\s+(?:about|to)\b|\btell\s+(?:nobody|no\s+one)\b"
            r"|\bno\s+need\s+to\s+(?:tell|mention|inform)\b"
            r"|\b(?:quietly|secretly|covertly)\s+(?:add|change|run|send|upload|push|delete|disable|install|grant|give)\b|"
            rf"\b(?:keep|hide)\b[^\n.]{{0,30}}\b(?:secret|hidden|quiet)\b[^\n.]{{0,30}}\bfrom\b|\bsilently\b[^\n.]{{0,40}}\b(?:run|send|upload|post|execute|delete|push)\b",
        ),
        (
            "it tries to override the reader's instructions",
            r"\b(?:ignore|disregard|forget|override|bypass)\b[^\n.]{0,40}\b(?:previous|prior|above|earlier|all|any|your|system|safety|the)\b"
            r"[^\n.]{0,30}\b(?:instructions?|prompts?|rules|directions|guidelines|context|messages?)\b"
            r"|\bforget\s+(?:everything|all)\b[^\n.]{0,20}\b(?:above|before|prior|previous|said)\b"
            r"|\byou\s+are\s+now\b|\bnew\s+instructions?\s*:|\boverrides?\s+your\s+(?:task|instructions?|rules)\b"
            r"|\bpretend\s+(?:you\s+are|to\s+be)\b[^\n.]{0,40}\b(?:without|no)\s+(?:any\s+)?(?:restrictions|rules|limits)\b"
            r"|#{2,}\s*instruction\s*:"
            r"|\b(?:print|reveal|show|repeat|output|leak|dump)\b[^\n.]{0,30}\bsystem\s+prompt\b|\bsystem\s+prompt\s+override\b|\b(?:developer|dan|god)\s+mode\b"
            r"|<\|im_start\|>|\[/?INST\]|<\s*/?\s*(?:system|instructions?)\s*>|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|jailbroken)",
        ),
        (
            "it asks to send secrets or data out",
            r"\b(?:send|post|upload|exfiltrate|forward|leak|email|paste|transmit)\b[^\n]{0,80}?"
            r"(?:\.env\b|\b(?:secrets?|tokens?|credentials?|passwords?|api[\s_-]?keys?|private\s+keys?|env(?:ironment)?\s+variables|ssh|cookies?|"
            r"conversation|chat\s+history|id_rsa)\b)[^\n]{0,80}(?:\bto\b|https?://)"
            r"|\b(?:print|dump|list|paste|copy)\b[^\n.]{0,20}\b(?:all\s+)?env(?:ironment)?\s+variables\b[^\n.]{0,60}"
            r"\b(?:paste|post|send|into|output|summary)\b"
            r"|!\[[^\]]*\]\(\s*https?://[^)]*[?&][^)]*=|\bcurl\b[^\n]{0,80}(?:-d|--data|-F|--upload-file|-T)\s+@",
        ),
    )
)


MODEL_PATH = Path(__file__).with_name("recall_model.bin")
SCREENED_CHARS = 4_000  # a payload shows itself early; a long honest document costs no more than its start
_TOKEN = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]")
CLASSIFIER_REASON = "it reads like a prompt-injection payload"
_SEED_WORD, _SEED_PAIR = zlib.crc32(b"w"), zlib.crc32(b"b")


def features(text: str, buckets: int, char_sizes: tuple[int, ...] = (3, 5)) -> set[int]:
    """The hashed n-grams of a text: lower-cased word unigrams and bigrams (punctuation kept as tokens, since `|`,
    `$(` and `<|` matter) and byte n-grams of the UTF-8 text of the sizes given, each kind hashed from its own seed.
    crc32 keeps the buckets the same in every process, which Python's salted `hash` would not."""
    flat = " ".join(text[:SCREENED_CHARS].lower().split())
    words = _TOKEN.findall(flat)
    crc, mask = zlib.crc32, buckets - 1
    found = {crc(w.encode(), _SEED_WORD) & mask for w in words}
    found.update(crc(f"{a} {b}".encode(), _SEED_PAIR) & mask for a, b in zip(words, words[1:]))
    raw = flat.encode()
    for n in char_sizes:
        seed = crc(b"c%d" % n)
        found.update(crc(raw[i : i + n], seed) & mask for i in range(len(raw) - n + 1))
    return found


class Classifier:
    """The shipped linear model: int8 weights per hashed n-gram bucket, a scale, a bias and the threshold chosen
    for no false holds on honest text (bench/train_recall.py writes the file: one JSON header line, then the
    weights)."""

    def __init__(self, path: Path = MODEL_PATH):
        header, weights = path.read_bytes().split(b"\n", 1)
        about = json.loads(header)
        self.buckets: int = about["buckets"]
        self.char_sizes: tuple[int, ...] = tuple(about["char_sizes"])
        self.scale: float = about["scale"]
        self.bias: float = about["bias"]
        self.threshold: float = about["threshold"]
        self.weights = array("b")
        self.weights.frombytes(weights)
        if len(self.weights) != self.buckets:
            raise ValueError(f"{path} holds {len(self.weights)} weights for {self.buckets} buckets; rebuild it")

    def score(self, text: str) -> float:
        """The probability-like score that the text is a payload (0..1); held at `threshold` and above."""
        found = features(text, self.buckets, self.char_sizes)
        if not found:
            return 0.0
        w = self.weights
        z = self.bias + self.scale * sum(w[i] for i in found) / math.sqrt(len(found))
        return 1.0 / (1.0 + math.exp(-max(min(z, 60.0), -60.0)))


@cache
def classifier() -> Classifier:
    return Classifier()


def held_reason(text: str) -> str | None:
    """Why this text is held back for a person (it reads like an instruction to fetch or run something, to hide
    something from the user, to override the reader's instructions or to send data out, or the classifier scores it
    as a payload); None when it may pass."""
    flat = " ".join(text.split())
    for why, pattern in SHAPES:
        if pattern.search(flat):
            return why
    model = classifier()
    if model.score(text) >= model.threshold:
        return CLASSIFIER_REASON
    return None


def provenance(
    *, kind: str, item_id: int | None, author: str, trust: str, task_id: int | None, review_id: int | None = None
) -> str:
    """Who an item came from, in words: "lesson 13 by alice, unreviewed, from task 7"."""
    what = f"{kind} {item_id}" if item_id is not None else kind
    where = f", from task {task_id}" if task_id is not None else ""
    if review_id is not None:
        where += f" (review {review_id})"
    return f"{what} by {author}, {trust}{where}"


def quoted(text: str, **about) -> str:
    """Text handed on as quoted material with its provenance (`provenance`'s arguments): what another agent or
    the review said, to weigh, never an instruction to the reader."""
    body = " ".join(text.split()).replace("«", "‹").replace("»", "›")
    return f"{provenance(**about)}: «{body}»"
