"""What every benchmark script here shares: timed samples, percentiles, the machine line, clean-up."""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import time
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import version
from pathlib import Path


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


def remove_unless_kept(path: Path | str, keep: bool) -> None:
    """The bench's scratch directory: removed, or kept (and named) for a look afterwards."""
    if keep:
        print(f"kept {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile of samples (seconds) in milliseconds."""
    if not samples:
        return float("nan")
    s = sorted(samples)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k] * 1000


def machine_info(*packages: str) -> dict:
    """CPU, Python, SQLite and the versions of mcp and of the given packages."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info = dict(cpu_count=os.cpu_count(), usable_cpus=usable, python=platform.python_version(),
                implementation=platform.python_implementation(), platform=platform.platform(),
                mcp=version("mcp"), sqlite=sqlite3.sqlite_version)
    info.update({name: version(name) for name in packages})
    return info


def ts(text: str) -> float:
    """An ISO 8601 time from the server as a Unix timestamp."""
    return datetime.fromisoformat(text).timestamp()


def payload(result) -> dict:
    """A tool result's data, from whichever carrier the server's profile uses: structured content, or
    the compact JSON text (the default profile sends the data once, as text)."""
    if result.structured_content is not None:
        return result.structured_content
    text = "".join(getattr(block, "text", "") for block in result.content)
    return json.loads(text) if text.startswith(("{", "[")) else {}


async def call(client, tool: str, **args) -> dict:
    """A tool's result through an MCP client; a tool error stops the benchmark."""
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text if result.content else result}")
    return payload(result)


def quiet_loggers() -> None:
    """Keep the servers a benchmark builds from logging every request (build_server's logging setup)."""
    for name in ("httpx", "httpx2", "mcp", "hiveboard"):
        logging.getLogger(name).setLevel(logging.WARNING)


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float | None:
    """user+system CPU seconds of a process, all its threads (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def stop_process(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    """Terminate a server the bench started, killing it if it does not exit in time."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class LoggedServer:
    """A server process the bench starts with its stderr in a file, shown (the tail) when something fails."""

    stop_timeout = 10.0

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self._log = None

    def launch(self, argv: list[str], env: dict) -> subprocess.Popen:
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (open while the server runs; stop closes it)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._log, env=env)
        return self.proc

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
