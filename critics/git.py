"""Git, run where an agent's work cannot reach the server.

An agent works in a repository hiveboard registered (`hiveboard repo add`), in a worktree it was given, and
hands in a commit. Everything git reads there can be the agent's: the files, `.gitattributes`, the hooks and
the repository's own config (a worktree shares `.git/config`, so an agent can write filter, merge and diff
drivers, `core.fsmonitor` or hooks that git would run). So every git command hiveboard runs on a repository
goes through `Git.run`:

- inside bubblewrap: no network, its own pid/ipc/uts namespaces, no capabilities, the system directories
  read-only, only the repository's directories bound (read-only unless the command writes), a scrubbed
  environment with no system or global git config, and the data directory and config covered when they lie
  inside a bound tree; what git runs on the agent's behalf (a driver, a hook) is confined there and can reach
  no more than the agent already could;
- with hooks off, no remote protocol, no fsmonitor, no automatic gc, and `--end-of-options` before anything
  an agent named (a ref like `--upload-pack=…` is then a ref, and refused as one);
- under rlimits (CPU seconds, file size) and a wall-clock timeout that kills the whole sandbox, reading at
  most `limit` bytes of output.

Where bubblewrap cannot run, repositories are refused in one sentence, unless the operator chose
`review.execute = "unsafe"` (then git runs as a plain subprocess with the same config and limits).
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .sandbox import NAMESPACES, system_binds

# Config every command runs with; the repository's own config cannot turn these back on, since `-c` wins.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",  # not a directory: no hook is found
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "protocol.allow=never",  # no fetch, no remote helper: the sandbox has no network anyway
    "gc.auto=0",
    "core.useReplaceRefs=false",  # refs/replace/* (an agent can write them) would swap what objects read as
    "maintenance.auto=false",
    "core.pager=cat",
    "advice.detachedHead=false",
    "safe.directory=*",  # the repository is the operator's; its owner is checked when it is registered
    "user.name=hiveboard",
    "user.email=hiveboard@localhost",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
)
ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_ATTR_NOSYSTEM": "1",
}
DIFFING = ("diff", "log", "show")  # commands that would run diff.external or a textconv driver
CPU_SECONDS = 120
FILE_BYTES = 1 << 30  # the largest file a git command may write (a pack, a checked-out file)
OUTPUT_BYTES = 32 << 20  # what one command may print before it is stopped
# A ref as an agent may name one: a branch, a tag or a commit id; no option, no revision syntax
REF_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
SHA_RE = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


class GitError(Exception):
    """A git command failed or cannot run here; str() is one sentence for the agent or operator."""


@dataclass
class Result:
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


def check_ref(ref: str) -> str:
    """An agent's ref as git may be given it, or GitError saying what to send."""
    if not REF_RE.fullmatch(ref) or ".." in ref or ref.endswith((".lock", "/", ".")) or "//" in ref:
        raise GitError(
            f"ref {ref[:80]!r} is not a branch, tag or commit id hiveboard accepts (letters, digits, '._/-', "
            "not starting with '-' or '.', no '..'); send the branch name or the full commit id"
        )
    return ref


class Git:
    """Runs git on a repository, isolated as the module docstring says."""

    def __init__(self, bwrap: str | None, hidden: Sequence[Path] = (), unsafe: bool = False):
        self.bwrap = bwrap
        self.hidden = [Path(p).resolve() for p in hidden]
        self.unsafe = unsafe
        self.git = shutil.which("git", path=ENV["PATH"])
        self.root = os.geteuid() == 0 if hasattr(os, "geteuid") else False

    @classmethod
    def for_machine(cls, hidden: Sequence[Path] = (), unsafe: bool = False) -> Git:
        """bubblewrap where it is installed (Linux); else a plain subprocess only when `unsafe`."""
        bwrap = shutil.which("bwrap") if sys.platform.startswith("linux") else None
        return cls(bwrap, hidden, unsafe)

    @property
    def isolated(self) -> bool:
        return self.bwrap is not None

    def why_not(self) -> str | None:
        """None when git can run here as this module promises; else one sentence saying why not."""
        if self.git is None:
            return "git is not installed on the server (apt-get install git)"
        if self.bwrap is None and not self.unsafe:
            return (
                "repositories need the sandbox and bubblewrap is not installed here (apt-get install bubblewrap; "
                'or set review.execute = "unsafe" to run git without one)'
            )
        return None

    def run(
        self,
        cwd: Path,
        args: Sequence[str],
        *,
        writable: Sequence[Path] = (),
        readable: Sequence[Path] = (),
        stdin: bytes | None = None,
        timeout: float = 60,
        limit: int = OUTPUT_BYTES,
        ok: Sequence[int] = (0,),
    ) -> Result:
        """`git ARGS` in `cwd` with `writable` and `readable` directories bound (cwd is bound read-only unless
        it is under a writable one). A return code outside `ok` is GitError with git's last line."""
        problem = self.why_not()
        if problem:
            raise GitError(problem)
        args = list(args)
        if args and args[0] in DIFFING:  # the repository's diff drivers would run (confined) and could fail it
            args[1:1] = ["--no-ext-diff", "--no-textconv"]
        argv = [self.git, *(f for c in SAFE_CONFIG for f in ("-c", c)), *args]
        limits = ["prlimit", f"--cpu={CPU_SECONDS}", f"--fsize={FILE_BYTES}", "--core=0", "--"]
        if self.bwrap is not None:
            argv = self._bwrap(cwd, argv, writable, readable)
            env: dict[str, str] = {}
        else:
            env = dict(ENV)
        out = _run([*limits, *argv] if shutil.which("prlimit") else argv, cwd, env, stdin, timeout, limit)
        if out.returncode not in ok:
            last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            raise GitError(f"git {args[0] if args else ''} failed: {last[:300]}")
        return out

    def _bwrap(self, cwd: Path, argv: list[str], writable: Sequence[Path], readable: Sequence[Path]) -> list[str]:
        args = [self.bwrap, *NAMESPACES]
        args += ["--cap-drop", "ALL"] if self.root else ["--unshare-user", "--disable-userns"]
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *system_binds()]
        rw = [Path(p).resolve() for p in writable]
        ro = [Path(p).resolve() for p in (cwd, *readable) if not any(Path(p).resolve().is_relative_to(w) for w in rw)]
        for path in sorted(set(ro), key=lambda p: len(p.parts)):
            args += ["--ro-bind", str(path), str(path)]
        for path in sorted(set(rw), key=lambda p: len(p.parts)):
            args += ["--bind", str(path), str(path)]
        for path in self.hidden:  # the data directory inside a bound tree: covered over
            if any(path.is_relative_to(p) for p in (*rw, *ro)):
                args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        args += ["--chdir", str(Path(cwd).resolve()), "--clearenv"]
        for key, value in ENV.items():
            args += ["--setenv", key, value]
        return [*args, "--", *argv]


def _run(argv: list[str], cwd: Path, env: dict, stdin: bytes | None, timeout: float, limit: int) -> Result:
    """Run with a process group of its own; kill the whole group at the timeout or past `limit` bytes."""
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(
        argv,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if stdin is not None:
        try:
            proc.stdin.write(stdin)
        except BrokenPipeError:
            pass
        proc.stdin.close()
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    sizes = dict.fromkeys(chunks, 0)
    too_much = False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map() and not too_much:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(proc)
                proc.wait()
                raise GitError(f"git did not finish in {timeout:.0f} s (a repository too large or a command stuck)")
            for key, _ in sel.select(min(left, 1.0)):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                fd = key.fd
                sizes[fd] += len(data)
                if fd == proc.stderr.fileno() and sizes[fd] > 64 << 10:
                    continue  # stderr's tail is enough
                chunks[fd].append(data)
                too_much = sizes[proc.stdout.fileno()] > limit
    if too_much:
        _kill(proc)
        proc.wait()
        raise GitError(f"git printed more than {limit >> 20} MB; the repository or change is too large to handle")
    proc.wait(max(deadline - time.monotonic(), 1))
    stdout = b"".join(chunks[proc.stdout.fileno()])
    stderr = b"".join(chunks[proc.stderr.fileno()]).decode("utf-8", "replace")
    proc.stdout.close()
    proc.stderr.close()
    return Result(proc.returncode, stdout, stderr[-4000:])


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def resolve(git: Git, repo: Path, ref: str, binds: Sequence[Path] = ()) -> str:
    """The commit id `ref` names in `repo` (a branch, a tag or a commit id), or GitError in one sentence."""
    check_ref(ref)
    out = git.run(
        repo,
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        readable=binds,
        ok=(0, 1),
    )
    sha = out.text.strip()
    if out.returncode != 0 or not SHA_RE.fullmatch(sha):
        raise GitError(f"{ref!r} names no commit in this repository; commit your work and send its branch or commit id")
    return sha
