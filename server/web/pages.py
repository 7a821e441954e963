"""The web board's HTML, rendered on the server from the board's read models.

Every value that came from an agent is escaped (`h`): titles, notes, messages and critiques are
hostile text. Pages carry no inline script; `static/app.js` reads what it needs from data attributes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import get_args
from urllib.parse import urlencode

from hiveboard.board import STATUSES, Task
from hiveboard.board.knowledge import KINDS
from hiveboard.board.messages import Message
from hiveboard.board.review_models import BoardStats, ReviewTrail
from hiveboard.board.views import AgentView, CardView, ColumnPage, LessonLink
from hiveboard.memory.service import Mode

from . import charts

COLUMNS = STATUSES  # left to right
TITLES = {
    "todo": "To do",
    "in_progress": "In progress",
    "review": "Review",
    "done": "Done",
    "blocked": "Blocked",
    "needs_human": "Needs a human",
}
SEVERITIES = ("critical", "major", "minor", "info")


def h(value) -> str:
    return escape("" if value is None else str(value), quote=True)


@dataclass
class Viewer:
    """Who is looking: a person (may act unless the board is read-only), or a wall screen."""

    name: str | None
    csrf: str | None
    read_only: bool

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
    data = f" data-live='{h(json.dumps(live))}'" if live is not None else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{h(title)} · hiveboard</title><link rel="stylesheet" href="/static/app.css">'
        f'<script src="/static/app.js" defer></script></head><body{data}>'
        f'<header><a class="brand" href="/board">hiveboard</a><nav>{nav}</nav><div class="me">{who}</div>'
        f'<span id="live" class="live" title="live updates">●</span></header>'
        f'<main id="main">{body}</main></body></html>'
    )


def login_page(error: str | None = None, next_url: str = "/board") -> str:
    problem = f'<p class="error" role="alert">{h(error)}</p>' if error else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Log in · hiveboard</title>'
        f'<link rel="stylesheet" href="/static/app.css"></head><body class="login"><main>'
        f"<h1>hiveboard</h1><p>People log in with the token of an agent whose role is <b>human</b> or "
        f"<b>lead</b>: <code>hiveboard agent add YOUR-NAME --role human</code> prints one.</p>{problem}"
        f'<form method="post" action="/login"><input type="hidden" name="next" value="{h(next_url)}">'
        f'<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus>'
        f"</label><button>Log in</button></form></main></body></html>"
    )


def message_page(title: str, text: str, back: str = "/board") -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{h(title)} · hiveboard</title>'
        f'<link rel="stylesheet" href="/static/app.css"></head><body class="login"><main><h1>{h(title)}</h1>'
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
        f'<p class="reason">{h(c.blocked_reason[:200])}</p>'
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
        f'<div class="bar">{form}{create}</div>{note}<div class="board">'
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
        f"{' at ' + h(i.location) if i.location else ''}: {h(i.description)}"
        f"{'<br><i>fix: ' + h(i.suggestion) + '</i>' if i.suggestion else ''}</li>"
        for i in issues
    )
    return f'<ul class="{cls}">{rows}</ul>'


def trail_html(trail: ReviewTrail) -> str:
    if not trail.rounds:
        return '<p class="empty">not reviewed yet</p>'
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
                f"{'<p>' + h(c.summary) + '</p>' if c.summary else ''}"
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
                f"{'<h4>Brief</h4><pre>' + h(s.brief) + '</pre>' if s.brief else ''}</div>"
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
            f'<li><a href="/memory/{i.id}">{h(i.title or i.text[:80])}</a>'
            f"{' <span class=ok>marked helpful</span>' if i.useful else ''}"
            f"<p>{h(i.text[:300])}</p></li>"
            for i in items
        )
        + "</ul>"
    )


def thread_html(messages: list[Message]) -> str:
    if not messages:
        return '<p class="empty">no messages yet</p>'
    return (
        '<ol class="thread">'
        + "".join(
            f'<li id="msg-{m.id}"><div class="mhead"><b>{h(m.sender)}</b> <span class="intent">{h(m.intent)}</span>'
            f"{' → ' + h(m.recipient) if m.recipient else ''} <time>{h(_when(m.created_at))}</time>"
            f"{' <a href=/task/' + str(m.task_id) + '>#' + str(m.task_id) + '</a>' if m.task_id else ''}</div>"
            + (f'<div class="summary">{h(m.summary)}</div>' if m.summary else "")
            + (f'<pre class="content">{h(m.content)}</pre>' if m.content.strip() else "")
            + "</li>"
            for m in messages
        )
        + "</ol>"
    )


def task_page(
    task: Task,
    trail: ReviewTrail,
    thread: list[Message],
    lessons: tuple[list, list],
    agents: list[str],
    viewer: Viewer,
    flash: str | None = None,
) -> str:
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
    if task.blocked_reason:
        parts.append(f'<div class="reason"><b>Why it waits:</b><pre>{h(task.blocked_reason)}</pre></div>')
    if task.status == "needs_human" and viewer.acts:
        options = "".join(f'<option value="{h(a)}">{h(a)}</option>' for a in agents)
        parts.append(
            f'<form class="decide" method="post" action="/task/{task.id}/decide">'
            f'<input type="hidden" name="csrf" value="{h(viewer.csrf)}"><h3>Decide</h3>'
            f'<label class="wide">Note (what to change, or why) <textarea name="note" rows="3"></textarea></label>'
            f'<button name="decision" value="pass">Pass (approve)</button>'
            f'<button name="decision" value="send_back">Send back to {h(task.assignee or task.created_by)}</button>'
            f'<label>or reassign to <select name="assign_to"><option value="">…</option>{options}</select></label>'
            f'<button name="decision" value="reassign">Reassign</button></form>'
        )
    if task.description:
        parts.append(f'<h3>Description</h3><pre class="desc">{h(task.description)}</pre>')
    if task.acceptance_criteria:
        parts.append(
            "<h3>Acceptance criteria</h3><ul>" + "".join(f"<li>{h(c)}</li>" for c in task.acceptance_criteria) + "</ul>"
        )
    if task.summary or task.output:
        parts.append(
            f"<h3>Work</h3>{'<p>' + h(task.summary) + '</p>' if task.summary else ''}"
            f"{'<pre class=output>' + h(task.output[:20000]) + '</pre>' if task.output else ''}"
        )
    parts.append(f"<h3>Review</h3>{trail_html(trail)}")
    parts.append(
        f'<div class="cols2"><div><h3>Lessons it produced</h3>{_lessons(produced, "none")}</div>'
        f"<div><h3>Lessons handed to its agents</h3>{_lessons(handed, 'none')}</div></div>"
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
    parts.append(f"<h3>Thread</h3>{thread_html(thread)}{post}")
    history = "".join(
        f"<tr><td>{h(_when(e.at))}</td><td>{h(e.actor)}</td><td>{h(e.action)}</td>"
        f"<td>{h(e.from_status or '')} → {h(e.to_status or '')}</td><td>{h(e.note or '')}</td></tr>"
        for e in reversed(task.history)
    )
    parts.append(
        f'<h3>History</h3><table class="history"><tr><th>when</th><th>who</th><th>what</th><th>move</th>'
        f"<th>note</th></tr>{history}</table>"
    )
    return layout(f"#{task.id} {task.title}", "".join(parts), viewer, live={"page": "task", "task": task.id})


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


def agents_page(agents: list[AgentView], presence: float, now_ts: float, viewer: Viewer) -> str:
    rows = []
    for a in agents:
        present = a.waiting or (a.last_seen_at is not None and now_ts - a.last_seen_at <= presence)
        holding = " ".join(f'<a href="/task/{i}" title="{h(t)}">#{i}</a>' for i, t in a.holding) or "—"
        rate = f"{a.first_pass_rate:.0%} of {a.first_rounds}" if a.first_pass_rate is not None else "—"
        rows.append(
            f'<tr class="{"present" if present else "away"}"><td><span class="dot"></span>{h(a.name)}</td>'
            f"<td>{h(a.role or '')}</td><td>{'waiting for messages' if a.waiting else ('present' if present else 'away')}</td>"
            f"<td>{h(_when(a.last_seen_at))}</td><td>{holding}</td><td>{rate}</td></tr>"
        )
    body = (
        '<h1>Agents</h1><table class="agents"><tr><th>agent</th><th>role</th><th>presence</th><th>last seen</th>'
        f"<th>holds</th><th>first-pass rate</th></tr>{''.join(rows)}</table>"
    )
    return layout("Agents", body, viewer, active="agents", live={"page": "agents"})


def memory_page(query: dict, results, note: str | None, viewer: Viewer) -> str:
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
            f'<li><a href="/memory/{x.id}">{h(x.title or x.snippet[:80])}</a> <span class="type">'
            f"{h(x.kind)}</span>{' <span class=type>' + h(x.task_type) + '</span>' if x.task_type else ''}"
            f' <span class="score">{x.score:.3f} ({"+".join(x.matched)})</span><p>{h(x.snippet)}</p></li>'
            for x in results.hits
        )
        listing = f'<ol class="hits">{hits}</ol>' if hits else '<p class="empty">nothing found</p>'
    problem = f'<p class="flash">{h(note)}</p>' if note else ""
    return layout("Memory", f"<h1>Memory</h1>{form}{problem}{listing}", viewer, active="memory")


def memory_item_page(item, viewer: Viewer) -> str:
    meta = " ".join(
        x
        for x in (
            f'<span class="type">{h(item.kind)}</span>',
            f'<span class="type">{h(item.task_type)}</span>' if item.task_type else "",
            f'<a href="/task/{item.task_id}">#{item.task_id}</a>' if item.task_id else "",
            *(f'<span class="label">{h(t)}</span>' for t in item.tags),
            f"by {h(item.created_by)} {h(_when(item.created_at))}",
            f"recorded {item.merged_count}×" if item.merged_count > 1 else "",
            "deprecated" if item.deprecated else "",
        )
        if x
    )
    body = (
        f'<h1>{h(item.title or f"memory item {item.id}")}</h1><div class="meta">{meta}</div>'
        f'<pre class="desc">{h(item.text)}</pre>'
    )
    return layout(f"memory {item.id}", body, viewer, active="memory")


# ----------------------------------------------------------------------- metrics


def metrics_page(stats: BoardStats, rounds: dict[int, int], viewer: Viewer) -> str:
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
    by_day = charts.bars(
        [(d.day[5:], d.rate) for d in stats.first_pass_by_day], unit="%", top=1, label="first-pass rate by day"
    )
    per_round = charts.bars(
        [(f"{n} round{'s' if n > 1 else ''}", float(c)) for n, c in sorted(rounds.items())],
        label="cards by rounds to finish",
    )
    scores = charts.bars(
        [(f"round {n}", s) for n, s in enumerate(stats.score_by_round, 1)], top=10, label="mean score by round"
    )
    critics = charts.bars(
        [(f"{c.critic}/{c.lens}", c.contribution_rate) for c in stats.critics],
        unit="%",
        top=1,
        label="per-critic contribution",
    )
    reuse = charts.bars(
        [("handed at claim", float(stats.memory_surfaced)), ("marked helpful", float(stats.memory_useful))],
        label="memory reuse",
    )
    body = (
        f'<h1>Metrics</h1><div class="figures">{figures}</div><div class="charts">'
        f"<figure><figcaption>First-pass rate by day</figcaption>{by_day}</figure>"
        f"<figure><figcaption>Rounds per card</figcaption>{per_round}</figure>"
        f"<figure><figcaption>Mean score by round</figcaption>{scores}</figure>"
        f"<figure><figcaption>Per-critic contribution (rounds its blocking input decided)</figcaption>{critics}"
        f"</figure><figure><figcaption>Memory reuse</figcaption>{reuse}</figure></div>"
    )
    return layout("Metrics", body, viewer, active="metrics", live={"page": "metrics"})
