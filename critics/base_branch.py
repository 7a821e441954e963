"""The base branch is the merge queue's: a hook that keeps agents' worktrees from moving it, and the check that
finds it moved anyway.

Worktrees share their repository's refs, so an agent's `git update-ref refs/heads/main HEAD` (or `git branch -f
main`, `git push . HEAD:main`) would put unreviewed work on the base. Where git allows it, a `reference-transaction`
hook in the repository refuses any update of the base ref: hiveboard's own git runs with hooks off (critics/git.py),
so only the queue's moves get through. An agent with a shell can still get past the hook (delete it, turn hooks
off with `-c core.hooksPath=`, write the ref file or `packed-refs`), so before it reviews or merges against a base,
hiveboard compares the base's tip with where it left it (board/repos.py's record): a base found anywhere else stops
merging into the repository, names the commits that arrived unreviewed, and waits for a person (`hiveboard repo
adopt|reset`). Repositories whose merges a person makes (`--merge manual`) are neither hooked nor checked.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from hiveboard.board.repos import Repo
from hiveboard.board.tasks import Board

from .commits import Repository
from .git import GitError, check_ref

log = logging.getLogger("hiveboard.critics")
HOOK = "reference-transaction"
MARK = "# hiveboard: the base branch moves only through the merge queue"
SHOWN = 20  # unreviewed commits named, then a count
DELETED = "(deleted)"

# POSIX sh, as git runs it. In the `prepared` state a non-zero exit aborts the whole transaction. A ref left where
# it is passes (a no-op, or `pack-refs` writing its current commit into packed-refs, which git shows as an update
# from nothing), and so does the loose file's removal once packed-refs holds the same commit: `git gc` keeps
# working. Anything else that touches the base ref is refused.
HOOK_TEXT = """#!/bin/sh
{mark}
# Installed by hiveboard for the repository it registered as {name!r}; hiveboard puts it back if it is removed.
[ "$1" = prepared ] || exit 0
base={ref}
packed="$(git rev-parse --git-common-dir)/packed-refs"
now="$(git rev-parse -q --verify "$base" 2>/dev/null)"
zero=0000000000000000000000000000000000000000
status=0
while read -r old new ref; do
    [ "$ref" = "$base" ] || continue
    [ "${{new#$zero}}" != "" ] && [ "$new" = "$now" ] && continue
    [ "${{new#$zero}}" = "" ] && [ "${{old#$zero}}" != "" ] && grep -qx "$old $base" "$packed" 2>/dev/null && continue
    echo "hiveboard: $base moves only through hiveboard's merge queue (the card's review, then its merge); hand \
your branch in with complete_task(ref=<your branch>) instead" >&2
    status=1
done
exit $status
"""


def install_hook(repository: Repository) -> str | None:
    """Write the repository's reference-transaction hook, or put it back as it was written (an agent may have
    removed or changed it). None when it is in place; else one sentence on why it is not (another hook of that
    name is there: it is left alone, and the check still finds a base that moved)."""
    repo = repository.repo
    text = HOOK_TEXT.format(mark=MARK, name=repo.name, ref=f"refs/heads/{check_ref(repo.base)}")
    hooks = Path(repo.git_dir) / "hooks"
    try:
        return _write_hook(hooks, text, repo.base)
    except OSError as exc:
        return f"{hooks} cannot hold hiveboard's {HOOK} hook ({exc.strerror or exc})"


def _write_hook(hooks: Path, text: str, base: str) -> str | None:
    if not hooks.is_symlink() and not hooks.exists():
        hooks.mkdir(mode=0o755)
    # the hooks directory is the agents' to write: a link planted there must not send this write elsewhere
    fd = os.open(hooks, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            with open(HOOK, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW, dir_fd=fd)) as found:
                now = found.read(1 << 16).decode("utf-8", "replace")
        except FileNotFoundError:
            now = None
        except OSError as exc:
            return f"{hooks / HOOK} cannot be read ({exc.strerror}); hiveboard's hook is not installed"
        if now == text and os.stat(HOOK, dir_fd=fd, follow_symlinks=False).st_mode & 0o111:
            return None
        if now is not None and MARK not in now:
            return (
                f"{hooks / HOOK} is another hook, left as it is: agents' worktrees are not stopped from moving "
                f"{base}, but hiveboard still finds it moved before it merges"
            )
        temporary = f".{HOOK}.hiveboard-tmp"
        try:
            os.unlink(temporary, dir_fd=fd)  # a file (or a link) left there: never written through
        except FileNotFoundError:
            pass
        with open(
            temporary,
            "w",
            encoding="utf-8",
            opener=lambda p, f: os.open(p, f | os.O_EXCL | os.O_NOFOLLOW, 0o755, dir_fd=fd),
        ) as out:
            out.write(text)
            os.fchmod(out.fileno(), 0o755)
        os.replace(temporary, HOOK, src_dir_fd=fd, dst_dir_fd=fd)
        return None
    finally:
        os.close(fd)


def remove_hook(repo: Repo) -> bool:
    """Take hiveboard's hook out of a repository no longer registered (another hook of that name stays); whether
    it was there."""
    try:
        fd = os.open(Path(repo.git_dir) / "hooks", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        with open(HOOK, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW, dir_fd=fd)) as found:
            if MARK.encode() not in found.read(1 << 16):
                return False
        os.unlink(HOOK, dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass
class Moved:
    """A base found away from where hiveboard left it: the recorded tip, the tip found, the commits that arrived
    (id, subject; newest first, at most SHOWN + 1) and how many landed commits it no longer holds."""

    recorded: str
    tip: str | None  # None: the base branch is gone
    arrived: list[tuple[str, str]]
    dropped: int

    @property
    def found(self) -> str:
        """The tip found, as the record of a stopped repository keeps it."""
        return self.tip or DELETED

    def commits(self) -> str:
        """The unreviewed commits in a few words: "3 commit(s) no review passed: abc123 (subject), …"."""
        if self.tip is None:
            return "the branch was deleted"
        shown = ", ".join(f"{sha[:12]} ({subject[:60]})" for sha, subject in self.arrived[:SHOWN])
        more = " and more" if len(self.arrived) > SHOWN else ""
        parts = []
        if self.arrived:
            parts.append(f"{len(self.arrived)}{'+' if more else ''} commit(s) no review passed: {shown}{more}")
        if self.dropped:
            parts.append(f"it no longer holds {self.dropped} commit(s) hiveboard had landed")
        return "; ".join(parts) or f"it points at {self.tip[:12]}"

    def describe(self, repository: Repository) -> str:
        """One sentence for the people: what moved, what it holds, and the two ways on."""
        repo = repository.repo
        if self.tip is None:
            return (
                f"{repo.name}'s base branch {repo.base} was deleted outside hiveboard's merge queue (hiveboard left it "
                f"at {self.recorded[:12]}); merging into {repo.name} is stopped until a person runs `hiveboard repo "
                f"reset {repo.name}` (put {repo.base} back at {self.recorded[:12]})"
            )
        return (
            f"{repo.name}'s base branch {repo.base} was moved outside hiveboard's merge queue, from "
            f"{self.recorded[:12]} (where hiveboard left it) to {self.tip[:12]}: {self.commits()}; merging into "
            f"{repo.name} is stopped until a person runs `hiveboard repo adopt {repo.name}` (take those commits as "
            f"reviewed) or `hiveboard repo reset {repo.name}` (put {repo.base} back at {self.recorded[:12]})"
        )


def base_moved(board: Board, repository: Repository) -> tuple[str | None, Moved | None]:
    """The base's tip (None: the branch is gone), and how it is away from where hiveboard left it (None: it is not,
    or a person merges this repository). What is merged is merged into that tip, the one checked. The first look at
    a repository records the tip it finds as the tip at registration; the hook is put back."""
    repo = repository.repo
    if repo.merge_mode != "auto":
        return repository.base_tip(), None
    problem = install_hook(repository)
    if problem:
        log.info("%s: %s", repo.name, problem)
    try:
        tip = repository.base_tip()
    except GitError:
        if repo.landed is None:
            raise  # never seen: nothing to tell from a base that does not exist
        return None, Moved(repo.landed, None, [], 0)
    recorded = repo.landed or board.repos.recorded(repo.name, tip)
    if tip == recorded or board.merges.made(repo.name, tip):  # the queue's own move, perhaps not recorded yet
        return tip, None
    with repository.view(tip) as view:
        arrived = repository.log(view, tip, recorded, SHOWN + 1)
        dropped = len(repository.log(view, recorded, tip, 1000))
    return tip, Moved(recorded, tip, arrived, dropped)


def tell(board: Board, repository: Repository, moved: Moved, task_id: int | None = None) -> str:
    """Stop merging into the repository and tell the people (once per tip found); the sentence they were told."""
    said = moved.describe(repository)
    board.merges.base_moved(
        repository.repo.name,
        moved.found,
        f"{repository.repo.name}: {repository.repo.base} moved outside the merge queue ({moved.commits()[:150]})",
        said,
        task_id,
    )
    return said
