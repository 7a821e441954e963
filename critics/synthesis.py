"""The deterministic synthesis: one verdict, ranked issues and a revision brief from a round's critiques.

Rules (seed 000): critics are never dropped — errors, timeouts and missed agent slots are listed;
duplicates across critics are merged with who found them; contradictions are surfaced and decided by
lens precedence (security > correctness > … > style); the verdict is FAIL when any critic failed the
work or raised a critical or major issue, else PASS. The score is the critics' mean, except that a FAIL
scores below the bar: while a critical issue blocks, at most 2; a major one, at most 4 (`score_of`).
"""

from __future__ import annotations

import re

from hiveboard.board.review_models import (
    BLOCKING,
    SEVERITY_RANK,
    Contradiction,
    CritiqueRecord,
    MergedIssue,
    MetaDecision,
    ReviewIssue,
    Synthesis,
)

from .config import NEVER_LOWERED, PRECEDENCE

WORD = re.compile(r"[a-z0-9_]+")
LINE = re.compile(r"(?::\d+)+$|[\s,]+(?:line|l\.)\s*\d+$")  # a location's line (and column): code moves between rounds
# the head of a blocking issue's entry in the brief, as the brief writes it ("3. [major] ")
BLOCKING_ENTRY = re.compile(rf"(\d+)\. \[(?:{'|'.join(BLOCKING)})\] ")


def _rank(lens: str) -> int:
    return PRECEDENCE.index(lens) if lens in PRECEDENCE else len(PRECEDENCE)


def _words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if len(w) > 2}


def _similar(a: ReviewIssue, b: ReviewIssue) -> bool:
    if a.rule and a.rule == b.rule:
        return True
    if a.category.lower() == b.category.lower():
        return True
    wa, wb = _words(a.description), _words(b.description)
    return bool(wa and wb) and len(wa & wb) / len(wa | wb) >= 0.5


def blocking(c: CritiqueRecord) -> bool:
    """A critique that on its own fails the work."""
    return c.status == "ok" and (c.verdict == "FAIL" or any(i.severity in BLOCKING for i in c.issues))


def merge(critiques: list[CritiqueRecord]) -> list[MergedIssue]:
    """All issues, duplicates merged (same place and same lens or same problem), ranked."""
    merged: list[tuple[MergedIssue, ReviewIssue]] = []
    ordered = sorted((c for c in critiques if c.status == "ok"), key=lambda c: _rank(c.lens))
    for c in ordered:
        for issue in c.issues:
            for entry, first in merged:
                same_place = issue.location and issue.location == entry.location
                if (same_place and (entry.lens == c.lens or _similar(first, issue))) or (
                    not issue.location and not entry.location and _similar(first, issue)
                ):
                    if SEVERITY_RANK[issue.severity] > SEVERITY_RANK[entry.severity]:
                        entry.severity = issue.severity
                    if c.critic not in entry.found_by:
                        entry.found_by.append(c.critic)
                    entry.refs.append(issue.ref or "")
                    if not entry.suggestion and issue.suggestion:
                        entry.suggestion = issue.suggestion
                    break
            else:
                merged.append(
                    (
                        MergedIssue(
                            rank=0,
                            severity=issue.severity,
                            lens=c.lens,
                            category=issue.category,
                            location=issue.location,
                            description=issue.description,
                            suggestion=issue.suggestion,
                            found_by=[c.critic],
                            refs=[issue.ref or ""],
                        ),
                        issue,
                    )
                )
    issues = sorted((m for m, _ in merged), key=lambda m: (-SEVERITY_RANK[m.severity], _rank(m.lens), -len(m.found_by)))
    for n, m in enumerate(issues, 1):
        m.rank = n
    return issues


def contradictions(critiques: list[CritiqueRecord], issues: list[MergedIssue]) -> list[Contradiction]:
    """Critics of one lens that disagree on the verdict, and one place where lenses ask different things."""
    out = []
    delivered = [c for c in critiques if c.status == "ok"]
    for lens in sorted({c.lens for c in delivered}, key=_rank):
        same = [c for c in delivered if c.lens == lens]
        if len({blocking(c) for c in same}) > 1:
            out.append(
                Contradiction(
                    about=f"{lens}: critics disagree on whether the work passes",
                    positions={c.critic: f"{c.verdict} ({c.score}/10): {(c.summary or '')[:200]}" for c in same},
                    decided="FAIL stands: a blocking issue is not overruled by a critic that missed it",
                )
            )
    by_place: dict[str, list[MergedIssue]] = {}
    for m in issues:
        if m.location:
            by_place.setdefault(m.location, []).append(m)
    for place, found in by_place.items():
        lenses = {m.lens for m in found}
        if len(lenses) > 1 and len({m.suggestion for m in found if m.suggestion}) > 1:
            top = min(lenses, key=_rank)
            out.append(
                Contradiction(
                    about=f"{place}: {', '.join(sorted(lenses, key=_rank))} ask for different changes",
                    positions={"/".join(m.found_by): f"[{m.lens}] {m.suggestion}" for m in found},
                    decided=f"{top} takes precedence where the changes conflict",
                )
            )
    return out


BRIEF_CHARS = 1000
# The most a FAIL scores while an issue of this severity blocks it, and when a critic failed the work without
# one: a FAIL never averages its way to a passing score (one critic's 2 among three 10s would make 8).
SCORE_CAPS: dict[str, float] = {"critical": 2.0, "major": 4.0}
FAIL_CAP = 4.0
SCORE_NOTE = re.compile(r" caps? the score at [\d.]+/10 \(critics averaged")


def score_of(
    critiques: list[CritiqueRecord], issues: list[MergedIssue], verdict: str, bar: float = 0
) -> tuple[float | None, str | None]:
    """(score, why) for a round: the mean of the critics' scores, capped for a FAIL (below SCORE_CAPS of its
    worst blocking issue, FAIL_CAP without one, and below the bar when there is one); `why` is one line, set
    when the cap applied."""
    scores = [c.score for c in critiques if c.status == "ok" and c.score is not None]
    if not scores:
        return None, None
    mean = round(sum(scores) / len(scores), 2)
    if verdict != "FAIL" or (bar and mean < bar):
        return mean, None  # a PASS, or a FAIL by the bar: already below it
    worst = max((m.severity for m in issues if m.severity in BLOCKING), key=SEVERITY_RANK.get, default=None)
    if worst is not None:
        top = [m for m in issues if m.severity == worst]
        noun = "test failure" if all(m.category in ("test-failed", "test-error") for m in top) else "issue"
        what, many, cap = f"{len(top)} {worst} {noun}{'s' if len(top) > 1 else ''}", len(top) > 1, SCORE_CAPS[worst]
    else:
        failed = [c.critic for c in critiques if c.status == "ok" and c.verdict == "FAIL"]
        what, many, cap = (
            f"the FAIL of {', '.join(failed)}" if failed else "a FAIL without a blocking issue",
            False,
            FAIL_CAP,
        )
    if bar:
        cap = min(cap, max(1.0, bar - 1))
    if mean <= cap:
        return mean, None
    return cap, f"{what} {'cap' if many else 'caps'} the score at {cap:g}/10 (critics averaged {mean:g})"


def _rescored(
    synthesis: Synthesis, critiques: list[CritiqueRecord], issues: list[MergedIssue], verdict: str, bar: float = 0
) -> dict:
    """The score and note of a synthesis whose verdict or issues changed (the meta-review)."""
    score, why = score_of(critiques, issues, verdict, bar)
    notes = [n for n in (synthesis.note or "").split("; ") if n and not SCORE_NOTE.search(n)]
    return {"score": score, "note": "; ".join([why, *notes] if why else notes) or None}


def rescore(synthesis: Synthesis, critiques: list[CritiqueRecord], bar: float = 0) -> Synthesis:
    """The synthesis with a score that agrees with its verdict, after something else decided the verdict
    (a model's synthesis, tests that could not run, a failed lens)."""
    return synthesis.model_copy(update=_rescored(synthesis, critiques, synthesis.issues, synthesis.verdict, bar))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def said_once(location: str, description: str) -> str:
    """A finding's text for showing beside its location: without the location again in front of it (a
    model's "app.py:3: eval on input" at app.py:3 says "eval on input")."""
    if location:
        found = re.match(re.escape(location) + r"(?:\s*[:—–-]\s*|\s+|$)", description)
        if found:
            return description[found.end() :]
    return description


def brief(
    verdict: str, issues: list[MergedIssue], round_: int, critiques: list[CritiqueRecord], limit: int = BRIEF_CHARS
) -> str:
    """The revision brief an agent acts on in one read: the blocking issues, most important first, each
    with where, what (for a failing test: expected against actual and the failing line) and the fix; the
    rest counted, not listed. At most `limit` characters."""
    must = [m for m in issues if m.severity in BLOCKING]
    should = [m for m in issues if m.severity not in BLOCKING]
    lines = [f"Round {round_}: FAIL. Fix these first, in order:" if verdict == "FAIL" else f"Round {round_}: PASS."]
    if verdict == "FAIL":
        lines += [
            f"- {c.critic} ({c.lens}) failed the work: {_cut(c.summary or '', 200)}"
            for c in critiques
            if c.status == "ok" and c.verdict == "FAIL" and not any(i.severity in BLOCKING for i in c.issues)
        ]
    # one fix shared by every blocking issue (each failing test: "make this test pass") is said once
    common = must[0].suggestion if len(must) > 1 and len({m.suggestion for m in must}) == 1 else None
    closing = [f"Fix each: {_cut(common, 160)}"] if common else []
    entries = []
    for m in must:
        text = said_once(m.location, m.description or "")
        what = " | ".join(" ".join(line.split()) for line in text.splitlines()[:3] if line.strip())
        entries.append(
            f"{m.rank}. [{m.severity}] {m.location or '(general)'} — {_cut(what, 320)}"
            + (f" Fix: {_cut(m.suggestion, 160)}" if m.suggestion and not common else "")
        )
    shown = 0
    room = limit - 140 - sum(len(x) + 1 for x in closing)  # room for the shared fix and the closing count
    for entry in entries:
        if sum(len(x) + 1 for x in lines) + len(entry) > room:
            break
        lines.append(entry)
        shown += 1
    rest = []
    if len(must) > shown:
        rest.append(f"{len(must) - shown} more blocking")
    if should:
        rest.append(f"{len(should)} minor/info (not blocking)")
    if rest:
        closing.append(f"Not listed: {', '.join(rest)}; get_review(task_id, full=true) has every issue.")
    return _cut("\n".join(lines + closing), limit)


def for_a_person(text: str, round_: int, limit: int = BRIEF_CHARS) -> str:
    """A FAIL round's brief once its card went to needs_human: the author is asked for nothing until a person
    decides, so its head says that instead of "fix these first" (the issues stay listed, for the person)."""
    lines = text.splitlines()
    if lines and lines[0].startswith(f"Round {round_}: "):  # the synthesis's own head; a model's brief keeps all
        lines = lines[1:]
    head = (
        f"Round {round_}: FAIL. The card went to needs_human: a person decides what happens next, and nothing is "
        "asked of its author until then."
    )
    return _cut("\n".join([head, *(["Open issues, most important first:", *lines] if lines else [])]), limit)


def synthesise(
    critiques: list[CritiqueRecord], lenses: list[str], round_: int, brief_chars: int = BRIEF_CHARS, bar: float = 0
) -> Synthesis:
    """One verdict for a round. No critic is dropped: failures and missed lenses are listed."""
    delivered = [c for c in critiques if c.status == "ok"]
    ran = sorted({c.lens for c in delivered}, key=_rank)
    failed = sorted({c.lens for c in critiques if c.status in ("error", "timeout", "missed")} - set(ran), key=_rank)
    uncovered = [lens for lens in lenses if lens not in ran and lens not in failed]
    issues = merge(critiques)
    decisive = [c.critic for c in delivered if blocking(c)]
    verdict = "FAIL" if decisive else "PASS"
    notes = []
    for c in critiques:
        if c.status in ("error", "timeout", "missed"):
            notes.append(f"{c.critic} ({c.lens}) {c.status}: {c.error}")
    if not delivered:
        notes.append("no critic delivered a critique")
    score, why = score_of(critiques, issues, verdict, bar)
    text = brief(verdict, issues, round_, critiques, brief_chars)
    if verdict == "PASS" and bar and score is not None and score < bar:
        # the seeds' loop: revise until the score reaches the bar, not only until nothing blocks
        verdict = "FAIL"
        notes.append(f"score {score}/10 is below the bar {bar:g} (review.pass_score)")
        text = _cut(
            f"Round {round_}: FAIL. No blocking issue, but the score {score}/10 is below the bar "
            f"{bar:g}: improve the work where the critics marked it down.\n" + "\n".join(text.splitlines()[1:]),
            brief_chars,
        )
    if why:
        notes.insert(0, why)
    return Synthesis(
        verdict=verdict,
        score=score,
        issues=issues,
        contradictions=contradictions(critiques, issues),
        brief=text,
        lenses_ran=ran,
        lenses_failed=failed,
        lenses_uncovered=uncovered,
        decisive=decisive,
        note="; ".join(notes) or None,
    )


def downgrade(
    synthesis: Synthesis,
    critiques: list[CritiqueRecord],
    round_: int,
    decisions: dict[int, tuple[str, str]],
    brief_chars: int = BRIEF_CHARS,
) -> Synthesis:
    """Apply a meta-review: {rank: (severity, reason)} for blocking issues. A critical finding of the first lens
    (security, integrity: NEVER_LOWERED) is never lowered. The verdict is then decided again on what still blocks."""
    meta, issues = [], []
    for m in synthesis.issues:
        if m.rank in decisions and m.severity in BLOCKING:
            to, reason = decisions[m.rank]
            if m.severity == "critical" and m.lens in NEVER_LOWERED and SEVERITY_RANK[to] < SEVERITY_RANK["critical"]:
                to, reason = m.severity, f"kept: a critical {m.lens} finding is never lowered ({reason})"
            meta.append(MetaDecision(rank=m.rank, location=m.location, severity=m.severity, decided=to, reason=reason))
            m = m.model_copy(update={"severity": to})
        issues.append(m)
    still = [m for m in issues if m.severity in BLOCKING]
    unexplained = [c.critic for c in critiques if c.status == "ok" and c.verdict == "FAIL" and not c.issues]
    verdict = "FAIL" if still or unexplained else "PASS"
    decisive = sorted({name for m in still for name in m.found_by} | set(unexplained))
    return synthesis.model_copy(
        update={
            "issues": issues,
            "meta": meta,
            "verdict": verdict,
            "decisive": decisive,
            **_rescored(synthesis, critiques, issues, verdict),
            "brief": brief(verdict, issues, round_, critiques, brief_chars)
            if verdict != synthesis.verdict
            else synthesis.brief,
        }
    )


def finding(m: MergedIssue) -> tuple[str, str, str]:
    """What makes two rounds' findings the same finding: its lens, its rule or category, and its place without the
    line (an edit above it moves it), normalised; not its words, which a model rephrases every round. Made from
    the synthesis's issues, which are made from sealed critiques: the hidden tests' findings are one per critic,
    without place, so comparing them says no more than the verdict did."""
    return (m.lens, m.category.strip().lower(), LINE.sub("", m.location.strip().lower()).strip())


def blocking_findings(synthesis: Synthesis | None) -> set[tuple[str, str, str]]:
    """A FAIL round's blocking findings, by `finding`; none for a round that passed or did not finish."""
    if synthesis is None or synthesis.verdict != "FAIL":
        return set()
    return {finding(m) for m in synthesis.issues if m.severity in BLOCKING}


def mark_repeated(synthesis: Synthesis, before: set[tuple[str, str, str]], round_: int) -> Synthesis:
    """The brief's entries for blocking findings that the round before also raised say they are repeated."""
    again = {m.rank for m in synthesis.issues if m.severity in BLOCKING and finding(m) in before}
    if not again or synthesis.verdict != "FAIL":
        return synthesis
    lines = []
    for line in synthesis.brief.splitlines():
        head = BLOCKING_ENTRY.match(line)
        if head and int(head.group(1)) in again:
            line = f"{head.group(0)}(repeated: raised in round {round_ - 1} too) {line[head.end() :]}"
        lines.append(line)
    return synthesis.model_copy(update={"brief": "\n".join(lines)})


def convergence_summary(rounds: list[list[CritiqueRecord]], max_rounds: int) -> str:
    """For a human after the last round: per critic, its final verdict, what got resolved, what did not."""
    last = rounds[-1]
    lines = [
        (
            f"Review did not converge after {len(rounds)} of {max_rounds} rounds; a human decides."
            if len(rounds) <= max_rounds
            else f"Review round {len(rounds)} did not pass, and the card's {max_rounds} review rounds were used "
            "up before it; a human decides."
        ),
        "Final verdicts: " + ", ".join(f"{c.critic}: {c.verdict or c.status}" for c in last),
    ]
    issue_of = {i.ref: i for rnd in rounds for c in rnd for i in c.issues}
    critics = list(dict.fromkeys(c.critic for rnd in rounds for c in rnd))
    for name in critics:
        mine = [(n, c) for n, rnd in enumerate(rounds, 1) for c in rnd if c.critic == name]
        resolved = [
            (n, issue_of[r.ref]) for n, c in mine for r in c.resolutions if r.status == "resolved" and r.ref in issue_of
        ]
        final = next((c for n, c in mine if n == len(rounds)), None)
        open_ = sorted(final.issues if final else [], key=lambda i: -SEVERITY_RANK[i.severity])
        lens = mine[-1][1].lens
        lines.append(
            f"{name} ({lens}): {len(resolved)} resolved, {len(open_)} unresolved"
            + (f"; {final.status}: {final.error}" if final and final.status != "ok" else "")
        )
        for n, issue in resolved:
            lines.append(f"  RESOLVED in round {n}: {issue.location} {said_once(issue.location, issue.description)}")
        for issue in open_:
            lines.append(
                f"  UNRESOLVED [{issue.severity}] {issue.location} {said_once(issue.location, issue.description)}"
                + (f" — suggests: {issue.suggestion}" if issue.suggestion else "")
            )
    lines.append(
        "Decide: fix it yourself, re-scope the card, or grant it more review rounds (its creator or a person: "
        "update_task(rounds=N), or on the web board with the decision); moving it to todo alone grants "
        "none, so its next failed round comes straight back to a person."
    )
    return "\n".join(lines)
