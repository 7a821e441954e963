"""Source text as highlighted HTML, rendered on the server.

A file handed in is hostile text. Pygments only tokenises it (regular expressions over the text: nothing
in it runs), the lexer is chosen by the file's name alone (never guessed from the content), and every
token is escaped here, so the HTML holds no markup of the file's. A name Pygments does not know, or a lexer
that fails, gives plain text. Colours are classes (static/app.css): the pages' Content-Security-Policy
allows no style attribute.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from html import escape

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import Comment, Generic, Keyword, Name, Number, Operator, String, Token
from pygments.util import ClassNotFound

log = logging.getLogger("hiveboard.web")

MAX_LINES = 2_000  # of one file shown on a page; the rest is cut, and the page says how much
MAX_CHARS = 100_000
TokenType = type(Token)
# the kinds of token a reader tells apart, most specific first, and the class static/app.css colours
CLASSES: tuple[tuple[TokenType, str], ...] = (
    (Comment, "c"),
    (Keyword, "k"),
    (Operator.Word, "k"),
    (String, "s"),
    (Number, "m"),
    (Name.Builtin, "b"),
    (Name.Function, "f"),
    (Name.Class, "f"),
    (Name.Decorator, "d"),
    (Generic.Inserted, "gi"),
    (Generic.Deleted, "gd"),
    (Generic.Heading, "gh"),
    (Generic.Subheading, "gh"),
)


def lexer_for(name: str) -> Lexer:
    """The lexer of a file called `name` (its extension or well-known name), else plain text."""
    try:
        return get_lexer_for_filename(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def normalised(text: str) -> str:
    """Line ends as Pygments reads them (and a leading byte-order mark dropped), so lines count alike."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _css(kind: TokenType) -> str | None:
    return next((cls for parent, cls in CLASSES if kind in parent), None)


@lru_cache(maxsize=64)  # a card page is rendered again on each of its live updates
def lines(name: str, text: str) -> tuple[str, ...]:
    """`text` (normalised) as escaped HTML, one string per line (split at "\\n"), highlighted as the file
    `name` is."""
    text = normalised(text)
    plain = tuple(escape(line) for line in text.split("\n"))
    out: list[str] = []
    pieces: list[list] = []  # this line's [class, text], neighbours of one class merged

    def end_line() -> None:
        out.append("".join(f'<span class="{c}">{escape(t)}</span>' if c else escape(t) for c, t in pieces))
        pieces.clear()

    try:
        for kind, value in lexer_for(name).get_tokens(text):
            css = _css(kind)
            for n, part in enumerate(value.split("\n")):
                if n:
                    end_line()
                if part and pieces and pieces[-1][0] == css:
                    pieces[-1][1] += part
                elif part:
                    pieces.append([css, part])
    except Exception:  # a lexer's bug on odd input costs the colours, not the page
        log.warning("highlighting %r failed; shown as plain text", name, exc_info=True)
        return plain
    end_line()
    return tuple(out) if len(out) == len(plain) else plain


def cut(text: str, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS) -> tuple[str, str]:
    """(the part of `text` a page shows, without the last line's end; a note of what was cut, or "")."""
    body = normalised(text).removesuffix("\n")  # a last line's end starts no line of its own
    shown = body[:max_chars]
    parts = shown.split("\n")
    if len(parts) > max_lines:
        shown = "\n".join(parts[:max_lines])
    if len(shown) == len(body):
        return body, ""
    kept, total = shown.count("\n") + 1, body.count("\n") + 1
    return shown, (
        f"showing {kept:,} of {total:,} lines ({len(shown):,} of {len(body):,} characters); the rest is cut here"
    )


def row(cls: str, numbers: tuple[int | None, ...], html: str, mark: str = "") -> str:
    """One line of a code block: its line numbers (not copied with the code), a +/- mark, the line."""
    nos = "".join(f'<span class="no">{"" if n is None else n}</span>' for n in numbers)
    marked = f'<span class="mk">{escape(mark)}</span>' if mark else ""
    return f'<div class="l{" " + cls if cls else ""}">{nos}{marked}{html}</div>'


def block(name: str, text: str) -> str:
    """A whole file as a numbered, highlighted code block, cut to MAX_LINES / MAX_CHARS with a note."""
    shown, note = cut(text)
    body = "".join(row("", (n,), line) for n, line in enumerate(lines(name, shown), 1))
    return f'<div class="code">{body}</div>' + (f'<p class="cut">{escape(note)}</p>' if note else "")
