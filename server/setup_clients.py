"""`hiveboard setup CLIENT`: write hiveboard into an MCP client's own config file, and take it out again.

  claude-code     DIR/.mcp.json ("mcpServers") and the hooks in DIR/.claude/settings.json
  cursor          DIR/.cursor/mcp.json with --project, else ~/.cursor/mcp.json ("mcpServers")
  vscode          DIR/.vscode/mcp.json ("servers", with "type": "stdio")
  claude-desktop  claude_desktop_config.json in the platform's Claude folder ("mcpServers")

DIR is --project, else the current directory. Every entry runs this installation's `hiveboard serve` by its
absolute path (desktop apps do not see the shell's PATH), with HIVEBOARD_AGENT (claude-code: only with --agent,
since each Claude Code session is then an agent of its own, server/sessions.py), and HIVEBOARD_HOME when the
data directory is not the default one. The Claude Code hooks run `hiveboard hook EVENT` with the same
variables as assignments in front of the command, so the hooks carry their own settings and the session's
environment ("env" in settings.json) stays the user's; PostToolUse runs after hiveboard's own tools only, in the
background ("async"), so other tool calls start no process.

claude-code with --url: the board is a `hiveboard serve --http` elsewhere. The entry is an HTTP one (URL/mcp)
and the hooks run `hiveboard hook EVENT` with HIVEBOARD_URL (and HIVEBOARD_HOME, where this machine keeps how
far it read each transcript). The agent is the one whose token the server is sent. With --token-file the hooks
name the file (HIVEBOARD_TOKEN_FILE) and the entry's `headersHelper` reads it when Claude Code connects, so the
token is in no config file and no command line; without it, both take HIVEBOARD_TOKEN from the environment
Claude Code runs in.

Merge, never clobber: what is not ours stays as it was, and a file's indentation is kept. Ours is the
"hiveboard" server entry and the hook handlers whose command runs `hiveboard hook EVENT` (found by the words
of the command, so a moved installation is updated, not duplicated). Before a file that exists is changed,
a copy is kept beside it (NAME.hiveboard-backup-TIMESTAMP); each change is printed as a unified diff.
--uninstall takes out ours alone; a file left empty is deleted when no backup beside it shows that it
existed before setup first wrote it. A file that is not plain JSON (VS Code allows comments in mcp.json) is
refused, not rewritten: its comments would be lost.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .config import SetupError

CLIENTS = ("claude-code", "cursor", "vscode", "claude-desktop")
SERVER = "hiveboard"  # the entry's key in the client's table of servers
OUR_ENV = ("HIVEBOARD_AGENT", "HIVEBOARD_HOME")  # env keys setup sets or removes; others in the entry stay
HTTP_KEYS = ("url", "headers", "headersHelper")  # an HTTP entry's keys, which contradict the stdio command we write
STDIO_KEYS = ("command", "args", "env")  # a stdio entry's keys, which contradict the HTTP entry we write

# Claude Code's event -> `hiveboard hook` event, seconds Claude Code waits for it, matcher (only where the
# event takes one and it is not "every occurrence", which an absent matcher already means)
HOOKS = {
    "SessionStart": ("session-start", 10, None),
    "UserPromptSubmit": ("user-prompt-submit", 10, None),
    # after the board's own tools only, and in the background: no process after every other tool call, and never
    # a tool call that waits for the board (news between turns come by the channel and UserPromptSubmit)
    "PostToolUse": ("post-tool-use", 10, "mcp__hiveboard__.*"),
    "Stop": ("stop", 30, None),  # stop and session-end also read the session's transcript for its token usage
    "SessionEnd": ("session-end", 30, None),
    "TaskCompleted": ("task-completed", 10, None),
    "TeammateIdle": ("teammate-idle", 10, None),
}
ASYNC = {"PostToolUse"}  # run with "async": true (Claude Code hands their output to the next turn)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Change:
    """One file's text before and after; None is no file."""

    path: Path
    before: str | None
    after: str | None


def setup(
    client: str,
    *,
    project: Path | None = None,
    agent: str | None = None,
    home: Path | None = None,
    dry_run: bool = False,
    uninstall: bool = False,
    url: str | None = None,
    token_file: Path | None = None,
    out: TextIO = sys.stdout,
) -> None:
    """Set hiveboard up in `client` (or take it out), print each change as a diff, and write it unless
    dry_run; SetupError in one sentence, with nothing written, when a file cannot be merged."""
    changes = plan(client, project=project, agent=agent, home=home, uninstall=uninstall, url=url, token_file=token_file)
    todo = [c for c in changes if c.before != c.after]
    if not todo:
        where = " and ".join(str(c.path) for c in changes)
        state = "not set up" if uninstall else "already set up"
        print(f"hiveboard is {state} for {client} in {where}; nothing changed", file=out)
        return
    for change in todo:
        out.writelines(_diff(change))
        if dry_run:
            print(f"{change.path}: not written (--dry-run)", file=out)
        else:
            print(_apply(change), file=out)
    if not dry_run and not uninstall:
        print(NEXT_STEP_REMOTE if url is not None else NEXT_STEP[client], file=out)
    if token_file is not None and not uninstall and token_file.stat().st_mode & 0o077:
        print(f"note: other users of this machine can read {token_file}; chmod 600 it", file=out)


CHANNEL_FLAG = f"--dangerously-load-development-channels server:{SERVER}"  # Claude Code's flag for a channel server

# a board over HTTP: the agent is the token's, and a channel is a stdio server of the session's own
NEXT_STEP_REMOTE = "next: start Claude Code in that directory and approve the project's hiveboard server once"
NEXT_STEP = {
    "claude-code": (
        "next: start Claude Code in that directory and approve the project's hiveboard server once; each session is "
        "an agent of its own (claude-<session id>; set HIVEBOARD_AGENT to name it). To be told about work as it "
        "happens, launch it with the board as a channel (Claude Code 2.1.80+, research preview):\n"
        f"  claude {CHANNEL_FLAG}"
    ),
    "cursor": "next: enable hiveboard under Cursor Settings > MCP (or restart Cursor)",
    "vscode": "next: start the hiveboard server from .vscode/mcp.json (the Start link above it) in VS Code",
    "claude-desktop": "next: quit Claude Desktop completely and start it again",
}


def plan(
    client: str,
    *,
    project: Path | None = None,
    agent: str | None = None,
    home: Path | None = None,
    uninstall: bool = False,
    url: str | None = None,
    token_file: Path | None = None,
) -> list[Change]:
    """Every file `client` needs, as it is and as setup (or --uninstall) leaves it; reads, never writes."""
    if client not in CLIENTS:
        raise SetupError(f"setup knows {', '.join(CLIENTS)}, not {client!r}")
    if url is not None and client != "claude-code":
        raise SetupError(f"--url sets up Claude Code's hooks against a server; for {client}, leave it out")
    if token_file is not None and url is None:
        raise SetupError("--token-file goes with --url (the server the token is for); add --url or leave it out")
    if url is not None and agent is not None:
        raise SetupError("--agent does not go with --url: the agent is the one whose token the server is sent")
    if project is not None and client == "claude-desktop":
        raise SetupError(
            "claude-desktop has one configuration for the whole app, not one per project; leave out --project"
        )
    if project is not None and not project.is_dir():
        raise SetupError(f"--project {project} is not a directory; name the project's folder")
    directory = (project or Path.cwd()).absolute()
    command = launcher()
    table = "servers" if client == "vscode" else "mcpServers"
    if url is not None:
        env, ours = remote(url, token_file)
    else:
        # Claude Code names each session to its server and hooks (server/sessions.py): no fixed agent there
        env = {"HIVEBOARD_AGENT": agent} if agent else {} if client == "claude-code" else {"HIVEBOARD_AGENT": client}
        ours = {"command": command[0], "args": [*command[1:], "serve"], "env": env}
    if home is not None:
        env["HIVEBOARD_HOME"] = str(home.expanduser().absolute())
    if client == "vscode":
        ours = {"type": "stdio", **ours}

    def server(data: dict, path: Path) -> dict:
        return _without_server(data, table, path) if uninstall else _with_server(data, table, ours, path)

    if client == "claude-code":
        hooks = None if uninstall else _hook_commands(command, env)
        return [
            _change(directory / ".mcp.json", server),
            _change(directory / ".claude" / "settings.json", lambda data, path: _hooks(data, hooks, path)),
        ]
    if client == "cursor":
        return [_change((directory if project else Path.home()) / ".cursor" / "mcp.json", server)]
    if client == "vscode":
        return [_change(directory / ".vscode" / "mcp.json", server)]
    return [_change(desktop_config(), server)]


def remote(url: str, token_file: Path | None) -> tuple[dict[str, str], dict]:
    """For a board at `url`: the hooks' variables, and the HTTP entry (the token read from `token_file` when
    Claude Code connects, else from HIVEBOARD_TOKEN)."""
    from .hook import server_base

    try:
        base = server_base(url)
    except ValueError as exc:
        raise SetupError(f"--url {exc}; nothing was written") from None
    env = {"HIVEBOARD_URL": base}
    ours: dict = {"type": "http", "url": base + "/mcp"}
    if token_file is None:
        ours["headers"] = {"Authorization": "Bearer ${HIVEBOARD_TOKEN}"}  # Claude Code expands it when it connects
        return env, ours
    token_file = token_file.expanduser().absolute()
    if not token_file.is_file():
        raise SetupError(
            f"--token-file {token_file} is not a file; write the agent's token into it first "
            f"(hiveboard agent add NAME > {token_file}; chmod 600 {token_file})"
        )
    env["HIVEBOARD_TOKEN_FILE"] = str(token_file)
    # Claude Code runs the helper in a shell and sends the JSON object it prints as headers
    helper = 'printf \'{"Authorization": "Bearer %s"}\' "$(cat ' + shlex.quote(str(token_file)) + ')"'
    return env, ours | {"headersHelper": helper}


def launcher() -> list[str]:
    """The absolute command of this installation's `hiveboard`: the script beside this Python, else the one
    on PATH, else this Python running the package."""
    python = Path(os.path.abspath(sys.executable))
    for name in ("hiveboard", "hiveboard.exe"):
        if (python.parent / name).is_file():
            return [str(python.parent / name)]
    found = shutil.which("hiveboard")
    if found:
        return [os.path.abspath(found)]
    return [str(python), "-m", "hiveboard.server"]


def desktop_config() -> Path:
    """Where Claude Desktop reads its MCP servers on this platform."""
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "Claude" / "claude_desktop_config.json"


# ---------------------------------------------------------------- one file


def _change(path: Path, edit) -> Change:
    """The file at `path` with `edit(data, path)` applied to its JSON; unchanged text when the data is."""
    before = _read(path)
    data = _parse(before, path) if before is not None else {}
    edited = edit(json.loads(json.dumps(data)), path)  # a copy: `data` stays the file's
    if edited == data:
        return Change(path, before, before)
    if not edited and before is not None and not _backups(path):
        return Change(path, before, None)  # emptied, and setup created it: it goes
    return Change(path, before, json.dumps(edited, indent=_indent(before), ensure_ascii=False) + "\n")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise SetupError(f"cannot read {path} ({why}); nothing was written") from None


def _parse(text: str, path: Path) -> dict:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SetupError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); setup rewrites only "
            "plain JSON (no comments, no trailing commas), so correct it and run setup again; nothing was written"
        ) from None
    if not isinstance(data, dict):
        raise SetupError(f"{path} holds a JSON {type(data).__name__}, not an object; correct it; nothing was written")
    return data


def _indent(text: str | None) -> int | str:
    """The file's own indentation (its first indented line), so the diff shows only what setup changed."""
    for line in (text or "").splitlines()[1:]:
        body = line.lstrip(" \t")
        if body and body != line:
            margin = line[: len(line) - len(body)]
            return "\t" if margin.startswith("\t") else len(margin)
    return 2


def _table(data: dict, key: str, path: Path) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise SetupError(f'{path}: "{key}" is not a JSON object; correct it and run setup again; nothing was written')
    return value


def _backups(path: Path) -> list[Path]:
    return list(path.parent.glob(f"{_glob_escape(path.name)}.hiveboard-backup-*"))


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _apply(change: Change) -> str:
    """Write (or delete) the file, keeping a backup of one that exists; what was done, in a line."""
    path = change.path
    backup = None
    if change.before is not None and change.after is not None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.hiveboard-backup-{stamp}")
        n = 1
        while backup.exists():
            n += 1
            backup = path.with_name(f"{path.name}.hiveboard-backup-{stamp}-{n}")
        try:
            shutil.copy2(path, backup)
        except OSError as exc:
            raise SetupError(
                f"cannot keep a backup of {path} at {backup} ({exc.strerror}); nothing was written"
            ) from None
    try:
        if change.after is None:
            path.unlink()
            return f"removed {path} (setup had created it; nothing else was in it)"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
        ) as tmp:
            tmp.write(change.after)
        if change.before is not None:
            shutil.copymode(path, tmp.name)
        os.replace(tmp.name, path)
    except OSError as exc:
        raise SetupError(f"cannot write {path} ({exc.strerror}); check that this user may write there") from None
    return f"wrote {path}" + (f" (the previous version is in {backup.name})" if backup else "")


def _diff(change: Change) -> list[str]:
    before = (change.before or "").splitlines(keepends=True)
    after = (change.after or "").splitlines(keepends=True)
    lines = list(
        difflib.unified_diff(
            before,
            after,
            fromfile=str(change.path) if change.before is not None else "/dev/null",
            tofile=str(change.path) if change.after is not None else "/dev/null",
        )
    )
    return [line if line.endswith("\n") else line + "\n" for line in lines]


# ---------------------------------------------------------------- the server entry


def _with_server(data: dict, table: str, ours: dict, path: Path) -> dict:
    servers = _table(data, table, path)
    old = servers.get(SERVER)
    if isinstance(old, dict) and "url" in ours:  # to an HTTP entry: the user's other keys stay
        entry = {k: v for k, v in old.items() if k not in (*STDIO_KEYS, *HTTP_KEYS)} | ours
    elif isinstance(old, dict):  # updated in place: the user's other keys and env variables stay
        entry = {k: v for k, v in old.items() if k not in HTTP_KEYS} | ours
        if "type" in entry:
            entry["type"] = "stdio"
        old_env = old.get("env") if isinstance(old.get("env"), dict) else {}
        env = {k: ours["env"].get(k, v) for k, v in old_env.items() if k not in OUR_ENV or k in ours["env"]}
        entry["env"] = env | ours["env"]
    else:
        entry = ours
    data[table] = servers | {SERVER: entry}
    return data


def _without_server(data: dict, table: str, path: Path) -> dict:
    servers = _table(data, table, path)
    if SERVER in servers:
        del servers[SERVER]
        if servers:
            data[table] = servers
        else:
            del data[table]
    return data


# ---------------------------------------------------------------- Claude Code's hooks


def _hook_commands(command: list[str], env: dict[str, str]) -> dict[str, dict]:
    """Claude Code's event -> our handler for it."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return {
        event: {
            "type": "command",
            "command": " ".join([*assignments, *map(shlex.quote, command), "hook", ours]),
            "timeout": timeout,
            **({"async": True} if event in ASYNC else {}),
        }
        for event, (ours, timeout, _) in HOOKS.items()
    }


def is_our_hook(command: object) -> bool:
    """Whether a hook command runs `hiveboard hook EVENT` (with variables in front, from any installation)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)
    if len(words) < 3 or words[-2] != "hook" or words[-1] not in {h[0] for h in HOOKS.values()}:
        return False
    program = words[:-2]
    name = Path(program[0]).name.lower()
    return (len(program) == 1 and name in ("hiveboard", "hiveboard.exe")) or program[1:] == ["-m", "hiveboard.server"]


def _hooks(data: dict, handlers: dict[str, dict] | None, path: Path) -> dict:
    """The settings with our handler for each event (None: with none): one found is updated in place and
    any second copy dropped; one missing is added as a group of its own; groups, events and the "hooks"
    table that only ours filled go with them."""
    hooks = _table(data, "hooks", path)
    had_hooks = bool(hooks)
    for event, (_, _, matcher) in HOOKS.items():
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise SetupError(
                f'{path}: "hooks"."{event}" is not a list of matcher groups; correct it and run setup again; '
                "nothing was written"
            )
        wanted = handlers[event] if handlers else None
        placed, kept = False, []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(
                isinstance(h, dict) and is_our_hook(h.get("command")) for h in inner
            ):
                kept.append(group)
                continue
            handlers_left = []
            # ours stays in a group whose matcher is ours, or that it has to itself (the matcher is then updated);
            # from a group of the user's with another matcher it moves to a group of its own
            same = (group.get("matcher") or None) == matcher or all(
                isinstance(h, dict) and is_our_hook(h.get("command")) for h in inner
            )
            for handler in inner:
                if not (isinstance(handler, dict) and is_our_hook(handler.get("command"))):
                    handlers_left.append(handler)
                elif wanted and not placed and same:
                    handlers_left.append(handler | wanted)
                    placed = True
            if handlers_left:
                mine = {k: v for k, v in group.items() if k != "matcher"} | ({"matcher": matcher} if matcher else {})
                kept.append((mine if same and placed else group) | {"hooks": handlers_left})
        if wanted and not placed:
            kept.append(({"matcher": matcher} if matcher else {}) | {"hooks": [wanted]})
        if kept:
            hooks[event] = kept
        elif groups:  # only ours were there
            del hooks[event]
    if hooks:
        data["hooks"] = hooks
    elif had_hooks:  # only ours were there
        del data["hooks"]
    return data
