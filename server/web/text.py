"""How text on the board is shown to people: markdown rendered and sanitised, what a program printed kept
verbatim, long text cut at a word with an ellipsis, and the board's instructions to agents said in a
person's words.

Markdown comes from agents and people alike, so it is hostile: markdown-it-py renders it with raw HTML
off (a `<script>` stays text) and links checked (no `javascript:`), then nh3 (the Rust ammonia
sanitiser) keeps only an allow-list of tags and attributes, so neither a parser bug nor a plugin can let
markup through. Images are not rendered (a remote image would tell its owner who read the card).

Agents and the review write prose and paste what programs printed into the same text: a needs-human reason
quotes pytest's failure, a brief its failing lines, an output a traceback or a diff. Read as markdown, that
output is mangled (pytest's `>` line becomes a blockquote that swallows the lines after it, a `====` rule a
heading, `__init__` bold), so `segments` tells the two apart by their shape, line by line, and every
renderer keeps the program's lines as they were: `markdown` fences them as code, `for_people` leaves them
alone, `plain` keeps their words.

The board and its reviewers write for agents: "move it to todo (update_task status='todo')". A person
acts with the buttons on these pages, so `for_people` rewrites those sentences, or drops the clauses that
only an agent can act on.
"""

from __future__ import annotations

import html
import re

import nh3
from markdown_it import MarkdownIt

# every MCP tool (tests/server/test_web.py checks this against the wire snapshot of tools/list)
TOOLS = frozenset(
    {
        "board_stats",
        "claim_task",
        "complete_task",
        "create_task",
        "flag_task",
        "get_board",
        "get_messages",
        "get_review",
        "get_task",
        "list_tasks",
        "publish_message",
        "query_memory",
        "record_lesson",
        "release_paths",
        "release_task",
        "remember",
        "reserve_paths",
        "submit_critique",
        "subscribe",
        "update_task",
        "wait_for_work",
        "whoami",
    }
)
SYSTEM_SENDERS = frozenset({"system", "review"})  # names the board posts as (board/agents.py RESERVED)

# ----------------------------------------------------------------------- markdown

_MD = (
    MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True, "typographer": False})
    .enable(["table", "strikethrough"])
    .disable("image")
)
_TAGS = {
    *("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote"),
    *("strong", "em", "s", "code", "pre", "a", "ul", "ol", "li"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}
_SANITISE = nh3.Cleaner(
    tags=_TAGS,
    clean_content_tags={"script", "style"},
    attributes={"a": {"href", "title"}, "ol": {"start"}},
    url_schemes={"http", "https", "mailto"},
    link_rel="noopener noreferrer nofollow",
    strip_comments=True,
)


def markdown(text: str | None, cls: str = "") -> str:
    """Markdown as sanitised HTML in a `div.md` (code blocks stay monospace, and so does anything a program
    printed: `segments`); empty text gives ""."""
    if not text or not text.strip():
        return ""
    return f'<div class="md{" " + cls if cls else ""}">{_SANITISE.clean(_MD.render(fenced(text)))}</div>'


def plain(text: str | None) -> str:
    """Markdown's words without its marks, on one line: for an excerpt (a card's reason on the board, a
    lesson in a list), where `**` or a code fence shown as text would be noise."""
    if not text:
        return ""
    words = nh3.clean(_MD.render(fenced(text)), tags=set())
    return " ".join(html.unescape(words).split())


# ----------------------------------------------------------------------- what a program printed

# a line only a program prints: pytest's failing statement and error lines, its section rules and summary,
# a Python traceback's head and frames, an error's "file:line: Error", a unified diff's headers and hunks
_PRINTED = re.compile(
    r"""^(?:
      >\s{2,}\S | >\s+(?:assert|raise|return|await|yield)\b      # pytest: the failing statement
    | E\s{2,}\S | E\s+(?:assert|[A-Z]\w*(?:Error|Exception))\b   # pytest: what it failed with
    | (?:={3,}|_{3,}|-{3,}|\*{3,})[ ].*[ ](?:={3,}|_{3,}|-{3,}|\*{3,})[ \t]*$  # "=== FAILURES ===", "___ test_x ___"
    | (?:FAILED|ERROR|XPASS|XFAIL)[ ]\S+(?:::\S+)?(?:[ ]-[ ].*)?$   # pytest's short summary
    | Traceback[ ]\(most[ ]recent[ ]call[ ]last\):
    | [ \t]+File[ ]".*",[ ]line[ ]\d+
    | \S+\.py:\d+:[ ]\w*(?:Error|Exception|Exit|Failed|Warning)\b   # "test_calc.py:5: AssertionError"
    | @@[ ]-\d+(?:,\d+)?[ ]\+\d+(?:,\d+)?[ ]@@
    | (?:---|\+\+\+)[ ](?:a/|b/|/dev/null)
    | diff[ ]--git[ ]
    )""",
    re.X,
)
_HUNK = re.compile(r"^(?:[ +\-\\]|@@ )")  # the lines of a diff's hunk
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failed)\b")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def segments(text: str) -> list[tuple[bool, str]]:
    """The text as (printed, lines) runs: True for what a program printed (a test run's failure, a traceback,
    a diff), False for prose. A run starts at a line only a program prints and takes the lines that belong
    to it: a traceback's frames up to its exception, a diff's hunk lines, the source lines pytest shows
    above a failure, blank lines between two printed lines. Markdown's own code (fenced, or indented after
    a blank line) is prose here: it is verbatim already."""
    lines = text.split("\n")
    printed = [False] * len(lines)
    fence: str | None = None
    code = False  # in an indented code block
    for n, line in enumerate(lines):
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            continue
        opening = _FENCE.match(line)
        if opening:
            fence = opening.group(1)
            continue
        blank_before = n == 0 or not lines[n - 1].strip()
        code = line.startswith(("    ", "\t")) and (code or blank_before) and not printed[n - 1 if n else 0]
        if code or not _PRINTED.match(line):
            continue
        start = n  # pytest's source lines above the failing one
        while start > 0 and lines[start - 1].startswith("    ") and not printed[start - 1]:
            start -= 1
        for k in range(start, n + 1):
            printed[k] = True
    # each run takes what belongs to it (a traceback its frames and exception, a diff its hunks), and blank
    # lines between two runs join them
    mode = None
    n = 0
    while n < len(lines):
        line = lines[n]
        if printed[n]:
            if line.startswith("Traceback") or line.lstrip().startswith("File "):
                mode = "traceback"
            elif line.startswith(("@@", "--- ", "+++ ", "diff ")):
                mode = "diff"
            elif mode == "diff" and not _HUNK.match(line):
                mode = None
            n += 1
            continue
        if mode == "traceback" and line.strip() and (line.startswith((" ", "\t")) or _EXCEPTION.match(line)):
            printed[n] = True
            mode = "traceback" if line.startswith((" ", "\t")) else None
            n += 1
            continue
        if mode == "diff" and line and _HUNK.match(line):
            printed[n] = True
            n += 1
            continue
        mode = None
        if not line.strip() and n > 0 and printed[n - 1]:
            ahead = n
            while ahead < len(lines) and not lines[ahead].strip():
                ahead += 1
            if ahead < len(lines) and printed[ahead]:
                for k in range(n, ahead):
                    printed[k] = True
                n = ahead
                continue
        n += 1
    runs: list[tuple[bool, str]] = []
    for line, is_printed in zip(lines, printed, strict=True):
        if runs and runs[-1][0] == is_printed:
            runs[-1] = (is_printed, runs[-1][1] + "\n" + line)
        else:
            runs.append((is_printed, line))
    return runs


def fenced(text: str) -> str:
    """The text with what a program printed in it (`segments`) fenced as code, so markdown keeps it verbatim."""
    out = []
    for is_printed, run in segments(text):
        if is_printed:
            longest = max((len(m) for m in re.findall(r"`+", run)), default=0)
            fence = "`" * max(3, longest + 1)
            out.append(f"{fence}\n{run}\n{fence}")
        else:
            out.append(run)
    return "\n".join(out)


# ----------------------------------------------------------------------- shortening


def shorten(text: str | None, limit: int) -> str:
    """At most `limit` characters: cut at the last word boundary before it, with "…" to say so."""
    text = text or ""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    if space > limit // 2:  # a word boundary not too far back; one very long word is cut inside it
        cut = cut[:space]
    return cut.rstrip(" \t\n,;:-—") + "…"


# ----------------------------------------------------------------------- agents' instructions, for people

_TOOL = r"\b(?:" + "|".join(sorted(TOOLS)) + r")\b"
# whole sentences first: what they ask of an agent has a button (or nothing to do) on the card page
_SENTENCES: tuple[tuple[re.Pattern, str], ...] = (
    (  # the review's convergence summary (critics/synthesis.py)
        re.compile(r"^Decide: .*$", re.M),
        "Decide on the card's page: pass it, send it back to its author for another round of review, or reassign it.",
    ),
    (  # a review's request to agent critics (critics/engine.py)
        re.compile(r"Read the work with get_task\(.*?stay inside your lens\.", re.S),
        "The critic agents read the work and their earlier issues, and each sends one critique per lens.",
    ),
    (  # a failed round's note to the author (critics/engine.py)
        re.compile(r"Revise the work and call complete_task again[^;.]*"),
        "The author revises the work and hands it in again",
    ),
    (re.compile(r"call get_task and retry"), "reload the page and try again"),
    (
        re.compile(r"call get_task, re-apply your change and retry"),
        "reload the page, re-apply your change and try again",
    ),
    (re.compile(r"get_review\([^)]*\) has every issue"), "the critics' findings above have every issue"),
)
# then any parenthesis, and any clause, that names a tool: instructions only an agent can follow
_PARENS = re.compile(r"\s*\((?:[^()]|\([^()]*\))*?" + _TOOL + r"(?:[^()]|\([^()]*\))*\)")
_CLAUSE = re.compile(r"[^;.!?\n—]*" + _TOOL + r"(?:[^;.!?\n()—]|\([^()]*\))*")


def for_people(text: str | None) -> str:
    """The board's text for agents, said to a person: no tool calls to make, only what a person can do. What a
    program printed in it (`segments`) is left as it was: its spacing and its words are the evidence."""
    if not text:
        return ""
    runs = segments(text)
    if any(is_printed for is_printed, _ in runs):
        return "\n".join(run if is_printed else _said_to_people(run) for is_printed, run in runs).strip("\n")
    return _said_to_people(text)


def _said_to_people(text: str) -> str:
    for pattern, said in _SENTENCES:
        text = pattern.sub(said, text)
    text = _PARENS.sub("", text)
    text = _CLAUSE.sub("", text)
    # the punctuation a dropped clause leaves behind
    text = re.sub(r"\s*[;,—]\s*(?=[;.!?—]|$)", "", text, flags=re.M)
    text = re.sub(r"^\s*[;.]\s*", "", text, flags=re.M)
    return re.sub(r"(?<=\S)[ \t]{2,}", " ", text).strip()
