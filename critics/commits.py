"""Work handed in as a commit: what complete_task(ref=) checks and pins, what a review exports and reads, and
the git steps of a merge (critics/merge.py runs the queue).

Every command goes through Git.run (critics/git.py): in the sandbox, hooks off, refs checked. On top of that,
the commands that read or write content (diff, archive, merge-base, merge-tree, commit-tree) run in a *clean
view* of the repository: a scratch git directory of ours whose `objects` is the repository's object store, with
no refs, config, hooks or attributes of the agent's, and an `info/attributes` that turns off every attribute
that changes what git reads or writes (filters, eol conversion, ident, export-ignore, export-subst, encodings,
diff and merge drivers). An agent can write its repository's config (a worktree shares `.git/config`) and its
commit's `.gitattributes`, so with them a review could see other bytes than the base branch gets (a smudge
filter that rewrites a file on export, `export-ignore` on the broken one, a `-diff` that hides a change); in
the view none of it applies: the review sees exactly the commit's bytes and no filter, driver or textconv of the
agent's runs. What must touch the repository itself runs there: resolving the ref the agent named, its
worktree's status, the pin, the base branch's compare-and-swap, and the fast-forward of a worktree that has the
base checked out (git checks files out there, so a filter of the agent's runs, confined as Git.run confines it).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hiveboard.board.commits import Target
from hiveboard.board.errors import InvalidInput
from hiveboard.board.models import Artifact, ChangedFile, Commit
from hiveboard.board.repos import Repo
from hiveboard.board.review_models import BLOCKING, Critique

from .base import is_test_file, verdict_of
from .config import RepoLimits
from .git import SHA_RE, Git, GitError, check_ref, resolve

CLEAN_ATTRIBUTES = (
    "* -text !eol -filter -ident -export-ignore -export-subst !working-tree-encoding !diff !merge "
    "!conflict-marker-size\n"
)
DIFF = ["-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"]
GITLINK, SYMLINK = "160000", "120000"
HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.M)
MB = 1 << 20


def _mb(n: float) -> str:
    return f"{n:g} MB"


@dataclass
class Repository:
    """One registered repository, as git in the sandbox sees it."""

    git: Git
    repo: Repo
    limits: RepoLimits

    @property
    def path(self) -> Path:
        return Path(self.repo.path)

    @property
    def git_dir(self) -> Path:
        return Path(self.repo.git_dir)

    @property
    def objects(self) -> Path:
        return (self.git_dir / "objects").resolve()

    def _run(self, cwd: Path, args: list[str], **options):
        return self.git.run(cwd, args, timeout=self.limits.git_timeout, **options)

    # ----------------------------------------------------------------- the repository itself

    def resolve(self, ref: str, where: Path | None = None) -> str:
        """The commit `ref` names, as seen from `where` (an agent's worktree: its HEAD is its own) or the
        repository; GitError in one sentence."""
        return resolve(self.git, where or self.path, ref, binds=[self.git_dir])

    def base_tip(self) -> str:
        """The commit the base branch points at now."""
        return self.resolve(f"refs/heads/{check_ref(self.repo.base)}")

    def dirty(self, worktree: Path, untracked: bool = True) -> list[str]:
        """The uncommitted changes of a worktree (`git status --porcelain`), one line each."""
        out = self._run(
            worktree,
            ["status", "--porcelain", "-z", "--untracked-files=" + ("normal" if untracked else "no")],
            readable=[self.git_dir],
            limit=1 << 20,
        )
        changes, fields = [], iter(out.text.split("\0"))
        for entry in fields:
            if entry.strip():
                changes.append(entry)
                if "R" in entry[:2] or "C" in entry[:2]:  # a rename's old path follows
                    next(fields, None)
        return changes

    def pin(self, task_id: int, n: int, sha: str) -> str:
        """Keep `sha` reachable whatever happens to the branch that named it; the pin's ref name."""
        name = f"refs/hiveboard/cards/{task_id}/{n}"
        self._run(self.path, ["update-ref", "-m", "hiveboard: handed in", name, sha], writable=[self.git_dir])
        return name

    def worktree_of(self, branch: str) -> Path | None:
        """The worktree that has `branch` checked out (the main one, typically), if any."""
        out = self._run(self.path, ["worktree", "list", "--porcelain", "-z"], readable=[self.git_dir], limit=1 << 20)
        path = None
        for field in out.text.split("\0"):
            if field.startswith("worktree "):
                path = field[len("worktree ") :]
            elif field == f"branch refs/heads/{branch}" and path:
                return Path(path)
        return None

    def advance(self, branch: str, new: str, old: str, why: str = "merged") -> bool:
        """Move `branch` from `old` to `new`, only if it still points at `old` (False: it moved meanwhile)."""
        out = self._run(
            self.path,
            ["update-ref", "-m", f"hiveboard: {why}", f"refs/heads/{check_ref(branch)}", new, old],
            writable=[self.git_dir],
            ok=(0, 1, 128),
        )
        return out.returncode == 0

    def fast_forward(self, worktree: Path, new: str) -> str | None:
        """Advance the branch checked out in `worktree` to `new` with its files; None when done, else git's reason
        (not a fast-forward, or files it would not overwrite)."""
        out = self._run(
            worktree,
            ["merge", "--ff-only", "--no-edit", "--no-verify", "--quiet", new],
            writable=[worktree, self.git_dir],
            ok=(0, 1, 128),
        )
        if out.returncode == 0:
            return None
        lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        return "; ".join(lines[-3:])[:300] or f"exit {out.returncode}"

    # ----------------------------------------------------------------- the clean view

    @contextmanager
    def view(self, sha: str) -> Iterator[Path]:
        """A scratch git directory over the repository's objects (see the module docstring); `sha` tells the
        object format."""
        scratch = Path(tempfile.mkdtemp(prefix="hiveboard-git-"))
        try:
            (scratch / "refs").mkdir()
            (scratch / "info").mkdir()
            (scratch / "HEAD").write_text("ref: refs/heads/hiveboard\n")
            (scratch / "info" / "attributes").write_text(CLEAN_ATTRIBUTES)
            sha256 = len(sha) == 64
            (scratch / "config").write_text(
                "[core]\n\trepositoryformatversion = "
                + ("1" if sha256 else "0")
                + "\n\tbare = true\n\tcommitGraph = false\n\tuseReplaceRefs = false\n"
                + ("[extensions]\n\tobjectformat = sha256\n" if sha256 else "")
            )
            os.symlink(self.objects, scratch / "objects")
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def in_view(self, view: Path, args: list[str], write: bool = False, **options):
        """`git ARGS` in the clean view; `write`: it may add objects to the repository's store."""
        if write:
            return self._run(view, args, writable=[self.objects], **options)
        return self._run(view, args, readable=[self.objects], **options)

    # ----------------------------------------------------------------- handing in

    def hand_in(self, target: Target, ref: str) -> Commit:
        """Check the commit `ref` names for the card `target` describes, describe its change against the merge base
        with the base branch, and pin it. InvalidInput (one sentence, nothing handed in) when it cannot be."""
        try:
            check_ref(ref)
        except GitError as exc:
            raise InvalidInput(f"{exc}; nothing was handed in") from None
        worktree = Path(target.worktree) if target.worktree and Path(target.worktree).is_dir() else None
        if worktree is not None:
            dirty = self.dirty(worktree)
            if dirty:
                shown = ", ".join(repr(line[3:]) for line in dirty[:5]) + (" …" if len(dirty) > 5 else "")
                raise InvalidInput(
                    f"your worktree {worktree} has {len(dirty)} uncommitted change(s) ({shown}); commit first "
                    "(git add, git commit), then call complete_task again with ref=; nothing was handed in"
                )
        try:
            sha = self.resolve(ref, worktree)
        except GitError as exc:
            raise InvalidInput(f"{exc} (repository {self.repo.name!r}); nothing was handed in") from None
        # the change is taken against where the merge queue left the base: commits put there by anything else are
        # part of what is reviewed (critics/base_branch.py)
        tip = self.repo.landed if self.repo.merge_mode == "auto" and self.repo.landed else self.base_tip()
        with self.view(sha) as view:
            found = self.in_view(view, ["merge-base", sha, tip], ok=(0, 1))
            base = found.text.strip()
            if found.returncode != 0 or not SHA_RE.fullmatch(base):
                raise InvalidInput(
                    f"{ref!r} ({sha[:12]}) shares no history with {self.repo.name}'s base branch {self.repo.base!r}; "
                    f"branch from {self.repo.base} and commit there; nothing was handed in"
                )
            files = self._changes(view, base, sha, ref)
            diff = self._diff(view, base, sha, files)
        self.pin(target.task_id, target.pin, sha)
        return Commit(repo=self.repo.name, ref=ref, sha=sha, base_sha=base, files=files, diff=diff)

    def _changes(self, view: Path, base: str, sha: str, ref: str) -> list[ChangedFile]:
        """The files the commit changes against `base`, checked against the hand-in rules and bounds."""
        limits = self.limits
        raw = self.in_view(view, [*DIFF, "--raw", "-z", "--no-abbrev", base, sha, "--"]).stdout.split(b"\0")
        entries = []  # (old mode, new mode, new blob, status, path, old path)
        fields = iter(raw)
        for head in fields:
            if not head.startswith(b":"):
                continue
            old_mode, new_mode, _, blob, status = head[1:].decode().split(" ")
            first = next(fields).decode("utf-8", "surrogateescape")
            if status[0] in "RC":
                entries.append(
                    (old_mode, new_mode, blob, status[0], next(fields).decode("utf-8", "surrogateescape"), first)
                )
            else:
                entries.append((old_mode, new_mode, blob, status[0], first, None))
        if not entries:
            raise InvalidInput(
                f"{ref!r} ({sha[:12]}) changes nothing against {self.repo.name}'s base branch {self.repo.base!r}; "
                "commit your work on your branch and send that; nothing was handed in"
            )
        if len(entries) > limits.files:
            raise InvalidInput(
                f"{ref!r} changes {len(entries)} files, over the bound of {limits.files} per change "
                "(review.repo.files); split the work into smaller cards; nothing was handed in"
            )
        for old_mode, new_mode, _, _, path, _ in entries:
            if GITLINK in (old_mode, new_mode):
                raise InvalidInput(
                    f"{ref!r} changes the submodule {path!r}; submodules are not reviewed or merged here: leave it "
                    "out of the commit; nothing was handed in"
                )
        kept = [e for e in entries if e[3] != "D"]
        sizes = self._sizes(view, [e[2] for e in kept])
        for _, _, blob, _, path, _ in kept:
            if sizes.get(blob, 0) > limits.file_mb * MB:
                raise InvalidInput(
                    f"{path!r} is {sizes[blob] / MB:.1f} MB, over the bound of {_mb(limits.file_mb)} per file "
                    "(review.repo.file_mb); keep large files out of the commit; nothing was handed in"
                )
        links = [(blob, path) for _, mode, blob, _, path, _ in kept if mode == SYMLINK]
        for blob, path in links:
            target = self.in_view(view, ["cat-file", "blob", blob], limit=1 << 16).stdout.decode("utf-8", "replace")
            if escapes(path, target):
                raise InvalidInput(
                    f"{path!r} is a symbolic link to {target[:120]!r}, outside the repository's tree; a link may "
                    "only point inside it; nothing was handed in"
                )
        counts = self._numstat(view, base, sha)
        return [
            ChangedFile(
                status=status,
                path=path,
                old_path=old,
                added=counts.get(path, (None, None))[0],
                deleted=counts.get(path, (None, None))[1],
            )
            for _, _, _, status, path, old in entries
        ]

    def _sizes(self, view: Path, blobs: list[str]) -> dict[str, int]:
        if not blobs:
            return {}
        out = self.in_view(view, ["cat-file", "--batch-check"], stdin="".join(f"{b}\n" for b in blobs).encode())
        sizes = {}
        for line in out.text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                sizes[parts[0]] = int(parts[2])
        return sizes

    def _numstat(self, view: Path, base: str, sha: str) -> dict[str, tuple[int | None, int | None]]:
        """Lines added and deleted per file (None: binary), by the file's new path."""
        out = self.in_view(view, [*DIFF, "--numstat", "-z", base, sha, "--"]).stdout.split(b"\0")
        counts: dict[str, tuple[int | None, int | None]] = {}
        fields = iter(out)
        for field in fields:
            if not field:
                continue
            added, deleted, path = field.decode("utf-8", "surrogateescape").split("\t", 2)
            if not path:  # a rename or copy: the old path, then the new one
                next(fields)
                path = next(fields).decode("utf-8", "surrogateescape")
            counts[path] = (int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
        return counts

    def _diff(self, view: Path, base: str, sha: str, files: list[ChangedFile]) -> str:
        """The unified diff, whole up to the change's bound, kept up to `shown_chars` with the files cut named."""
        limits = self.limits
        try:
            out = self.in_view(view, [*DIFF, base, sha, "--"], limit=int(limits.diff_mb * MB))
        except GitError as exc:
            if "printed more than" not in str(exc):
                raise
            raise InvalidInput(
                f"the change's diff is over the bound of {_mb(limits.diff_mb)} (review.repo.diff_mb); split the work "
                "into smaller cards; nothing was handed in"
            ) from None
        return bounded(out.stdout.decode("utf-8", "replace"), limits.shown_chars)

    # ----------------------------------------------------------------- reviewing and merging

    def export(self, view: Path, sha: str, dest: Path) -> list[str]:
        """The commit's files into `dest`, extracted here with tarfile's data filter (no absolute paths, no `..`,
        no links out, no devices) and bounded in files and bytes; the paths left out (links out of the tree)."""
        limits = self.limits
        budget = int(limits.tree_mb * MB) + limits.tree_files * 1024 + MB  # tar headers and padding
        try:
            out = self.in_view(view, ["archive", "--format=tar", sha], limit=budget)
        except GitError as exc:
            if "printed more than" not in str(exc):
                raise
            raise GitError(
                f"commit {sha[:12]} is over the bound of {_mb(limits.tree_mb)} of files a review exports "
                "(review.repo.tree_mb)"
            ) from None
        skipped: list[str] = []
        with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
            members = tar.getmembers()
            files = [m for m in members if m.isfile()]
            if len(files) > limits.tree_files:
                raise GitError(
                    f"commit {sha[:12]} holds {len(files)} files, over the bound of {limits.tree_files} a review "
                    "exports (review.repo.tree_files)"
                )
            if sum(m.size for m in files) > limits.tree_mb * MB:
                raise GitError(
                    f"commit {sha[:12]} is over the bound of {_mb(limits.tree_mb)} of files a review exports "
                    "(review.repo.tree_mb)"
                )

            def kept(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
                try:
                    return tarfile.data_filter(member, path)
                except tarfile.FilterError:
                    skipped.append(member.name)
                    return None

            tar.extractall(dest, filter=kept)
        # the filter judges a link by what exists when it is extracted; one that a later link made point out goes
        real = dest.resolve()
        for root, dirs, names in os.walk(dest):
            for name in [*dirs, *names]:
                path = Path(root, name)
                if path.is_symlink() and not path.resolve().is_relative_to(real):
                    path.unlink()
                    skipped.append(path.relative_to(dest).as_posix())
        return skipped

    def changed_lines(self, view: Path, base: str, sha: str) -> dict[str, list[tuple[int, int]]]:
        """The lines of each changed file the diff added or changed (first, last), by path in the commit."""
        out = self.in_view(view, [*DIFF, "-U0", base, sha, "--"], limit=int(self.limits.diff_mb * MB) + MB)
        lines: dict[str, list[tuple[int, int]]] = {}
        path = None
        for line in out.stdout.decode("utf-8", "replace").splitlines():
            if line.startswith("+++ "):
                name = line[4:].removesuffix("\t")  # git ends a name that holds a space with a tab
                name = unquote(name) if name.startswith('"') else name
                path = name[2:] if name.startswith("b/") else None
            elif line.startswith("@@") and path is not None:
                found = HUNK.match(line)
                if found:
                    start, count = int(found.group(1)), int(found.group(2) or 1)
                    if count:
                        lines.setdefault(path, []).append((start, start + count - 1))
        return lines

    def files_at(self, view: Path, sha: str, paths: list[str], largest: int = MB) -> list[Artifact]:
        """The text of `paths` as commit `sha` holds them (those it has, up to `largest` bytes each, as UTF-8)."""
        asked = [p for p in paths if "\n" not in p]
        if not asked:
            return []
        out = self.in_view(
            view,
            ["cat-file", "--batch"],
            stdin="".join(f"{sha}:{p}\n" for p in asked).encode(),
            limit=len(asked) * (largest + 200),
        ).stdout
        found, at = [], 0
        for path in asked:
            end = out.index(b"\n", at)
            header = out[at:end].split()
            at = end + 1
            if len(header) != 3 or not header[2].isdigit():  # "<sha>:<path> missing"
                continue
            size = int(header[2])
            body, at = out[at : at + size], at + size + 1
            if header[1] == b"blob" and size <= largest:
                try:
                    found.append(Artifact(name=path, kind="code", content=body.decode("utf-8")))
                except UnicodeDecodeError:
                    pass
        return found

    def log(self, view: Path, tip: str, without: str, most: int) -> list[tuple[str, str]]:
        """The commits `tip` holds and `without` does not, newest first, at most `most`: (id, subject)."""
        out = self.in_view(
            view, ["log", "--no-decorate", "--format=%H%x09%s", f"--max-count={most}", tip, "--not", without, "--"]
        )
        return [tuple(line.split("\t", 1)) for line in out.text.splitlines() if "\t" in line]  # type: ignore[misc]

    def tree_of(self, view: Path, sha: str) -> str:
        """The tree a commit holds."""
        return self.in_view(view, ["rev-parse", "--verify", f"{sha}^{{tree}}"]).text.strip()

    def is_ancestor(self, view: Path, commit: str, of: str) -> bool:
        return self.in_view(view, ["merge-base", "--is-ancestor", commit, of], ok=(0, 1)).returncode == 0

    def merge_tree(self, view: Path, base: str, sha: str) -> tuple[str | None, list[str]]:
        """The tree of `sha` merged into `base`, or (None, the files that conflict)."""
        out = self.in_view(
            view, ["merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", base, sha], write=True, ok=(0, 1)
        )
        tree, *paths = [p.decode("utf-8", "replace") for p in out.stdout.split(b"\0") if p]
        if out.returncode == 0:
            return tree, []
        return None, list(dict.fromkeys(paths))

    def commit_tree(self, view: Path, tree: str, parents: list[str], message: str) -> str:
        args = ["commit-tree", tree, *(f for p in parents for f in ("-p", p)), "-m", message]
        sha = self.in_view(view, args, write=True).text.strip()
        if not SHA_RE.fullmatch(sha):
            raise GitError(f"git commit-tree answered {sha[:80]!r}, not a commit id")
        return sha


def escapes(path: str, target: str) -> bool:
    """Whether a symbolic link at `path` (in the tree) pointing at `target` leads outside the tree: an absolute
    target, one that climbs above the root, or one that climbs after descending (through a link it may not come
    back up the way it went down, so such a target is refused too)."""
    if not target or target.startswith("/") or "\0" in target:
        return True
    parts = [p for p in PurePosixPath(target).parts if p != "."]
    climbs = 0
    while climbs < len(parts) and parts[climbs] == "..":
        climbs += 1
    if ".." in parts[climbs:]:
        return True
    return climbs > len(PurePosixPath(posixpath.dirname(path)).parts)


def bounded(diff: str, chars: int) -> str:
    """The diff's whole files while they fit in `chars`; the files cut are named at the end."""
    if len(diff) <= chars:
        return diff
    sections = re.split(r"(?m)^(?=diff --git )", diff)
    kept, cut = [], []
    used = 0
    for section in sections:
        if not section:
            continue
        if not cut and used + len(section) <= chars:
            kept.append(section)
            used += len(section)
            continue
        if not kept and not cut:  # a first file over the bound on its own: its start
            kept.append(section[:chars] + "\n")
        cut.append(section.split("\n", 1)[0].removeprefix("diff --git "))
    names = ", ".join(cut[:20]) + (f" and {len(cut) - 20} more" if len(cut) > 20 else "")
    return "".join(kept) + f"\n… cut at {chars:,} characters: {len(cut)} file(s) not shown in full ({names})\n"


def unquote(name: str) -> str:
    """A path as git quotes it (C-style, in double quotes) back to text."""
    body = name[1:-1] if name.endswith('"') else name[1:]
    out = bytearray()
    escapes_ = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in escapes_:
                out.append(escapes_[nxt])
                i += 2
                continue
            if body[i + 1 : i + 4].isdigit():
                out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
                i += 4
                continue
        out += ch.encode()
        i += 1
    return out.decode("utf-8", "replace")


def on_diff(critique: Critique, commit: Commit, lines: dict[str, list[tuple[int, int]]], demote: bool) -> Critique:
    """Say of each finding that names a line of a changed file (`path:line`) whether the commit's diff changed
    that line. `demote`: a blocking finding on a line the diff did not change becomes minor (the commit is judged
    by what it changed; the repository's tests judge the rest), and its description says so."""
    changed = {f.path for f in commit.files if f.status != "D"}
    issues = []
    for issue in critique.issues:
        path, _, number = issue.location.rpartition(":")
        if path not in changed or not number.isdigit():
            issues.append(issue)
            continue
        made = any(first <= int(number) <= last for first, last in lines.get(path, []))
        update: dict = {"changed_line": made}
        if not made and demote and issue.severity in BLOCKING:
            update.update(
                severity="minor",
                description=f"on a line this commit did not change (was {issue.severity}): {issue.description}",
            )
        issues.append(issue.model_copy(update=update))
    if not any(new.severity != old.severity for new, old in zip(issues, critique.issues)):
        return critique.model_copy(update={"issues": issues})
    verdict, score = verdict_of(issues)  # an analyser's verdict is its findings'
    moved = sum(new.severity != old.severity for new, old in zip(issues, critique.issues))
    summary = f"{critique.summary}; {moved} finding(s) on lines this commit did not change made minor"
    return critique.model_copy(update={"issues": issues, "verdict": verdict, "score": score, "summary": summary})


def changed_files(commit: Commit, tree: Path, largest: int = MB) -> list[Artifact]:
    """What the critics read of a commit as artifacts: its diff first, then the text of each file it added or
    changed (regular files of the exported tree up to `largest` bytes, as UTF-8)."""
    found = [Artifact(name=f"{commit.sha[:12]}.diff", kind="diff", content=commit.diff)]
    root = tree.resolve()
    for f in commit.files:
        path = tree / f.path
        if f.status == "D" or len(f.path) > 300 or path.is_symlink() or not path.is_file():
            continue
        if not path.resolve().is_relative_to(root) or path.stat().st_size > largest:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary: the diff says it changed
        found.append(Artifact(name=f.path, kind="test" if is_test_file(f.path, "code") else "code", content=text))
    return found
