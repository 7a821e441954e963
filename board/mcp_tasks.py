"""The handles of MCP Tasks (the io.modelcontextprotocol/tasks extension): a long call a client asked for as a task,
run in the background by one node, its state and final result kept here so that `tasks/get` answers from any node.

A task belongs to the agent that made the call: every read and change names the agent, and another agent's task
reads as no task at all. The node running a task renews its lease (`runner_until`), every task it runs in one
statement; a task whose lease ran out while working had its node stop (killed, restarted) and is failed by the next
read, so that nobody polls it forever.
Tasks expire `ttl` seconds after they were created; expired ones are deleted when new ones are made.
"""

from __future__ import annotations

import json
import secrets

from . import scopes
from .db import Store, now, placeholders
from .errors import OverQuota

STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
TERMINAL = ("completed", "failed", "cancelled")
COLUMNS = (
    "id, agent, tool, status, status_message, result, error, created_at, updated_at, expires_at, runner_until, "
    "cancel_requested"
)


class McpTasks:
    def __init__(self, store: Store, running_cap: int = 0):
        """`running_cap`: the most tasks one agent may have working at once (0: no cap). Each working task holds a
        waiting call and renews its lease with a write: without a cap one agent could start them by the thousand."""
        self.store = store
        self.running_cap = running_cap

    def create(self, agent: str, tool: str, ttl: float, lease: float) -> dict:
        """A new working task of `agent` for a call of `tool`, stored (and so readable by tasks/get) on return;
        refused (OverQuota, nothing written) when the agent already has `running_cap` working."""
        ts = now()
        task_id = secrets.token_urlsafe(24)  # unguessable: the handle is the only way to it besides the agent
        with self.store.write(scopes.agent(agent)) as db:
            if self.running_cap:
                running = db.execute(
                    "SELECT count(*) FROM mcp_tasks WHERE agent = ? AND status = 'working' AND runner_until >= ?",
                    [agent, ts],
                ).fetchone()[0]
                if running >= self.running_cap:
                    raise OverQuota(
                        f"you have {running} MCP tasks working, the most one agent may "
                        f"(HIVEBOARD_QUOTAS__RUNNING_TASKS_PER_AGENT={self.running_cap}); nothing was started: wait for "
                        "one to finish or cancel one with tasks/cancel, then call again"
                    )
            db.execute("DELETE FROM mcp_tasks WHERE expires_at < ?", [ts])
            db.execute(
                "INSERT INTO mcp_tasks (id, agent, tool, status, created_at, updated_at, expires_at, runner_until) "
                "VALUES (?, ?, ?, 'working', ?, ?, ?, ?)",
                [task_id, agent, tool, ts, ts, ts + ttl, ts + lease],
            )
        return self.get(agent, task_id)

    def get(self, agent: str, task_id: str) -> dict | None:
        """The task as its agent sees it, or None (no such task, another agent's, or expired). A working task
        whose runner's lease ran out is failed first."""
        ts = now()
        with self.store.read() as db:
            found = db.execute(
                f"SELECT {COLUMNS} FROM mcp_tasks WHERE id = ? AND agent = ? AND expires_at >= ?", [task_id, agent, ts]
            ).fetchone()
        if found is None:
            return None
        task = _task(found)
        if task["status"] == "working" and task["runner_until"] < ts:
            self.finish(
                task_id,
                "failed",
                error={"code": -32603, "message": "the server running this task stopped"},
                message="the server running this task stopped before it finished; call the tool again",
                lapsed=True,
            )
            return self.get(agent, task_id)
        return task

    def renew(self, task_ids: list[str], lease: float) -> set[str]:
        """Extend the running node's lease on these working tasks, all in one statement (a node renews every task
        it runs at once: one write per renewal period however many tasks run); those no longer working (cancelled,
        on any node) are left out of the answer, so that their calls stop."""
        if not task_ids:
            return set()
        with self.store.write(scopes.MCP_TASKS) as db:
            found = db.execute(
                f"UPDATE mcp_tasks SET runner_until = ? WHERE id IN ({placeholders(task_ids)}) AND status = 'working' "
                "RETURNING id",
                [now() + lease, *task_ids],
            ).fetchall()
        return {r[0] for r in found}

    def finish(
        self,
        task_id: str,
        status: str,
        result: dict | None = None,
        error: dict | None = None,
        message: str | None = None,
        lapsed: bool = False,
    ) -> bool:
        """Record a working task's end (completed with `result`, failed with `error`, or cancelled); False when it
        had already ended (cancelled meanwhile, or failed for a lost lease). `lapsed`: only if its runner's lease
        has run out (the failing of a task whose node stopped must not overwrite a result that just came in)."""
        if status not in TERMINAL:
            raise ValueError(f"a task ends completed, failed or cancelled, not {status!r}")
        ts = now()
        with self.store.write(scopes.MCP_TASKS) as db:
            return (
                db.execute(
                    "UPDATE mcp_tasks SET status = ?, result = ?, error = ?, status_message = ?, updated_at = ? "
                    f"WHERE id = ? AND status = 'working'{' AND runner_until < ?' if lapsed else ''} RETURNING id",
                    [
                        status,
                        json.dumps(result) if result is not None else None,
                        json.dumps(error) if error is not None else None,
                        message,
                        ts,
                        task_id,
                        *([ts] if lapsed else []),
                    ],
                ).fetchone()
                is not None
            )

    def cancel(self, agent: str, task_id: str) -> dict | None:
        """Cancel `agent`'s task if it is still working; the task as it now stands, or None if there is none."""
        with self.store.write(scopes.agent(agent)) as db:
            db.execute(
                "UPDATE mcp_tasks SET status = 'cancelled', status_message = ?, cancel_requested = 1, updated_at = ? "
                "WHERE id = ? AND agent = ? AND status = 'working'",
                ["cancelled by the client", now(), task_id, agent],
            )
        return self.get(agent, task_id)


def _task(row) -> dict:
    keys = [c.strip() for c in COLUMNS.split(",")]
    task = dict(zip(keys, row))
    for key in ("result", "error"):
        task[key] = json.loads(task[key]) if task[key] else None
    return task
