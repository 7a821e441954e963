"""Hooks while nothing happens: what Claude Code's PostToolUse hook costs a session per 100 tool calls.

    .venv/bin/python bench/bench_hooks.py            # 100 tool calls per setup, about 30 s on 2 cores
    .venv/bin/python bench/bench_hooks.py --calls 300
    .venv/bin/python bench/bench_hooks.py --json out.json

Claude Code runs the PostToolUse handlers whose group's matcher (a regular expression; "*" or none is every tool)
matches the tool's name, after every tool call; a handler without `"async": true` holds the session until its
process exits. The bench plays one session's tool calls, a mix of a working agent's (mostly Read, Edit, Bash,
Grep; one in ten a hiveboard tool), through each setup's `.claude/settings.json`, as Claude Code dispatches them:
the handlers that match run as `sh -c COMMAND` with the event's JSON on stdin, on a board with the session's agent
and one card it holds (nothing new to tell: the hook has nothing to say, the case this bench is about).

Rows, in one run:
- `sh -c true`: a process that does nothing, per call (the floor of any command hook).
- `python -c pass`: this Python started and doing nothing, per call (the floor of a hook written in Python).
- before issue 49: the handler setup wrote then (matcher "*", synchronous, HIVEBOARD_AGENT in the command).
- now: what `hiveboard setup claude-code` writes (matcher `mcp__hiveboard__.*`, `"async": true`, the agent from the
  input's session_id).

Columns: hiveboard processes started per 100 tool calls; the hook's p50 and p95 (one run, wall time); what the
session waited for hooks per 100 tool calls (the sum of the synchronous runs; an async run is not waited for).
No timed asserts: the exit code is 0 either way.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

from _harness import Col, bench_parser, machine_info, machine_line, pct, scratch, server_env, table, write_json

# one in ten calls is a hiveboard tool, the rest a working agent's own
MIX = ["Read", "Edit", "Bash", "Grep", "Read", "mcp__hiveboard__update_task", "Bash", "Edit", "Glob", "Read"]


def board(home: Path, session: str) -> None:
    """A board with `bench` (a named agent) and the session's agent, each holding a card."""
    from hiveboard.board.db import Store
    from hiveboard.board.models import NewTask
    from hiveboard.board.tasks import Board
    from hiveboard.server.sessions import session_agent

    b = Board(Store(str(home / "hiveboard.db")))
    try:
        for name in ("bench", session_agent(session)):
            if name == "bench":
                b.agents.ensure(name)
            else:
                b.agents.for_session(name, session)
            card = b.create(name, NewTask(title=f"{name}'s card"))
            b.claim(name, card.id)
    finally:
        b.store.close()


def settings_now(project: Path, home: Path) -> dict:
    from hiveboard.server.setup_clients import setup

    setup("claude-code", project=project, home=home, out=io.StringIO())
    return json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["PostToolUse"]


def settings_before(now: list[dict], home: Path) -> list[dict]:
    """The PostToolUse group as setup wrote it before issue 49: every tool, synchronous, a fixed agent."""
    handler = {k: v for k, v in now[0]["hooks"][0].items() if k != "async"}
    handler["command"] = "HIVEBOARD_AGENT=bench " + handler["command"]
    return [{"matcher": "*", "hooks": [handler]}]


def matches(matcher: str | None, tool: str) -> bool:
    return matcher in (None, "", "*") or re.fullmatch(matcher, tool) is not None


def play(groups: list[dict], calls: int, session: str, project: Path, env: dict) -> dict:
    runs, waited, started = [], 0.0, 0
    for i in range(calls):
        tool = MIX[i % len(MIX)]
        for group in groups:
            if not matches(group.get("matcher"), tool):
                continue
            for handler in group["hooks"]:
                payload = {
                    "session_id": session,
                    "hook_event_name": "PostToolUse",
                    "tool_name": tool,
                    "tool_input": {},
                    "cwd": str(project),
                }
                t0 = time.perf_counter()
                done = subprocess.run(
                    ["sh", "-c", handler["command"]],
                    input=json.dumps(payload),
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=project,
                )
                spent = time.perf_counter() - t0
                if done.stderr:
                    raise RuntimeError(f"the hook failed open: {done.stderr.strip()}")
                runs.append(spent)
                started += "hiveboard" in handler["command"]
                waited += 0 if handler.get("async") else spent
    per = 100 / calls
    return {
        "processes_per_100": started * per,
        "p50_ms": pct(runs, 50) if runs else None,
        "p95_ms": pct(runs, 95) if runs else None,
        "waited_ms_per_100": waited * 1000 * per,
    }


def main() -> None:
    p = bench_parser(__doc__)
    p.add_argument("--calls", type=int, default=100, help="tool calls played per setup")
    args = p.parse_args()
    info = machine_info()
    results = {}
    with scratch("bench-hooks-", keep=args.keep) as tmp:
        project, home = tmp / "project", tmp / "home"
        project.mkdir()
        home.mkdir()
        session = str(uuid.uuid4())
        board(home, session)
        now = settings_now(project, home)
        env = server_env(home, HIVEBOARD_HOME=str(home), CLAUDE_CODE_SESSION_ID=session)
        floor = [{"matcher": "*", "hooks": [{"type": "command", "command": "true"}]}]
        python = [{"matcher": "*", "hooks": [{"type": "command", "command": f"{shlex.quote(sys.executable)} -c pass"}]}]
        setups = (
            ("sh -c true", floor),
            ("python -c pass", python),
            ("before issue 49", settings_before(now, home)),
            ("now", now),
        )
        for name, groups in setups:
            results[name] = play(groups, args.calls, session, project, env)
    cols = [
        Col("PostToolUse setup", 18, left=True),
        Col("hiveboard procs/100 calls", 25, ".0f"),
        Col("hook p50 ms", 11, ".1f"),
        Col("hook p95 ms", 11, ".1f"),
        Col("session waited ms/100 calls", 27, ".0f"),
    ]
    print(machine_line(info))
    rows = [
        (name, r["processes_per_100"], r["p50_ms"], r["p95_ms"], r["waited_ms_per_100"]) for name, r in results.items()
    ]
    table(cols, rows, f"PostToolUse over {args.calls} tool calls (one in ten a hiveboard tool)")
    write_json(args.json, {"machine": info, "calls": args.calls, "results": results})


if __name__ == "__main__":
    main()
