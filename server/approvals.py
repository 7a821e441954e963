"""Approvals where the person is: a card waiting on a person is asked in that person's own client, by elicitation.

A person (an agent with an operator role: human or lead) whose client declared form elicitation and who waits
with `wait_for_work` is asked about the cards in needs_human, one at a time: a form offers the answers the card
offers (`Decisions.answers`, the same the web page's buttons give) and a note. An accepted answer is recorded by
`Decisions.decide`, the function behind the web's Pass and Send back, as that person, with the pass confirmed
against what the form named; the card's history then says who. A client without the capability is never asked:
its wait answers with the card's web page instead; a declined, cancelled, unanswered or timed-out form leaves the
card waiting on the web board. Either way the same card is not raised again with that person until it changes.

Elicitation always rides the person's own request (SEP-2260): mid-call on the session protocol (2025-11-25), as
an `input_required` result that the client answers by calling again on 2026-07-28. A wait running as an MCP
task has no request to ride, so it asks nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
from mcp.server.mcpserver import Context
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

from hiveboard.board.agents import OPERATOR_ROLES
from hiveboard.board.decisions import Answer
from hiveboard.board.errors import BoardError, IllegalTransition
from hiveboard.board.models import TaskSummary

from . import lanes
from .deps import Deps

log = logging.getLogger("hiveboard")

ASK_SECONDS = 600.0  # how long a form mid-call waits for the person before the card is left to the web board
KEY = "hiveboard-decide"  # the input request's key on 2026-07-28
ASKED_MOST = 10_000  # (agent, card, version) pairs remembered as asked; past it, forgotten all at once


@dataclass(frozen=True)
class Asked:
    """What came of asking a person about a card, in their words."""

    task_id: int
    outcome: str


def can_ask(ctx: Context) -> bool:
    """Whether this request's client may be asked a form: it declared form elicitation (an empty elicitation
    capability means form, as the spec says) and the request is still open (not a wait running as an MCP task)."""
    if lanes.detached.get():
        return False
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


def web_page(task_id: int) -> str:
    return f"/task/{task_id}"


def waits_on_web(task_id: int) -> str:
    return f"it waits on the web board ({web_page(task_id)})"


class Approvals:
    """The cards a waiting person is asked about, and the recording of their answers."""

    def __init__(self, deps: Deps):
        self.board = deps.board
        self._asked: set[tuple[str, int, int]] = set()  # (person, card, version) asked already

    def is_person(self, agent: str) -> bool:
        found = self.board.agents.get(agent, missing_ok=True)
        return found is not None and found.role in OPERATOR_ROLES

    def next_card(self, agent: str) -> TaskSummary | None:
        """The card waiting on a person longest that this person has not been asked about as it stands."""
        for card in self.board.decisions.waiting(limit=100):
            if (agent, card.id, card.version) not in self._asked:
                return card
        return None

    def mark(self, agent: str, card: TaskSummary) -> None:
        if len(self._asked) >= ASKED_MOST:
            self._asked.clear()
        self._asked.add((agent, card.id, card.version))

    def question(self, card: TaskSummary) -> tuple[ElicitRequestFormParams, str]:
        """The form for a card (its answers from the board) and the approval key a pass confirms."""
        task = self.board.get(card.id, history=0)
        answers = self.board.decisions.form_answers(card.id)
        if not answers:
            raise IllegalTransition(f"task {card.id} no longer waits for a person")
        passes = any(a.name == "pass" for a in answers)
        approval = self.board.decisions.approval(card.id) if passes else None
        why = task.blocked_reason or (f"it needs approval ({task.needs_approval})" if task.needs_approval else "")
        message = (
            f"hiveboard: task {card.id} waits for a person: {card.title}"
            + (f"\nWhy: {why}" if why else "")
            + (f"\nA pass approves {approval.text}." if approval else "")
            + f"\nDecline to decide it later on the web board ({web_page(card.id)})."
        )
        return ElicitRequestFormParams(message=message[:2000], requested_schema=_schema(answers)), (
            approval.key if approval else ""
        )

    def record(self, agent: str, task_id: int, confirm: str, result: ElicitResult) -> Asked:
        """Record an answer as the web's buttons would (the same board function, as this person); anything but an
        accepted, valid answer leaves the card waiting on the web board."""
        later = waits_on_web(task_id)
        if result.action != "accept":
            said = {"decline": "declined", "cancel": "cancelled"}.get(result.action, result.action)
            return Asked(task_id, f"task {task_id}: the form was {said}; {later}")
        content = result.content or {}
        decision, note = content.get("decision"), content.get("note") or ""
        offered = {a.name for a in self.board.decisions.form_answers(task_id)}
        if decision not in offered or not isinstance(note, str):
            return Asked(task_id, f"task {task_id}: the answer {decision!r} is not one it offers; {later}")
        try:
            done = self.board.decisions.decide(
                agent, task_id, decision, note, confirm=confirm if decision == "pass" else None
            )
        except BoardError as exc:
            return Asked(task_id, f"task {task_id}: not recorded: {exc}; {later}")
        return Asked(task_id, f"task {task_id}: {decision.replace('_', ' ')} recorded as {agent}; it is {done.status}")

    def to_web(self, agent: str, card: TaskSummary) -> Asked:
        """A person whose client takes no forms is told where the card is decided (once per card as it stands)."""
        self.mark(agent, card)
        return Asked(card.id, f"task {card.id} waits for a person: decide it on the web board ({web_page(card.id)})")

    async def ask_now(self, ctx: Context, agent: str, card: TaskSummary) -> Asked | InputRequiredResult:
        """Ask about `card` within this request: a form mid-call on the session protocol, an input_required
        result on 2026-07-28 (the client calls again with the answer; `answered` records it)."""
        self.mark(agent, card)
        try:
            params, confirm = await lanes.run("read", self.question, card)
        except BoardError:  # it moved on since it was picked (decided on the web, say): nothing to ask
            return Asked(card.id, f"task {card.id} no longer waits for a person")
        session = ctx.request_context.session
        if not session.can_send_request:
            request = ElicitRequest(params=params)
            return InputRequiredResult(input_requests={KEY: request}, request_state=f"{card.id}:{confirm}")
        result = None
        with anyio.move_on_after(ASK_SECONDS):
            try:
                result = await session.elicit_form(
                    params.message, params.requested_schema, related_request_id=ctx.request_id
                )
            except Exception as exc:  # the client failed the request: the card is the web's
                log.warning("task %s: %s could not be asked in their client: %s", card.id, agent, exc)
                result = ElicitResult(action="cancel")
        if result is None:
            return Asked(card.id, f"task {card.id}: the form was not answered in time; {waits_on_web(card.id)}")
        return await lanes.run("write", self.record, agent, card.id, confirm, result)

    async def answered(self, ctx: Context, agent: str) -> Asked | None:
        """On 2026-07-28, the answer this call carries to an earlier input_required result, recorded; else None.
        The echoed state names the card and what its pass confirms; the person acts as themselves (from the
        connection), and a pass of work that changed since is refused by `decide`."""
        responses, state = ctx.input_responses or {}, ctx.request_state or ""
        response = responses.get(KEY)
        task, _, confirm = state.partition(":")
        if not isinstance(response, ElicitResult) or not task.isdigit():
            return None
        return await lanes.run("write", self.record, agent, int(task), confirm, response)


def _schema(answers: list[Answer]) -> dict:
    """The form: one choice among the card's answers, and a note (what to change, or why)."""
    return {
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "oneOf": [{"const": a.name, "title": a.label} for a in answers],
            },
            "note": {
                "type": "string",
                "title": "Note",
                "description": "what to change or why ("
                + ", ".join(a.label for a in answers if a.note)
                + " needs one)",
                "maxLength": 2000,
            },
        },
        "required": ["decision"],
    }
