"""sqlite-utils as the board imports it: with numpy hidden the first time.

sqlite-utils imports numpy when it is installed, only to give numpy scalars column types, and the board hands
it none; so it is imported with numpy hidden (it expects the ImportError), and the commands and the server's
start-up that need no numpy do not load it. Every module of the board takes `Database` from here, so whichever
of them is imported first (the package imports its modules on first use), numpy stays out.
"""

from __future__ import annotations

import sys

if "numpy" not in sys.modules and "sqlite_utils" not in sys.modules:
    sys.modules["numpy"] = None  # type: ignore[assignment]
    try:
        import sqlite_utils  # noqa: F401
    finally:
        del sys.modules["numpy"]

from sqlite_utils import Database  # noqa: E402

__all__ = ["Database"]
