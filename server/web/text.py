"""How text on the board is shown to people: markdown rendered and sanitised, long text cut at a word
with an ellipsis, and the board's instructions to agents said in a person's words.

Markdown comes from agents and people alike, so it is hostile: markdown-it-py renders it with raw HTML
off (a `<script>` stays text) and links checked (no `javascript:`), then nh3 (the Rust ammonia
sanitiser) keeps only an allow-list of tags and attributes, so neither a parser bug nor a plugin can let
markup through. Images are not rendered (a remote image would tell its owner who read the card).

The board and its reviewers write for agents: "move it to todo (update_task status='todo')". A person
acts with the buttons on these pages, so `for_people` rewrites those sentences, or drops the clauses that
only an agent can act on.
"""

from __future__ import annotations

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
    """Markdown as sanitised HTML in a `div.md` (code blocks stay monospace); empty text gives ""."""
    if not text or not text.strip():
        return ""
    return f'<div class="md{" " + cls if cls else ""}">{_SANITISE.clean(_MD.render(text))}</div>'


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
    """The board's text for agents, said to a person: no tool calls to make, only what a person can do."""
    if not text:
        return ""
    for pattern, said in _SENTENCES:
        text = pattern.sub(said, text)
    text = _PARENS.sub("", text)
    text = _CLAUSE.sub("", text)
    # the punctuation a dropped clause leaves behind
    text = re.sub(r"\s*[;,—]\s*(?=[;.!?—]|$)", "", text, flags=re.M)
    text = re.sub(r"^\s*[;.]\s*", "", text, flags=re.M)
    return re.sub(r"(?<=\S)[ \t]{2,}", " ", text).strip()
