"""A cgroup per sandboxed command: one memory budget for its processes and its temporary files, one process cap.

The launcher's rlimits (critics/sandbox.py) bound each process, not the command: many processes at the
address-space limit, and the sandbox's tmpfs mounts, which live in RAM, all fit under them. A cgroup
bounds the whole tree. The kernel charges a tmpfs page to the cgroup of the process that wrote it, so the
files a command writes to its /tmp, home and work directory count against the same budget as its
processes; past the budget the kernel's OOM killer stops a process of the group (swap is not a way out:
the swap limit is zero), and the group's counters say so.

- cgroup v2, where this process's group in the unified hierarchy has the memory and pids controllers
  (enabled for child groups, or enabled here): a child group with `memory.max`, `memory.swap.max` = 0
  and `pids.max`; `memory.events` counts OOM kills.
- cgroup v1 (a hierarchy per controller, as many containers mount them): a child in the memory and in
  the pids hierarchy, under this process's own group in each, so the limits the server runs under still
  hold: `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap is accounted),
  `pids.max`; `memory.oom_control` counts OOM kills.
- neither writable (not root and no delegated subtree, not Linux): only the rlimits hold, and
  `hiveboard doctor` says why.

The command enters its group before any of it runs: a shell writes its own pid into the group and execs
the sandbox (not a preexec_fn, which is unsafe in a process with threads). After the command, whatever is
left in the group is killed and the group removed. A group is named after the server's pid; groups whose
server is gone (killed mid-run) are removed when the next server first looks for cgroups.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("hiveboard.critics")

PREFIX = "hiveboard-sandbox-"
STALE = re.compile(rf"{PREFIX}(\d+)-")
# the command's first process writes its pid into each group's cgroup.procs (the arguments up to "--"),
# then becomes the command; 125: it could not enter a group
ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
_serial = itertools.count(1)
_finding = threading.Lock()


@dataclass(frozen=True)
class Group:
    """One command's cgroup: a directory in the v2 hierarchy, or one in the v1 memory and one in the v1 pids
    hierarchy (in that order)."""

    version: int
    dirs: tuple[Path, ...]

    @property
    def memory(self) -> Path:
        return self.dirs[0]

    @property
    def pids(self) -> Path:
        return self.dirs[-1]

    def command(self, argv: list[str]) -> list[str]:
        """`argv`, entering this group before it starts."""
        return ["/bin/sh", "-c", ENTER, "hiveboard-sandbox", *(str(d / "cgroup.procs") for d in self.dirs), "--", *argv]

    def oom_kills(self) -> int:
        """Processes of the group the kernel killed at its memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _counter(self.memory / name, "oom_kill")

    def refused_forks(self) -> int:
        """Forks and new threads refused at the group's process limit."""
        return _counter(self.pids / "pids.events", "max")

    def processes(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found |= {int(pid) for pid in (d / "cgroup.procs").read_text().split()}
            except OSError:  # removed already
                pass
        return found

    def remove(self, wait: float = 10.0) -> bool:
        """Kill what is left in the group and remove it; False if processes outlived `wait` seconds (logged;
        the group stays until they end)."""
        end = time.monotonic() + wait
        while True:
            left = self.processes()
            if left:
                self._kill(left)
            else:
                try:
                    for d in self.dirs:
                        if d.exists():
                            d.rmdir()
                    return True
                except FileNotFoundError:
                    continue
                except OSError:  # EBUSY: a process is still on its way out
                    pass
            if time.monotonic() > end:
                log.warning("sandbox cgroup %s: processes %s still there after %.0f s", self.dirs[0], left, wait)
                return False
            time.sleep(0.02)

    def _kill(self, pids: set[int]) -> None:
        kill = self.dirs[0] / "cgroup.kill"  # v2 on Linux 5.14+: every process at once, forks included
        if self.version == 2 and kill.exists():
            try:
                kill.write_text("1")
                return
            except OSError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@dataclass(frozen=True)
class Cgroups:
    """Where this process makes its commands' groups: one parent (v2) or two (v1: memory, pids)."""

    version: int
    parents: tuple[Path, ...]

    def open(self, memory_bytes: int, processes: int) -> Group:
        """A new, empty group with these limits; OSError if the kernel refuses."""
        name = f"{PREFIX}{os.getpid()}-{next(_serial)}"
        group = Group(self.version, tuple(p / name for p in self.parents))
        try:
            for d in group.dirs:
                d.mkdir()
            if self.version == 2:
                _write(group.memory / "memory.max", memory_bytes)
                _write(group.memory / "memory.swap.max", 0, optional=True)
            else:  # memsw (memory and swap together) may not be below the memory limit: set it second
                _write(group.memory / "memory.limit_in_bytes", memory_bytes)
                _write(group.memory / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
            _write(group.pids / "pids.max", processes)
        except OSError:
            group.remove(wait=1.0)
            raise
        return group

    def remove_stale(self) -> None:
        """Remove the groups of servers that are gone (killed mid-run), and whatever still runs in them."""
        for parent in self.parents:
            for d in parent.glob(f"{PREFIX}*"):
                match = STALE.match(d.name)
                if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
                    log.info("removing the sandbox cgroup %s of a server that is gone", d)
                    Group(self.version, (d,)).remove(wait=2.0)

    def where(self) -> str:
        return ", ".join(map(str, self.parents))


def _write(path: Path, value: int, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    path.write_text(str(value))


def _counter(path: Path, key: str) -> int:
    """A `key value` line's value from a cgroup file of such lines; 0 if there is none."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


@dataclass(frozen=True)
class _Mount:
    fstype: str
    root: str  # the part of the hierarchy the mount shows
    point: Path
    options: frozenset[str]


def _mounts() -> list[_Mount]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        tail = fields[fields.index("-") + 1 :]
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            unescape = functools.partial(re.sub, r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)))
            mounts.append(
                _Mount(tail[0], unescape(fields[3]), Path(unescape(fields[4])), frozenset(tail[2].split(",")))
            )
    return mounts


def _own() -> dict[str, str]:
    """This process's group in each hierarchy: controllers ("" for v2, "memory", "cpu,cpuacct") -> path."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[controllers] = path
    return own


def _inside(mount: _Mount, path: str) -> Path | None:
    """Where group `path` of a hierarchy is under `mount`, if the mount shows it."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    found = mount.point / path[len(root) :].lstrip("/")
    return found if found.is_dir() else None


def _v2(mounts: list[_Mount], own: dict[str, str]) -> Cgroups | str:
    path = own.get("")
    parent = (
        None if path is None else next((p for m in mounts if m.fstype == "cgroup2" and (p := _inside(m, path))), None)
    )
    if parent is None:
        return "no cgroup v2 hierarchy"
    try:
        missing = {"memory", "pids"} - set((parent / "cgroup.controllers").read_text().split())
        if missing:
            return f"cgroup v2 at {parent} has no {' or '.join(sorted(missing))} controller"
        off = {"memory", "pids"} - set((parent / "cgroup.subtree_control").read_text().split())
        if off:  # refused (EBUSY) while this process is in the group, unless it is the root
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(off)))
    except OSError as exc:
        return f"cgroup v2 at {parent}: cannot enable the memory and pids controllers for child groups ({exc.strerror})"
    return Cgroups(2, (parent,))


def _v1(mounts: list[_Mount], own: dict[str, str]) -> Cgroups | str:
    parents = []
    for controller in ("memory", "pids"):
        path = next((p for c, p in own.items() if controller in c.split(",")), None)
        parent = next(
            (
                p
                for m in mounts
                if m.fstype == "cgroup" and controller in m.options and path is not None and (p := _inside(m, path))
            ),
            None,
        )
        if parent is None:
            return f"no cgroup v1 {controller} hierarchy"
        parents.append(parent)
    return Cgroups(1, tuple(parents))


def _usable(found: Cgroups) -> str | None:
    """None if a group can be made and removed under `found`'s parents; else why not. Removes the groups of
    servers that are gone first."""
    found.remove_stale()
    probe = Group(found.version, tuple(p / f"{PREFIX}{os.getpid()}-probe" for p in found.parents))
    try:
        for d in probe.dirs:
            d.mkdir(exist_ok=True)
    except OSError as exc:
        return f"cgroup v{found.version}: cannot make a group in {found.where()} ({exc.strerror})"
    finally:
        probe.remove(wait=1.0)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find() -> Cgroups | str:
    """Where this process can give each sandboxed command a cgroup (v2 first, then v1), or why nowhere;
    looked for once (and the groups of servers that are gone removed then)."""
    with _finding:
        return _find()


@functools.cache
def _find() -> Cgroups | str:
    if not sys.platform.startswith("linux"):
        return f"cgroups are Linux's; this is {sys.platform}"
    try:
        mounts, own = _mounts(), _own()
    except (OSError, ValueError) as exc:
        return f"cannot read this process's cgroups ({exc})"
    reasons = []
    for way in (_v2, _v1):
        found = way(mounts, own)
        if isinstance(found, Cgroups):
            problem = _usable(found)
            if problem is None:
                return found
            found = problem
        reasons.append(found)
    return "; ".join(reasons)


def size(mb: int) -> str:
    return f"{mb // 1024} GiB" if mb % 1024 == 0 else f"{mb} MiB"


def describe(memory_mb: int, processes: int) -> str:
    """One line for `hiveboard doctor`: how a sandboxed command's memory and processes are bounded here."""
    found = find()
    if isinstance(found, str):
        return f"rlimits only (no writable cgroup: {found})"
    return (
        f"cgroup v{found.version} (memory {size(memory_mb)} incl. tmpfs, {processes} processes, per sandboxed "
        f"command; groups under {found.where()})"
    )
