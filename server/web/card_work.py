"""The work on a card's page, as a person at the approval gate judges it: the files of its latest hand-in,
each beside its version in the hand-in before (side by side on a wide screen), the acceptance check's test
output of the latest round, the card's acceptance tests, the commit it was handed in as (its diff beside the
commit before), and the path reservations held on it.

Files, test output and tests are hostile text: highlighted and escaped on the server (highlight.py,
diff.py), each bounded with a note of what was cut.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from html import escape as h

from hiveboard.board.models import AcceptanceTests, Artifact, Commit, Task
from hiveboard.board.review_models import CritiqueRecord, HandIn, ReviewRound, ReviewTrail
from hiveboard.critics.acceptance import AcceptanceCritic

from . import diff, highlight
from .diff import render_diff

COMPARED_LINES = 5_000  # a changed file longer than this on either side is shown beside, not compared line by line
SAID = {"PASS": "passed", "FAIL": "failed"}


def label(hand_in: HandIn) -> str:
    """How the page names a hand-in: "round 2", or when no review round took it, "the hand-in"."""
    return f"round {hand_in.round}" if hand_in.round is not None else "the hand-in without review"


def when(hand_in: HandIn) -> str:
    return hand_in.at.replace("T", " ")[:16]


def content(a: Artifact) -> str:
    """One file's content: a diff rendered as a diff, anything else highlighted as its name says."""
    return render_diff(a.content) if a.kind == "diff" else highlight.block(a.name, a.content)


@lru_cache(maxsize=32)  # a card page is rendered again on each of its live updates
def changes(name: str, before: str, after: str) -> str:
    """What changed in a file between two hand-ins, as a rendered unified diff."""
    old, new = highlight.normalised(before).split("\n"), highlight.normalised(after).split("\n")
    if max(len(old), len(new)) > COMPARED_LINES:
        return f'<p class="cut">too long to compare line by line here (over {COMPARED_LINES:,} lines)</p>'
    path = " ".join(name.split())  # a name's line breaks would end the diff's header lines
    return render_diff("\n".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", lineterm="")))


def _version(a: Artifact, named: str) -> str:
    return f'<div class="version"><div class="vhead">{h(named)}</div>{content(a)}</div>'


def _section(n: int, a: Artifact, state: str, body: str) -> str:
    since = f' <span class="since {state.split(" ", 1)[0]}">{h(state)}</span>' if state else ""
    return (
        f'<section class="file" id="file-{n}"><h4><code>{h(a.name)}</code> <span class="kind">{h(a.kind)}</span>'
        f"{since}</h4>{body}</section>"
    )


def _file(n: int, now: Artifact, before: Artifact | None, now_is: str, before_is: str | None) -> str:
    """One file of the hand-in, beside its previous version when it changed."""
    if before_is is None:
        return _section(n, now, "", _version(now, now_is))
    if before is None:
        return _section(n, now, f"new since {before_is}", _version(now, now_is))
    if (now.kind, now.content) == (before.kind, before.content):
        return _section(n, now, f"unchanged since {before_is}", _version(now, now_is))
    body = f'<div class="versions two">{_version(before, before_is)}{_version(now, now_is)}</div>'
    if now.kind != "diff" and before.kind != "diff":
        body += (
            f'<details class="changes"><summary>What changed since {h(before_is)}</summary>'
            f"{changes(now.name, before.content, now.content)}</details>"
        )
    return _section(n, now, f"changed since {before_is}", body)


def files_section(hand_ins: list[HandIn]) -> str:
    """The latest hand-in's files, each beside its version in the hand-in before; "" when nothing was handed in."""
    if not hand_ins:
        return ""
    now, before = hand_ins[0], (hand_ins[1] if len(hand_ins) > 1 else None)
    now_is = label(now)
    before_is = label(before) if before is not None else None
    if before is not None and before_is == now_is:  # a round a person cancelled and the next share a number
        now_is, before_is = f"{now_is} ({when(now)})", f"{before_is} ({when(before)})"
    count = len(now.artifacts)
    intro = (
        f"{now_is.capitalize()}, handed in {when(now)} UTC: "
        + (f"{count} file{'' if count == 1 else 's'}" if count else "no files")
        + (f"; each shown beside its version in {before_is}" if before is not None else "")
        + "."
    )
    earlier: dict[str, list[Artifact]] = {}
    for a in before.artifacts if before is not None else []:
        earlier.setdefault(a.name, []).append(a)
    parts = []
    for n, a in enumerate(now.artifacts, 1):
        same = earlier.get(a.name)
        parts.append(_file(n, a, same.pop(0) if same else None, now_is, before_is))
    gone = [a for left in earlier.values() for a in left]
    parts += [
        _section(len(now.artifacts) + n, a, f"removed since {before_is}", _version(a, str(before_is)))
        for n, a in enumerate(gone, 1)
    ]
    return (
        f'<section class="work-files" id="files"><h3>Files</h3><p class="hint">{h(intro)}</p>{"".join(parts)}</section>'
    )


def _check(c: CritiqueRecord) -> str:
    """One acceptance check's result: what ran and how it ended, and each failure's text."""
    said = SAID.get(c.verdict or "", c.status) if c.status == "ok" else c.status
    failures = "".join(
        f'<div class="failure"><p><code>{h(i.location or i.rule or i.category)}</code> {h(i.category)}</p>'
        f"<pre>{h(i.description)}</pre></div>"
        for i in c.issues
    )
    return (
        f'<div class="tests"><p><b class="st-{h(c.status)} verdict-{h(said)}">{h(said)}</b> '
        f"<span class=hint>({h(c.critic)})</span></p>"
        + (f'<p class="run">{h(c.summary)}</p>' if c.summary else "")
        + (f'<p class="err">{h(c.error)}</p>' if c.error else "")
        + failures
        + "</div>"
    )


def test_output(trail: ReviewTrail) -> str:
    """The acceptance check of the card's latest review round: which tests ran, passed or failed, and how the
    failing ones failed (stored as the round's critique by critics/acceptance.py); "" before any review."""
    if not trail.rounds:
        return ""
    last = trail.rounds[-1]
    head = f'<section class="test-output" id="tests-run"><h3>Test output</h3><p class="hint">Round {last.round}'
    if last.status in ("queued", "running"):
        return head + " is under review: its tests' output shows here once the round ends.</p></section>"
    checks = [c for c in last.critiques if c.backend == AcceptanceCritic.backend]
    if not checks:
        return head + ": no acceptance check ran.</p></section>"
    return head + ":</p>" + "".join(_check(c) for c in checks) + "</section>"


def tests_said(last: ReviewRound) -> str:
    """How a round's acceptance checks ended, in a word ("passed", "failed", "timeout"); "" when none ran."""
    checks = [c for c in last.critiques if c.backend == AcceptanceCritic.backend]
    said = [SAID.get(c.verdict or "", c.status) if c.status == "ok" else c.status for c in checks]
    return "failed" if "failed" in said else ", ".join(dict.fromkeys(said))


def acceptance_tests(tests: AcceptanceTests | None, hidden: int) -> str:
    """The card's acceptance tests: its files highlighted and its commands; hidden ones are marked so (agents
    see only that they exist), or counted when this page may not show them."""
    if tests is None:
        if not hidden:
            return ""
        return (
            f'<h3>Acceptance tests</h3><p class="hint">Hidden acceptance tests ({hidden}): shown to people who '
            "log in; agents see only that they exist.</p>"
        )
    note = (
        '<p class="hint">Hidden from agents: the card\'s claimer sees only that they exist.</p>' if tests.hidden else ""
    )
    commands = (
        "<ul class=commands>" + "".join(f"<li><code>{h(c)}</code></li>" for c in tests.commands) + "</ul>"
        if tests.commands
        else ""
    )
    files = "".join(
        f'<section class="file"><h4><code>{h(f.name)}</code></h4>{highlight.block(f.name, f.content)}</section>'
        for f in tests.files
    )
    return (
        f'<section class="acceptance" id="acceptance-tests"><h3>Acceptance tests</h3>{note}{commands}{files}</section>'
    )


def _commit_head(c: Commit) -> str:
    n = len(c.files) + c.files_omitted
    return (
        f"commit <code>{h(c.sha[:12])}</code> ({h(c.ref)}) of <code>{h(c.repo)}</code>, against "
        f"<code>{h(c.base_sha[:12])}</code>: {n} file{'' if n == 1 else 's'} changed"
    )


def commit_section(commits: list[Commit]) -> str:
    """The latest commit handed in, file by file, each file's diff beside its diff in the commit handed in before
    (when there was one and the file's change differs); "" when the card's work was never a commit."""
    if not commits:
        return ""
    now, before = commits[-1], (commits[-2] if len(commits) > 1 else None)
    intro = f"The {_commit_head(now)}."
    if before is not None:
        intro += f" Beside each file: its change in the commit handed in before, {_commit_head(before)}."
    preamble, files = diff.parse(now.diff)
    earlier = {f.name: f for f in diff.parse(before.diff)[1]} if before is not None else {}
    parts = [diff.render_files(preamble, [])] if any(line.strip() for line in preamble) else []
    for f in files:
        mine = diff.render_files([], [f])
        old = earlier.pop(f.name, None)
        if before is None:
            parts.append(mine)
        elif old is None:
            parts.append(f'<p class="since new">new in this commit</p>{mine}')
        elif diff.render_files([], [old]) == mine:
            parts.append(f'<p class="since unchanged">the same change as in the commit before</p>{mine}')
        else:
            parts.append(
                f'<div class="versions two"><div class="version"><div class="vhead">the commit before</div>'
                f'{diff.render_files([], [old])}</div><div class="version"><div class="vhead">this commit</div>'
                f"{mine}</div></div>"
            )
    if before is not None and earlier:
        gone = ", ".join(h(name) for name in sorted(earlier))
        parts.append(f'<p class="since removed">changed by the commit before, not by this one: {gone}</p>')
    if now.files_omitted:
        parts.append(f'<p class="cut">{now.files_omitted} more changed files are not shown</p>')
    return (
        f'<section class="work-commit" id="commit"><h3>Commit</h3><p class="hint">{intro}</p>{"".join(parts)}</section>'
    )


def reservations_section(task: Task) -> str:
    """The live path reservations tied to the card or overlapping its declared paths; "" when there are none."""
    if not task.reservations:
        return ""
    live = task.reservations_live or len(task.reservations)
    rows = "".join(
        f"<tr><td><code>{h(r.pattern)}</code></td><td>@{h(r.agent)}</td>"
        f"<td>{'exclusive' if r.exclusive else 'shared'}</td><td>{h(r.repo or 'the board')}</td>"
        f"<td>{h(r.until.replace('T', ' ')[:16])} UTC</td><td>{h(r.reason or '')}</td></tr>"
        for r in task.reservations
    )
    more = live - len(task.reservations)
    return (
        '<section class="work-reservations" id="reservations"><h3>Path reservations</h3>'
        '<table class="grid"><thead><tr><th>paths</th><th>held by</th><th>kind</th><th>repository</th>'
        f"<th>until</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>"
        + (f'<p class="cut">{more} more</p>' if more > 0 else "")
        + "</section>"
    )
