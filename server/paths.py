"""Where hiveboard keeps its data and its config file (standard library only: `hiveboard hook` starts with it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def default_home() -> Path:
    """A per-user data directory: XDG on Linux, Application Support on macOS, LOCALAPPDATA on Windows."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "hiveboard"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "hiveboard"
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "hiveboard"


def config_file() -> Path:
    explicit = os.environ.get("HIVEBOARD_CONFIG")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("HIVEBOARD_HOME") or default_home()) / "config.toml"
