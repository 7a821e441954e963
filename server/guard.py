"""`hiveboard guard`: a git pre-commit hook that refuses a commit touching paths another agent reserved.

  install [REPO]    writes REPO's pre-commit hook (default: the repository of the current directory), where git
                    looks for it (`git rev-parse --git-path hooks`, so core.hooksPath is respected). A pre-commit
                    hook that is already there is not overwritten: it is kept as `pre-commit.before-hiveboard` and
                    runs first, its failure failing the commit as before. Installing again updates the hook.
  uninstall [REPO]  takes the hook out and puts a chained one back.
  check             what the hook runs: the staged paths (`git diff --cached --name-only -z --no-renames`, a
                    rename counting as both its paths) against the live reservations of other agents; an
                    exclusive one refuses the commit (exit 1), naming the path, the holder, its card and until
                    when; a shared one is mentioned.

Who commits: HIVEBOARD_AGENT, else the agent of a branch named `hb/<agent>/<card>` (claim_task's worktrees), else
nobody, for whom every exclusive reservation is another's. Which reservations: those of the board ('') and of
the repository's registered name (HIVEBOARD_GUARD_REPO, written into the hook by install: `--name`, else found by
the repository's path among the registered ones); without a name, those of every repository.

HIVEBOARD_GUARD=warn prints the same and lets the commit through; HIVEBOARD_GUARD=off (or `git commit
--no-verify`) skips the check. The hook finds the board the server uses: install writes HIVEBOARD_HOME (where
config.toml is) and, when the database was given by --db or HIVEBOARD_DB, that database, each a default the
committing environment may override; a database URL is written without its password (libpq then reads it from
PGPASSWORD, ~/.pgpass or PGPASSFILE). Fail-open: a board that cannot be read lets the commit through with a
warning, as does a hook whose hiveboard was uninstalled.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from hiveboard.board._sqlite_utils import Database

    from .config import Settings

MARK = "# hiveboard guard"  # how install recognises its own hook
CHAINED = "pre-commit.before-hiveboard"
BRANCH = re.compile(r"^hb/([^/]+)/")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MODES = ("block", "warn", "off")
SHOWN = 20  # refused paths listed, then a count
GIT_TIMEOUT = 60


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT)


# ----------------------------------------------------------------------------- install


def install(settings: Settings, repo: str | None, name: str | None, db_given: str | None) -> str:
    """Write the repository's pre-commit hook; what was done, in one sentence. SetupError when it cannot be."""
    from .config import SetupError
    from .setup_clients import launcher

    top, hook = _hook_path(repo)
    if name is not None and not NAME.match(name):
        raise SetupError(f"--name {name!r} is not a repository name: 1-64 letters, digits, '.', '_' or '-'")
    if name is None:
        name = _registered_name(settings, top)
    chained = hook.with_name(CHAINED)
    note = ""
    if hook.is_symlink() or hook.exists():
        if not _ours(hook):
            if chained.is_symlink() or chained.exists():
                raise SetupError(
                    f"{hook} is another pre-commit hook and {chained.name} beside it is taken; merge the two by "
                    "hand, then run hiveboard guard install again (nothing was changed)"
                )
            os.replace(hook, chained)
            note = f"; the pre-commit hook that was there runs first, from {chained}"
    hook.parent.mkdir(parents=True, exist_ok=True)
    text = _hook_text(settings, launcher(), chained, name, db_given)
    temporary = hook.with_name(f".{hook.name}.hiveboard-tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o755)
    os.replace(temporary, hook)
    scope = f"the board's and {name}'s" if name else "every repository's"
    return (
        f"installed the hiveboard guard as {hook}: commits in {top} that touch paths another agent reserved "
        f"exclusively ({scope} reservations on {settings.database_label}) are refused; HIVEBOARD_GUARD=warn only "
        f"warns, HIVEBOARD_GUARD=off or git commit --no-verify skips it{note}"
    )


def uninstall(repo: str | None) -> str:
    from .config import SetupError

    _, hook = _hook_path(repo)
    chained = hook.with_name(CHAINED)
    if not (hook.is_symlink() or hook.exists()):
        return f"no pre-commit hook at {hook}; nothing to take out"
    if not _ours(hook):
        raise SetupError(f"{hook} is not the hiveboard guard; it was left as it is")
    hook.unlink()
    if chained.is_symlink() or chained.exists():
        os.replace(chained, hook)
        return f"took the hiveboard guard out of {hook}; the pre-commit hook it chained is back in its place"
    return f"took the hiveboard guard out: {hook} is gone"


def _hook_path(repo: str | None) -> tuple[Path, Path]:
    """(the repository's top directory, where git looks for its pre-commit hook)."""
    from .config import SetupError

    where = Path(repo or ".").expanduser()
    if not where.is_dir():
        raise SetupError(f"{where} is not a directory; give the path of a git repository")
    try:
        top = _git(["rev-parse", "--show-toplevel"], where)
        hook = _git(["rev-parse", "--path-format=absolute", "--git-path", "hooks/pre-commit"], where)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"git could not be run ({exc}); install git, or put it on PATH") from None
    if top.returncode != 0 or hook.returncode != 0:
        raise SetupError(
            f"{where.absolute()} is not inside a git repository with a working tree; give the path of one "
            "(hiveboard guard install PATH)"
        )
    return Path(os.fsdecode(top.stdout.strip())), Path(os.fsdecode(hook.stdout.strip()))


def _ours(hook: Path) -> bool:
    try:
        return MARK in hook.read_text(encoding="utf-8", errors="replace")[:2000]
    except OSError:  # a dangling link, a directory: not ours
        return False


def _registered_name(settings: Settings, top: Path) -> str | None:
    """The name this repository is registered under on the board (`hiveboard repo add`), found by its path; None
    when it is not registered, or the board cannot say."""
    try:
        with board_db(settings) as db:
            found = db.execute("SELECT name, path FROM repos").fetchall()
    except Exception:  # no board yet, none readable, or no registered repositories: every repository's, then
        return None
    for repo_name, path in found:
        try:
            if path and Path(path).resolve() == top.resolve():
                return repo_name
        except OSError:
            continue
    return None


def _hook_text(settings: Settings, command: list[str], chained: Path, name: str | None, db_given: str | None) -> str:
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"{MARK}: refuses a commit touching paths another agent reserved exclusively (hiveboard guard install).",
        "# HIVEBOARD_GUARD=warn only warns; HIVEBOARD_GUARD=off or git commit --no-verify skips the check.",
        f"chained={q(str(chained))}",
        'if [ -x "$chained" ]; then "$chained" "$@" || exit $?; fi',
        '[ "$HIVEBOARD_GUARD" = off ] && exit 0',
        # the board the server uses, unless the committing environment names another
        f': "${{HIVEBOARD_HOME:={_shell_default(str(Path(settings.home).expanduser().absolute()))}}}"',
        "export HIVEBOARD_HOME",
    ]
    if os.environ.get("HIVEBOARD_CONFIG"):
        config = str(Path(os.environ["HIVEBOARD_CONFIG"]).expanduser().absolute())
        lines += [f': "${{HIVEBOARD_CONFIG:={_shell_default(config)}}}"', "export HIVEBOARD_CONFIG"]
    if db_given:
        db = without_password(db_given) if "://" in db_given else str(Path(db_given).expanduser().absolute())
        lines += [f': "${{HIVEBOARD_DB:={_shell_default(db)}}}"', "export HIVEBOARD_DB"]
    lines += [
        f"HIVEBOARD_GUARD_REPO={q(name or '')}",
        "export HIVEBOARD_GUARD_REPO",
        f"guard={q(command[0])}",
        'if [ ! -x "$guard" ]; then',
        '    echo "hiveboard guard: $guard is gone, so this commit is not checked; run hiveboard guard install '
        'again" >&2',
        "    exit 0",
        "fi",
        'exec "$guard" '
        + " ".join(q(part) for part in command[1:])
        + (" " if len(command) > 1 else "")
        + "guard check",
        "",
    ]
    return "\n".join(lines)


def _shell_default(value: str) -> str:
    """`value` as the word of a ${VAR:=word} expansion inside double quotes: \\, $, ` and " escaped."""
    return re.sub(r'([\\$`"])', r"\\\1", value)


def without_password(url: str) -> str:
    """A database URL with no password in it (neither user:password@ nor ?password=)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, host = netloc.rsplit("@", 1)
        netloc = credentials.split(":", 1)[0] + "@" + host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# ----------------------------------------------------------------------------- check


@contextmanager
def board_db(settings: Settings) -> Iterator[Database]:
    """A connection to the board's database, to read it: never a new board (a SQLite file must exist), no
    migration, no write lock; a database server that does not answer within PGCONNECT_TIMEOUT (5 s unless set)
    fails rather than holding up the commit."""
    from hiveboard.board.db import Store, dialect_for

    from .config import SetupError

    if settings.db_url:
        os.environ.setdefault("PGCONNECT_TIMEOUT", "5")
        db = dialect_for(settings.db_url).connect(settings.db_url)
        try:
            yield db
        finally:
            db.conn.close()
        return
    path = settings.db_path
    if not path.is_file():
        raise SetupError(f"there is no board at {path}")
    store = Store(path, read_only=True)
    try:
        if store.pending:
            raise SetupError(f"the board at {path} predates path reservations (hiveboard serve upgrades it)")
        yield store.db
    finally:
        store.close()


def check(settings_of) -> int:
    """The pre-commit check: 1 when the commit is refused, else 0. `settings_of()` gives the settings (read only
    when there is something to check). Never fails the commit for its own trouble (fail-open)."""
    mode = (os.environ.get("HIVEBOARD_GUARD") or "block").strip().lower()
    if mode == "off":
        return 0
    if mode not in MODES:
        _say(f"HIVEBOARD_GUARD={mode!r} is not one of {', '.join(MODES)}; checking as block")
        mode = "block"
    try:
        staged = _staged()
        agent = _committer()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        _say(f"cannot list the staged files ({exc}); this commit is not checked")
        return 0
    if not staged:
        return 0
    repo = os.environ.get("HIVEBOARD_GUARD_REPO") or ""
    scopes = ["", repo] if repo else None
    try:
        from hiveboard.board.reservations import blocking

        with board_db(settings_of()) as db:
            found = blocking(db, staged, agent, scopes)
    except Exception as exc:  # fail-open: a board that cannot be read never stops a commit
        from hiveboard.board.errors import first_line

        _say(f"cannot read the board ({first_line(exc)}); this commit is not checked")
        return 0
    return _report(found, agent, mode)


def _report(found: list[tuple[str, dict]], agent: str | None, mode: str) -> int:
    from hiveboard.board.db import iso
    from hiveboard.board.reservations import one_line

    refused = [(path, r) for path, r in found if r["exclusive"]]
    for path, r in [(p, r) for p, r in found if not r["exclusive"]][:SHOWN]:
        _say(f"note: {path} is reserved (shared) by {r['agent']}{_card(r)} until {iso(r['expires_at'])}")
    for path, r in refused[:SHOWN]:
        why = f": {one_line(r['reason'])}" if r["reason"] else ""
        _say(
            f"{path} is reserved exclusively by {r['agent']}{_card(r)} until {iso(r['expires_at'])} "
            f"(pattern {r['pattern']}){why}"
        )
    if len(refused) > SHOWN:
        _say(f"… and {len(refused) - SHOWN} more reserved paths")
    if not refused:
        return 0
    who = (
        f"you commit as {agent}"
        if agent
        else "you commit as nobody: set HIVEBOARD_AGENT, or commit on a branch hb/<agent>/<card>"
    )
    if mode == "warn":
        _say(f"HIVEBOARD_GUARD=warn: committing anyway; {who}")
        return 0
    _say(
        f"commit refused: {len(refused)} staged path(s) are reserved by other agents; unstage them, wait for the "
        f"reservation to end, or ask its holder ({who}). HIVEBOARD_GUARD=warn only warns; HIVEBOARD_GUARD=off or "
        "git commit --no-verify skips this check"
    )
    return 1


def _card(r: dict) -> str:
    return f" for task {r['task_id']}" if r["task_id"] is not None else ""


def _staged() -> list[str]:
    """The paths this commit touches, as git names them (a rename: both of its paths)."""
    out = subprocess.run(
        ["git", "diff", "--cached", "--name-only", "-z", "--no-renames"],
        capture_output=True,
        timeout=GIT_TIMEOUT,
        check=True,
    ).stdout
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def _committer() -> str | None:
    """Who commits: HIVEBOARD_AGENT, else the agent of a branch hb/<agent>/<card>, else None."""
    named = (os.environ.get("HIVEBOARD_AGENT") or "").strip().lower()
    if named:
        return named
    branch = subprocess.run(
        ["git", "symbolic-ref", "--quiet", "--short", "HEAD"], capture_output=True, timeout=GIT_TIMEOUT
    )
    found = BRANCH.match(os.fsdecode(branch.stdout.strip())) if branch.returncode == 0 else None
    return found[1].lower() if found else None


def _say(line: str) -> None:
    print(f"hiveboard guard: {line}", file=sys.stderr)
