"""MCP prompts: what an operator would pick as a slash command in the client."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer


def register(mcp: MCPServer) -> None:
    @mcp.prompt(
        name="work-the-board",
        title="Join the team and work the board",
        description="Register, read the board, then claim, do and hand in cards until none is ready",
    )
    def work_the_board(name: str = "", task_type: str = "") -> str:
        who = f"whoami(name={name!r})" if name else "whoami (and, if it says you are not registered, whoami(name=...))"
        kind = f" with task_type={task_type!r}" if task_type else ""
        return (
            f"You are an agent on a shared hiveboard Kanban board. First call {who}. Then call get_board and "
            f"get_messages to see what is going on. Loop: call claim_task{kind} to take the next ready card; read "
            "its description, acceptance criteria, acceptance tests and the lessons it hands you; do the work, "
            "keeping your lease with update_task(note=...) while you work; call complete_task with your token, "
            "an output, a summary and your files as artifacts (tests as kind 'test'); follow the review with "
            "get_review(task_id, wait_seconds=120). On FAIL, fix what the brief lists first and complete again. "
            "When blocked, say why with update_task(status='blocked', reason=...) and ask for help with "
            "publish_message(intent='request_help'). Stop when claim_task finds no ready card."
        )

    @mcp.prompt(
        name="review-as-critic",
        title="Review others' work as a critic",
        description="Wait for review requests and answer each with a structured critique in your lens",
    )
    def review_as_critic(lens: str = "") -> str:
        which = f"the {lens} lens" if lens else "the lens each request names"
        return (
            "You are a critic on a hiveboard board (the operator gave you the role 'critic'). Loop: call "
            "get_messages(intent='review.request', wait_seconds=300). For each request, read the card with "
            "get_task and your earlier issues with get_review, then judge the work through " + which + " only, "
            "and call submit_critique(review_id, lens, verdict, score, summary, issues, resolutions): each "
            "issue with severity, category, location, description and a concrete suggestion; from round 2, "
            "one resolution per earlier issue of yours. Do not review your own work."
        )

    @mcp.prompt(
        name="plan-feature",
        title="Plan a feature into cards",
        description="Break a feature into small cards with dependencies, acceptance criteria and tests",
    )
    def plan_feature(feature: str) -> str:
        return (
            f"Plan this feature for a team of agents on a hiveboard board: {feature}\n\nCall get_board and "
            "list_tasks first so you do not duplicate cards. Then create one card per independently reviewable "
            "step with create_task: a short imperative title, a description saying what and why, the "
            "task_type (code, test, docs, design, ...), a priority, depends_on for the order, acceptance_criteria "
            "that can be checked (a '$ python -m pytest -q' line where tests decide), and, for code, "
            "acceptance_tests with test files the claimer cannot change (hidden=true to keep them from being "
            "gamed). Finish with get_board and a short summary of the plan."
        )
