"""The harness every bench script shares: timed samples and percentiles, the machine line, tables, the
command line and scratch directories, server processes, MCP clients and the review round trip.

Only the standard library is imported at module level: the page-reader process of the web benches imports
this module too, and it must start light. MCP, httpx and hiveboard are imported where they are used.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

# ----------------------------------------------------------------------------- timing


class Lat(list):
    """Latencies in seconds, plus the process CPU time (all threads) the timed work took."""

    cpu_s: float | None = None
    cpu_per: int | None = None  # what cpu_s is divided by (default: the number of samples)

    @contextmanager
    def timing(self):
        """Time one sample: its wall time is appended, its process CPU time added to cpu_s."""
        c0, t0 = time.process_time(), time.perf_counter()
        yield
        self.append(time.perf_counter() - t0)
        self.cpu_s = (self.cpu_s or 0.0) + time.process_time() - c0


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile of samples (seconds) in milliseconds."""
    if not samples:
        return float("nan")
    s = sorted(samples)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k] * 1000


def stats(lat: list[float]) -> dict:
    """n, p50_ms, p99_ms and cpu_ms (per sample, or per `cpu_per`) of a list of latencies."""
    n = len(lat)
    cpu_s = getattr(lat, "cpu_s", None)
    per = getattr(lat, "cpu_per", None) or n
    return dict(
        n=n, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), cpu_ms=cpu_s / per * 1000 if cpu_s is not None and n else None
    )


def ratio(value: float, base: float | None) -> float | None:
    """value / base, or None when there is no baseline to divide by."""
    return value / base if base else None


def _over(started: float, n: int, seconds: float | None, min_samples: int) -> bool:
    return seconds is not None and n >= min_samples and time.perf_counter() - started > seconds


def timed_raw(
    fns: Iterable[Callable], *, before=None, check=None, seconds: float | None = None, min_samples: int = 30
) -> Lat:
    """Each function called and timed alone; `before` (untimed) runs first each time, `check(result)` after.
    With `seconds`, stops once that much time has gone and it has `min_samples` samples."""
    lat = Lat()
    started = time.perf_counter()
    for fn in fns:
        if _over(started, len(lat), seconds, min_samples):
            break
        if before is not None:
            before()
        with lat.timing():
            out = fn()
        if check is not None:
            check(out)
    return lat


async def timed_calls(
    client, tool: str, arg_list: Iterable[dict], *, before=None, check=None, seconds=None, min_samples=30
) -> Lat:
    """timed_raw for MCP tool calls: one call per arguments, `check(args, result)` after each."""
    lat = Lat()
    started = time.perf_counter()
    for args in arg_list:
        if _over(started, len(lat), seconds, min_samples):
            break
        if before is not None:
            before()
        with lat.timing():
            out = await call(client, tool, args)
        if check is not None:
            check(args, out)
    return lat


class GcWatch:
    """Times the collector's pauses (gc.callbacks), so a row can say how many full collections hit it."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._t0))

    @contextmanager
    def installed(self):
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)

    def mark(self) -> int:
        return len(self.pauses)

    def note(self, since: int) -> str:
        full = [d for g, d in self.pauses[since:] if g == 2]
        return f"{len(full)} full GC, max {max(full) * 1000:.0f} ms" if full else ""


def freeze_heap(enabled: bool = True) -> None:
    """Move everything alive now out of the collector's view, as `hiveboard serve` does after start-up."""
    if enabled:
        gc.collect()
        gc.freeze()


# ----------------------------------------------------------------------------- the machine


def machine_info(*packages: str) -> dict:
    """CPU, Python, SQLite and the versions of mcp and of the given packages."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info = dict(
        cpu_count=os.cpu_count(),
        usable_cpus=usable,
        python=platform.python_version(),
        implementation=platform.python_implementation(),
        platform=platform.platform(),
        mcp=version("mcp"),
        sqlite=sqlite3.sqlite_version,
    )
    info.update({name: version(name) for name in packages})
    return info


def commit() -> str | None:
    """`git describe --always --dirty` of the checkout the bench runs from."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


_BASE_INFO = ("cpu_count", "usable_cpus", "python", "implementation", "platform", "mcp", "sqlite")


def machine_line(info: dict) -> str:
    """machine_info as the one line every bench prints first."""
    rest = "".join(f", {k} {v}" for k, v in info.items() if k not in _BASE_INFO)
    return (
        f"machine: {info['cpu_count']} cpus ({info['usable_cpus']} usable), {info['implementation']} "
        f"{info['python']}, mcp {info['mcp']}{rest}, sqlite {info['sqlite']}, {info['platform']}"
    )


def loadavg() -> str:
    """The kernel's load line (1, 5 and 15 minutes, runnable/total, last pid), '?' where there is none."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "?"


def proc_cpu_seconds(pid: int) -> float | None:
    """user+system CPU seconds of a process, all its threads (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def rss_mb() -> float:
    """This process's resident set, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def status_mb(pid: int | str, field: str) -> float:
    """A memory field of /proc/PID/status (VmRSS, VmHWM), MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1000  # kB -> MB
    return float("nan")


def process_tree(pid: int) -> list[int]:
    """pid and the processes it started, and theirs (Linux /proc: every thread's children), parents first;
    [] once pid has exited."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        try:
            children = [
                int(c) for task in Path(f"/proc/{p}/task").iterdir() for c in (task / "children").read_text().split()
            ]
        except (OSError, ValueError):
            continue  # exited meanwhile
        found.append(p)
        todo += children
    return found


class RssSampler:
    """A thread that reads `read()` (default: VmRSS of `pid`) every `every` seconds while the block runs."""

    def __init__(self, pid: int | None = None, every: float = 0.25, read: Callable[[], float] | None = None):
        self.read = read or (lambda: status_mb(pid, "VmRSS"))
        self.every = every
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.wait(self.every):
            try:
                self.samples.append((time.perf_counter() - t0, self.read()))
            except OSError:
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> float:
        return max((s for _, s in self.samples), default=float("nan"))


# ----------------------------------------------------------------------------- command line, scratch, output


def bench_parser(
    doc: str, *, quick: str | None = None, keep: str | None = "keep the temp directory", json: bool = True
) -> argparse.ArgumentParser:
    """The arguments every bench shares: --quick (when it has a smoke run), --json (when it writes results),
    --keep (when it has a temp directory)."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    if quick:
        p.add_argument("--quick", action="store_true", help=quick)
    if json:
        p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    if keep:
        p.add_argument("--keep", action="store_true", help=keep)
    return p


@contextmanager
def deadline(seconds: int, what: str):
    """Stop the block with a TimeoutError after `seconds` (SIGALRM), so a stuck run ends instead of hanging."""

    def out_of_time(*_):
        raise TimeoutError(f"{what} ran longer than {seconds} s; stopping")

    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def parse_count(text: str) -> int:
    """A count as the command lines write it: 512, 10k, 1.5k."""
    text = text.strip().lower()
    return int(float(text.rstrip("k")) * (1_000 if text.endswith("k") else 1))


def count_label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def remove_unless_kept(path: Path | str, keep: bool) -> None:
    """The bench's scratch directory: removed, or kept (and named) for a look afterwards."""
    if keep:
        print(f"kept {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def scratch(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A temp directory for the run's data directories and logs, removed at the end unless kept."""
    path = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    try:
        yield path
    finally:
        remove_unless_kept(path, keep)


def finish(res, started: float, verdict: Iterable[str] = (), json_path: str | Path | None = None) -> None:
    """The end every run shares: the verdict lines; the total time in res.total_s and, when the run noted its
    load average at the start (res.load_before), the one at the end too; both printed; the results as JSON."""
    res.total_s = time.perf_counter() - started
    lines = [line for line in verdict if line]
    if lines:
        print("\n" + "\n".join(lines))
    load = ""
    if getattr(res, "load_before", None):
        res.load_after = loadavg()
        load = f"; load average {res.load_before} -> {res.load_after}"
    print(f"total {res.total_s:.1f} s{load}")
    write_json(json_path, res)


def _plain(value):
    if is_dataclass(value):
        return asdict(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def write_json(path: str | Path | None, data) -> None:
    """The results as JSON (dataclasses as dicts, numpy numbers as floats, anything else as text)."""
    if path:
        Path(path).write_text(json.dumps(data, indent=1, default=_plain))
        print(f"wrote {path}")


@dataclass(frozen=True)
class Col:
    """One column of a printed table: its title, width and how a value is shown (None shows `blank`)."""

    title: str
    width: int
    fmt: str = ""  # format spec of the values: ".2f", ".1%", "" for text as it is
    left: bool = False
    suffix: str = ""  # after the value, within the width ("x" for ratios)
    blank: str = "-"
    clip: bool = False  # cut longer text to the width

    def head(self) -> str:
        return f"{self.title:{'<' if self.left else '>'}{self.width}}"

    def cell(self, value) -> str:
        text = (
            self.blank if value is None else value if isinstance(value, str) else format(value, self.fmt) + self.suffix
        )
        if self.clip:
            text = text[: self.width]
        return f"{text:{'<' if self.left else '>'}{self.width}}"


def header(cols: list[Col], title: str | None = None) -> None:
    """Print a table's title, header line and rule (for a table whose rows are printed as they are measured)."""
    if title:
        print(f"\n{title}")
    head = " ".join(c.head() for c in cols)
    print(head)
    print("-" * len(head))


def line(cols: list[Col], values) -> None:
    """Print one row of a table: one value per column; a value beyond the columns is a note printed after them."""
    values = list(values)
    text = " ".join(c.cell(v) for c, v in zip(cols, values))
    note = values[len(cols)] if len(values) > len(cols) else ""
    print((text + (f"  {note}" if note else "")).rstrip(), flush=True)


def table(cols: list[Col], rows: Iterable, title: str | None = None) -> None:
    """Print a whole table; a str row is printed as it is (a section heading)."""
    header(cols, title)
    for row in rows:
        print(row) if isinstance(row, str) else line(cols, row)


def ts(text: str) -> float:
    """An ISO 8601 time from the server as a Unix timestamp."""
    return datetime.fromisoformat(text).timestamp()


def quiet_loggers() -> None:
    """Keep the servers a benchmark builds from logging every request (build_server's logging setup)."""
    for name in ("httpx", "httpx2", "mcp", "hiveboard"):
        logging.getLogger(name).setLevel(logging.WARNING)


# ----------------------------------------------------------------------------- processes

TESTS = Path(__file__).resolve().parents[1] / "tests"


def from_tests(module: str):
    """A helper module of tests/, shared rather than copied: pg_cluster (a throwaway PostgreSQL cluster on
    loopback), fake_llm (a fake OpenAI-compatible server), tasks_client (the requester side of MCP Tasks)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(module)


def clean_env(**variables: str) -> dict:
    """This environment without any HIVEBOARD_* setting the caller has (nor a Claude Code session's id, which would
    name the agent), plus `variables`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEBOARD_") and k != "CLAUDE_CODE_SESSION_ID"}
    env.update(variables)
    return env


def server_env(home: Path, **variables: str) -> dict:
    """The environment of a hiveboard process the bench starts: the bench's data directory and settings
    whatever HIVEBOARD_* the caller has set (no config file), WARNING logs, unbuffered stderr."""
    return clean_env(
        HIVEBOARD_CONFIG=str(home / "no-config.toml"), HIVEBOARD_LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1", **variables
    )


def hiveboard_cmd(*args: str, installed: bool = False) -> list[str]:
    """`python -m hiveboard.server ARGS`; with `installed`, the `hiveboard` script beside this Python when
    there is one (what users run)."""
    script = Path(sys.executable).with_name("hiveboard")
    if installed and script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "hiveboard.server", *args]


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    """Terminate a process the bench started, killing it if it does not exit in time."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class LoggedServer:
    """An HTTP server process the bench starts on a free loopback port, its stderr in a file. As a context
    manager it is stopped at the end, and the log's tail is shown when something failed."""

    def __init__(self, log_path: Path, stop_timeout: float = 10.0, home: Path | None = None):
        self.log_path = log_path
        self.home = home  # the data directory it serves
        self.stop_timeout = stop_timeout
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/mcp"
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, argv: list[str], env: dict, timeout: float = 30.0, health: bool = False) -> LoggedServer:
        """Start argv (which must listen on self.port) and wait until the port accepts connections, or with
        `health` until GET /health answers 200."""
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (open while the server runs; stop closes it)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._log, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._ready(health):
                return self
            time.sleep(0.05)
        raise TimeoutError(
            f"the server did not {'answer /health' if health else 'listen'} within {timeout:.0f} s:\n{self.log_tail()}"
        )

    def _ready(self, health: bool) -> bool:
        if health:
            import httpx

            try:
                return httpx.get(self.base + "/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def cpu(self) -> float | None:
        return proc_cpu_seconds(self.proc.pid)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc, self.stop_timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LoggedServer:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None and self.proc is not None and self.log_tail().strip():
            print(f"\n--- server log ({self.log_path.name}, tail) ---\n{self.log_tail()}", file=sys.stderr)
        self.stop()


@contextmanager
def environment(**variables: str | None):
    """os.environ with these variables set (None: removed) for the block, as it was after."""
    saved = {k: os.environ.get(k) for k in variables}
    try:
        for k, v in variables.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def serve_settings(home: Path, **variables: str):
    """Settings as `hiveboard serve --home HOME` reads them from its environment, with these HIVEBOARD_*
    variables set; HIVEBOARD_HOME is the bench's home, so no user config.toml is read."""
    from hiveboard.server.config import Settings

    with environment(HIVEBOARD_HOME=str(home), HIVEBOARD_CONFIG=None, **variables):
        return Settings(home=home, db=str(home / "hiveboard.db"), log_level="WARNING")


# ----------------------------------------------------------------------------- MCP


class BenchError(RuntimeError):
    """Something the bench checks came out wrong: a failed tool call or a wrong answer, not a slow one."""


def payload(result) -> dict:
    """A tool result's data, from whichever carrier the server's profile uses: structured content, or
    the compact JSON text (the default profile sends the data once, as text)."""
    if result.structured_content is not None:
        return result.structured_content
    text = "".join(getattr(block, "text", "") for block in result.content)
    return json.loads(text) if text.startswith(("{", "[")) else {}


def failure(tool: str, args: dict, result) -> BenchError:
    return BenchError(f"{tool}({args}) failed: {result.content[0].text if result.content else result}")


async def call(client, tool: str, args: dict | None = None, /, **kwargs) -> dict:
    """A tool's result through an MCP client; a tool error raises BenchError."""
    args = {**(args or {}), **kwargs}
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise failure(tool, args, result)
    return payload(result)


def noop() -> str:
    """Do nothing (benchmark baseline)."""
    return "ok"


def in_process(board, agent: str = "bench", *, with_noop: bool = False, **build):
    """An in-process MCP client of `build_server(board, Identity(..., agent=agent), **build)`, as the tests
    connect; with `with_noop`, the server also carries the bare `noop` tool, the baseline."""
    from mcp import Client

    from hiveboard.server.app import build_server
    from hiveboard.server.identity import Identity

    server = build_server(board, Identity(board.agents, "memory", agent=agent), **build)
    if with_noop:
        server.add_tool(noop, name="noop")
    return Client(server)


def http_client(url: str, token: str, timeout: float = 60, **client_options):
    """An MCP client over streamable HTTP with an agent's bearer token (its own connection); `client_options`:
    the Client's (extensions=[...])."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
    return Client(streamable_http_client(url, http_client=http), **client_options)


def named_causes(group: BaseExceptionGroup, what: str) -> RuntimeError:
    """One error naming the leaves of an exception group (the MCP clients' task groups nest them deep)."""
    causes = []

    def leaves(g):
        for e in g.exceptions:
            leaves(e) if isinstance(e, BaseExceptionGroup) else causes.append(e)

    leaves(group)
    error = RuntimeError(f"{what} failed: " + "; ".join(f"{type(e).__name__}: {e}" for e in causes))
    error.__cause__ = causes[0] if causes else group
    return error


# ----------------------------------------------------------------------------- the review round trip


async def hand_in(client, task_id: int, **complete) -> dict:
    """What an author does to hand a card in for review: claim it and complete it (output, artifacts…)."""
    claim = await call(client, "claim_task", task_id=task_id)
    return await call(client, "complete_task", task_id=task_id, token=claim["token"], **complete)


async def finished_round(client, task_id: int, wait: float = 60) -> dict:
    """Wait in get_review until the card's latest round is finished; that round, in full."""
    while True:
        trail = await call(client, "get_review", task_id=task_id, wait_seconds=wait, full=True)
        last = trail["rounds"][-1] if trail["rounds"] else {}
        if last.get("status") == "finished":
            return last
