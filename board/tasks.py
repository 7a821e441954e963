"""The Kanban board: the façade the server calls, and the commands that change cards.

Every change runs inside `Store.write()`, so read-check-write is atomic across threads and processes;
each move of a card is a row of the state machine (board/machine.py), performed there. Leases that ran
out are swept back to todo before any claim or holder action, and before reads that would otherwise
show them. Reading a card is board/cards.py; its limits board/limits.py; competing attempts
board/contests.py; a person's decisions board/decisions.py; reviews board/reviews.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from . import cards, digest_store, scopes
from ._sqlite_utils import Database
from .agents import OPERATOR_ROLES, Agents
from .canaries import Canaries
from .commits import BOTH, Commits
from .contests import Contests
from .cursor import decode_cursor, encode_cursor
from .db import Store, for_update, iso, now, placeholders, rows, rows_many
from .decisions import Decisions
from .digest_store import Digest, Digests
from .errors import Conflict, Forbidden, IllegalTransition, InvalidInput, NotYourClaim
from .flags import Flags
from .knowledge import Knowledge
from .limits import (
    MAX_ATTEMPTS,
    RULE_RE,
    TASK_TYPE_RE,
    Limits,
    check_criteria,
    check_labels,
    check_tests,
    check_text,
)
from .machine import Machine, Via, find, illegal
from .mcp_tasks import McpTasks
from .merges import Merges
from .messages import Messages
from .models import (
    PRIORITY_RANK,
    RANK_PRIORITY,
    STATUSES,
    Artifact,
    BoardView,
    Card,
    Claim,
    Column,
    Commit,
    NewTask,
    Page,
    Task,
    TaskEdit,
    TaskSummary,
)
from .pushes import Pushes
from .quotas import ARTIFACT, QuotaConfig, Quotas
from .repos import Repos
from .reservations import ENDS, Reservations, normalize_all
from .review_models import BoardStats
from .reviews import Reviews
from .usage import MAX_BUDGET, Price, Usage
from .views import Views
from .web_sessions import WebSessions
from .worktrees import Worktrees

CREATOR_ASKED = "asked by its creator"  # the one approval requirement its creator may clear again
ApprovalRule = Callable[[str, list[str]], str | None]
T = TypeVar("T")


class Board:
    """Tasks on one store, and the parts that keep them: agents, messages, memory, reviews, contests."""

    def __init__(
        self,
        store: Store,
        lease_seconds: int = 300,
        limits: Limits | None = None,
        quotas: QuotaConfig | None = None,
        prices: dict[str, Price] | None = None,
    ):
        """`quotas`: each agent's share of the bulk writes, the database's ceiling, the cap on self-registration
        (board/quotas.py); None: no quotas. `prices`: what tokens cost per model (board/usage.py); None: the
        defaults."""
        self.store = store
        self.limits = limits = limits or Limits()
        self.lease_seconds = lease_seconds
        self.approval_rule: ApprovalRule | None = None
        self.quotas = Quotas(store, quotas)
        self.agents = Agents(store, self.quotas.admit)
        self.knowledge = Knowledge(store, self.quotas)
        self.digests = Digests(store)
        self.mcp_tasks = McpTasks(store, self.quotas.cap("running_tasks_per_agent"))
        self.messages = Messages(store, self.agents, self.knowledge, limits, self.quotas)
        self.machine = Machine(store, self.agents, self.messages, lease_seconds)
        self.repos = Repos(store)  # git repositories cards are worked in
        self.commits = Commits(store, self.machine, self.repos)  # work handed in as a commit
        self.merges = Merges(store, self.machine, self.repos, self.commits)  # the merge queue
        self.reviews = Reviews(store, self.machine, self.knowledge, limits, self.merges)
        self.contests = Contests(store, self.machine)
        self.flags = Flags(store, self.machine, limits)  # an agent's honest way out of a card
        self.canaries = Canaries(store, self.machine)  # cards that measure gaming
        self.decisions = Decisions(
            store, self.machine, self.reviews, self.merges, limits, self.flags, self.canaries, self.knowledge
        )
        self.usage = Usage(store, self.machine, self.messages, prices)  # tokens, their cost, card budgets
        self.views = Views(store)
        self.pushes = Pushes(store)  # what agents are told unasked, once each (server/channel.py)
        self.web_sessions = WebSessions(store)  # people logged in to the web board
        self.reservations = Reservations(store, self.machine, self.quotas)  # paths agents are editing
        self.worktrees = Worktrees(store)  # the worktrees of them given at claim
        # what else happens when a card moves, all in one place
        self.machine.when_leaving("review", self.reviews.left_review)
        self.machine.when_leaving("review", self.merges.left_review)
        self.machine.when_entering("done", self.reviews.remember_output)
        self.machine.when_entering("done", self.knowledge.trust_helpful)
        for status in ENDS:  # a card that ends (its holder no longer works on it) releases its reservations
            self.machine.when_entering(status, self.reservations.card_ended)

    def require_approval(self, rule: ApprovalRule) -> None:
        """Register why a new card needs a person's approval after its review passes: `rule(task_type,
        labels)` gives the reason, or None (the review configuration's human_approval)."""
        self.approval_rule = rule

    # ----------------------------------------------------------------- reading

    def stats(self, honesty: bool = False) -> BoardStats:
        """How review and memory are working, the database's size against its ceiling, and what tokens cost.
        `honesty`: with each agent's canary cards and flags (for people only: it names the canaries)."""
        tokens = self.usage.stats()
        update = {"database": self.quotas.database(), "tokens": tokens}
        if honesty:
            update["honesty"] = self.canaries.stats()
        return self.reviews.stats().model_copy(update=update)

    def summary(self, task_id: int) -> TaskSummary:
        """One card, compactly: what deciding about it (e.g. whether it needs review) takes."""
        with self.machine.reading() as db:
            return cards.summarize(db, cards.row(db, task_id))

    def get(self, task_id: int, history: int | None = None, viewer: str | None = None) -> Task:
        """One whole card with its recent history (newest `history` entries, oldest first), and the live path
        reservations tied to it or overlapping its declared paths."""
        history = self.limits.history if history is None else history
        task = cards.task_from(
            self.machine.read_many(cards.whole_statements(task_id, history)), task_id, history, viewer
        )
        if not task.paths and task.status not in ("in_progress", "blocked", "review"):
            return task  # nothing can be tied to it, and no path of it can overlap one
        with self.machine.reading() as db:  # the reservations as they are now (one more read, rarely needed)
            held, total = self.reservations.of_card(db, cards.row(db, task_id), now())
        return task.model_copy(update={"reservations": held or None, "reservations_live": total or None})

    def list(
        self,
        *,
        status: str | None = None,
        task_type: str | None = None,
        assignee: str | None = None,
        label: str | None = None,
        ready: bool | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Cards matching the filters, highest priority first, one bounded page at a time."""
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if not 1 <= limit <= 200:
            raise InvalidInput("limit must be between 1 and 200")
        where, params = [], []
        if status:
            where.append("status = ?"), params.append(status)
        if task_type:
            where.append("task_type = ?"), params.append(task_type.strip().lower())
        if assignee:  # an agent's cards: the ones it holds and the ones reserved for it
            where.append("(assignee = ? OR reserved_for = ?)")
            params += [assignee.strip().lower()] * 2
        if label:
            where.append(self.store.dialect.json_has("tasks.labels")), params.append(label)
        if ready is not None:
            clause = (
                "NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dt ON dt.id = d.depends_on "
                "WHERE d.task_id = tasks.id AND dt.status != 'done')"
            )
            where.append(clause if ready else f"NOT ({clause})")
        base = " AND ".join(where) or "TRUE"
        page_where, page_params = base, list(params)
        if cursor:
            prio, last_id = decode_cursor(cursor, "list_tasks")
            page_where += " AND (priority < ? OR (priority = ? AND id > ?))"
            page_params += [prio, prio, last_id]
        page = f"SELECT * FROM tasks WHERE {page_where} ORDER BY priority DESC, id LIMIT ?"
        counts = self.store.dialect.status_counts
        if where == ["status = ?"]:
            count = (f"SELECT coalesce((SELECT n FROM ({counts}) AS c WHERE status = ?), 0) AS n", params)
        elif not where:
            count = (f"SELECT CAST(coalesce(sum(n), 0) AS BIGINT) AS n FROM ({counts}) AS c", [])
        else:
            count = (f"SELECT count(*) AS n FROM tasks WHERE {base}", params)
        counted, found, dep_rows = self.machine.read_many(
            [
                count,
                (page, page_params + [limit + 1]),
                # the page's dependencies, in the same snapshot and round trip (the page as a subquery)
                (cards.DEPENDENCIES.format(f"SELECT id FROM ({page}) AS p"), page_params + [limit + 1]),
            ]
        )
        total = counted[0]["n"]
        more = len(found) > limit
        found = found[:limit]  # the page's extra row (whether there is more) is not shown
        deps = cards.needs_by_card([r["id"] for r in found], dep_rows)
        tasks = [TaskSummary(**cards.summary_fields(r, deps[r["id"]])) for r in found]
        next_cursor = encode_cursor(found[-1]["priority"], found[-1]["id"]) if more else None
        return Page(tasks=tasks, total=total, next_cursor=next_cursor)

    def board(self, top: int = 5) -> BoardView:
        """Counts per column and the top cards of each."""
        if not 0 <= top <= 50:
            raise InvalidInput("top must be between 0 and 50")
        # the count per column, and how many todo cards still wait on a dependency (ready = todo minus those),
        # counted from the dependencies (few) rather than by probing every todo card for one, joined in the
        # order written; each column's top cards, one ordered, limited select per status in one statement
        # (done newest first, the others by what should be picked up next); the live path reservations: all in
        # one snapshot and round trip
        join = self.store.dialect.ordered_join
        statements = [
            (
                f"SELECT status, n FROM ({self.store.dialect.status_counts}) AS c UNION ALL "
                f"SELECT 'waiting', count(DISTINCT d.task_id) FROM task_deps d {join} tasks t ON t.id = d.task_id "
                f"{join} tasks dt ON dt.id = d.depends_on WHERE t.status = 'todo' AND dt.status != 'done'",
                [],
            ),
            *self.reservations.live_statements(now()),
        ]
        if top:
            order = {status: "updated_at DESC" if status == "done" else "priority DESC, id" for status in STATUSES}
            arms = " UNION ALL ".join(
                "SELECT * FROM (SELECT id, title, task_type, priority, assignee, unverified, status, updated_at "
                f"FROM tasks WHERE status = ? ORDER BY {order[status]} LIMIT ?) AS c{n}"
                for n, status in enumerate(STATUSES)
            )
            statements.append((arms, [v for status in STATUSES for v in (status, top)]))
        counted, live_count, live_rows, *tops = self.machine.read_many(statements)
        counts = {r["status"]: r["n"] for r in counted}
        ready = counts.get("todo", 0) - counts.pop("waiting")
        picked: dict[str, list] = {status: [] for status in STATUSES}
        for r in tops[0] if tops else []:
            picked[r["status"]].append(r)
        for status, found in picked.items():  # a union's arms keep their order in practice, not by rule
            found.sort(key=(lambda r: -r["updated_at"]) if status == "done" else (lambda r: (-r["priority"], r["id"])))
        columns = [
            Column(
                status=status,
                count=counts.get(status, 0),
                top=[
                    Card(
                        id=r["id"],
                        title=r["title"],
                        task_type=r["task_type"],
                        priority=RANK_PRIORITY[r["priority"]],
                        assignee=r["assignee"],
                        unverified=bool(r["unverified"]) if status == "done" else False,
                    )
                    for r in picked[status]
                ],
            )
            for status in STATUSES
        ]
        held, live = self.reservations.live_from(live_count, live_rows)
        return BoardView(
            columns=columns,
            total=sum(counts.values()),
            ready=ready,
            reservations=held or None,
            reservations_live=live or None,
        )

    # ----------------------------------------------------------------- commands

    def create(self, actor: str, new: NewTask) -> TaskSummary:
        """Add a card to todo."""
        task_type = new.task_type.strip().lower()
        if not new.title.strip():
            raise InvalidInput("title is blank: give the card a short imperative title")
        if not TASK_TYPE_RE.match(task_type):
            raise InvalidInput(
                f"task_type {new.task_type!r} is not valid: use a short lowercase word such as "
                "code, test, refactor, docs, design or bug"
            )
        check_text(new.description, self.limits.description, "description")
        labels = check_labels(new.labels, self.limits)
        check_criteria(new.acceptance_criteria, self.limits)
        tests = check_tests(new.acceptance_tests, self.limits)
        waived = sorted({rule.strip().upper() for rule in new.waive})
        if len(waived) > self.limits.labels or not all(RULE_RE.match(rule) for rule in waived):
            raise InvalidInput(
                f"waive takes up to {self.limits.labels} analyser rule ids such as B324 or S608; got "
                f"{', '.join(repr(r) for r in waived[:5])}"
            )
        paths = normalize_all(new.paths)
        deps = list(dict.fromkeys(new.depends_on))
        if len(deps) > self.limits.depends_on:
            raise InvalidInput(f"{len(deps)} dependencies given; at most {self.limits.depends_on}")
        if not 1 <= new.attempts <= MAX_ATTEMPTS:
            raise InvalidInput(
                f"attempts must be 1 (one card) to {MAX_ATTEMPTS} (competing attempts, each its own "
                f"card for a different agent); got {new.attempts}"
            )
        if new.attempts > 1 and new.assignee:
            raise InvalidInput("competing attempts are for different agents: leave assignee out, or use attempts=1")
        if new.budget_tokens is not None and not 1 <= new.budget_tokens <= MAX_BUDGET:
            raise InvalidInput(
                f"budget_tokens must be a whole number of tokens from 1 to {MAX_BUDGET} (e.g. 2000000), or left out "
                f"for no budget; got {new.budget_tokens}"
            )
        assignee = (
            self.agents.registered(new.assignee, f"assignee {new.assignee!r} is not a registered agent")
            if new.assignee
            else None
        )
        repo = self.repos.get(new.repo).name if new.repo is not None else None  # NotFound names the registered
        if new.canary:
            self.canaries.check_new(actor, new)
        # kept as why, decided now: no later edit of its labels takes it away (only an explicit clear, see update)
        approval = (self.approval_rule(task_type, labels) if self.approval_rule else None) or (
            # a canary reads as a card its creator asked to approve: its pass then waits for a person as theirs do
            CREATOR_ASKED if new.needs_approval or new.canary else None
        )
        ts = now()
        with self.store.write(scopes.agent(actor)) as db:
            if deps:
                marks = placeholders(deps)
                found = {r[0] for r in db.execute(f"SELECT id FROM tasks WHERE id IN ({marks})", deps)}
                missing = [d for d in deps if d not in found]
                if missing:
                    raise InvalidInput(f"depends_on names tasks that do not exist: {missing}")
            first = None
            for attempt in range(1, new.attempts + 1):
                title = new.title.strip() + (f" (attempt {attempt} of {new.attempts})" if new.attempts > 1 else "")
                if assignee:
                    note: str | Callable[[int], str] | None = f"reserved for {assignee}"
                elif new.attempts > 1:  # the first attempt names the contest after itself, so its id is the name

                    def note(task_id: int, attempt: int = attempt, first: int | None = first) -> str:
                        return f"attempt {attempt} of {new.attempts} of contest {first or task_id}"

                else:
                    note = None
                values = {
                    "title": title,
                    "description": new.description,
                    "task_type": task_type,
                    "priority": PRIORITY_RANK[new.priority],
                    "labels": json.dumps(labels),
                    "acceptance_criteria": json.dumps(new.acceptance_criteria),
                    "acceptance_tests": tests,
                    "waived": json.dumps(waived),
                    "reserved_for": assignee,
                    "contest": first,
                    "approval": approval,
                    "budget_tokens": new.budget_tokens,
                    "paths": json.dumps(paths),
                    "repo": repo,
                    "canary": int(new.canary),
                }
                created = self.machine.create(db, actor, values, note, ts)
                task_id = created["id"]
                if new.attempts > 1 and first is None:  # the first attempt names the contest after itself
                    first = task_id
                    db.execute("UPDATE tasks SET contest = ? WHERE id = ?", [first, first])
                for dep in deps:
                    db.execute("INSERT INTO task_deps (task_id, depends_on) VALUES (?, ?)", [task_id, dep])
                if assignee and assignee != actor:
                    self.messages.event(
                        db,
                        actor,
                        "task_assignment",
                        task_id,
                        f"task {task_id} is yours: {title}",
                        new.description,
                        recipient=assignee,
                    )
            if first is not None:  # the first attempt changed since (its contest)
                return cards.summarize(db, cards.row(db, first))
            return cards.summarize(db, created, needs=None if deps else [])

    def claim(
        self, actor: str, task_id: int | None = None, task_type: str | None = None, in_repo: bool = False
    ) -> Claim:
        """Take a card: the given one, or the next ready one (highest priority, oldest first). `in_repo`: only a
        card that names a repository (one to be worked in a worktree of it)."""
        return self.take(actor, task_id, task_type, in_repo)[0]

    def take(
        self,
        actor: str,
        task_id: int | None = None,
        task_type: str | None = None,
        in_repo: bool = False,
        then: Callable[[Database, Task], T] | None = None,
    ) -> tuple[Claim, Digest | None, T | None]:
        """`claim`, and the digest of the claimed card's task type, read in the claim's transaction (None when
        nothing was claimed or its type has none yet). The reads a claim needs travel together: one round
        trip for the card, its dependencies and the digest on a database server when a task_id is given.
        `then(db, card)`: more work in the claim's transaction once a card is claimed, whose result comes
        third (None when nothing was claimed)."""
        ts = now()
        with self.store.write(scopes.agent(actor)) as db:
            claim, digest = self._take(db, actor, ts, task_id, task_type, in_repo)
            more = then(db, claim.task) if then is not None and claim.claimed else None
        return claim, digest, more

    def _take(
        self, db: Database, actor: str, ts: float, task_id: int | None, task_type: str | None, in_repo: bool
    ) -> tuple[Claim, Digest | None]:
        """`take`'s claim in its transaction."""
        if task_id is None:
            sql, params = self._claimable_query(actor, [task_type] if task_type else [], in_repo=in_repo)
            # the next card is taken locked, passing over those other claims hold; its dependencies and digest then
            (found,) = self.machine.swept(db, ts, [(for_update(db, sql, skip=True), params)])
            if not found:
                what = f" of type {task_type!r}" if task_type else ""
                what += " naming a repository" if in_repo else ""
                return Claim(
                    claimed=False,
                    message=f"no ready card{what} in todo right now; create one, "
                    "or call get_board to see what is blocked or waiting on dependencies",
                ), None
            row = found[0]
            deps, digest = rows_many(
                db,
                [
                    (cards.DEPENDENCIES.format("?"), [row["id"]]),
                    (digest_store.OF_TYPE.format("SELECT task_type FROM tasks WHERE id = ?"), [row["id"]]),
                ],
            )
        else:
            row, deps, digest = self.machine.swept_card(
                db,
                ts,
                task_id,
                (digest_store.OF_TYPE.format("SELECT task_type FROM tasks WHERE id = ?"), [task_id]),
            )
            if in_repo and row["repo"] is None:
                raise InvalidInput(
                    f"task {task_id} names no repository, so it has no worktree to give; claim it without "
                    "worktree=true, or create a card with repo=<a name from hiveboard repo list>"
                )
            if row["status"] == "in_progress" and row["assignee"] == actor:
                # Claiming what you already hold renews it and hands the token back (an agent that lost it).
                return self._renew(
                    db, row, actor, ts, "claimed again by its holder", "claim_task"
                ), digest_store.of_rows(digest)
            if row["status"] == "in_progress":
                raise NotYourClaim(
                    f"task {task_id} is claimed by {row['assignee']} until "
                    f"{iso(row['lease_expires_at'])}; call claim_task without task_id for the "
                    "next ready card"
                )
            if row["status"] != "todo":
                raise IllegalTransition(f"task {task_id} is {row['status']}; only todo cards can be claimed")
        expires = ts + self.lease_seconds
        row = self.machine.move(
            db,
            row,
            "in_progress",
            "claim_task",
            actor,
            ts=ts,
            note=f"lease until {iso(expires)}",
            sets={"assignee": actor, "fencing_token": row["fencing_token"] + 1},
            deps=deps,
        )
        self.messages.event(
            db, actor, "task_claim", row["id"], f"{actor} claimed task {row['id']}: {row['title']}", row=row
        )
        return self._granted(db, row, expires, fresh=True, deps=deps), digest_store.of_rows(digest)

    def _claimable(
        self, db: Database, actor: str, types: list[str], labels: list[str] = (), in_repo: bool = False
    ) -> list[dict]:
        """The row of the card claim-next would give `actor` (of one of `types`, carrying one of `labels`, when
        given; naming a repository, with `in_repo`): ready, in todo, not reserved for another, not a contest it
        already has an entry in."""
        return rows(db, *self._claimable_query(actor, types, labels, in_repo))

    def _claimable_query(
        self, actor: str, types: list[str], labels: list[str] = (), in_repo: bool = False
    ) -> tuple[str, list]:
        """`_claimable`'s statement and its parameters."""
        where, params = ["t.status = 'todo'", "(t.reserved_for IS NULL OR t.reserved_for = ?)"], [actor]
        if in_repo:
            where.append("t.repo IS NOT NULL")
        if types:
            where.append(f"t.task_type IN ({placeholders(types)})"), params.extend(t.strip().lower() for t in types)
        if labels:
            where.append("(" + " OR ".join([self.store.dialect.json_has("t.labels")] * len(labels)) + ")")
            params.extend(labels)
        return (
            f"SELECT * FROM tasks t WHERE {' AND '.join(where)} AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks "
            "dt ON dt.id = d.depends_on WHERE d.task_id = t.id AND dt.status != 'done') AND (t.contest IS NULL OR NOT "
            "EXISTS (SELECT 1 FROM tasks o WHERE o.contest = t.contest AND o.assignee = ?)) ORDER BY t.priority DESC, "
            "t.id LIMIT 1",
            [*params, actor],
        )

    def next_ready(self, actor: str, types: list[str] = (), labels: list[str] = ()) -> TaskSummary | None:
        """The card claim-next would give `actor` now (of one of `types`, carrying one of `labels`), without
        claiming it; None when there is none."""
        with self.machine.reading() as db:
            found = self._claimable(db, actor, list(types), list(labels))
            return cards.summarize(db, found[0]) if found else None

    def _renew(self, db: Database, row: dict, actor: str, ts: float, note: str | None, via: Via) -> Claim:
        # the caller has established that the actor holds the card (by token, or by claiming it again)
        row = self.machine.move(db, row, "in_progress", via, actor, token=row["fencing_token"], note=note, ts=ts)
        return self._granted(db, row, row["lease_expires_at"])

    def _granted(
        self, db: Database, row: dict, expires: float, fresh: bool = False, deps: list[dict] | None = None
    ) -> Claim:
        """The answer to the claim holder: its card, token and lease, and other agents' live reservations of the
        card's declared paths (a warning: the claim stands). `fresh`: a new claim, whose token has no artifacts
        yet; `deps`: the card's dependency rows, read in this transaction."""
        others = self.reservations.others_on(db, row, row["assignee"], now())
        warning = ""
        if others:
            holders = ", ".join(dict.fromkeys(r.agent for r in others))
            warning = f"; paths of this card are reserved by {holders} (see reservations): coordinate before editing"
        return Claim(
            claimed=True,
            message=f"task {row['id']} is yours until {iso(expires)}{warning}; if it cannot be done as written, flag_task",
            task=cards.task(db, row, 0, viewer=row["assignee"], artifacts=not fresh, deps=deps),
            token=row["fencing_token"],
            lease_expires_at=iso(expires),
            lease_seconds=self.lease_seconds,
            reservations=others or None,
        )

    def renew(self, actor: str, task_id: int, token: int) -> Claim:
        """Extend the holder's lease by the lease length from now."""
        with self.machine.holding(actor, task_id, token, "renew the claim on", running=True) as (db, row, ts, _):
            return self._renew(db, row, actor, ts, None, "update_task")

    def release(self, actor: str, task_id: int, token: int, reason: str | None = None) -> TaskSummary:
        """Give a claimed card back to todo."""
        check_text(reason, self.limits.note, "reason")
        with self.machine.holding(actor, task_id, token, "release") as (db, row, ts, needs):
            self.messages.event(
                db,
                actor,
                "status_update",
                task_id,
                f"{actor} released task {task_id} back to todo" + (f": {reason}" if reason else ""),
                row=row,
            )
            row = self.machine.move(db, row, "todo", "release_task", actor, token=token, note=reason, ts=ts)
            return cards.summarize(db, row, needs)

    def update(
        self,
        actor: str,
        task_id: int,
        *,
        token: int | None = None,
        note: str | None = None,
        status: str | None = None,
        reason: str | None = None,
        edit: TaskEdit | None = None,
        expected_version: int | None = None,
        grant_rounds: int | None = None,
    ) -> TaskSummary:
        """Progress notes, status changes (blocked, resume, unblock, needs_human) and field edits.

        The card's brief (title, description, labels, acceptance criteria, needs_approval) is changed only by
        its creator or an operator, and its acceptance criteria only until it is first claimed; a note or a
        priority on a claimed card is its holder's. `grant_rounds`: more review rounds for the card, by its
        creator or an operator (Reviews.grant_rounds), granted before a status change in the same call."""
        check_text(note, self.limits.note, "note")
        check_text(reason, self.limits.note, "reason")
        edit = edit or TaskEdit()
        changes: dict = {}
        if edit.title is not None:
            if not edit.title.strip() or len(edit.title) > 200:
                raise InvalidInput("title must be 1-200 characters")
            changes["title"] = edit.title.strip()
        if edit.description is not None:
            check_text(edit.description, self.limits.description, "description")
            changes["description"] = edit.description
        if edit.priority is not None:
            changes["priority"] = PRIORITY_RANK[edit.priority]
        if edit.labels is not None:
            changes["labels"] = json.dumps(check_labels(edit.labels, self.limits))
        if edit.acceptance_criteria is not None:
            check_criteria(edit.acceptance_criteria, self.limits)
            changes["acceptance_criteria"] = json.dumps(edit.acceptance_criteria)
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if reason and not (status or grant_rounds):
            raise InvalidInput(
                "reason= goes with status= (blocked, needs_human) or rounds=; for a progress note use note="
            )
        if not (changes or note or status or grant_rounds or edit.needs_approval is not None):
            if token is not None:  # the holder checking in: extend the lease
                self.renew(actor, task_id, token)
                return self.summary(task_id)
            raise InvalidInput(
                "nothing to update: pass a note, a status or a field to change (or, on a card you "
                "hold, your token alone to extend your lease)"
            )
        ts = now()
        with self.store.write(scopes.agent(actor)) as db:
            row, deps = self.machine.swept_card(db, ts, task_id)
            if expected_version is not None and expected_version != row["version"]:
                raise Conflict(
                    f"task {task_id} changed since version {expected_version} (it is now version "
                    f"{row['version']}); call get_task, re-apply your change and retry"
                )
            if grant_rounds:
                row = self.reviews.grant_rounds(db, row, actor, grant_rounds, reason or note, ts)
                if not (changes or status or edit.needs_approval is not None):  # its note is the grant's reason
                    return cards.summarize(db, row, cards.needs_of(deps))
            held = row["assignee"] is not None and row["status"] in ("in_progress", "blocked")
            stuck_review = (
                row["status"] == "review"
                and status == "needs_human"
                and not (changes or note or edit.needs_approval is not None)
            )
            if row["status"] in ("done", "review", "cancelled") and not stuck_review:
                raise IllegalTransition(
                    f"task {task_id} is {row['status']} and cannot be updated"
                    + (
                        "; create a follow-up task instead"
                        if row["status"] in ("done", "cancelled")
                        else "; wait for its review to finish (get_review), or, if the review is "
                        "stuck, ask a person (role human or lead) to move it to needs_human"
                    )
                )
            moving = status is not None and status != row["status"]
            if moving and find(row["status"], status, "update_task") is None:
                raise IllegalTransition(
                    illegal(row, status, "update_task")
                    + " (use claim_task / release_task / complete_task for the rest)"
                )
            brief = [
                name
                for name in ("title", "description", "labels", "acceptance_criteria", "needs_approval")
                if getattr(edit, name) is not None
            ]
            if brief:  # what the card asks for is its creator's: a holder rewriting it would grade its own work
                if actor != row["created_by"] and not self.machine.operator(actor):
                    raise Forbidden(
                        f"only task {task_id}'s creator ({row['created_by']}) or an agent with the role "
                        f"{' or '.join(OPERATOR_ROLES)} may change its {', '.join(brief)}; send a note "
                        "instead, or ask them with publish_message"
                    )
                if edit.acceptance_criteria is not None and row["fencing_token"] > 0:
                    raise IllegalTransition(
                        f"task {task_id}'s acceptance criteria are frozen since it was first "
                        "claimed; create a new card with create_task for other criteria"
                    )
                approval = self._approval_after(row, actor, edit.needs_approval, changes.get("labels"))
                if approval != row["approval"]:
                    changes["approval"] = approval
            # A note or a priority on a claimed card is the holder's business, and so is anything sent with a
            # token (the caller believes it holds the card).
            if token is not None or (not moving and held and (note or edit.priority is not None)):
                self.machine.holder_check(row, actor, token, "update")
            text = "; ".join(x for x in (reason, note, ("changed " + ", ".join(changes)) if changes else None) if x)
            if moving:  # posted before the change, so a holder losing the card is still told
                self.messages.event(
                    db,
                    actor,
                    "status_update",
                    task_id,
                    f"task {task_id} {row['status']} → {status}" + (f": {reason}" if reason else ""),
                )
                row = self.machine.move(
                    db,
                    row,
                    status,
                    "update_task",
                    actor,
                    token=token,
                    reason=reason,
                    sets=changes,
                    note=text or None,
                    ts=ts,
                    deps=deps,
                )
            else:
                if row["status"] == "in_progress" and held and actor == row["assignee"]:
                    changes["lease_expires_at"] = ts + self.lease_seconds  # activity renews the lease
                row = self.machine.edit(
                    db,
                    row,
                    actor,
                    "edited" if changes.keys() - {"lease_expires_at"} else "progress",
                    changes,
                    text or None,
                    ts,
                )
            return cards.summarize(db, row, cards.needs_of(deps))  # a card's edit or move changes none of them

    def _approval_after(self, row: dict, actor: str, asked: bool | None, labels: str | None) -> str | None:
        """Why the card needs a person's approval after an edit by its creator or an operator: a label that asks
        for it adds it, taking a label away never removes it, and only `asked=False` clears it (what its creator
        alone asked for, by its creator; anything else only by an operator; never while the card's type or
        labels still match the review configuration)."""
        by_rule = (
            self.approval_rule(row["task_type"], json.loads(labels or row["labels"])) if self.approval_rule else None
        )
        if asked is None:
            return row["approval"] or by_rule
        if asked:
            return row["approval"] or by_rule or (CREATOR_ASKED if actor == row["created_by"] else f"asked by {actor}")
        if by_rule:
            raise InvalidInput(
                f"task {row['id']}'s {by_rule} needs a person's approval under the review "
                "configuration, so needs_approval cannot be cleared"
                + ("; remove that label in the same call" if by_rule.startswith("label") else "")
            )
        if row["approval"] not in (None, CREATOR_ASKED) and not self.machine.operator(actor):
            raise Forbidden(
                f"task {row['id']} needs a person's approval ({row['approval']}), which only an agent "
                f"with the role {' or '.join(OPERATOR_ROLES)} may clear; ask the operator"
            )
        return None

    def complete(
        self,
        actor: str,
        task_id: int,
        token: int,
        output: str,
        summary: str | None = None,
        artifacts: list[Artifact] | None = None,
        to_status: str | Callable[[TaskSummary], str] = "done",
        helpful: list[int] | None = None,
        commit: Commit | None = None,
    ) -> TaskSummary:
        """Record the holder's output and artifacts (or the commit it handed in, established through git by the
        caller: Commits.target says where) and move the card to review (or done).

        `to_status` is "review" or "done", or a function of the held card that says which (decided inside
        the transaction, so deciding costs no read of its own). A commit is only handed in to review."""
        if not callable(to_status) and to_status not in ("review", "done", "needs_human"):
            raise ValueError("to_status must be review, done or needs_human")
        artifacts = artifacts or []
        check_text(output, self.limits.output, "output")
        check_text(summary, self.limits.summary, "summary")
        if len(artifacts) > self.limits.artifacts:
            raise InvalidInput(f"{len(artifacts)} artifacts given; at most {self.limits.artifacts}")
        for a in artifacts:
            check_text(a.content, self.limits.artifact_chars, f"artifact {a.name!r}")
        if commit is not None and artifacts:
            raise InvalidInput(BOTH)
        if not output.strip() and not artifacts and commit is None:
            raise InvalidInput("complete_task needs output= describing what was done (or at least one artifact)")
        with self.machine.holding(actor, task_id, token, "complete", running=True) as (db, row, ts, needs):
            # completing changes none of the card's dependencies
            if callable(to_status):
                to_status = to_status(cards.summarize(db, row, needs))
                if to_status not in ("review", "done", "needs_human"):
                    raise ValueError("to_status must be review, done or needs_human")
            if commit is not None:
                if to_status != "review":
                    raise InvalidInput(
                        f"task {task_id} would not be reviewed on this server (review is off), and a commit is only "
                        "handed in to be reviewed and merged; hand in with artifacts= instead"
                    )
                self.commits.add(db, row, token, commit, ts)
            if artifacts:  # charged before anything is written: a refusal leaves the card as it was
                self.quotas.charge(db, actor, ARTIFACT, len(artifacts), sum(len(a.content) for a in artifacts))
            # the artifacts first: a card that goes straight to done takes them into the shared memory
            db.execute("DELETE FROM artifacts WHERE task_id = ? AND fencing_token = ?", [task_id, token])
            db.conn.executemany(
                "INSERT INTO artifacts (task_id, fencing_token, name, kind, content, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [[task_id, token, a.name, a.kind, a.content, ts] for a in artifacts],
            )
            # the card's artifacts now, for what reads them back in this transaction (the output it adds to the memory)
            self.store.note(("artifacts", task_id, token), [(a.name, a.kind, a.content) for a in artifacts])
            moved = self.machine.move(
                db,
                row,
                to_status,
                "complete_task",
                actor,
                token=token,
                note=summary,
                ts=ts,
                sets={"output": output, "summary": summary},
                reason=f"awaiting a person's approval ({row['approval']}); no review ran"
                if to_status == "needs_human"
                else None,
            )
            if helpful:
                self.knowledge.mark_useful(db, actor, task_id, helpful)
            if to_status == "review":  # the durable job commits with the card's move, or neither does
                self.reviews.enqueue(
                    db, row, output, summary, artifacts, ts
                )  # at the commit row's ts: its round finds it by that
            self.messages.event(
                db,
                actor,
                "output.complete",
                task_id,
                f"task {task_id} complete ({to_status}): {summary or output.strip()[:200]}",
                output,
                row=moved,
            )
            return cards.summarize(db, moved, needs)  # nothing after the move changes the card's row
