"""A unified diff as HTML: per file, its hunks with old and new line numbers, added and removed lines marked,
each side highlighted as its file's language.

The card page shows an artifact of kind `diff` with `render_diff`, and the changes between two rounds'
versions of a file; a reviewed commit's diff is shown with it too. A diff is hostile text: it is parsed
leniently (what is not a diff's line is kept as a note, never trusted), every part of it is escaped, and
what a page shows of it is bounded, saying what was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape

from . import highlight

MAX_FILES = 300
MAX_LINES = 5_000  # diff lines on one page, over all its files
MAX_LINE_CHARS = 2_000
HUNK = re.compile(r"@@ -(\d{1,9})(?:,(\d{1,9}))? \+(\d{1,9})(?:,(\d{1,9}))? @@(.*)")
OCTAL = re.compile(r"\\([0-7]{3})|\\(.)")
ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass
class Line:
    kind: str  # "context", "add", "del", or "note" ("\ No newline at end of file")
    text: str
    old: int | None = None
    new: int | None = None


@dataclass
class Hunk:
    head: str  # the "@@ -1,3 +1,4 @@ def f" line
    lines: list[Line] = field(default_factory=list)


@dataclass
class FileDiff:
    old: str | None = None  # None: the file is new
    new: str | None = None  # None: the file was removed
    notes: list[str] = field(default_factory=list)  # mode changes, renames, "Binary files … differ"
    hunks: list[Hunk] = field(default_factory=list)
    headed: bool = False  # its ---/+++ lines were read

    @property
    def name(self) -> str:
        return self.new or self.old or "(unnamed)"

    def count(self, kind: str) -> int:
        return sum(line.kind == kind for h in self.hunks for line in h.lines)


def _unquote(name: str) -> str:
    """A path as git writes it: C-quoted when it has unusual characters ("a/t\\303\\251st.py")."""
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    raw = bytearray()
    at = 0
    inner = name[1:-1]
    for m in OCTAL.finditer(inner):
        raw += inner[at : m.start()].encode("utf-8", "surrogatepass")
        raw += bytes([int(m.group(1), 8)]) if m.group(1) else ESCAPES.get(m.group(2), m.group(2)).encode()
        at = m.end()
    raw += inner[at:].encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


def _path(header: str) -> str | None:
    """The path of a ---/+++ line: without its a/ or b/ prefix and a trailing timestamp; None for /dev/null."""
    name = header[4:]
    if "\t" in name:
        name = name.split("\t", 1)[0]
    name = _unquote(name.strip())
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def _git_names(line: str) -> tuple[str | None, str | None]:
    """The two paths of "diff --git a/X b/Y" (split where both halves match when a path has spaces)."""
    rest = line[len("diff --git ") :]
    if rest.startswith('"') or not rest.startswith("a/"):
        parts = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', rest)
        if len(parts) == 2:
            return _path("--- " + parts[0]), _path("+++ " + parts[1])
        return None, None
    middle = (len(rest) - 1) // 2  # "a/X b/X": the space between two equal halves
    if rest[middle] == " " and rest[middle + 1 : middle + 3] == "b/" and rest[2:middle] == rest[middle + 3 :]:
        return rest[2:middle], rest[middle + 3 :]
    at = rest.find(" b/")
    return (rest[2:at], rest[at + 3 :]) if at > 0 else (None, None)


def parse(text: str) -> tuple[list[str], list[FileDiff]]:
    """(the lines before the first file, e.g. a commit's message; the files the diff changes)."""
    lines = highlight.normalised(text).removesuffix("\n").split("\n") if text else []
    preamble: list[str] = []
    files: list[FileDiff] = []
    current: FileDiff | None = None
    hunk: Hunk | None = None
    old_left = new_left = old_no = new_no = 0
    for n, raw in enumerate(lines):
        if hunk is not None and (old_left > 0 or new_left > 0):
            tag = raw[:1]
            if tag == "+":
                hunk.lines.append(Line("add", raw[1:], new=new_no))
                new_no, new_left = new_no + 1, new_left - 1
                continue
            if tag == "-":
                hunk.lines.append(Line("del", raw[1:], old=old_no))
                old_no, old_left = old_no + 1, old_left - 1
                continue
            if tag == " " or raw == "":  # some tools strip a blank context line's space
                hunk.lines.append(Line("context", raw[1:], old=old_no, new=new_no))
                old_no, new_no, old_left, new_left = old_no + 1, new_no + 1, old_left - 1, new_left - 1
                continue
            if tag == "\\":
                hunk.lines.append(Line("note", raw))
                continue
            hunk = None  # the hunk ended before its counts said: read the line as what it is
        if raw.startswith("\\") and hunk is not None:  # "\ No newline at end of file" after a hunk's last line
            hunk.lines.append(Line("note", raw))
            continue
        hunk = None
        if raw.startswith("diff --git "):
            old, new = _git_names(raw)
            current = FileDiff(old=old, new=new)
            files.append(current)
            continue
        if raw.startswith("--- ") and n + 1 < len(lines) and lines[n + 1].startswith("+++ "):
            if current is None or current.headed or current.hunks:  # a diff without "diff --git" lines
                current = FileDiff()
                files.append(current)
            current.old, current.headed = _path(raw), True
            continue
        if raw.startswith("+++ ") and current is not None and current.headed and not current.hunks:
            current.new = _path(raw)
            continue
        found = HUNK.fullmatch(raw) if current is not None else None
        if found:
            old_no, new_no = int(found.group(1)), int(found.group(3))
            old_left = int(found.group(2)) if found.group(2) is not None else 1
            new_left = int(found.group(4)) if found.group(4) is not None else 1
            hunk = Hunk(raw)
            current.hunks.append(hunk)
            continue
        if current is None:
            preamble.append(raw)
            continue
        if raw.startswith("new file mode"):
            current.old = None
        elif raw.startswith("deleted file mode"):
            current.new = None
        elif raw.startswith("rename from "):
            current.old = _unquote(raw[len("rename from ") :])
        elif raw.startswith("rename to "):
            current.new = _unquote(raw[len("rename to ") :])
        if not raw.startswith("index "):
            current.notes.append(raw)
    return preamble, files


def _hunk_rows(name: str, hunk: Hunk, take: int) -> list[str]:
    """A hunk's first `take` lines as rows, each side highlighted as a whole (a string that spans lines stays
    a string)."""
    shown = hunk.lines[:take]
    cap = [line.text[:MAX_LINE_CHARS] for line in shown]
    old_side = [i for i, line in enumerate(shown) if line.kind in ("context", "del")]
    new_side = [i for i, line in enumerate(shown) if line.kind in ("context", "add")]
    html: dict[int, str] = {}
    for side in (old_side, new_side):
        if side:
            lit = highlight.lines(name, "\n".join(cap[i] for i in side))
            html.update(zip(side, lit))
    rows = [highlight.row("hunk", (None, None), escape(hunk.head))]
    marks = {"add": "+", "del": "-", "context": " "}
    for i, line in enumerate(shown):
        if line.kind == "note":
            rows.append(highlight.row("note", (None, None), escape(line.text)))
            continue
        text = html.get(i, escape(cap[i]))
        if len(line.text) > MAX_LINE_CHARS:
            text += f'<span class="cut"> … {len(line.text) - MAX_LINE_CHARS:,} more characters</span>'
        rows.append(highlight.row(line.kind, (line.old, line.new), text, marks[line.kind]))
    return rows


def _head(f: FileDiff) -> str:
    if f.old is None and f.new is not None:
        change = "added"
    elif f.new is None and f.old is not None:
        change = "removed"
    elif f.old and f.new and f.old != f.new:
        change = f"renamed from <code>{escape(f.old)}</code>"
    else:
        change = "changed"
    counts = f'<span class="plus">+{f.count("add")}</span> <span class="minus">−{f.count("del")}</span>'
    return f'<h4 class="diff-name"><code>{escape(f.name)}</code> <span class="change">{change}</span> {counts}</h4>'


def render_diff(unified_text: str) -> str:
    """A unified diff (git's, or diff -u's) as HTML: per file, its hunks with line numbers, added and removed
    lines marked; at most MAX_FILES files and MAX_LINES lines, with a note of what was cut."""
    return render_files(*parse(unified_text))


def render_files(preamble: list[str], files: list[FileDiff]) -> str:
    """Parsed diffs (`parse`) as render_diff shows them: one file's, to set it beside another version's."""
    parts = ['<div class="diff">']
    if any(line.strip() for line in preamble):
        shown, note = highlight.cut("\n".join(preamble), max_lines=200)
        parts.append(f'<pre class="preamble">{escape(shown)}</pre>')
        if note:
            parts.append(f'<p class="cut">{escape(note)}</p>')
    if not files:
        parts.append('<p class="empty">no file changes in this diff</p></div>')
        return "".join(parts)
    total = sum(len(h.lines) for f in files for h in f.hunks)
    left, shown_files, shown_lines = MAX_LINES, 0, 0
    for f in files[:MAX_FILES]:
        if left <= 0:
            break
        rows: list[str] = []
        for hunk in f.hunks:
            take = min(len(hunk.lines), left)
            if take <= 0:
                break
            rows += _hunk_rows(f.name, hunk, take)
            left, shown_lines = left - take, shown_lines + take
        notes = [n for n in f.notes if not n.startswith(("new file mode", "deleted file mode"))]
        parts.append(
            f'<section class="diff-file">{_head(f)}'
            + ('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>" if notes else "")
            + (f'<div class="code">{"".join(rows)}</div>' if rows else "")
            + "</section>"
        )
        shown_files += 1
    if shown_files < len(files) or shown_lines < total:
        parts.append(
            f'<p class="cut">showing {shown_lines:,} of {total:,} lines in {shown_files:,} of {len(files):,} files; '
            "the rest of the diff is cut here</p>"
        )
    parts.append("</div>")
    return "".join(parts)
