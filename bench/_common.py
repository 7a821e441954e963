"""What every benchmark script here shares: percentiles and the machine line."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
from importlib.metadata import version


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
