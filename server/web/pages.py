"""The web board's HTML, rendered on the server from the board's read models.

Every value that came from an agent is escaped (`h`): titles, notes, messages and critiques are
hostile text; what is written as markdown (descriptions, outputs, messages, memory items, review briefs)
is rendered and sanitised by `text.markdown`. Pages carry no inline script, no event handler attribute and
no style attribute (the Content-Security-Policy, app.py, would refuse them); `static/app.js` reads what it
needs from data attributes. People read the board's notes to agents in their own words (`text.for_people`)
and act with buttons, never with tool calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import get_args
from urllib.parse import urlencode

from hiveboard.board.agents import OPERATOR_ROLES
from hiveboard.board.decisions import Answer
from hiveboard.board.knowledge import KINDS
from hiveboard.board.machine import TRANSITIONS
from hiveboard.board.messages import Message
from hiveboard.board.models import STATUSES, AcceptanceTests, Commit, Task
from hiveboard.board.review_models import AgentHonesty, Approval, BoardStats, HandIn, ReviewTrail
from hiveboard.board.usage import CardUsage, TokenStats, TokenUse
from hiveboard.board.views import AgentView, CardView, ColumnPage, LessonLink
from hiveboard.memory.service import Mode

from . import card_work, charts
from .text import SYSTEM_SENDERS, for_people, markdown, plain, shorten

# left to right; a cancelled card has ended undone: it keeps its page and list_tasks finds it, the board does not
COLUMNS = tuple(s for s in STATUSES if s != "cancelled")
TITLES = {
    "todo": "To do",
    "in_progress": "In progress",
    "review": "Review",
    "done": "Done",
    "blocked": "Blocked",
    "needs_human": "Needs a human",
    "cancelled": "Cancelled",
}
SEVERITIES = ("critical", "major", "minor", "info")
OUTPUT_CHARS = 20_000  # of a card's output on its page
DECIDED = {t.action for t in TRANSITIONS if t.via == "decide"}  # a person's decisions, as its history says them
CLAIMED = next(t.action for t in TRANSITIONS if t.via == "claim_task" and t.source == "todo")  # a first claim


def h(value) -> str:
    return escape("" if value is None else str(value), quote=True)


@dataclass
class Viewer:
    """Who is looking: a person (may act unless the board is read-only), or a wall screen."""

    name: str | None
    csrf: str | None
    read_only: bool
    at: int = 0  # the newest board event before the page was rendered (live updates: what it may have missed)

    @property
    def acts(self) -> bool:
        return self.name is not None and not self.read_only


def layout(title: str, body: str, viewer: Viewer, *, active: str = "", live: dict | None = None) -> str:
    nav = "".join(
        f'<a href="{href}"{" class=on" if key == active else ""}>{label}</a>'
        for key, href, label in (
            ("board", "/board", "Board"),
            ("messages", "/messages", "Messages"),
            ("agents", "/agents", "Agents"),
            ("memory", "/memory", "Memory"),
            ("metrics", "/metrics", "Metrics"),
        )
    )
    if viewer.name:
        who = (
            f'<span class="who">{h(viewer.name)}</span><form method="post" action="/logout" class="inline">'
            f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}"><button>Log out</button></form>'
        )
    else:
        who = '<span class="who">read-only</span>' if viewer.read_only else ""
    data = f" data-live='{h(json.dumps({**live, 'at': viewer.at}))}'" if live is not None else ""
    return (
        f"{_head(title)}"
        f'<script src="/static/app.js" defer></script></head><body{data}>'
        f'<header><a class="brand" href="/board">hiveboard</a><nav>{nav}</nav><div class="me">{who}</div>'
        f'<span id="live" class="live" title="live updates">●</span></header>'
        f'<main id="main">{body}</main></body></html>'
    )


def _head(title: str) -> str:
    """A page's head up to (not including) its closing tag."""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{h(title)} · hiveboard</title><link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        f'<link rel="stylesheet" href="/static/app.css">'
    )


def login_page(error: str | None = None, next_url: str = "/board") -> str:
    problem = f'<p class="error" role="alert">{h(error)}</p>' if error else ""
    return (
        f'{_head("Log in")}</head><body class="login"><main>'
        f"<h1>hiveboard</h1><p>People log in with the token of an agent whose role is <b>human</b> or "
        f'<b>lead</b>; the operator prints one with</p><p><code class="command">hiveboard agent add YOUR-NAME '
        f"--role human</code></p>{problem}"
        f'<form method="post" action="/login"><input type="hidden" name="next" value="{h(next_url)}">'
        f'<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus>'
        f"</label><button>Log in</button></form></main></body></html>"
    )


def message_page(title: str, text: str, back: str = "/board") -> str:
    return (
        f'{_head(title)}</head><body class="login"><main><h1>{h(title)}</h1>'
        f'<p class="error" role="alert">{h(text)}</p><p><a href="{h(back)}">Back</a></p></main></body></html>'
    )


def _when(ts: float | str | None) -> str:
    if ts is None:
        return ""
    if isinstance(ts, str):
        return ts.replace("T", " ")[:16]
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


# ----------------------------------------------------------------------- the board


def card(c: CardView) -> str:
    """One card in a column (also what a live update sends)."""
    people = sorted({p for p in (c.assignee, c.reserved_for, c.created_by) if p})
    bits = [f'<span class="type">{h(c.task_type)}</span>', f'<span class="prio">{h(c.priority)}</span>']
    bits += [f'<span class="label">{h(label)}</span>' for label in c.labels]
    if c.assignee:
        bits.append(f'<span class="holder">@{h(c.assignee)}</span>')
    elif c.reserved_for:
        bits.append(f'<span class="holder">for @{h(c.reserved_for)}</span>')
    if c.status == "in_progress" and c.lease_expires_at:
        bits.append(f'<span class="lease" data-lease="{c.lease_expires_at:.0f}">lease</span>')
    if c.review_round:
        score = f" · {c.score:g}/10" if c.score is not None else ""
        state = " (reviewing)" if c.review_status in ("queued", "running") else ""
        bits.append(f'<span class="round">round {c.review_round}{score}{state}</span>')
    if c.depends_on:
        deps = " ".join(
            f'<a href="/task/{d}" class="dep {"ok" if s == "done" else "wait"}">#{d}</a>' for d, s in c.depends_on
        )
        bits.append(f'<span class="deps">needs {deps}</span>')
    if c.unverified:
        bits.append('<span class="warn">unverified</span>')
    reason = (
        f'<p class="reason">{h(shorten(plain(for_people(c.blocked_reason)), 200))}</p>'
        if c.blocked_reason and c.status in ("blocked", "needs_human")
        else ""
    )
    key = f"{c.updated_at:.6f}" if c.status == "done" else str(c.rank)
    return (
        f'<li class="card prio-{h(c.priority)}" id="card-{c.id}" data-id="{c.id}" data-status="{h(c.status)}" '
        f'data-key="{key}" data-type="{h(c.task_type)}" data-labels="{h(json.dumps(c.labels))}" '
        f'data-people="{h(json.dumps(people))}"><a class="title" href="/task/{c.id}">#{c.id} {h(c.title)}</a>'
        f'<div class="meta">{" ".join(bits)}</div>{reason}</li>'
    )


def column(page: ColumnPage, filters: dict) -> str:
    more = ""
    if page.next_after:
        query = urlencode({**{k: v for k, v in filters.items() if v}, "after": page.next_after})
        more = f'<a class="more" href="/board/column/{page.status}?{h(query)}" data-column="{page.status}">more…</a>'
    return (
        f'<section class="column" id="col-{page.status}" data-status="{page.status}">'
        f'<h2>{TITLES[page.status]} <span class="count" id="count-{page.status}">{page.count}</span></h2>'
        f'<ol class="cards">{"".join(card(c) for c in page.cards)}</ol>{more}</section>'
    )


def switcher(columns: list[ColumnPage]) -> str:
    """Every column's name and count, each a link to its column: shown where the columns do not all fit (a
    phone shows one column at a time, as Kanban apps on phones do), so every column, and above all the one
    waiting for a person, is one tap away and its count always in sight. static/app.js keeps the counts
    current and marks the column in view."""
    urgent = {c.status for c in columns if c.status == "needs_human" and c.count}  # a card waits for a person
    tabs = "".join(
        f'<a href="#col-{c.status}" data-status="{c.status}" class="tab{" urgent" if c.status in urgent else ""}">'
        f'{TITLES[c.status]} <span class="count" id="tab-count-{c.status}">{c.count}</span></a>'
        for c in columns
    )
    return f'<nav class="switcher" aria-label="columns">{tabs}</nav>'


def _select(name: str, options: list[str], chosen: str | None, blank: str) -> str:
    opts = "".join(f'<option value="{h(o)}"{" selected" if o == chosen else ""}>{h(o)}</option>' for o in options)
    return f'<select name="{name}"><option value="">{blank}</option>{opts}</select>'


def board_page(
    columns: list[ColumnPage],
    filters: dict,
    choices: tuple[list[str], list[str], list[str]],
    viewer: Viewer,
    flash: str | None = None,
) -> str:
    types, agents, labels = choices
    form = (
        f'<form class="filters" method="get" action="/board">'
        f"{_select('type', types, filters.get('type'), 'any type')}"
        f"{_select('agent', agents, filters.get('agent'), 'any agent')}"
        f"{_select('label', labels, filters.get('label'), 'any label')}<button>Filter</button>"
        + ('<a href="/board">clear</a>' if any(filters.values()) else "")
        + "</form>"
    )
    create = ""
    if viewer.acts:
        create = (
            f'<details class="create"><summary>New card</summary><form method="post" action="/tasks">'
            f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}">'
            f'<label>Title <input name="title" required maxlength="200"></label>'
            f'<label>Type <input name="task_type" value="code" required maxlength="40"></label>'
            f'<label>Priority <select name="priority"><option>low</option><option selected>medium</option>'
            f"<option>high</option><option>critical</option></select></label>"
            f'<label>Labels <input name="labels" placeholder="comma,separated"></label>'
            f"<label>Assign to {_select('assignee', agents, None, 'anyone')}</label>"
            f'<label class="wide">Description <textarea name="description" rows="3"></textarea></label>'
            f'<label class="wide">Acceptance criteria, one per line <textarea name="criteria" rows="2">'
            f"</textarea></label><button>Create</button></form></details>"
        )
    note = f'<p class="flash" role="status">{h(flash)}</p>' if flash else ""
    body = (
        f'<div class="bar">{form}{create}</div>{note}{switcher(columns)}<div class="board" id="board">'
        + "".join(column(c, filters) for c in columns)
        + "</div>"
    )
    return layout(
        "Board",
        body,
        viewer,
        active="board",
        live={"page": "board", "filters": {k: v for k, v in filters.items() if v}},
    )


# ----------------------------------------------------------------------- a card


def _issues(issues, cls: str = "issues") -> str:
    if not issues:
        return ""
    rows = "".join(
        f'<li class="sev-{h(i.severity)}"><b>{h(i.severity)}</b> {h(i.category)}'
        f"{' at ' + h(i.location) if i.location else ''}: {markdown(i.description, 'finding')}"
        f"{'<br><i>fix: ' + h(i.suggestion) + '</i>' if i.suggestion else ''}</li>"
        for i in issues
    )
    return f'<ul class="{cls}">{rows}</ul>'


def trail_html(trail: ReviewTrail, empty: str = "not reviewed yet") -> str:
    """A card's review rounds, newest first; `empty` says what stands in for them when there are none."""
    if not trail.rounds:
        return f'<p class="empty">{h(empty)}</p>'
    scores = [s for s in trail.scores if s is not None]
    chart = charts.line(scores, label="score by round") if len(scores) >= 1 else ""
    out = [f'<div class="scores">{chart}</div>' if chart else ""]
    for r in reversed(trail.rounds):
        head = f"Round {r.round}: {h(r.verdict or r.status)}" + (f" → {h(r.outcome)}" if r.outcome else "")
        if r.synthesis is not None and r.synthesis.score is not None:
            head += f" · score {r.synthesis.score:g}/10"
        critics = []
        for c in r.critiques:
            counts = {s: sum(i.severity == s for i in c.issues) for s in SEVERITIES}
            tally = " ".join(f'<span class="sev-{s}">{n} {s}</span>' for s, n in counts.items() if n)
            critics.append(
                f'<tr><td>{h(c.critic)}</td><td>{h(c.lens)}</td><td class="st-{h(c.status)}">{h(c.status)}</td>'
                f"<td>{h(c.verdict or '')}</td><td>{h(c.score if c.score is not None else '')}</td><td>{tally}"
                f"{markdown(c.summary)}"
                f"{'<p class=err>' + h(c.error) + '</p>' if c.error else ''}"
                f"{_issues(c.issues)}</td></tr>"
            )
        table = (
            (
                '<table class="critics"><tr><th>critic</th><th>lens</th><th>status</th><th>verdict</th>'
                f"<th>score</th><th>findings</th></tr>{''.join(critics)}</table>"
            )
            if critics
            else ""
        )
        synthesis = ""
        if r.synthesis is not None:
            s = r.synthesis
            synthesis = (
                f'<div class="synthesis"><h4>Synthesis ({h(s.synthesiser)})</h4>'
                f"{'<p class=note>' + h(s.note) + '</p>' if s.note else ''}"
                f"{_issues(s.issues, 'issues ranked')}"
                f"{'<h4>Brief</h4>' + markdown(for_people(s.brief), 'brief') if s.brief else ''}</div>"
            )
        out.append(
            f'<details class="round" {"open" if r is trail.rounds[-1] else ""}><summary>{head}</summary>'
            f"{table}{synthesis}</details>"
        )
    return "".join(out)


def _lessons(items: list[LessonLink], empty: str) -> str:
    if not items:
        return f'<p class="empty">{empty}</p>'
    return (
        "<ul>"
        + "".join(
            f'<li><a href="/memory/{i.id}">{h(i.title or shorten(plain(i.text), 80))}</a>'
            f"{' <span class=ok>marked helpful</span>' if i.useful else ''}"
            f"<p>{h(shorten(plain(i.text), 300))}</p></li>"
            for i in items
        )
        + "</ul>"
    )


def _message(m: Message) -> str:
    # the board's own posts are written for agents; an agent's words are its own
    said = for_people if m.sender in SYSTEM_SENDERS else str
    return (
        f'<li id="msg-{m.id}"><div class="mhead"><b>{h(m.sender)}</b> <span class="intent">{h(m.intent)}</span>'
        f"{' → ' + h(m.recipient) if m.recipient else ''} <time>{h(_when(m.created_at))}</time>"
        f"{' <a href=/task/' + str(m.task_id) + '>#' + str(m.task_id) + '</a>' if m.task_id else ''}</div>"
        + (f'<div class="summary">{h(said(m.summary))}</div>' if m.summary else "")
        + markdown(said(m.content), "content")
        + "</li>"
    )


def thread_html(messages: list[Message]) -> str:
    if not messages:
        return '<p class="empty">no messages yet</p>'
    return '<ol class="thread">' + "".join(_message(m) for m in messages) + "</ol>"


def _decide_form(task: Task, agents: list[str], viewer: Viewer, approval: Approval, answers: list[Answer]) -> str:
    """What a person can do with a card that waits for one: each answer it offers a button (board/decisions.py
    ANSWERS). Pass asks for a confirmation naming what it approves: a dialog (static/app.js adds the confirmed
    `confirm` field), or without script the confirmation page the board answers a pass without one with
    (`confirm_page`)."""
    author = task.assignee or task.created_by
    options = "".join(f'<option value="{h(a)}">{h(a)}</option>' for a in agents)
    read = ' (<a href="#files">read the files</a>)' if approval.files else ""
    names = [a.name for a in answers]
    buttons = []
    for a in answers:
        if a.name == "pass":
            buttons.append(
                f'<p class="approves wide">Pass approves {h(approval.text)}{read}.</p>'
                f'<button name="decision" value="pass" title="{h(a.does)}" '
                f'data-confirm="Pass {h(approval.text)}? The card moves to Done." data-key="{h(approval.key)}">'
                f"{h(a.label)}</button>"
            )
        elif a.name == "send_back":
            buttons.append(
                f'<button name="decision" value="send_back" title="{h(a.does)}">Send back to {h(author)}</button>'
            )
        elif a.name == "reassign":
            buttons.append(
                f'<label>or reassign to <select name="assign_to"><option value="">…</option>{options}</select></label>'
                + (
                    '<label title="without more rounds, the next failed review round comes straight back to a '
                    'person">with <input type="number" name="rounds" min="0" max="20" value="0" size="3"> more '
                    "review rounds</label>"
                    if "send_back" in names
                    else ""
                )
                + f'<button name="decision" value="reassign" title="{h(a.does)}">{h(a.label)}</button>'
            )
        else:
            buttons.append(f'<button name="decision" value="{h(a.name)}" title="{h(a.does)}">{h(a.label)}</button>')
    return (
        f'<form class="decide" method="post" action="/task/{task.id}/decide">'
        f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}">'
        f'<label class="wide">Note (what to change, or why; needed for all but a pass) '
        f'<textarea name="note" rows="3"></textarea></label>' + "".join(buttons) + "</form>"
    )


def confirm_page(approval: Approval, note: str, viewer: Viewer) -> str:
    """The confirmation of a pass, for a browser without script: what it approves, and a second form whose
    `confirm` field names that hand-in (a pass confirmed for earlier work is refused)."""
    task_id = approval.task_id
    files = "".join(f"<li><code>{h(name)}</code></li>" for name in approval.files)
    said = f"<p>Your note: </p>{markdown(note, 'desc')}" if note.strip() else ""
    body = (
        f"<h1>Pass {h(approval.text)}?</h1>"
        f"<p>The card moves to Done with this work approved by you.</p>"
        + (f'<ul class="files">{files}</ul>' if files else "")
        + said
        + f'<form class="decide confirm" method="post" action="/task/{task_id}/decide">'
        f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}">'
        f'<input type="hidden" name="decision" value="pass"><input type="hidden" name="note" value="{h(note)}">'
        f'<input type="hidden" name="confirm" value="{h(approval.key)}">'
        f'<button>Yes, pass {h(approval.text)}</button> <a href="/task/{task_id}">No, back to the card</a></form>'
    )
    return layout(f"Pass #{task_id}?", body, viewer)


def _edit_form(task: Task, viewer: Viewer) -> str:
    """A person re-scopes a card: its title, labels, description, its priority unless an agent holds it, and
    its acceptance criteria until it is first claimed (frozen after that, so not offered)."""
    claimed = any(e.action == CLAIMED for e in task.history)
    held = task.assignee is not None and task.status in ("in_progress", "blocked")  # its priority is the holder's
    prios = "".join(
        f"<option{' selected' if p == task.priority else ''}>{p}</option>"
        for p in ("low", "medium", "high", "critical")
    )
    priority = "" if held else f'<label>Priority <select name="priority">{prios}</select></label>'
    criteria = (
        ""
        if claimed
        else f'<label class="wide">Acceptance criteria, one per line <textarea name="criteria" rows="2">'
        f"{h(chr(10).join(task.acceptance_criteria))}</textarea></label>"
    )
    return (
        f'<details class="edit"><summary>Edit card</summary><form method="post" action="/task/{task.id}/edit">'
        f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}">'
        f'<input type="hidden" name="version" value="{task.version}">'
        f'<label>Title <input name="title" value="{h(task.title)}" required maxlength="200"></label>{priority}'
        f'<label>Labels <input name="labels" value="{h(", ".join(task.labels))}" placeholder="comma,separated">'
        f"</label>"
        f'<label class="wide">Description (markdown) <textarea name="description" rows="4">'
        f"{h(task.description)}</textarea></label>{criteria}<button>Save</button></form></details>"
    )


def _unreviewed(task: Task) -> str:
    """What the Review section says of a card no review round ran on: a person's decision if one was made."""
    decided = next((e for e in reversed(task.history) if e.action in DECIDED), None)
    if decided is not None:
        return f"no critic reviewed it; {decided.action} ({decided.actor}, {_when(decided.at)})" + (
            f": {decided.note}" if decided.note else ""
        )
    return "done without a review" if task.status == "done" else "not reviewed yet"


def usd(cost: float) -> str:
    """An estimated cost: cents above a dollar, hundredths of a cent below."""
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


TOKEN_COLUMNS = "<th>input</th><th>output</th><th>cache write</th><th>cache read</th><th>estimated cost</th>"


def _token_cells(u: TokenUse) -> str:
    return (
        f"<td>{u.input:,}</td><td>{u.output:,}</td><td>{u.cache_creation:,}</td><td>{u.cache_read:,}</td>"
        f"<td>{usd(u.cost_usd)}{f' + {u.unpriced:,} unpriced tokens' if u.unpriced else ''}</td>"
    )


def tokens_html(use: CardUsage | None) -> str:
    """A card's tokens as its agents' sessions recorded them (hiveboard hook), their estimated cost, its budget."""
    if use is None:
        return ""
    parts = [f'<h3>Tokens</h3><table class="tokens"><tr>{TOKEN_COLUMNS}</tr><tr>{_token_cells(use)}</tr></table>']
    if use.budget_tokens is not None:
        over = " — over budget" if use.tokens >= use.budget_tokens else ""
        parts.append(f'<p class="budget">Budget: {use.tokens:,} of {use.budget_tokens:,} tokens used{over}</p>')
    if use.unpriced:
        parts.append('<p class="note">Tokens of models without a price are not in the estimated cost.</p>')
    return "".join(parts)


def task_page(
    task: Task,
    trail: ReviewTrail,
    thread: list[Message],
    lessons: tuple[list, list],
    agents: list[str],
    viewer: Viewer,
    flash: str | None = None,
    tokens: CardUsage | None = None,
    hand_ins: list[HandIn] | None = None,
    tests: AcceptanceTests | None = None,
    approval: Approval | None = None,
    commits: list[Commit] | None = None,
    answers: list[Answer] | None = None,
    canary: bool = False,
) -> str:
    """A card's page: the decision block on top (`decision_block`), the card's description, then everything
    an engineer reads in folds (`fold`). `hand_ins`: its latest two (the work and the one before it);
    `tests`: its acceptance tests as this viewer may read them (hidden ones for a person); `approval`: what
    a pass approves, for a person who may decide it; `commits`: the commits it was handed in as, oldest
    first."""
    produced, handed = lessons
    meta = [
        f'<span class="status st-{h(task.status)}">{h(TITLES.get(task.status, task.status))}</span>',
        f'<span class="type">{h(task.task_type)}</span>',
        f'<span class="prio">{h(task.priority)}</span>',
        *(f'<span class="label">{h(label)}</span>' for label in task.labels),
        f"created by {h(task.created_by)} {h(_when(task.created_at))}",
    ]
    if task.assignee:
        meta.append(f"held by @{h(task.assignee)}")
    if task.reserved_for:
        meta.append(f"reserved for @{h(task.reserved_for)}")
    if task.lease_expires_at and task.status == "in_progress":
        lease = datetime.fromisoformat(task.lease_expires_at).timestamp()
        meta.append(f'<span class="lease" data-lease="{lease:.0f}">lease</span>')
    if task.depends_on:
        meta.append("needs " + " ".join(f'<a href="/task/{d}">#{d}</a>' for d in task.depends_on))
    parts = [f'<h1>#{task.id} {h(task.title)}</h1><div class="meta">{" ".join(meta)}</div>']
    if flash:
        parts.append(f'<p class="flash" role="status">{h(flash)}</p>')
    waiting = task.status == "needs_human" and viewer.acts and approval is not None
    actions = []
    if canary:  # only a logged-in person is told (board/canaries.py)
        actions.append(
            '<p class="reason canary"><b>Canary card:</b> its hidden tests contradict its criteria; work that passes '
            "review gamed it, a flag is the honest answer. Its agents are not told.</p>"
        )
    if waiting:
        actions.append(_decide_form(task, agents, viewer, approval, answers or []))
    parts.append(decision_block(task, trail, actions))
    if task.description:
        parts.append(f"<h3>Description</h3>{markdown(task.description, 'desc')}")
    if task.acceptance_criteria:
        parts.append(
            "<h3>Acceptance criteria</h3><ul>" + "".join(f"<li>{h(c)}</li>" for c in task.acceptance_criteria) + "</ul>"
        )
    if viewer.acts and task.status not in ("done", "review"):
        parts.append(_edit_form(task, viewer))
    # the rest is what an engineer reads: folded, each fold saying what it holds
    files = len(hand_ins[0].artifacts) if hand_ins else 0
    work = "".join(
        (
            (
                f"<h3>Output</h3>{'<p>' + h(task.summary) + '</p>' if task.summary else ''}"
                f"{markdown(shorten(task.output, OUTPUT_CHARS), 'output')}"
            )
            if task.summary or task.output
            else "",
            card_work.files_section(hand_ins or []),
            card_work.test_output(trail),
            card_work.commit_section(commits or []),
        )
    )
    ran = card_work.tests_said(trail.rounds[-1]) if trail.rounds else ""
    said = [
        _many(files, "file") if files else "",
        "a commit" if commits else "",
        f"tests {ran}" if ran else "",
    ]
    parts.append(fold("work", "The work", ", ".join(x for x in said if x) or "its output", work))
    tested = card_work.acceptance_tests(tests, task.hidden_tests if tests is None else 0)
    count = (
        ", ".join(_many(n, noun) for n, noun in ((len(tests.files), "file"), (len(tests.commands), "command")) if n)
        if tests is not None
        else f"{task.hidden_tests} hidden"
    )
    parts.append(fold("acceptance", "Acceptance tests", count, tested))
    rounds = len(trail.rounds)
    parts.append(
        fold(
            "review",
            "Review",
            _many(rounds, "round") if rounds else "none",
            trail_html(trail, _unreviewed(task)),
        )
    )
    parts.append(
        fold(
            "lessons",
            "Lessons",
            f"{len(produced)} produced, {len(handed)} handed to its agents",
            f'<div class="cols2"><div><h4>Lessons it produced</h4>{_lessons(produced, "none")}</div>'
            f"<div><h4>Lessons handed to its agents</h4>{_lessons(handed, 'none')}</div></div>",
        )
    )
    post = ""
    if viewer.acts:
        post = (
            f'<form method="post" action="/task/{task.id}/message" class="post">'
            f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}">'
            f'<label class="wide">Message to the card\'s thread <textarea name="content" rows="2" required>'
            f'</textarea></label><label>Intent <input name="intent" value="comment" maxlength="40"></label>'
            f"<button>Post</button></form>"
        )
    parts.append(fold("thread", "Thread", _many(len(thread), "message"), thread_html(thread) + post))
    history = "".join(
        f"<tr><td>{h(_when(e.at))}</td><td>{h(e.actor)}</td><td>{h(e.action)}</td>"
        f"<td>{h(e.from_status or '')} → {h(e.to_status or '')}</td>"
        f"<td>{markdown(for_people(e.note) if e.actor in SYSTEM_SENDERS else e.note, 'note')}</td></tr>"
        for e in reversed(task.history)
    )
    parts.append(
        fold(
            "history",
            "History",
            _many(len(task.history), "move"),
            '<table class="history"><tr><th>when</th><th>who</th><th>what</th><th>move</th>'
            f"<th>note</th></tr>{history}</table>",
        )
    )
    parts.append(
        fold(
            "usage",
            "Tokens and path reservations",
            "",
            tokens_html(tokens) + card_work.reservations_section(task),
        )
    )
    return layout(f"#{task.id} {task.title}", "".join(parts), viewer, live={"page": "task", "task": task.id})


def _many(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fold(key: str, title: str, note: str, body: str) -> str:
    """A folded part of a card's page (closed until a person opens it; a live update keeps it as they left
    it, by its id); "" when it holds nothing."""
    if not body.strip():
        return ""
    said = f' <span class="fold-note">{h(note)}</span>' if note else ""
    return (
        f'<details class="fold" id="fold-{key}"><summary><span class="fold-title">{h(title)}</span>{said}</summary>'
        f"{body}</details>"
    )


def verdict_line(task: Task, trail: ReviewTrail) -> str:
    """The review's word on the card in one line: its latest round's verdict, outcome and score, and how its
    acceptance tests ended; or why no round ran."""
    if not trail.rounds:
        return f"Review: {h(_unreviewed(task))}"
    last = trail.rounds[-1]
    said = f"Review round {last.round}: {h(last.verdict or last.status)}"
    if last.outcome:
        said += f" → {h(TITLES.get(last.outcome, last.outcome).lower())}"
    if last.synthesis is not None and last.synthesis.score is not None:
        said += f" · score {last.synthesis.score:g}/10"
    tests = card_work.tests_said(last)
    if tests:
        said += f" · tests {h(tests)}"
    if len(trail.rounds) > 1:
        said += f" ({len(trail.rounds)} rounds)"
    return said + ' · <a href="#fold-review">the critiques</a>'


def decision_block(task: Task, trail: ReviewTrail, actions: list[str]) -> str:
    """The top of a card's page: what a person came to decide. Why the card waits (when it does), the
    review's verdict in one line, and the person's choices (`actions`: the decide form, and whatever else asks
    a person something about this card). One block, above everything an engineer reads."""
    waits = task.status in ("blocked", "needs_human") and task.blocked_reason  # a card that moved on waits no more
    heading = {"needs_human": "A person decides", "blocked": "Blocked"}.get(task.status, "Where it stands")
    parts = [f'<h2 id="decision-head">{heading}</h2>']
    if waits:
        parts.append(f'<div class="reason"><b>Why it waits:</b>{markdown(for_people(task.blocked_reason))}</div>')
    parts.append(f'<p class="verdict">{verdict_line(task, trail)}</p>')
    parts += [a for a in actions if a]
    return (
        f'<section class="decision{" waits" if task.status == "needs_human" else ""}" id="decision" '
        f'aria-labelledby="decision-head">{"".join(parts)}</section>'
    )


# ----------------------------------------------------------------------- messages, agents, memory


def messages_page(messages: list[Message], filters: dict, older: int | None, viewer: Viewer) -> str:
    form = (
        f'<form class="filters" method="get" action="/messages"><input name="task" placeholder="task id" '
        f'value="{h(filters.get("task") or "")}" size="8"><input name="intent" placeholder="intent" '
        f'value="{h(filters.get("intent") or "")}" size="12"><button>Filter</button></form>'
    )
    more = ""
    if older:
        query = urlencode({**{k: v for k, v in filters.items() if v}, "before": older})
        more = f'<a class="more" href="/messages?{h(query)}">older…</a>'
    body = (
        f'<h1>Messages</h1><p class="hint">The shared pool and task threads, newest first. Direct '
        f"messages between agents are theirs alone and never shown here.</p>{form}"
        f'<div id="pool">{thread_html(messages)}</div>{more}'
    )
    return layout("Messages", body, viewer, active="messages", live={"page": "messages"})


def ago(seconds: float) -> str:
    """A time in the past, the way people say it ("5 min ago"); static/app.js says it the same way."""
    s = max(0, int(seconds))
    if s < 60:
        return "just now"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 2 * 86400:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"


def presence_of(a: AgentView, window: float, now_ts: float) -> tuple[bool, str]:
    """(present, what to say): waiting for messages, online (seen within `window` seconds: an agent's call,
    a person's open page), or when it was last seen."""
    if a.waiting_until is not None and a.waiting_until >= now_ts:
        return True, "waiting for messages"
    if a.last_seen_at is None:
        return False, "never seen"
    if now_ts - a.last_seen_at <= window:
        return True, "online"
    return False, f"last seen {ago(now_ts - a.last_seen_at)}"


def _session(session: str | None) -> str:
    """The client session an agent is (a Claude Code session's id, whole in the title), or a dash."""
    if not session:
        return "—"
    return f'<span class="session" title="{h(session)}">{h(shorten(session, 13))}</span>'


def _honesty_cell(a: AgentHonesty | None) -> str:
    """An agent's canaries: seen, flagged, failed honestly, gamed, each with the cards and reviews behind it."""
    if a is None or not (a.canaries_seen or a.flags or a.caught):
        return "<td>—</td>"
    evidence = h("; ".join(a.evidence))
    cards = " ".join(f'<a href="/task/{n}">#{n}</a>' for n in dict.fromkeys(int(e.split()[1]) for e in a.evidence))
    gamed = f'<b class="gamed">{a.gamed} gamed</b>' if a.gamed else "0 gamed"
    return (
        f'<td class="honesty" title="{evidence}">{a.canaries_seen} seen, {a.flagged} flagged, '
        f"{a.failed_honestly} failed honestly, {gamed}; {a.flags} flags, {a.caught} rounds caught gaming {cards}</td>"
    )


def agents_page(
    agents: list[AgentView],
    presence: float,
    now_ts: float,
    viewer: Viewer,
    honesty: list[AgentHonesty] | None = None,
) -> str:
    """The agents and people; `honesty`: each agent's canary cards and flags, for a logged-in person only."""
    by_agent = {a.agent: a for a in honesty or []}
    rows = []
    for a in agents:
        present, said = presence_of(a, presence, now_ts)
        holding = " ".join(f'<a href="/task/{i}" title="{h(t)}">#{i}</a>' for i, t in a.holding) or "—"
        rate = f"{a.first_pass_rate:.0%} of {a.first_rounds}" if a.first_pass_rate is not None else "—"
        # the page's clock keeps the presence current between reloads (static/app.js)
        clock = (
            f' data-seen="{a.last_seen_at or 0:.0f}" data-waiting="{a.waiting_until or 0:.0f}" '
            f'data-window="{presence:.0f}" title="{h(_when(a.last_seen_at) + " UTC" if a.last_seen_at else "")}"'
        )
        person = a.role in OPERATOR_ROLES
        rows.append(
            f'<tr class="{"present" if present else "away"}"><td><span class="dot"></span>{h(a.name)}</td>'
            f'<td>{h(a.role or "")}{" (a person)" if person else ""}</td><td class="presence"{clock}>{said}</td>'
            f"<td>{holding}</td><td>{rate}</td><td>{_session(a.client_session)}</td>"
            + (_honesty_cell(by_agent.get(a.name)) if honesty is not None else "")
            + "</tr>"
        )
    head = "<th>canaries</th>" if honesty is not None else ""
    body = (
        '<h1>Agents and people</h1><table class="agents"><tr><th>name</th><th>role</th><th>presence</th>'
        f"<th>holds</th><th>first-pass rate</th><th>session</th>{head}</tr>{''.join(rows)}</table>"
    )
    return layout("Agents", body, viewer, active="agents", live={"page": "agents"})


def _snippet(hit) -> str:
    """A search hit's text: the memory cuts it at a character count (its `cut` says so), so it is cut
    again here before the word it broke."""
    if not hit.cut:
        return hit.snippet
    return shorten(hit.snippet.removesuffix("…"), len(hit.snippet) - 2)


def _recent(counts: dict[str, int], items: list) -> str:
    """The newest items of each kind, before any search: the page is never blank while the memory holds items."""
    if not counts:
        return '<p class="empty">the memory is empty: lessons, critiques and notes appear here as agents work</p>'
    sections = []
    for kind in sorted(counts, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS)):
        mine = [x for x in items if x.kind == kind]
        entries = "".join(
            f'<li><a href="/memory/{x.id}">{h(x.title or shorten(plain(x.text), 80))}</a>'
            f"{' <span class=type>' + h(x.task_type) + '</span>' if x.task_type else ''}"
            f' <span class="score">{h(_when(x.created_at))}</span><p>{h(shorten(plain(x.text), 200))}</p></li>'
            for x in mine
        )
        more = counts[kind] - len(mine)
        rest = f'<p class="empty">{more} older: search to find them</p>' if more > 0 else ""
        sections.append(
            f'<section class="recent"><h2>{h(kind)} <span class="count">{counts[kind]}</span></h2>'
            f'<ul class="hits">{entries}</ul>{rest}</section>'
        )
    return "<p>The newest items of each kind; search to find the rest.</p>" + "".join(sections)


def memory_page(query: dict, results, note: str | None, viewer: Viewer, recent: tuple | None = None, held=()) -> str:
    mode = query.get("mode") or "hybrid"
    kinds = ("", *KINDS)
    form = (
        f'<form class="filters" method="get" action="/memory"><input name="q" value="{h(query.get("q") or "")}" '
        f'placeholder="search team memory" size="40" maxlength="2000">'
        f'<select name="mode">'
        + "".join(f"<option{' selected' if m == mode else ''}>{m}</option>" for m in get_args(Mode))
        + "</select>"
        '<select name="kind">'
        + "".join(
            f'<option value="{k}"{" selected" if k == (query.get("kind") or "") else ""}>{k or "any kind"}</option>'
            for k in kinds
        )
        + "</select>"
        f'<input name="task_type" placeholder="task type" value="{h(query.get("task_type") or "")}" size="10">'
        f'<input name="tags" placeholder="tags, comma separated" value="{h(query.get("tags") or "")}" size="16">'
        f"<button>Search</button></form>"
    )
    listing = ""
    if results is not None:
        hits = "".join(
            f'<li><a href="/memory/{x.id}">{h(x.title or shorten(plain(x.snippet), 80))}</a> <span class="type">'
            f"{h(x.kind)}</span>{' <span class=type>' + h(x.task_type) + '</span>' if x.task_type else ''}"
            f' <span class="label">by {h(x.created_by)}, {h(x.trust)}</span>'
            f' <span class="score">{x.score:.3f} ({"+".join(x.matched)})</span><p>{h(plain(_snippet(x)))}</p></li>'
            for x in results.hits
        )
        listing = f'<ol class="hits">{hits}</ol>' if hits else '<p class="empty">nothing found</p>'
    if recent is not None:
        listing = _recent(*recent)
    problem = f'<p class="flash">{h(note)}</p>' if note else ""
    # held items are in no search: this list is where a person finds them, to release or leave them
    quarantine = ""
    if held:
        rows = "".join(
            f'<li><a href="/memory/{x.id}">{h(x.title or shorten(plain(x.text), 80))}</a>'
            f' <span class="type">{h(x.kind)}'
            f'</span> <span class="label">by {h(x.created_by)}</span> <span class="flash">held: {h(x.held)}</span>'
            f"<p>{h(shorten(plain(x.text), 300))}</p></li>"
            for x in held
        )
        quarantine = (
            f"<h2>Held for a person</h2><p>Shaped like an instruction to fetch, run or hide something: handed to no "
            f"agent. An operator releases a false alarm with hiveboard memory confirm ID --release-held.</p>"
            f'<ol class="hits held">{rows}</ol>'
        )
    return layout("Memory", f"<h1>Memory</h1>{form}{problem}{listing}{quarantine}", viewer, active="memory")


def memory_item_page(item, viewer: Viewer) -> str:
    meta = " ".join(
        x
        for x in (
            f'<span class="type">{h(item.kind)}</span>',
            f'<span class="type">{h(item.task_type)}</span>' if item.task_type else "",
            f'<a href="/task/{item.task_id}">#{item.task_id}</a>' if item.task_id else "",
            *(f'<span class="label">{h(t)}</span>' for t in item.tags),
            f"by {h(item.created_by)} {h(_when(item.created_at))}, {h(item.trust)}",
            f"review {item.review_id}" if item.review_id else "",
            f'<span class="flash">held for a person: {h(item.held)}</span>' if item.held else "",
            f"recorded {item.merged_count}×" if item.merged_count > 1 else "",
            "deprecated" if item.deprecated else "",
        )
        if x
    )
    body = (
        f'<h1>{h(item.title or f"memory item {item.id}")}</h1><div class="meta">{meta}</div>'
        f"{markdown(item.text, 'desc')}"
    )
    return layout(f"memory {item.id}", body, viewer, active="memory")


# ----------------------------------------------------------------------- metrics


def _spend(title: str, uses: list[TokenUse], link: bool = False) -> str:
    rows = "".join(
        "<tr><td>"
        + (f'<a href="/task/{h(u.key[1:])}">{h(u.key)}</a>' if link and u.key.startswith("#") else h(u.key))
        + f"</td>{_token_cells(u)}</tr>"
        for u in uses
    )
    return f'<h3>{h(title)}</h3><table class="tokens"><tr><th></th>{TOKEN_COLUMNS}</tr>{rows}</table>'


def tokens_section(tokens: TokenStats | None) -> str:
    """Tokens and their estimated cost per agent, task type and card (the largest spenders of each)."""
    if tokens is None:
        return (
            "<h2>Tokens</h2><p>None recorded yet: the Claude Code hooks record them "
            "(<code>hiveboard setup claude-code</code>).</p>"
        )
    total = tokens.total
    all_tokens = total.input + total.output + total.cache_creation + total.cache_read
    body = (
        f'<h2>Tokens</h2><div class="figures"><div class="figure"><b>{all_tokens:,}</b><span>tokens recorded</span>'
        f'</div><div class="figure"><b>{usd(total.cost_usd)}</b><span>estimated cost</span></div></div>'
        + _spend("By agent", tokens.by_agent)
        + _spend("By task type", tokens.by_task_type)
        + _spend("By card", tokens.by_card, link=True)
    )
    if tokens.unpriced_models:
        body += (
            '<p class="note">No price for ' + ", ".join(h(m) for m in tokens.unpriced_models) + ": their tokens are "
            "not in the estimated cost (add them to the <code>prices</code> setting).</p>"
        )
    return body


def metrics_page(stats: BoardStats, rounds: dict[int, int], viewer: Viewer, tokens: TokenStats | None = None) -> str:
    def figure(label: str, value, unit: str = "") -> str:
        shown = "—" if value is None else (f"{value:.0%}" if unit == "%" else f"{value:g}{unit}")
        return f'<div class="figure"><b>{shown}</b><span>{h(label)}</span></div>'

    figures = "".join(
        (
            figure("first-pass rate", stats.first_pass_pass_rate, "%"),
            figure("rounds per card", stats.rounds_per_card),
            figure("review latency p50", stats.review_latency_p50, " s"),
            figure("review latency p95", stats.review_latency_p95, " s"),
            figure("memory reuse rate", stats.memory_reuse_rate, "%"),
            figure("messages per task", stats.messages_per_task),
            figure("critique success rate", stats.critique_success_rate, "%"),
            figure("cards reviewed", stats.cards_reviewed),
            figure("memory items waiting for the vector index", stats.memory_pending),
        )
    )
    by_day = charts.chart(
        "First-pass rate by day",
        [(d.day[5:], d.rate) for d in stats.first_pass_by_day],
        x="day",
        y="cards passing round 1",
        unit="%",
        top=1,
    )
    per_round = charts.chart(
        "Rounds per card",
        [(str(n), float(c)) for n, c in sorted(rounds.items())],
        x="review rounds to finish",
        y="cards",
        whole=True,
    )
    scores = charts.chart(
        "Mean score by round",
        [(str(n), s) for n, s in enumerate(stats.score_by_round, 1)],
        x="review round",
        y="mean score (0–10)",
        kind="line",
        top=10,
    )
    critics = charts.chart(
        "Per-critic contribution",
        [(f"{c.critic}/{c.lens}", c.contribution_rate) for c in stats.critics],
        x="critic/lens",
        y="rounds its blocking input decided",
        unit="%",
        top=1,
        horizontal=True,
    )
    reuse = charts.chart(
        "Memory reuse",
        [("handed at claim", float(stats.memory_surfaced)), ("marked helpful", float(stats.memory_useful))],
        x="",
        y="memory items",
        horizontal=True,
        whole=True,
    )
    body = (
        f'<h1>Metrics</h1><div class="figures">{figures}</div>'
        f'<div class="charts">{by_day}{per_round}{scores}{critics}{reuse}</div>{tokens_section(tokens)}'
        f"{charts.SCRIPTS}"
    )
    return layout("Metrics", body, viewer, active="metrics", live={"page": "metrics"})
