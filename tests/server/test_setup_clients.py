"""`hiveboard setup CLIENT` as a user runs it: the client's config file written or merged (others' servers,
hooks and settings kept), idempotent, backed up, printed as a diff, taken out again by --uninstall; files
it cannot merge refused with nothing written; and the entry it writes starts a server the official Python
MCP client can use. HOME and the XDG directories point into the test's own folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import START_TIMEOUT, call, clean_env, run_cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from hiveboard.server.setup_clients import is_our_hook

EVENTS = {
    "SessionStart": "session-start",
    "UserPromptSubmit": "user-prompt-submit",
    "PostToolUse": "post-tool-use",
    "Stop": "stop",
    "SessionEnd": "session-end",
    "TaskCompleted": "task-completed",
    "TeammateIdle": "teammate-idle",
}

THEIR_MCP = {"mcpServers": {"github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"]}}}
THEIR_SETTINGS = {
    "permissions": {"allow": ["Bash(npm test)"]},
    "env": {"FOO": "1"},
    "hooks": {
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "./lint.sh"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "say done", "timeout": 5}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}],
    },
}


@pytest.fixture
def user(tmp_path: Path) -> dict[str, str]:
    """The environment of a user whose home and XDG directories are the test's."""
    home = tmp_path / "user"
    home.mkdir()
    return clean_env(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        APPDATA=str(home / "AppData" / "Roaming"),
    )


def setup(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    out = run_cli("setup", *args, env=env)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes: to show what a run did and did not change."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def backups(root: Path) -> list[str]:
    return [name for name in files(root) if ".hiveboard-backup-" in name]


def our_hooks(settings: dict) -> dict[str, list[dict]]:
    """Claude Code's event -> the handlers in it that run `hiveboard hook`."""
    return {
        event: [h for group in groups for h in group["hooks"] if " hook " in h["command"]]
        for event, groups in settings.get("hooks", {}).items()
    }


def test_claude_code_on_a_fresh_directory_gets_the_server_and_seven_hooks(tmp_path, user):
    project = tmp_path / "project"
    project.mkdir()
    out = setup(user, "claude-code", "--project", str(project))
    assert out.returncode == 0, out.stderr
    mcp = json.loads((project / ".mcp.json").read_text())
    entry = mcp["mcpServers"]["hiveboard"]
    assert Path(entry["command"]).is_absolute() and entry["args"][-1] == "serve"
    # each session is its own agent (no fixed name); the default home: no HIVEBOARD_HOME
    assert entry["env"] == {}
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert list(settings) == ["hooks"] and list(settings["hooks"]) == list(EVENTS)
    for event, name in EVENTS.items():
        (group,) = settings["hooks"][event]
        assert group.get("matcher") == ("mcp__hiveboard__.*" if event == "PostToolUse" else None)
        (handler,) = group["hooks"]
        assert handler["type"] == "command" and handler["timeout"] > 0
        assert handler.get("async", False) is (event == "PostToolUse")
        assert handler["command"] == f"{entry['command']} hook {name}"
    # the user sees each change as a diff, with the path, and no backup is made of files that did not exist
    assert f"+++ {project / '.mcp.json'}" in out.stdout and f"+++ {project / '.claude' / 'settings.json'}" in out.stdout
    assert '+    "hiveboard": {' in out.stdout
    assert backups(project) == []

    again = setup(user, "claude-code", "--project", str(project))
    assert again.returncode == 0 and "already set up" in again.stdout and "+++" not in again.stdout
    assert backups(project) == []


def test_existing_config_is_merged_backed_up_idempotent_and_restored_by_uninstall(tmp_path, user):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    (project / ".mcp.json").write_text(json.dumps(THEIR_MCP, indent=4) + "\n")
    (project / ".claude" / "settings.json").write_text(json.dumps(THEIR_SETTINGS, indent=2) + "\n")
    original = files(project)

    out = setup(user, "claude-code", "--project", str(project), "--agent", "cc-1")
    assert out.returncode == 0, out.stderr
    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp["mcpServers"]["github"] == THEIR_MCP["mcpServers"]["github"]
    assert mcp["mcpServers"]["hiveboard"]["env"]["HIVEBOARD_AGENT"] == "cc-1"
    assert (project / ".mcp.json").read_text().startswith('{\n    "mcpServers"')  # the file's own indent
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == THEIR_SETTINGS["permissions"] and settings["env"] == {"FOO": "1"}
    assert settings["hooks"]["PreToolUse"] == THEIR_SETTINGS["hooks"]["PreToolUse"]
    assert settings["hooks"]["PostToolUse"][0] == THEIR_SETTINGS["hooks"]["PostToolUse"][0]
    assert settings["hooks"]["Stop"][0] == THEIR_SETTINGS["hooks"]["Stop"][0]
    assert {event: len(found) for event, found in our_hooks(settings).items() if found} == dict.fromkeys(EVENTS, 1)
    # the diff shows what was added, not the whole file rewritten
    assert '-        "github"' not in out.stdout and '+        "hiveboard": {' in out.stdout
    # a backup of each file as it was, beside it
    kept = backups(project)
    assert len(kept) == 2, kept
    for name in kept:
        assert files(project)[name] == original[name.split(".hiveboard-backup-")[0]]

    after_first = files(project)
    again = setup(user, "claude-code", "--project", str(project), "--agent", "cc-1")
    assert again.returncode == 0 and "already set up" in again.stdout
    assert files(project) == after_first  # nothing changed, no new backup

    gone = setup(user, "claude-code", "--project", str(project), "--uninstall")
    assert gone.returncode == 0, gone.stderr
    assert json.loads((project / ".mcp.json").read_text()) == THEIR_MCP
    assert json.loads((project / ".claude" / "settings.json").read_text()) == THEIR_SETTINGS
    assert "-" + '        "hiveboard": {' in gone.stdout


def test_a_moved_installation_and_an_older_entry_are_updated_in_place(tmp_path, user):
    """An entry from another path (a moved venv) is ours too: updated, its other keys and variables kept,
    never duplicated."""
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    old_entry = {
        "command": "hiveboard",
        "args": ["serve"],
        "env": {"HIVEBOARD_AGENT": "x", "HIVEBOARD_LOG_LEVEL": "INFO"},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"hiveboard": old_entry}}))
    old_hook = {"type": "command", "command": "HIVEBOARD_AGENT=x /old/venv/bin/hiveboard hook stop", "timeout": 3}
    (project / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"Stop": [{"hooks": [old_hook]}]}}))

    assert setup(user, "claude-code", "--project", str(project)).returncode == 0
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    assert Path(entry["command"]).is_absolute()
    assert entry["env"] == {"HIVEBOARD_LOG_LEVEL": "INFO"}  # the old fixed agent goes: each session is one
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    (stop,) = our_hooks(settings)["Stop"]
    assert stop["command"] == f"{entry['command']} hook stop"


def test_an_older_post_tool_use_hook_on_every_tool_moves_to_hiveboards_tools(tmp_path, user):
    """Setups before issue 49 ran post-tool-use after every tool call ("*"): its group, ours alone, takes our matcher;
    from a group of the user's it moves to one of its own, and the user's handler stays where it was."""
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    old = {"type": "command", "command": "HIVEBOARD_AGENT=claude-code /old/venv/bin/hiveboard hook post-tool-use"}
    theirs = {"type": "command", "command": "./log.sh"}
    (project / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [old]}]}})
    )
    assert setup(user, "claude-code", "--project", str(project)).returncode == 0
    (group,) = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["PostToolUse"]
    assert group["matcher"] == "mcp__hiveboard__.*" and group["hooks"][0]["async"] is True

    (project / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [theirs, old]}]}})
    )
    assert setup(user, "claude-code", "--project", str(project)).returncode == 0
    mine, ours = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["PostToolUse"]
    assert mine == {"matcher": "*", "hooks": [theirs]}
    assert ours["matcher"] == "mcp__hiveboard__.*" and is_our_hook(ours["hooks"][0]["command"])


def test_dry_run_prints_the_diff_and_writes_nothing(tmp_path, user):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_text(json.dumps(THEIR_SETTINGS))
    before = files(project)
    out = setup(user, "claude-code", "--project", str(project), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "+++ " in out.stdout and "hook session-start" in out.stdout and "--dry-run" in out.stdout
    assert files(project) == before


def test_uninstall_removes_the_files_setup_created(tmp_path, user):
    project = tmp_path / "project"
    project.mkdir()
    assert setup(user, "claude-code", "--project", str(project)).returncode == 0
    out = setup(user, "claude-code", "--project", str(project), "--uninstall")
    assert out.returncode == 0, out.stderr
    assert files(project) == {}
    again = setup(user, "claude-code", "--project", str(project), "--uninstall")
    assert again.returncode == 0 and "not set up" in again.stdout


@pytest.mark.parametrize("broken", ["mcp", "settings"])
def test_a_file_that_is_not_json_is_refused_and_nothing_is_written(tmp_path, user, broken):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    bad = project / ".mcp.json" if broken == "mcp" else project / ".claude" / "settings.json"
    bad.write_text('{\n  // my servers\n  "mcpServers": {}\n}\n')  # JSON with comments
    before = files(project)
    out = setup(user, "claude-code", "--project", str(project))
    assert out.returncode == 2
    assert out.stderr.startswith(f"hiveboard: {bad} is not valid JSON (") and out.stderr.count("\n") == 1
    assert "nothing was written" in out.stderr
    assert files(project) == before


def test_a_table_of_the_wrong_type_is_refused(tmp_path, user):
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    (project / ".vscode" / "mcp.json").write_text('{"servers": ["hiveboard"]}')
    out = setup(user, "vscode", "--project", str(project))
    assert out.returncode == 2 and '"servers" is not a JSON object' in out.stderr
    assert out.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("client", "where", "table"),
    [
        ("cursor", "user/.cursor/mcp.json", "mcpServers"),
        ("claude-desktop", "user/.config/Claude/claude_desktop_config.json", "mcpServers"),
        ("vscode", "project/.vscode/mcp.json", "servers"),
    ],
)
def test_each_client_gets_its_own_file_and_shape(tmp_path, user, client, where, table):
    (tmp_path / "project").mkdir()
    args = ["--project", str(tmp_path / "project")] if client == "vscode" else []
    out = setup(user, "--home", str(tmp_path / "board"), client, *args)
    assert out.returncode == 0, out.stderr
    entry = json.loads((tmp_path / where).read_text())[table]["hiveboard"]
    assert entry["env"] == {"HIVEBOARD_AGENT": client, "HIVEBOARD_HOME": str(tmp_path / "board")}
    assert Path(entry["command"]).is_absolute() and entry["args"][-1] == "serve"
    assert entry.get("type") == ("stdio" if client == "vscode" else None)


def test_cursor_with_a_project_writes_the_projects_file(tmp_path, user):
    (tmp_path / "project").mkdir()
    assert setup(user, "cursor", "--project", str(tmp_path / "project")).returncode == 0
    assert (tmp_path / "project" / ".cursor" / "mcp.json").is_file()
    assert not (tmp_path / "user" / ".cursor").exists()


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["claude-desktop", "--project", "."], "claude-desktop has one configuration for the whole app"),
        (["vscode", "--project", "/nonexistent/dir"], "--project /nonexistent/dir is not a directory"),
        (["cursor", "--agent", "Not A Name"], "agent name 'Not A Name' is not valid"),
    ],
)
def test_wrong_arguments_are_refused_in_one_sentence(user, args, sentence):
    out = setup(user, *args)
    assert out.returncode == 2 and out.stderr.startswith(f"hiveboard: {sentence}") and out.stderr.count("\n") == 1


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_written_entry_starts_a_server_the_python_client_uses(tmp_path, user):
    project = tmp_path / "project"
    project.mkdir()
    out = setup(
        user, "--home", str(tmp_path / "board"), "claude-code", "--project", str(project), "--agent", "setup-bot"
    )
    assert out.returncode == 0, out.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    server = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"])
    async with Client(server) as client:
        assert (await call(client, "whoami"))["agent"] == "setup-bot"
    assert (tmp_path / "board" / "hiveboard.db").is_file()  # the data directory the entry named

    # the hook commands run as written, in a shell (the hook itself fails open: exit 0 whatever it finds)
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    (handler,) = our_hooks(settings)["SessionStart"]
    hook_input = {"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup", "cwd": str(project)}
    ran = subprocess.run(
        ["sh", "-c", handler["command"]],
        input=json.dumps(hook_input),
        capture_output=True,
        text=True,
        env=user,
        cwd=project,
        timeout=START_TIMEOUT,
    )
    assert ran.returncode == 0, ran.stderr
    assert "setup-bot" in ran.stdout, ran.stdout + ran.stderr  # the agent and data directory it was given


# ---------------------------------------------------------------- --url: the board on a server


def url_setup(tmp_path: Path, user: dict[str, str], *extra: str) -> tuple[Path, Path, str]:
    """A project set up with --url and a token file only its owner reads: (project, token file, token)."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    token_file = tmp_path / "alice.token"
    token = "hb_secret-token-of-alice"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    out = setup(
        user,
        "claude-code",
        "--project",
        str(project),
        "--url",
        "http://127.0.0.1:8765/mcp",
        "--token-file",
        str(token_file),
        *extra,
    )
    assert out.returncode == 0, out.stderr
    assert token not in out.stdout + out.stderr and "other users" not in out.stdout
    return project, token_file, token


def test_url_mode_writes_an_http_entry_and_hooks_that_name_the_token_file(tmp_path, user):
    project, token_file, token = url_setup(tmp_path, user)
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    assert set(entry) == {"type", "url", "headersHelper"}
    assert entry["type"] == "http" and entry["url"] == "http://127.0.0.1:8765/mcp"
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = None
    for event, name in EVENTS.items():
        (handler,) = our_hooks(settings)[event]
        words = handler["command"].split(" ")
        assert words[:2] == ["HIVEBOARD_URL=http://127.0.0.1:8765", f"HIVEBOARD_TOKEN_FILE={token_file}"]
        assert Path(words[2]).is_absolute() and words[3:] == ["hook", name]
        command = words[2]
    assert all(token not in content.decode() for content in files(project).values())  # the token is in no file
    # when Claude Code connects, the helper reads the file and prints the header
    helper = subprocess.run(["sh", "-c", entry["headersHelper"]], capture_output=True, text=True, env=user, timeout=60)
    assert json.loads(helper.stdout) == {"Authorization": f"Bearer {token}"}

    again = setup(
        user,
        "claude-code",
        "--project",
        str(project),
        "--url",
        "http://127.0.0.1:8765",
        "--token-file",
        str(token_file),
    )
    assert again.returncode == 0 and "already set up" in again.stdout  # the MCP URL or the server's: one setup

    # back to a local board: the same entry and handlers, updated in place
    local = setup(user, "claude-code", "--project", str(project))
    assert local.returncode == 0, local.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    assert set(entry) == {"type", "command", "args", "env"} and entry["type"] == "stdio"
    assert entry["env"] == {}
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert {e: [h["command"] for h in found] for e, found in our_hooks(settings).items()} == {
        event: [f"{command} hook {name}"] for event, name in EVENTS.items()
    }
    assert setup(user, "claude-code", "--project", str(project), "--uninstall").returncode == 0
    # backups of their earlier versions sit beside them, so the emptied files stay, emptied
    assert json.loads((project / ".mcp.json").read_text()) == {}
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {}


def test_url_mode_without_a_token_file_takes_the_token_from_the_environment(tmp_path, user):
    project = tmp_path / "project"
    project.mkdir()
    out = setup(user, "claude-code", "--project", str(project), "--url", "http://127.0.0.1:8765/")
    assert out.returncode == 0, out.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    assert entry["headers"] == {"Authorization": "Bearer ${HIVEBOARD_TOKEN}"}  # expanded by Claude Code
    (stop,) = our_hooks(json.loads((project / ".claude" / "settings.json").read_text()))["Stop"]
    assert stop["command"].startswith("HIVEBOARD_URL=http://127.0.0.1:8765 /")


def test_a_token_file_others_can_read_is_pointed_out(tmp_path, user):
    token_file = tmp_path / "t.token"
    token_file.write_text("hb_x")
    token_file.chmod(0o644)
    (tmp_path / "project").mkdir()
    out = setup(
        user,
        "claude-code",
        "--project",
        str(tmp_path / "project"),
        "--url",
        "http://127.0.0.1:1",
        "--token-file",
        str(token_file),
    )
    assert out.returncode == 0 and f"other users of this machine can read {token_file}; chmod 600 it" in out.stdout


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["cursor", "--url", "http://127.0.0.1:8765"], "--url sets up Claude Code's hooks against a server"),
        (["claude-code", "--token-file", "/etc/hostname"], "--token-file goes with --url"),
        (["claude-code", "--url", "http://127.0.0.1:8765", "--agent", "bob"], "--agent does not go with --url"),
        (["claude-code", "--url", "ftp://127.0.0.1/"], "--url is not a server's http:// or https:// address"),
        (["claude-code", "--url", "http://127.0.0.1:port"], "--url has a port that is not a number"),
        (["claude-code", "--url", "http://alice:pw-secret@127.0.0.1:8765"], "--url must not carry a user or password"),
        (["claude-code", "--url", "http://127.0.0.1:8765", "--token-file", "/nonexistent/t"], "--token-file "),
    ],
)
def test_url_mode_refuses_what_does_not_fit_in_one_sentence(tmp_path, user, args, sentence):
    (tmp_path / "project").mkdir()
    out = setup(user, *args, "--project", str(tmp_path / "project")) if args[0] != "cursor" else setup(user, *args)
    assert out.returncode == 2 and out.stderr.startswith(f"hiveboard: {sentence}"), out.stderr
    assert out.stderr.count("\n") == 1 and "pw-secret" not in out.stderr
    assert files(tmp_path / "project") == {}


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_url_mode_hooks_and_entry_work_against_a_real_server(tmp_path, user, http_server):
    from conftest import http_client, self_registered_token

    url = http_server(home=tmp_path / "server")
    token = await self_registered_token(url, "alice")
    project = tmp_path / "project"
    project.mkdir()
    token_file = tmp_path / "alice.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    out = setup(
        user,
        "--home",
        str(tmp_path / "client"),
        "claude-code",
        "--project",
        str(project),
        "--url",
        url,
        "--token-file",
        str(token_file),
    )
    assert out.returncode == 0, out.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["hiveboard"]
    headers = json.loads(
        subprocess.run(
            ["sh", "-c", entry["headersHelper"]], capture_output=True, text=True, env=user, timeout=60
        ).stdout
    )
    async with http_client(entry["url"], headers["Authorization"].removeprefix("Bearer ")) as alice:
        card = await call(alice, "create_task", title="Set up over HTTP")
        await call(alice, "claim_task", task_id=card["id"])
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    (handler,) = our_hooks(settings)["SessionStart"]
    ran = subprocess.run(
        ["sh", "-c", handler["command"]],
        input=json.dumps({"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup"}),
        capture_output=True,
        text=True,
        env=user,
        cwd=project,
        timeout=START_TIMEOUT,
    )
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    text = json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "You are alice" in text and f"#{card['id']} [in_progress] Set up over HTTP" in text
    assert not (tmp_path / "client").exists() or "hiveboard.db" not in files(tmp_path / "client")
