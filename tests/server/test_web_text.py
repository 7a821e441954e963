"""How the web board shows text to people (server/web/text.py): markdown rendered and sanitised, text cut
at a word, the board's notes to agents said in a person's words; and presence as people say it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hiveboard.board.review_models import CritiqueRecord, ReviewIssue
from hiveboard.board.views import AgentView
from hiveboard.critics.synthesis import convergence_summary
from hiveboard.server.web import pages
from hiveboard.server.web.text import TOOLS, for_people, markdown, plain, shorten

SNAPSHOT = Path(__file__).with_name("tools_list.json")
TOOL_CALL = re.compile(r"\b(?:" + "|".join(sorted(TOOLS)) + r")\b")


def test_the_tool_names_are_the_servers():
    """for_people knows every tool: a new one must be added there (or its instructions reach people)."""
    assert TOOLS == set(json.loads(SNAPSHOT.read_text())["tools"])


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](&#106;avascript:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "<a href='javascript:alert(1)'>x</a>",
        "![x](https://tracker.example/pixel.png)",
        "<iframe src=//evil.example></iframe>",
        '<div style="background:url(javascript:alert(1))">x</div>',
        "[x]: javascript:alert(1)\n\n[y][x]",
    ],
)
def test_markdown_keeps_no_markup_an_author_wrote(hostile):
    html = markdown(hostile).removeprefix('<div class="md">').removesuffix("</div>")
    assert not re.search(r"<(script|img|iframe|div |style)", html), html
    assert not re.search(r"<[^>]+\s(on\w+|style)\s*=", html), html
    assert not re.search(r"href=\"(?!https?://|mailto:)", html), html


def test_markdown_renders_what_people_write():
    html = markdown(
        "# Plan\n\n- **one**\n- `two`\n\n```\nx < y\n```\n\n[docs](https://example.com) and /task/3\nnext line"
    )
    assert "<h1>Plan</h1>" in html and "<li><strong>one</strong></li>" in html and "<code>two</code>" in html
    assert "<pre><code>x &lt; y\n</code></pre>" in html  # code blocks stay monospace (and escaped)
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">docs</a>' in html
    assert "<br>" in html  # an agent's plain line breaks are kept
    assert markdown("") == "" and markdown("  \n") == ""


PYTEST = """    def test_add():
>       assert add(2, 3) == 5
E       assert -1 == 5

test_calc.py:5: AssertionError
=========================== short test summary info ============================
FAILED test_calc.py::test_add - assert -1 == 5"""


@pytest.mark.parametrize(
    "before,after",
    [
        ("The test fails:\n\n", "\nWhich sign is **right**?"),  # an agent's reason around pasted output
        ("UNRESOLVED [critical] test_calc.py::test_add failed: expected 5, got -1\n", ""),  # the review's summary
        ("- **Fix** the sign\n", "\n\n## Next"),
    ],
)
def test_what_a_test_run_printed_is_shown_as_printed_and_the_prose_as_markdown(before, after):
    html = markdown(before + PYTEST + after)
    assert "<blockquote>" not in html and "<h1>" not in html and "<hr>" not in html, html
    code = re.search(r"<pre><code>(.*?)</code></pre>", html, re.S).group(1)
    assert code.strip("\n") == PYTEST.replace(">", "&gt;"), code  # every line, every space, in one block
    assert ("<strong>" in html) == ("**" in before + after)  # what the agent wrote around it is still markdown


@pytest.mark.parametrize(
    "printed",
    [
        'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\n    main()\nValueError: **boom**',
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b",
    ],
)
def test_a_traceback_and_a_diff_are_kept_whole(printed):
    html = markdown(f"It broke:\n{printed}\nThat is all.")
    code = re.search(r"<pre><code>(.*?)</code></pre>", html, re.S).group(1)
    assert code.strip("\n") == printed.replace(">", "&gt;").replace("<", "&lt;"), html
    assert "<p>That is all.</p>" in html


def test_a_quote_and_code_a_person_wrote_stay_markdown():
    html = markdown("> a quote from the design doc\n\n```\n>       assert kept\n```\n\n    E   indented code")
    assert "<blockquote>" in html and html.count("<pre><code>") == 2 and "```" not in html


def test_people_read_a_review_note_with_its_test_output_untouched():
    """for_people rewrites the board's instructions to agents, never the lines a test printed."""
    note = "Round 1: FAIL; call get_task and retry.\n>       assert add(2,  3) == 5\nE       assert -1 == 5"
    said = for_people(note)
    assert said.splitlines() == [
        "Round 1: FAIL; reload the page and try again.",
        ">       assert add(2,  3) == 5",
        "E       assert -1 == 5",
    ]


def test_an_excerpt_has_the_words_without_the_marks():
    assert plain("**Problem:** the sum\n\n```diff\n-    return a - b\n```\n## Fix\n`a + b`") == (
        "Problem: the sum - return a - b Fix a + b"
    )


def test_shorten_cuts_at_a_word_and_says_so():
    text = "a needs-a-human reason that goes on well past the limit of the card"
    cut = shorten(text, 30)
    assert cut == "a needs-a-human reason that…" and len(cut) <= 30
    assert shorten(text, 500) == text
    assert shorten("x" * 50, 10) == "x" * 9 + "…"  # one long word: cut inside it, still marked
    assert shorten(None, 10) == ""


def test_the_review_summary_for_people_names_no_tool():
    """The real convergence summary (critics/synthesis.py): its agents' instruction becomes the card page's
    choices, whatever else it says stays."""
    issue = ReviewIssue(severity="major", category="bug", location="app.py:3", description="off by one")
    record = CritiqueRecord(critic="ruff", lens="correctness", backend="ruff", status="ok", verdict="FAIL", score=3)
    summary = convergence_summary([[record.model_copy(update={"issues": [issue]})]], 1)
    assert TOOL_CALL.search(summary)  # written for agents
    said = for_people(summary)
    assert not TOOL_CALL.search(said), said
    assert "UNRESOLVED [major] app.py:3 off by one" in said
    assert "pass it, send it back to its author for another round of review, or reassign it" in said


@pytest.mark.parametrize(
    ("agents", "people"),
    [
        (
            "task 3 changed meanwhile; call get_task and retry",
            "task 3 changed meanwhile; reload the page and try again",
        ),
        ("review 4 is running; call get_review to see its verdict", "review 4 is running"),
        ("Not listed: 3 minor; get_review(task_id, full=true) has every issue.", "Not listed: 3 minor; the critics'"),
        ("it is frozen; create a new card with create_task for other criteria", "it is frozen"),
        ("cannot move todo → done (use claim_task / release_task for the rest)", "cannot move todo → done"),
        (
            "task 3 is claimed by coder, not by you (ann); only the claim holder can do that — pick another card "
            "with claim_task",
            "task 3 is claimed by coder, not by you (ann); only the claim holder can do that",
        ),
        ("ISO 8601 or RFC 2822?", "ISO 8601 or RFC 2822?"),
    ],
)
def test_for_people_drops_what_only_an_agent_can_do(agents, people):
    said = for_people(agents)
    assert said.startswith(people) and not TOOL_CALL.search(said), said


def _agent(name: str, role: str | None, seen: float | None, waiting: float | None = None) -> AgentView:
    return AgentView(
        name=name,
        role=role,
        last_seen=None,
        last_seen_at=seen,
        waiting=waiting is not None,
        waiting_until=waiting,
        holding=[],
        first_rounds=0,
        first_passes=0,
    )


def test_presence_says_online_or_when_last_seen():
    now = 1_000_000.0
    viewer = pages.Viewer("ann", "t", False)
    html = pages.agents_page(
        [
            _agent("ann", "human", now - 5),
            _agent("bob", "lead", now - 300),
            _agent("coder", None, now - 3 * 3600),
            _agent("critic", "critic", now - 900, waiting=now + 30),
            _agent("ghost", None, None),
        ],
        120,
        now,
        viewer,
    )
    said = dict(re.findall(r'</span>(\w+)</td>.*?class="presence"[^>]*>([^<]+)</td>', html))
    assert said == {
        "ann": "online",
        "bob": "last seen 5 min ago",
        "coder": "last seen 3 h ago",
        "critic": "waiting for messages",
        "ghost": "never seen",
    }
    assert html.count("(a person)") == 2  # human and lead


def test_the_agents_page_shows_the_session_an_agent_is():
    session = "3f2a9c1d-5b6e-4c1a-9d2f-0a1b2c3d4e5f"
    agent = _agent("claude-3f2a9c1d", None, 1_000_000.0).model_copy(update={"client_session": session})
    html = pages.agents_page([agent, _agent("bob", "lead", None)], 120, 1_000_000.0, pages.Viewer("ann", "t", False))
    row = re.search(r"<tr[^>]*><td><span class=\"dot\"></span>claude-3f2a9c1d</td>.*?</tr>", html).group(0)
    assert f'<span class="session" title="{session}">3f2a9c1d-5b6…</span>' in row
    assert "<th>session</th>" in html
