"""Handed-in files and diffs on the card page: highlighted by file name only, escaped, numbered, bounded
(server/web/highlight.py), and a unified diff read leniently into files, hunks and numbered lines
(server/web/diff.py)."""

from __future__ import annotations

import re

from hiveboard.server.web import diff, highlight
from hiveboard.server.web.diff import parse, render_diff

GIT = """commit 0123abc
Author: coder <coder@example.com>

    Fix the sign </pre><script>alert(1)</script>

diff --git a/calc.py b/calc.py
index 1111111..2222222 100644
--- a/calc.py
+++ b/calc.py
@@ -1,3 +1,4 @@ def top
 def calc(a, b):
-    return a - b
+    return a + b
+# "</div><script>alert(2)</script>"

diff --git a/new file.txt b/new file.txt
new file mode 100644
--- /dev/null
+++ b/new file.txt
@@ -0,0 +1 @@
+hello
\\ No newline at end of file
diff --git a/old.py b/old.py
deleted file mode 100644
--- a/old.py
+++ /dev/null
@@ -1,2 +0,0 @@
-x = 1
--- y = 2
diff --git "a/t\\303\\251st.py" "b/t\\303\\251st2.py"
similarity index 90%
rename from "t\\303\\251st.py"
rename to "t\\303\\251st2.py"
diff --git a/img.png b/img.png
Binary files a/img.png and b/img.png differ
"""


def test_a_git_diff_is_read_into_files_hunks_and_numbered_lines():
    preamble, files = parse(GIT)
    assert preamble[0] == "commit 0123abc"
    assert [(f.old, f.new) for f in files] == [
        ("calc.py", "calc.py"),
        (None, "new file.txt"),
        ("old.py", None),
        ("tést.py", "tést2.py"),
        ("img.png", "img.png"),
    ]
    calc = [(x.kind, x.old, x.new, x.text) for x in files[0].hunks[0].lines]
    assert calc == [
        ("context", 1, 1, "def calc(a, b):"),
        ("del", 2, None, "    return a - b"),
        ("add", None, 2, "    return a + b"),
        ("add", None, 3, '# "</div><script>alert(2)</script>"'),
        ("context", 3, 4, ""),  # a blank context line whose space a tool stripped
    ]
    assert [x.kind for x in files[1].hunks[0].lines] == ["add", "note"]
    # a removed line that reads like a file header is still a removed line: the hunk's counts say so
    assert [(x.kind, x.text) for x in files[2].hunks[0].lines] == [("del", "x = 1"), ("del", "-- y = 2")]
    assert files[4].notes == ["Binary files a/img.png and b/img.png differ"] and not files[4].hunks


def test_a_diff_renders_marked_numbered_highlighted_and_inert():
    html = render_diff(GIT)
    assert "<script" not in html and "&lt;script&gt;alert(1)" in html and "&lt;script&gt;alert(2)" in html
    assert '<pre class="preamble">commit 0123abc' in html  # a commit's message, shown as text
    assert (
        '<div class="l del"><span class="no">2</span><span class="no"></span><span class="mk">-</span>    '
        '<span class="k">return</span> a - b</div>'
    ) in html
    assert '<div class="l add"><span class="no"></span><span class="no">2</span><span class="mk">+</span>' in html
    assert '<code>new file.txt</code> <span class="change">added</span>' in html
    assert '<code>old.py</code> <span class="change">removed</span>' in html
    assert '<code>tést2.py</code> <span class="change">renamed from <code>tést.py</code></span>' in html
    assert '<span class="plus">+2</span> <span class="minus">−1</span>' in html  # calc.py's counts
    assert "<li>Binary files a/img.png and b/img.png differ</li>" in html
    assert "cut here" not in html


def test_a_plain_diff_u_and_malformed_text_are_read_leniently():
    plain = "--- a.txt\t2024-01-01 00:00:00\n+++ b.txt\t2024-01-02 00:00:00\n@@ -1 +1 @@\n-one\n+two\n"
    (f,) = parse(plain)[1]
    assert (f.old, f.new, [x.kind for x in f.hunks[0].lines]) == ("a.txt", "b.txt", ["del", "add"])
    # a hunk header with absurd numbers is not a hunk, and lines after a hunk ended early are not its lines
    odd = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\nnot a diff line\n@@ -99999999999 +1 @@\n+b\n"
    (f,) = parse(odd)[1]
    assert [x.kind for x in f.hunks[0].lines] == ["del"] and len(f.hunks) == 1
    assert "not a diff line" in f.notes and "@@ -99999999999 +1 @@" in f.notes
    assert render_diff("") == '<div class="diff"><p class="empty">no file changes in this diff</p></div>'
    assert "<b>" not in render_diff("just <b>text</b>")


def test_a_large_diff_is_cut_saying_what_was_left_out(monkeypatch):
    monkeypatch.setattr(diff, "MAX_LINES", 10)
    big = "".join(f"--- a/f{n}.py\n+++ b/f{n}.py\n@@ -1,3 +1,3 @@\n-a\n+b\n c\n-d\n+e\n" for n in range(5))
    html = render_diff(big)
    assert html.count('class="diff-file"') == 2
    assert "showing 10 of 25 lines in 2 of 5 files; the rest of the diff is cut here" in html
    long_line = render_diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+" + "z" * 5000 + "\n")
    assert "z" * 2000 in long_line and "z" * 2001 not in long_line and "3,000 more characters" in long_line


def test_files_are_highlighted_by_their_name_never_by_their_content():
    python = "import os\n\ndef f():\n    return 'x'  # done\n"
    lit = highlight.lines("tool.py", python)
    assert lit[0] == '<span class="k">import</span> os' and '<span class="c"># done</span>' in lit[3]
    assert highlight.lines("tool.txt", python)[0] == "import os"  # the same text, named as plain text
    assert highlight.lines("Makefile", "all:\n\techo hi\n") != highlight.lines("x.unknown", "all:\n\techo hi\n")
    # content that tries to pass for another language, or for markup, stays text
    tricky = "#!/usr/bin/env python\n</pre><script>alert(1)</script>\n"
    assert highlight.lines("notes.txt", tricky)[1] == "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
    assert "<script" not in "".join(highlight.lines("we\"ird'<name>.html", tricky))
    # every kind of line end, and a byte-order mark, keep the line count
    assert len(highlight.lines("a.py", "\ufeffa = 1\r\nb = 2\rc = 3\n")) == 4


def test_a_long_file_is_cut_with_a_note():
    text = "".join(f"line {n}\n" for n in range(1, 2501))
    html = highlight.block("long.txt", text)
    numbers = re.findall(r'<span class="no">(\d+)</span>', html)
    assert numbers[0] == "1" and numbers[-1] == "2000" and len(numbers) == 2000
    assert "showing 2,000 of 2,500 lines" in html and "the rest is cut here" in html
    assert highlight.cut("one\ntwo\n") == ("one\ntwo", "")  # a last line's end is not a line
    wide = highlight.block("wide.txt", "x" * 150_000)
    assert "showing 1 of 1 lines (100,000 of 150,000 characters)" in wide
