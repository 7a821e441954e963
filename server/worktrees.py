"""A git worktree per claimed card, and none left behind.

`claim_task(worktree=true)` on a card that names a registered repository gives its holder a worktree of that
repository on a branch of its own, `hb/<agent>/<card>`, made from the base branch, under
`<repository>/.hiveboard/worktrees/<card>-<agent>` (beside the project, where the agent's tools reach it;
`/.hiveboard/` is added to the repository's `.git/info/exclude` so the main worktree does not list it). The same
agent claiming the card again gets the same worktree back, or, once that was removed, its branch checked out
again. Files the repository lists in `.worktreeinclude` (gitignore patterns: the env files a checkout lacks)
are copied in from the main worktree.

A worktree lasts while its card keeps it (board/worktrees.py says when); `WorktreeSweeper`, a background
worker of every serving process, removes the others when a card ends or goes back to todo, and once at start;
`hiveboard worktree prune` does the same by hand and also clears what git and a failed removal left. A
removed worktree's branch is kept (the merge queue or a person may need it) unless the base already has it.

Every git command goes through critics/git.py (in the sandbox). What is done here on the host is file work
in directories an agent can write to, so it never follows a symlink: directories are opened one component at
a time with O_NOFOLLOW, and only regular files with a single link are copied, within fixed bounds.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from hiveboard.board.errors import BoardError
from hiveboard.board.events import Event, TaskChanged
from hiveboard.board.repos import Repo
from hiveboard.board.tasks import Board
from hiveboard.board.worker import Worker
from hiveboard.board.worktrees import Worktree
from hiveboard.critics.git import Git, GitError, check_ref, resolve

log = logging.getLogger("hiveboard")

HOME = ".hiveboard"  # in the repository's main worktree; excluded from git's view of it
PLACE = (HOME, "worktrees")
EXCLUDE_LINE = f"/{HOME}/"
INCLUDE_FILE = ".worktreeinclude"
MAX_INCLUDE_PATTERNS = 64 << 10  # bytes of .worktreeinclude read
MAX_INCLUDE_FILES = 100
MAX_INCLUDE_BYTES = 10 << 20  # all copied files together
MAX_LISTED = 1 << 20  # bytes of git's list of matching files
LISTING_BYTES = 64 << 20  # bytes of git's list of a commit's files (ls-tree), to size its checkout
EXCLUDE_BYTES = 1 << 20  # an info/exclude larger than this is left as it is
NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# errors a worktree operation can meet, each one sentence
PROBLEMS = (GitError, BoardError, OSError)


@dataclass
class Given:
    """The worktree a claim hands out."""

    path: str
    branch: str
    copied: list[str] = field(default_factory=list)
    note: str = ""


def branch_for(agent: str, task_id: int) -> str:
    """The card's branch for this agent, or GitError when the agent's name cannot be part of one."""
    branch = f"hb/{agent}/{task_id}"
    try:
        check_ref(branch)
        bad = agent.startswith(".") or agent.endswith((".", ".lock"))
    except GitError:
        bad = True
    if bad:
        raise GitError(
            f"agent name {agent!r} cannot be part of a git branch name (hb/<agent>/<card>); work in a worktree "
            "as an agent whose name has no '..' and does not end in '.' or '.lock'"
        )
    return branch


def why(exc: BaseException) -> str:
    """An error of PROBLEMS as a sentence (an OSError's own text names neither what nor where in a useful way)."""
    if isinstance(exc, OSError) and not isinstance(exc, GitError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"a file operation failed{where}: {exc.strerror or exc}"
    return str(exc)


class WorktreeManager:
    """Makes, hands back and removes the worktrees of claimed cards (git through `git`, the rows on the board)."""

    def __init__(self, board: Board, git: Git):
        self.board = board
        self.git = git
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._sizes: dict[tuple[str, str], int] = {}  # (git directory, commit): bytes of its checkout

    def _lock(self, repo: str) -> threading.Lock:
        """One worktree operation per repository at a time in this process (another process's meets git's own
        refusals: a path or branch in use)."""
        with self._locks_lock:
            return self._locks.setdefault(repo, threading.Lock())

    # ----------------------------------------------------------------- registering a repository

    def inspect(self, path: Path, base: str) -> tuple[str, str]:
        """(top-level directory, common git directory) of the repository at `path`, absolute, after checking it
        has the branch `base`; GitError in one sentence otherwise."""
        problem = self.git.why_not()
        if problem:
            raise GitError(problem)
        check_ref(base)
        where = Path(path).expanduser()
        if not where.is_dir():
            raise GitError(f"{where} is not a directory; give the top directory of a git repository's clone")
        where = where.resolve()
        head = self.git.run(
            where, ["rev-parse", "--path-format=absolute", "--is-bare-repository", "--git-common-dir"], ok=(0, 128)
        )
        lines = head.text.split("\n")
        if head.returncode != 0 or len(lines) < 2:
            raise GitError(
                f"{where} is not a git repository (or its .git is elsewhere); give the top directory of a clone "
                "whose .git directory is inside it"
            )
        if lines[0] == "true":
            raise GitError(
                f"{where} is a bare repository; register a clone with a working tree (worktrees and "
                f"{INCLUDE_FILE} are made from its main worktree)"
            )
        top = self.git.run(where, ["rev-parse", "--path-format=absolute", "--show-toplevel"]).text.strip()
        git_dir = lines[1].strip()
        if Path(top).resolve() != where:
            raise GitError(f"{where} is inside the repository {top}; register its top directory, {top}")
        if not Path(git_dir).resolve().is_relative_to(where):
            raise GitError(
                f"{where} keeps its git directory elsewhere ({git_dir}); register a clone whose .git directory "
                "is inside it"
            )
        uid = os.geteuid()
        for checked in (where, Path(git_dir)):
            if checked.stat().st_uid != uid:
                raise GitError(
                    f"{checked} belongs to another user (uid {checked.stat().st_uid}); register a repository that "
                    "the user running hiveboard owns"
                )
        if not self.git.run(where, ["for-each-ref", "--count=1", "refs/heads/"]).text.strip():
            raise GitError(f"{where} has no commit yet; commit something on {base} first")
        found = self.git.run(
            where, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"refs/heads/{base}^{{commit}}"], ok=(0, 1)
        )
        if found.returncode != 0:
            branches = self.git.run(
                where, ["for-each-ref", "--count=10", "--format=%(refname:short)", "refs/heads/"]
            ).text.split()
            raise GitError(
                f"{where} has no branch {base!r} (its branches: {', '.join(branches)}); pass --base with one of them"
            )
        return str(where), str(Path(git_dir).resolve())

    # ----------------------------------------------------------------- giving one at claim

    def check(self, agent: str) -> None:
        """GitError when no worktree can be made for `agent` whatever the card: git cannot run here, or its name
        cannot be part of a branch. What a claim asks before it takes the card."""
        problem = self.git.why_not()
        if problem:
            raise GitError(problem)
        branch_for(agent, 1)

    def give(self, agent: str, task_id: int, repo_name: str) -> Given:
        """The worktree `agent` works the card in: the one it has, or a new one (its branch from an earlier claim
        checked out again, else a new branch from the base). GitError, BoardError or OSError when it cannot be."""
        self.check(agent)
        branch = branch_for(agent, task_id)
        repo = self.board.repos.get(repo_name)
        with self._lock(repo.name):
            live = self.board.worktrees.live(task_id, agent)
            if live is not None:
                if _is_worktree(Path(live.path)):
                    return Given(live.path, live.branch, note=f"your worktree from before, on branch {live.branch}")
                self.board.worktrees.gone(live.id)  # deleted by hand: made again below
            quotas = self.board.quotas
            self.board.worktrees.check_room(
                agent, repo.name, quotas.cap("worktrees_per_agent"), quotas.cap("worktrees_per_repository")
            )
            return self._make(repo, agent, task_id, branch)

    def _make(self, repo: Repo, agent: str, task_id: int, branch: str) -> Given:
        top, git_dir = Path(repo.path), Path(repo.git_dir)
        place = _place(top)
        _exclude(git_dir)
        run = self.git.run
        exists = (
            run(top, ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], readable=[git_dir], ok=(0, 1))
        ).returncode == 0
        earlier = self.board.worktrees.last(task_id, agent)
        path = _free(place, f"{task_id}-{agent}")
        if exists:
            if earlier is None or earlier.branch != branch:
                raise GitError(
                    f"branch {branch} already exists in repository {repo.name!r} and hiveboard did not make it for "
                    "you; ask the operator to delete it (git branch -D) and claim again"
                )
            self._free_branch(repo, place, branch)
            base_sha = earlier.base_sha
            args = ["worktree", "add", "--end-of-options", str(path), branch]
            how = f"your branch {branch} from your earlier claim"
        else:
            tip = resolve(self.git, top, f"refs/heads/{repo.base}", binds=[git_dir])
            # work starts where the merge queue left the base: a commit put there behind its back was never
            # reviewed, and is not handed on to the next card before a person adopts it
            base_sha = self.board.repos.recorded(repo.name, tip) if repo.merge_mode == "auto" else tip
            args = ["worktree", "add", "-b", branch, "--end-of-options", str(path), base_sha]
            how = f"new branch {branch} from {repo.base} at {base_sha[:12]}" + (
                ""
                if base_sha == tip
                else f" (where the merge queue left it; {repo.base} moved to {tip[:12]} outside it)"
            )
        quotas = self.board.quotas
        self.board.worktrees.check_disk(
            agent,
            repo.name,
            self.checkout_bytes(
                repo, resolve(self.git, top, f"refs/heads/{branch}", binds=[git_dir]) if exists else base_sha
            ),
            self._live_bytes,
            quotas.cap("worktree_mb_per_agent"),
            quotas.cap("worktree_mb_per_repository"),
        )
        run(top, args, writable=[git_dir, place], timeout=300)
        try:
            copied, skipped = self._include(top, git_dir, path)
            self.board.worktrees.record(task_id, agent, repo.name, str(path), branch, base_sha)
        except BaseException:
            self._undo(repo, place, path, branch if not exists else None)
            raise
        note = f"worktree {path} on {how}"
        if copied:
            note += f"; copied from the main worktree ({INCLUDE_FILE}): {_some(copied, ', ')}"
        if skipped:
            note += f"; not copied: {_some(skipped, '; ')}"
        return Given(str(path), branch, copied, note)

    def checkout_bytes(self, repo: Repo, commit: str) -> int:
        """The bytes a checkout of `commit` writes: the sizes of its tracked files, summed from git's tree (no
        checkout, no walk of the disk), kept per commit (a commit's tree never changes)."""
        key = (repo.git_dir, commit)
        if key not in self._sizes:
            out = self.git.run(
                Path(repo.path),
                ["ls-tree", "-r", "-l", "-z", "--full-tree", "--end-of-options", commit],
                readable=[Path(repo.git_dir)],
                limit=LISTING_BYTES,
            ).stdout
            total = 0
            for entry in out.split(b"\0"):
                fields = entry.split(b"\t", 1)[0].split()
                if len(fields) == 4 and fields[1] == b"blob" and fields[3].isdigit():
                    total += int(fields[3])
            with self._locks_lock:
                if len(self._sizes) >= 1024:
                    self._sizes.clear()
                self._sizes[key] = total
        return self._sizes[key]

    def _live_bytes(self, worktree: Worktree) -> int:
        """A live worktree's checkout as it was made (its base commit; what was written since is the agent's work);
        0 when its repository is no longer registered or git cannot read the commit."""
        try:
            return self.checkout_bytes(self.board.repos.get(worktree.repo), worktree.base_sha)
        except (GitError, BoardError):
            return 0

    def _undo(self, repo: Repo, place: Path, path: Path, new_branch: str | None) -> None:
        """Take back a worktree made for a claim that did not go through (best effort: prune clears the rest)."""
        git_dir = Path(repo.git_dir)
        try:
            self.git.run(
                Path(repo.path),
                ["worktree", "remove", "--force", "--force", "--end-of-options", str(path)],
                writable=[git_dir, place],
            )
            if new_branch is not None:
                self.git.run(Path(repo.path), ["branch", "-D", "--end-of-options", new_branch], writable=[git_dir])
        except GitError:
            log.warning("could not take back the worktree %s of repository %s", path, repo.name, exc_info=True)

    def _free_branch(self, repo: Repo, place: Path, branch: str) -> None:
        """Remove a worktree of ours that still has `branch` checked out (one retired, whose removal another
        process has not finished), so the branch can be checked out again."""
        for path, checked_out in self._listed(repo):
            if checked_out == f"refs/heads/{branch}" and Path(path).parent == place:
                self.git.run(
                    Path(repo.path),
                    ["worktree", "remove", "--force", "--force", "--end-of-options", path],
                    writable=[Path(repo.git_dir), place],
                )

    def _listed(self, repo: Repo) -> list[tuple[str, str | None]]:
        """git's worktrees of the repository: (path, the branch ref checked out there, or None)."""
        out = self.git.run(
            Path(repo.path), ["worktree", "list", "--porcelain", "-z"], readable=[Path(repo.git_dir)], limit=4 << 20
        ).text
        listed: list[tuple[str, str | None]] = []
        for record in out.split("\0\0"):
            fields = dict((line.split(" ", 1) + [""])[:2] for line in record.split("\0") if line)
            if "worktree" in fields:
                listed.append((fields["worktree"], fields.get("branch")))
        return listed

    def _include(self, top: Path, git_dir: Path, dest: Path) -> tuple[list[str], list[str]]:
        """Copy the main worktree's untracked files that .worktreeinclude lists into `dest`: (copied, skipped
        with why)."""
        try:
            info = os.lstat(top / INCLUDE_FILE)
        except FileNotFoundError:
            return [], []
        if not stat.S_ISREG(info.st_mode):
            return [], [f"{INCLUDE_FILE} is not a regular file"]
        if info.st_size > MAX_INCLUDE_PATTERNS:
            return [], [f"{INCLUDE_FILE} is larger than {MAX_INCLUDE_PATTERNS >> 10} KB"]
        try:
            listed = self.git.run(
                top,
                ["ls-files", "-z", "--others", "--ignored", f"--exclude-from={INCLUDE_FILE}"],
                readable=[git_dir],
                limit=MAX_LISTED,
            ).stdout
        except GitError as exc:
            return [], [f"{INCLUDE_FILE}'s files could not be listed ({exc})"]
        copied: list[str] = []
        skipped: list[str] = []
        budget = MAX_INCLUDE_BYTES
        over = 0
        hidden = self.git.hidden
        for raw in listed.split(b"\0"):
            rel = raw.decode("utf-8", "replace")
            if not rel:
                continue
            parts = rel.split("/")
            if rel.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts) or parts[0] == HOME:
                continue
            if any((top / rel).is_relative_to(h) for h in hidden):
                skipped.append(f"{rel} (hiveboard's own data)")
                continue
            if len(copied) >= MAX_INCLUDE_FILES:
                over += 1
                continue
            try:
                size = _copy(top, dest, parts, budget)
            except _Skip as exc:
                skipped.append(f"{rel} ({exc})")
                continue
            budget -= size
            copied.append(rel)
        if over:
            skipped.append(f"{over} more file(s): at most {MAX_INCLUDE_FILES} are copied")
        return copied, skipped

    # ----------------------------------------------------------------- removing orphans

    def sweep(self) -> tuple[list[str], bool]:
        """Remove the worktrees whose cards no longer keep them (expired leases returned to todo first): what
        was done, one line each, and whether more may be waiting."""
        self.board.machine.sweep_expired()
        orphans = self.board.worktrees.orphans()
        lines = []
        for row in orphans:
            with self._lock(row.repo):
                if not self.board.worktrees.retire(row.id):
                    continue  # claimed again meanwhile: its holder keeps it
                try:
                    lines.append(self._remove(row))
                except PROBLEMS as exc:
                    log.warning("worktree %s of task %s could not be removed: %s", row.path, row.task_id, why(exc))
                    lines.append(f"task {row.task_id}: worktree {row.path} could not be removed: {why(exc)}")
        return lines, len(orphans) == 100

    def _remove(self, row: Worktree) -> str:
        repo = self.board.repos.get(row.repo)
        top, git_dir = Path(repo.path), Path(repo.git_dir)
        place = _place(top)
        path = Path(row.path)
        if path.parent != place:  # a row of a repository since moved or registered again elsewhere
            return f"task {row.task_id}: worktree {row.path} is not under {place}; left as it is"
        if os.path.lexists(path):
            self.git.run(
                top,
                ["worktree", "remove", "--force", "--force", "--end-of-options", str(path)],
                writable=[git_dir, place],
            )
        else:
            self.git.run(top, ["worktree", "prune"], writable=[git_dir])
        line = f"task {row.task_id}: removed worktree {row.path}"
        if self._merged(repo, row.branch) and not any(
            w.branch == row.branch for w in self.board.worktrees.live_in(repo.name)
        ):
            self.git.run(top, ["branch", "-D", "--end-of-options", row.branch], writable=[git_dir])
            return line + f" and branch {row.branch} ({repo.base} has it)"
        return line + f"; branch {row.branch} kept"

    def _merged(self, repo: Repo, branch: str) -> bool:
        """Whether the base branch already contains `branch` (False when either is missing)."""
        out = self.git.run(
            Path(repo.path),
            ["merge-base", "--is-ancestor", "--end-of-options", f"refs/heads/{branch}", f"refs/heads/{repo.base}"],
            readable=[Path(repo.git_dir)],
            ok=(0, 1, 128),
        )
        return out.returncode == 0

    def prune(self) -> list[str]:
        """The sweep, then for every repository: git's records of worktrees that are gone (`git worktree prune`),
        worktrees under .hiveboard/worktrees that no card keeps, and hb/ branches the base already has and no
        worktree uses. What was removed, one line each."""
        lines, more = self.sweep()
        while more:
            again, more = self.sweep()
            lines += again
        for repo in self.board.repos.list():
            with self._lock(repo.name):
                try:
                    lines += self._prune_repo(repo)
                except PROBLEMS as exc:
                    lines.append(f"{repo.name}: {why(exc)}")
        return lines

    def _prune_repo(self, repo: Repo) -> list[str]:
        top, git_dir = Path(repo.path), Path(repo.git_dir)
        lines = []
        out = self.git.run(top, ["worktree", "prune", "--verbose"], writable=[git_dir])
        for said in (out.text + out.stderr).splitlines():
            if said.strip():
                lines.append(f"{repo.name}: git worktree prune: {said.strip()}")
        live = self.board.worktrees.live_in(repo.name)
        kept = {w.path for w in live}
        place = top.joinpath(*PLACE)
        leftovers = [p for p, _ in self._listed(repo) if Path(p).parent == place and p not in kept]
        if leftovers:
            place = _place(top)  # checked before it is bound writable
        for path in leftovers:
            self.git.run(
                top, ["worktree", "remove", "--force", "--force", "--end-of-options", path], writable=[git_dir, place]
            )
            lines.append(f"{repo.name}: removed worktree {path}, which no card keeps")
        in_use = {w.branch for w in live} | {b.removeprefix("refs/heads/") for _, b in self._listed(repo) if b}
        branches = self.git.run(
            top, ["for-each-ref", "--format=%(refname)", "refs/heads/hb/"], readable=[git_dir], limit=4 << 20
        ).text.split()
        for ref in branches:
            branch = ref.removeprefix("refs/heads/")
            if branch not in in_use and self._merged(repo, branch):
                self.git.run(top, ["branch", "-D", "--end-of-options", branch], writable=[git_dir])
                lines.append(f"{repo.name}: deleted branch {branch} ({repo.base} has it)")
        return lines


class WorktreeSweeper(Worker):
    """Removes orphaned worktrees: at start, when a card moves to done or todo (released, its lease ran out, sent
    back by a person), and on the poll (which also returns expired leases to todo, as a read would)."""

    def __init__(self, manager: WorktreeManager, poll_seconds: float = 30.0):
        super().__init__(
            manager.board.store.notifier,
            name="hiveboard-worktrees",
            poll_seconds=poll_seconds,
            log=log,
            failure="removing orphaned worktrees failed; retrying later",
            join_timeout=60,  # a removal under way finishes (git's own timeout bounds it)
        )
        self.manager = manager

    def heard(self, events: list[Event]) -> bool:
        return any(isinstance(e, TaskChanged) and e.status in ("done", "todo") for e in events)

    def step(self, n: int) -> bool:
        _, more = self.manager.sweep()
        return more


# ----------------------------------------------------------------- host file work, never through a symlink


class _Skip(Exception):
    """A listed file that is not copied, and why."""


def _open_dirs(root: Path, parts: tuple[str, ...] | list[str], create: bool = False) -> int:
    """A descriptor of root/parts[0]/…, each component opened without following a symlink (ELOOP or
    ENOTDIR when one is not a real directory); `create` makes missing ones."""
    fd = os.open(root, NOFOLLOW_DIR)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            inner = os.open(part, NOFOLLOW_DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _place(top: Path) -> Path:
    """<top>/.hiveboard/worktrees, made if missing, checked to be real directories (no symlink on the way):
    git is given it writable."""
    try:
        os.close(_open_dirs(top, PLACE, create=True))
    except OSError as exc:
        raise GitError(
            f"{top / HOME} cannot hold worktrees ({exc.strerror}: a symlink or a file where hiveboard keeps its "
            f"directories?); remove it and claim again"
        ) from None
    place = top.joinpath(*PLACE)
    if place.resolve() != place:
        raise GitError(f"{place} does not resolve to itself; remove {top / HOME} and claim again")
    return place


def _free(place: Path, name: str) -> Path:
    """A path under `place` named `name`, or name-2, name-3, … when one is taken (a removal that failed)."""
    for n in range(1, 100):
        path = place / (name if n == 1 else f"{name}-{n}")
        if not os.path.lexists(path):
            return path
    raise GitError(f"{place} holds 99 leftovers named {name}; run hiveboard worktree prune")


def _some(items: list[str], sep: str, shown: int = 10) -> str:
    return sep.join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _is_worktree(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISREG(os.lstat(path / ".git").st_mode)
    except OSError:
        return False


def _exclude(git_dir: Path) -> None:
    """Add /.hiveboard/ to the repository's info/exclude (once), so the main worktree does not list the worktrees."""
    fd = _open_dirs(git_dir, ("info",), create=True)
    try:
        handle = os.open(
            "exclude", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=fd
        )
    except OSError as exc:
        os.close(fd)
        raise GitError(f"{git_dir}/info/exclude cannot be written ({exc.strerror}); make it a regular file") from None
    os.close(fd)
    with os.fdopen(handle, "r+b") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > EXCLUDE_BYTES:
            return
        text = f.read()
        if EXCLUDE_LINE.encode() in text.splitlines():
            return
        f.write((b"" if not text or text.endswith(b"\n") else b"\n") + EXCLUDE_LINE.encode() + b"\n")


def _copy(top: Path, dest: Path, parts: list[str], budget: int) -> int:
    """Copy top/parts to dest/parts: a regular file with one link, reached through real directories on both
    sides, not already in the worktree, within `budget` bytes. Its size, or _Skip saying why not."""
    *dirs, name = parts
    try:
        src_dir = _open_dirs(top, dirs)
    except OSError:
        raise _Skip("reached through a symlink") from None
    try:
        try:
            src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
        except OSError:
            raise _Skip("a symlink or unreadable") from None
    finally:
        os.close(src_dir)
    with os.fdopen(src, "rb") as reader:
        info = os.fstat(reader.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _Skip("not a regular file")
        if info.st_nlink != 1:
            raise _Skip("a hard link")
        if info.st_size > budget:
            raise _Skip(f"over the {MAX_INCLUDE_BYTES >> 20} MB copied at most")
        content = reader.read(info.st_size + 1)
        if len(content) > info.st_size:
            raise _Skip("grew while read")
    try:
        dest_dir = _open_dirs(dest, dirs, create=True)
    except OSError:
        raise _Skip("its directory in the worktree is a symlink or a file") from None
    try:
        try:
            out = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                stat.S_IMODE(info.st_mode) & 0o777,
                dir_fd=dest_dir,
            )
        except FileExistsError:
            raise _Skip("already in the worktree") from None
    finally:
        os.close(dest_dir)
    with os.fdopen(out, "wb") as writer:
        writer.write(content)
    return len(content)
