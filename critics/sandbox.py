"""One sandbox for every critic that reads or runs submitted work.

A critic hands the sandbox the work's files and a command; the sandbox runs the command against a
copy of them and gives back what it printed, capped. What each kind isolates:

- `Bubblewrap` (Linux, the OS package `bubblewrap`): new pid, network, ipc, uts and mount namespaces,
  and a user namespace when the server is not root. The root of the sandbox is empty but for the
  system directories, a few files of /etc and the Python environment, all read-only; the work sits on
  a size-capped tmpfs at /review; /tmp and HOME are tmpfs; the data directory, the config file, the
  user's home and the server's /proc are not there at all. The environment is cleared to a fixed set.
  When the server runs as root, the command drops to an unprivileged uid of its own inside instead of
  entering a user namespace: a root-owned process ignores the kernel's per-user process limit.
- `SandboxExec` (macOS `sandbox-exec`): a deny-by-default profile that allows reading the system and
  the Python environment, writing the work and temporary directories, and no network.
- `Bare`: a plain subprocess with the same rlimits, environment and process-group kill, but no
  isolation. Static analysers (which never run the code) use it where no sandbox works, and the
  acceptance check only when the operator chose `review.execute = "unsafe"`.

Every command starts under a small launcher that sets the rlimits inside the namespaces (CPU seconds,
address space, processes, file size, open files); on Linux, where a cgroup can be made, the command also
runs in one of its own, which bounds the memory of all its processes and temporary files together and
the number of its processes (critics/sandbox_cgroup.py). The caller kills the whole sandbox at the
wall-clock timeout and stops reading output at a cap. `detect()` probes a real Python run in each
candidate once, so a sandbox that cannot start here (no bwrap, user namespaces disabled) is reported,
never half-used.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from hiveboard.board.priority import at_low_priority

from . import sandbox_cgroup
from .sandbox_cgroup import Group

log = logging.getLogger("hiveboard.critics")
UID_BASE, UID_SPAN = 2_000_000, 1_000_000  # unprivileged uids for runs when the server is root
# Read-only system paths a command may need; each is bound if it exists (a symlink is recreated).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "passwd", "group", "nsswitch.conf")
MAX_OUTPUT = 16 * 1024 * 1024  # a command that prints more than this is stopped
# bubblewrap's namespaces for every sandboxed command (the review's and git's): no network, its own pids
NAMESPACES = (
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
)


def system_binds() -> list[str]:
    """bubblewrap's arguments for the read-only system every command needs: SYSTEM's directories (a symlink
    recreated as one) and ETC's files in a 0755 /etc."""
    args: list[str] = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


Files = dict[str, str] | Path  # what a session holds: files by relative path, or a directory of them


class SandboxLimits(BaseModel):
    """What one sandboxed command may use (the `[review.limits]` table)."""

    cpu_seconds: int = Field(60, ge=1, le=3600, description="CPU seconds per process")
    memory_mb: int = Field(2048, ge=64, le=1_048_576, description="address space per process")
    memory_total_mb: int = Field(
        1024,
        ge=64,
        le=1_048_576,
        description="memory of one sandboxed command: its processes and its temporary files together (a "
        "cgroup; where none can be made, only the per-process limits hold)",
    )
    processes: int = Field(64, ge=4, le=4096, description="processes and threads at once")
    file_mb: int = Field(64, ge=1, le=65_536, description="largest file it may write")
    open_files: int = Field(256, ge=16, le=65_536)
    work_mb: int = Field(512, ge=16, le=65_536, description="size of the writable work directory and of /tmp")
    output_kb: int = Field(256, ge=4, le=65_536, description="stdout and stderr kept (the tail) of each command")


@dataclass
class RunResult:
    """How a sandboxed command ended."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    flooded: bool = False  # printed more than MAX_OUTPUT and was stopped
    dropped: int = 0  # output bytes not kept (beyond SandboxLimits.output_kb)
    report: str = ""  # what the command wrote to the report pipe (HIVEBOARD_REPORT_FD), capped
    out_of_memory: bool = False  # the kernel killed a process of it at its cgroup's memory budget
    refused_forks: bool = False  # a fork or a new thread was refused at its cgroup's process limit

    @property
    def signal(self) -> str | None:
        """The signal that ended the command, by name (SIGKILL, SIGXCPU, …)."""
        code = self.returncode
        if code is None or not (code < 0 or code > 128):
            return None
        number = -code if code < 0 else code - 128
        try:
            return signal.Signals(number).name
        except ValueError:
            return None

    def why(self, limits: SandboxLimits, wall: float) -> str | None:
        """Why the command was stopped (the clock, its output, a signal from a limit), or a limit its output
        says it ran into."""
        return self.stopped(limits, wall) or self.hint(limits)

    def stopped(self, limits: SandboxLimits, wall: float) -> str | None:
        """Why the sandbox or the kernel stopped the command, if one did."""
        if self.out_of_memory:  # first: a run that lost a process to the budget may then hang or fail
            return over_budget(limits)
        if self.timed_out:
            return f"did not finish within {wall:.0f} s and was stopped"
        if self.flooded:
            return f"printed more than {MAX_OUTPUT // 1024 // 1024} MB and was stopped"
        sig = self.signal
        if sig == "SIGXCPU" or (sig == "SIGKILL" and "CPU time" in self.stderr):
            return f"used more than {limits.cpu_seconds} s of CPU and was stopped"
        if sig == "SIGXFSZ":
            return f"wrote a file larger than {limits.file_mb} MB"
        if sig == "SIGKILL":
            return "was killed (SIGKILL)"
        return None

    def hint(self, limits: SandboxLimits) -> str | None:
        """A limit the command's own output says it ran into."""
        if self.refused_forks:
            return f"hit the process limit ({limits.processes} processes)"
        text = self.stdout[-20_000:] + self.stderr[-20_000:]
        if "MemoryError" in text or "Cannot allocate memory" in text:
            return f"ran out of memory (limit {limits.memory_mb} MB of address space)"
        if "Resource temporarily unavailable" in text or "BlockingIOError" in text:
            return f"hit the process limit ({limits.processes} processes)"
        if "No space left on device" in text:
            return f"filled its work space (limit {limits.work_mb} MB)"
        return None


def over_budget(limits: SandboxLimits) -> str:
    """What a command that the kernel stopped at its memory budget is told."""
    return (
        f"used more than the sandbox's {sandbox_cgroup.size(limits.memory_total_mb)} memory budget (processes "
        "and temporary files together) and was stopped; make it use less"
    )


def limits_line(limits: SandboxLimits) -> str:
    """How a sandboxed command's memory and processes are bounded on this machine, in a line."""
    return sandbox_cgroup.describe(limits.memory_total_mb, limits.processes)


def _cgroup(limits: SandboxLimits) -> Group | None:
    """A cgroup of its own for one command, where this machine lets this process make one."""
    found = sandbox_cgroup.find()
    if isinstance(found, str):
        return None
    try:
        return found.open(limits.memory_total_mb << 20, limits.processes)
    except OSError as exc:
        log.warning("a sandboxed command runs without a cgroup (%s): only its per-process limits hold", exc)
        return None


@dataclass
class Session:
    """A prepared work directory: the submitted files (`src`), the card creator's tests (`spec`) and an
    empty directory to run from (`run`), each as the command inside the sandbox sees it."""

    host: Path
    src: str
    spec: str
    run: str
    out: str
    extra_ro: dict[str, Path] = field(default_factory=dict)  # path inside -> host path (e.g. a runner script)


LAUNCHER = """
import os, shutil, sys
try:
    import resource
except ImportError:  # Windows: no rlimits to set
    resource = None
cpu, mem, nproc, fsize, nofile, drop = (int(x) for x in sys.argv[1].split(","))
work = sys.argv[2]
if work:  # the submitted files onto the writable work tmpfs, before any of them can run (links stay links)
    shutil.copytree("/in/src", work + "/src", symlinks=True, dirs_exist_ok=True)
    if drop:
        for root, dirs, files in os.walk(work + "/src"):
            for name in [root, *(os.path.join(root, n) for n in files)]:
                os.chown(name, drop, drop)
for res, value in () if resource is None else (
        (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem), (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_CORE, 0)):
    if value >= 0:  # -1: leave as it is
        resource.setrlimit(res, (value, value + 1 if res == resource.RLIMIT_CPU else value))
if drop:
    os.setgroups([])
    os.setgid(drop)
    os.setuid(drop)
os.execvp(sys.argv[3], sys.argv[3:])
"""


def _launch(limits: SandboxLimits, drop: int = 0, copy_to: str = "", processes: bool = True) -> list[str]:
    """The launcher's command line: rlimits (-1: leave as is), the uid to drop to (0: none), and the work
    directory to copy the files into (empty: none); the command follows."""
    values = (
        limits.cpu_seconds,
        limits.memory_mb << 20,
        limits.processes if processes else -1,
        limits.file_mb << 20,
        limits.open_files,
        drop,
    )
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, ",".join(str(v) for v in values), copy_to]


def python_paths() -> list[Path]:
    """Directories the Python environment lives in: the interpreter, the standard library, the
    installed packages (the venv and its base), as they exist on disk."""
    paths = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(sys.base_exec_prefix),
        Path(sys.executable).resolve().parent.parent,
    }
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(Path(value))
    existing = sorted({p.resolve() for p in paths if p.exists()}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in existing:  # drop paths inside another one
        if not any(p.is_relative_to(q) for q in out):
            out.append(p)
    return out


class Box(ABC):
    """A way to run a command against submitted files."""

    name: str = ""
    isolated: bool = False  # True: a real sandbox; False: only rlimits and a clean environment

    @abstractmethod
    def session(self, src: Files, spec: dict[str, str] | None = None) -> Iterator[Session]:
        """A context manager: the files written to a fresh work directory, removed afterwards. `src` is the
        submitted files by path, or a directory of them (a commit's tree) copied in."""

    def expose(self, session: Session, host: Path) -> str:
        """A file of the server's (a tool, a runner script) as the command sees it, read-only."""
        return str(host)

    @abstractmethod
    def command(
        self, session: Session, argv: list[str], cwd: str, env: dict[str, str], limits: SandboxLimits, writable: bool
    ) -> tuple[list[str], dict[str, str], str]:
        """(argv, environment, working directory) of the process that runs `argv` in the box."""

    def run(
        self,
        session: Session,
        argv: list[str],
        *,
        limits: SandboxLimits,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        writable: bool = False,
        report: bool = False,
    ) -> RunResult:
        """Run `argv` (paths as `session` shows them) from `cwd` (default: the empty run directory);
        `writable`: a writable copy of the files instead of a read-only view; `report`: a pipe whose fd is
        in HIVEBOARD_REPORT_FD, read back as `RunResult.report`."""
        started = time.monotonic()
        read_fd = write_fd = None
        if report:
            read_fd, write_fd = os.pipe()
        groups: list[Group | None] = []
        try:
            try:
                proc = self._start(
                    session,
                    argv,
                    cwd,
                    {**env_of(env), **({"HIVEBOARD_REPORT_FD": str(write_fd)} if report else {})},
                    limits,
                    writable,
                    [write_fd] if report else [],
                    groups,
                )
            finally:
                if write_fd is not None:
                    os.close(write_fd)
            if os.name == "nt":  # no select() on pipes there: read to the end, then cap
                return _communicate(proc, limits, timeout, started)
            return _collect(
                [proc], groups, {"out": proc.stdout, "err": proc.stderr, "report": read_fd}, limits, timeout, started
            )[0]
        finally:
            _remove(groups)
            if read_fd is not None:
                os.close(read_fd)

    def run_pair(
        self,
        judge: Session,
        judge_argv: list[str],
        host: Session,
        host_argv: list[str],
        *,
        limits: SandboxLimits,
        timeout: float,
        judge_env: dict[str, str] | None = None,
    ) -> tuple[RunResult, RunResult]:
        """Two commands joined by two pipes, each in its own box: the judge (run from `judge.spec`, with a
        report pipe in HIVEBOARD_REPORT_FD) and the host (from a writable copy of `host.src`). Each side's
        end of the pipes is in HIVEBOARD_CALL_IN / HIVEBOARD_CALL_OUT. The host can reach neither the
        judge's files, nor its process, nor its report. Both end when the judge's output ends, or at the
        timeout. (judge's outcome with the report, host's outcome)."""
        if os.name == "nt":
            raise OSError("the split test run needs select() on pipes, which Windows lacks")
        started = time.monotonic()
        to_host_r, to_host_w = os.pipe()
        to_judge_r, to_judge_w = os.pipe()
        report_r, report_w = os.pipe()
        procs: list[subprocess.Popen] = []
        groups: list[Group | None] = []  # each side in a cgroup of its own: the code cannot crowd out the judge
        try:
            procs.append(
                self._start(
                    judge,
                    judge_argv,
                    judge.spec,
                    {
                        **env_of(judge_env),
                        "HIVEBOARD_CALL_IN": str(to_judge_r),
                        "HIVEBOARD_CALL_OUT": str(to_host_w),
                        "HIVEBOARD_REPORT_FD": str(report_w),
                    },
                    limits,
                    False,
                    [to_judge_r, to_host_w, report_w],
                    groups,
                )
            )
            procs.append(
                self._start(
                    host,
                    host_argv,
                    host.src,
                    {**env_of(None), "HIVEBOARD_CALL_IN": str(to_host_r), "HIVEBOARD_CALL_OUT": str(to_judge_w)},
                    limits,
                    True,
                    [to_host_r, to_judge_w],
                    groups,
                )
            )
        except BaseException:
            for proc in procs:
                _kill_group(proc)
            _remove(groups)
            os.close(report_r)
            raise
        finally:
            for fd in (to_host_r, to_host_w, to_judge_r, to_judge_w, report_w):
                os.close(fd)
        judge_proc, host_proc = procs
        try:
            return _collect(
                procs,
                groups,
                {
                    "out": judge_proc.stdout,
                    "err": judge_proc.stderr,
                    "report": report_r,
                    "host-out": host_proc.stdout,
                    "host-err": host_proc.stderr,
                },
                limits,
                timeout,
                started,
                until=("out", "err", "report"),
            )
        finally:
            _remove(groups)
            os.close(report_r)

    def _start(
        self,
        session: Session,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str],
        limits: SandboxLimits,
        writable: bool,
        fds: list[int],
        groups: list[Group | None],
    ) -> subprocess.Popen:
        """Start the command; its cgroup (None: none) is appended to `groups`, for the caller to remove."""
        full, full_env, full_cwd = self.command(session, argv, cwd or session.run, env, limits, writable)
        group = _cgroup(limits)
        groups.append(group)
        # started from a low-priority thread, so the process runs below request handling (board/priority.py)
        return at_low_priority(
            subprocess.Popen,
            full if group is None else group.command(full),
            env=full_env,
            cwd=full_cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(fds),
        )


def env_of(extra: dict[str, str] | None) -> dict[str, str]:
    """The fixed environment of a sandboxed command, plus `extra`."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        **(extra or {}),
    }


def _collect(
    procs: list[subprocess.Popen],
    groups: list[Group | None],
    streams: dict,
    limits: SandboxLimits,
    timeout: float,
    started: float,
    until: tuple[str, ...] | None = None,
) -> list[RunResult]:
    """Read the commands' output (tails capped) until it ends (or, with `until`, until those streams end),
    the deadline passes or they flood; kill their whole process groups on the way out. One RunResult per
    command: the first gets "out", "err" and "report", the second "host-out" and "host-err"; each says
    what its cgroup (`groups`, in the same order) counted."""
    keep = limits.output_kb * 1024
    bufs = {key: bytearray() for key in streams}
    total, timed_out, flooded = 0, False, False
    sel = selectors.DefaultSelector()
    for key, stream in streams.items():
        if stream is not None:
            sel.register(stream, selectors.EVENT_READ, key)
    waiting = set(until or streams) & {k for k, s in streams.items() if s is not None}
    deadline = started + timeout
    try:
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    waiting.discard(key.data)
                    continue
                buf = bufs[key.data]
                buf += chunk
                if key.data == "report":
                    del buf[1 << 20 :]  # a report is small; the rest is dropped
                    continue
                total += len(chunk)
                if len(buf) > keep:
                    del buf[: len(buf) - keep]
                if total > MAX_OUTPUT:
                    flooded = True
            if flooded:
                break
    finally:
        sel.close()
        for proc in procs:
            _kill_group(proc)
            for stream in (proc.stdout, proc.stderr):
                stream.close()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    seconds = time.monotonic() - started
    outcomes = []
    for proc, group, (out, err) in zip(procs, groups, (("out", "err"), ("host-out", "host-err"))):
        kept = len(bufs.get(out, b"")) + len(bufs.get(err, b""))
        outcomes.append(
            RunResult(
                returncode=None if timed_out else proc.returncode,
                timed_out=timed_out,
                flooded=flooded,
                stdout=bufs.get(out, bytearray()).decode("utf-8", "replace"),
                stderr=bufs.get(err, bytearray()).decode("utf-8", "replace"),
                report=bufs.get("report", bytearray()).decode("utf-8", "replace") if out == "out" else "",
                seconds=seconds,
                dropped=max(0, total - kept) if len(procs) == 1 else 0,
                out_of_memory=group is not None and group.oom_kills() > 0,
                refused_forks=group is not None and group.refused_forks() > 0,
            )
        )
    return outcomes


def _remove(groups: list[Group | None]) -> None:
    for group in groups:
        if group is not None:
            group.remove()


def _communicate(proc: subprocess.Popen, limits: SandboxLimits, timeout: float, started: float) -> RunResult:
    """Windows: the command's whole output, then its tails (no report pipe there)."""
    keep = limits.output_kb * 1024
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    return RunResult(
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        stdout=out[-keep:].decode("utf-8", "replace"),
        stderr=err[-keep:].decode("utf-8", "replace"),
        seconds=time.monotonic() - started,
        dropped=max(0, len(out) + len(err) - 2 * keep),
    )


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill everything the command started. For bubblewrap, killing it ends its pid namespace."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextmanager
def _workdir(src: Files, spec: dict[str, str] | None) -> Iterator[Path]:
    from .base import write_tree

    host = Path(tempfile.mkdtemp(prefix="hiveboard-review-"))
    try:
        if isinstance(src, Path):  # a commit's tree, extracted with no link out (critics/commits.py): links stay links
            shutil.copytree(src, host / "src", symlinks=True)
        for sub, files in (("src", {} if isinstance(src, Path) else src), ("spec", spec or {})):
            (host / sub).mkdir(exist_ok=True)
            write_tree(host / sub, files)
        (host / "run").mkdir()
        (host / "out").mkdir()
        yield host
    finally:
        shutil.rmtree(host, ignore_errors=True)


class Bare(Box):
    """A plain subprocess: rlimits, a clean environment, a process-group kill; no isolation."""

    name = "none"

    @contextmanager
    def session(self, src: Files, spec: dict[str, str] | None = None) -> Iterator[Session]:
        with _workdir(src, spec) as host:
            yield Session(
                host=host, src=str(host / "src"), spec=str(host / "spec"), run=str(host / "run"), out=str(host / "out")
            )

    def command(self, session, argv, cwd, env, limits, writable):
        # no namespace to count processes in: a per-user limit would count all of the server user's
        # processes, so the process limit is left as it is
        env = {**env, "HOME": session.out, "TMPDIR": session.out}
        return [*_launch(limits, processes=False), *argv], env, cwd


class Bubblewrap(Box):
    """Linux namespaces through bwrap; see the module docstring for what the sandbox holds."""

    name = "bubblewrap"
    isolated = True

    def __init__(self, bwrap: str, hidden: list[Path] = ()):
        self.bwrap = bwrap
        self.hidden = [Path(p) for p in hidden]
        self.root = os.geteuid() == 0
        self.ro = python_paths()
        # where the work sits inside: a path no part of the Python environment is under
        self.work = next(
            w for w in (f"/review{n or ''}" for n in range(100)) if not any(p.is_relative_to(w) for p in self.ro)
        )

    @contextmanager
    def session(self, src: Files, spec: dict[str, str] | None = None) -> Iterator[Session]:
        with _workdir(src, spec) as host:
            yield Session(
                host=host,
                src=f"{self.work}/src",
                spec=f"{self.work}/spec",
                run=f"{self.work}/run",
                out=f"{self.work}/out",
            )

    def expose(self, session: Session, host: Path) -> str:
        host = host.resolve()
        if any(host.is_relative_to(p) for p in [*self.ro, Path("/usr")]):
            return str(host)
        inside = f"/opt/hiveboard/{len(session.extra_ro)}/{host.name}"
        session.extra_ro[inside] = host
        return inside

    def _dirs(self, path: Path, made: set[str], args: list[str]) -> None:
        """Create a bound path's parents as 0755 directories (bwrap would make them 0700)."""
        for parent in reversed(path.parents):
            text = str(parent)
            if text != "/" and text not in made:
                made.add(text)
                args += ["--perms", "0755", "--dir", text]

    def command(self, session, argv, cwd, env, limits, writable):
        size = str(limits.work_mb << 20)
        args = [self.bwrap, *NAMESPACES, "--hostname", "sandbox"]
        if self.root:
            args += ["--cap-add", "CAP_SETUID,CAP_SETGID,CAP_CHOWN"]
        else:
            args += ["--unshare-user", "--disable-userns"]
        # the writable places first: a Python environment that lives under /tmp is bound on top of them
        args += [
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--size",
            size,
            "--perms",
            "01777",
            "--tmpfs",
            "/tmp",
            "--size",
            size,
            "--perms",
            "01777",
            "--tmpfs",
            "/home/sandbox",
            "--size",
            size,
            "--perms",
            "0755",
            "--tmpfs",
            self.work,
        ]
        made = {"/tmp", "/home", "/home/sandbox", self.work, "/dev", "/proc", *SYSTEM, "/etc"}
        args += system_binds()
        for path in self.ro:
            if not path.is_relative_to("/usr"):
                self._dirs(path, made, args)
                args += ["--ro-bind", str(path), str(path)]
        for path in self.hidden:  # the data directory or config inside a bound tree: covered over
            if any(path.is_relative_to(p) for p in [*self.ro, Path("/usr")]):
                args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        host = session.host
        for sub in ("run", "out"):
            args += ["--perms", "01777", "--dir", f"{self.work}/{sub}"]
        if writable:  # the launcher copies the files onto the tmpfs
            args += ["--ro-bind", str(host / "src"), "/in/src", "--perms", "0755", "--dir", session.src]
        else:
            args += ["--ro-bind", str(host / "src"), session.src]
        args += ["--ro-bind", str(host / "spec"), session.spec]
        for inside, path in session.extra_ro.items():
            self._dirs(Path(inside), made, args)
            args += ["--ro-bind", str(path), inside]
        args += ["--chdir", cwd, "--clearenv"]
        for key, value in {**env, "HOME": "/home/sandbox", "TMPDIR": "/tmp", "USER": "sandbox"}.items():
            args += ["--setenv", key, value]
        # as root, each run gets a uid of its own (from a range no account uses): the kernel counts the
        # process limit per uid, so one run at its limit does not starve the others
        drop = UID_BASE + secrets.randbelow(UID_SPAN) if self.root else 0
        launch = _launch(limits, drop, self.work if writable else "")
        return [*args, "--", *launch, *argv], {}, str(host)


SBPL = """(version 1)
(deny default)
(allow process-exec process-fork signal sysctl-read mach-lookup ipc-posix-shm)
(allow file-read-metadata)
(allow file-read* (subpath "/usr") (subpath "/System") (subpath "/Library") (subpath "/private/etc")
  (subpath "/dev") (subpath "/private/var/db/timezone") (literal "/") {reads})
(allow file-write* (subpath {work}) (subpath {tmp}) (literal "/dev/null"))
(allow file-read* (subpath {work}) (subpath {tmp}))
"""


def _sbpl_string(path: str) -> str:
    return json.dumps(path)  # SBPL strings are double-quoted with backslash escapes, as JSON's


class SandboxExec(Box):
    """macOS: `sandbox-exec` with a deny-by-default profile; no network, writes only to the work dir."""

    name = "sandbox-exec"
    isolated = True

    def __init__(self, tool: str):
        self.tool = tool
        self.ro = python_paths()

    @contextmanager
    def session(self, src: Files, spec: dict[str, str] | None = None) -> Iterator[Session]:
        with _workdir(src, spec) as host:
            host = host.resolve()  # /var is /private/var: the profile must name the real path
            yield Session(
                host=host, src=str(host / "src"), spec=str(host / "spec"), run=str(host / "run"), out=str(host / "out")
            )

    def expose(self, session: Session, host: Path) -> str:
        session.extra_ro[str(host)] = host  # readable through the profile
        return str(host)

    def command(self, session, argv, cwd, env, limits, writable):
        reads = " ".join(f"(subpath {_sbpl_string(str(p))})" for p in [*self.ro, *session.extra_ro.values()])
        tmp = session.host / "out"
        profile = SBPL.format(reads=reads, work=_sbpl_string(str(session.host)), tmp=_sbpl_string(str(tmp)))
        env = {**env, "HOME": str(tmp), "TMPDIR": str(tmp)}
        # the process limit is per user on macOS: the server user's other processes would count
        return [self.tool, "-p", profile, *_launch(limits, processes=False), *argv], env, cwd


@dataclass
class Detected:
    """The sandbox this machine can run, or why none."""

    box: Box | None
    reason: str


def detect(hidden: list[Path] = ()) -> Detected:
    """The sandbox for this machine, proven by running Python inside it once."""
    if sys.platform.startswith("linux"):
        bwrap = shutil.which("bwrap")
        if not bwrap:
            return Detected(
                None,
                "bubblewrap is not installed (the OS package `bubblewrap`: apt-get install "
                "bubblewrap, dnf install bubblewrap)",
            )
        box: Box = Bubblewrap(bwrap, hidden)
    elif sys.platform == "darwin":
        tool = shutil.which("sandbox-exec")
        if not tool:
            return Detected(None, "sandbox-exec is not available on this macOS")
        box = SandboxExec(tool)
    else:
        return Detected(None, f"no sandbox is supported on {sys.platform} (Linux: bubblewrap; macOS: sandbox-exec)")
    problem = probe(box)
    if problem:
        return Detected(None, f"{box.name} cannot run here: {problem}")
    return Detected(box, f"{box.name} works here")


def probe(box: Box) -> str | None:
    """None when a Python in the box starts, sees its files and cannot reach the network; else why not."""
    code = (
        "import socket, sys; s = socket.socket(); s.settimeout(2)\n"
        "try:\n    s.connect(('1.1.1.1', 53)); print('network')\nexcept OSError:\n    pass\n"
        "print(open(sys.argv[1]).read())"
    )
    with box.session({"probe.txt": "ok"}) as session:
        out = box.run(
            session, [sys.executable, "-I", "-c", code, f"{session.src}/probe.txt"], limits=SandboxLimits(), timeout=30
        )
    if out.timed_out:
        return "a probe run did not finish in 30 s"
    if out.returncode != 0 or out.stdout.strip() != "ok":
        first = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        if "uid map" in out.stderr or "user namespace" in out.stderr.lower() or "Operation not permitted" in out.stderr:
            first += (
                " (user namespaces look disabled: sysctl kernel.unprivileged_userns_clone=1, or the "
                "AppArmor setting kernel.apparmor_restrict_unprivileged_userns=0, lets bwrap start)"
            )
        return first[:300]
    return None
