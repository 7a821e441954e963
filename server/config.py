"""All configuration in one place: HIVEBOARD_* environment variables, an optional TOML file, CLI flags.

Precedence: CLI flags > environment > TOML file (`$HIVEBOARD_HOME/config.toml`, or the path in
HIVEBOARD_CONFIG) > defaults. The defaults work offline with no setup.

A setting that is wrong stops the command with one sentence (`SetupError`) naming it, where it was set
and what it takes: a TOML syntax error with its line and column, a misspelt table or key with the
nearest real one (a typo would otherwise be ignored and its default silently used), a value of the
wrong type with the type wanted.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from hiveboard.board.db import dialect_for, is_url, redact
from hiveboard.board.quotas import QuotaConfig
from hiveboard.board.usage import DEFAULT_PRICES, BudgetAction, Price
from hiveboard.critics.config import Endpoint, ReviewConfig

from .paths import config_file, default_home

Profile = Literal["lean", "full"]  # what results and tools/list carry: see `Settings.tool_profile`


class SetupError(Exception):
    """A broken set-up (a setting, the config file, the data directory, the database), in one sentence that
    names it and says what to do; the CLI prints it and exits with status 2, having changed nothing."""


class DigestConfig(BaseModel):
    """Digests per task type (memory/digests.py): when they are written, and by which model."""

    min_lessons: int = Field(10, ge=2, le=10_000, description="lessons a task type needs before it gets a digest")
    refresh_after: int = Field(3, ge=1, le=10_000, description="new lessons that make a digest be written again")
    max_rules: int = Field(8, ge=1, le=50, description="rules in a digest, most frequent first")
    llm: Endpoint | None = Field(
        None,
        description="a model that writes the rules; default: review.llm when set, else the extractive digest (offline)",
    )


class BackupConfig(BaseModel):
    """Backups `hiveboard serve` takes by itself (server/backup.py): how often, where, how many are kept."""

    every_hours: float = Field(0, ge=0, le=24 * 365, description="hours between backups; 0: none (the default)")
    folder: Path | None = Field(None, description="where they go; default <home>/backups")
    keep: int = Field(7, ge=1, le=10_000, description="the newest backups kept; older ones are removed")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIVEBOARD_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(default_factory=default_home, description="data directory")
    db: str | None = Field(
        None, description="SQLite file (default <home>/hiveboard.db) or a postgresql:// URL shared by several nodes"
    )
    agent: str | None = Field(None, description="who this stdio connection acts as (else the agent calls whoami)")
    agent_role: str | None = None
    lease_seconds: int = Field(300, ge=5, le=86_400, description="how long a claim lasts without activity")
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65_535)
    http_token: str | None = Field(None, description="if set, HTTP requests need this bearer token or an agent's")
    allowed_origins: list[str] = Field(default_factory=list, description="extra Origins allowed on HTTP")
    web_read_only: bool = Field(
        False, description="the web board as a wall screen: every page readable without logging in, no actions"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    chroma_url: str | None = Field(None, description="a Chroma server (chroma run) instead of the embedded one")
    chroma_collection: str = Field(
        "hiveboard_memory",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{2,62}$",
        description="collection name, so several boards can share one Chroma server",
    )
    embedding_model: str = Field(
        "all-MiniLM-L6-v2-onnx-int8", description="the offline model, or a model name at embedding_base_url"
    )
    embedding_base_url: str | None = Field(None, description="an OpenAI-compatible /v1 endpoint for embeddings")
    embedding_api_key: str | None = None
    embedding_process: bool = Field(
        True, description="embed new memory items in a process of its own at low priority (the offline model)"
    )
    max_message_chars: int = Field(64_000, ge=100, le=10_000_000, description="largest message content")
    max_output_chars: int = Field(200_000, ge=100, le=50_000_000, description="largest complete_task output")
    review: ReviewConfig = Field(
        default_factory=ReviewConfig,
        description="critics: the [review] table (HIVEBOARD_REVIEW__EXECUTE=true and so on)",
    )
    digest: DigestConfig = Field(
        default_factory=DigestConfig,
        description="digests per task type: the [digest] table (HIVEBOARD_DIGEST__MIN_LESSONS=10 and so on)",
    )
    quotas: QuotaConfig = Field(
        default_factory=QuotaConfig,
        description="each agent's share of the bulk writes, the database's ceiling, the cap on self-registration: "
        "the [quotas] table (HIVEBOARD_QUOTAS__MESSAGES_PER_MINUTE=120 and so on)",
    )
    prices: dict[str, Price] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description="USD per million tokens (input, output, cache_read, cache_creation) per model, keyed by the "
        'start of its name, the longest key winning: the [prices] table ([prices."claude-sonnet-4"] input = 3 …); '
        "adds to and overrides the defaults, Anthropic's list prices when hiveboard was written",
    )
    budget_action: BudgetAction = Field(
        "message",
        description="when a card's recorded tokens reach its budget_tokens: message its creator, or also move it "
        "to needs_human (a person decides whether it goes on)",
    )
    review_workers: int = Field(2, ge=0, le=32, description="review jobs this process runs at once (0: none)")
    db_pool: int = Field(
        24, ge=1, le=1000, description="PostgreSQL: database connections this process holds at most (its pool)"
    )
    db_pool_wait: float = Field(
        5.0, gt=0, le=300, description="PostgreSQL: seconds a call waits for a free connection before it is refused"
    )
    otel_endpoint: str | None = Field(
        None,
        description="an OTLP/HTTP collector's traces URL (http://127.0.0.1:4318/v1/traces): spans of every request, "
        "review and critic, joined to the client's trace; off when unset (needs the hiveboard[otel] extra)",
    )
    otel_service_name: str = Field("hiveboard", max_length=200, description="service.name on the exported spans")
    backup: BackupConfig = Field(
        default_factory=lambda: BackupConfig(),
        description="scheduled backups while serving: the [backup] table (HIVEBOARD_BACKUP__EVERY_HOURS=24 and so on)",
    )
    tool_profile: Profile = Field(
        "lean",
        description="lean: each result's data once, as "
        "compact JSON text, and no output schemas; full: also structured "
        "content and output schemas (typed results for clients that use "
        "them; more tokens in some clients)",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ):
        path = config_file().expanduser()  # read by `read_config`: refused in one sentence, a misspelt key too
        return (
            init_settings,
            env_settings,
            InitSettingsSource(settings_cls, read_config(path) if path.is_file() else {}),
        )

    @field_validator("prices")
    @classmethod
    def _over_the_defaults(cls, value: dict[str, Price]) -> dict[str, Price]:
        return {**DEFAULT_PRICES, **value}  # a table that names one model keeps the others' prices

    @field_validator("db")
    @classmethod
    def _known_database(cls, value: str | None) -> str | None:
        if value is not None and is_url(value):
            dialect_for(value)  # a URL of another database is refused in one sentence
        return value

    @property
    def db_url(self) -> str | None:
        """The PostgreSQL URL when the board lives there, else None (a SQLite file)."""
        return self.db if self.db is not None and is_url(self.db) else None

    @property
    def db_path(self) -> Path:
        """The SQLite file (for a PostgreSQL board: where one would be; nothing is made there)."""
        return Path(self.db) if self.db is not None and not is_url(self.db) else self.home / "hiveboard.db"

    @property
    def database(self) -> str:
        """What the store opens: the PostgreSQL URL or the SQLite file."""
        return self.db_url or str(self.db_path)

    @property
    def database_label(self) -> str:
        """The database as messages and logs may name it: a URL without its password."""
        return redact(self.db_url) if self.db_url else str(self.db_path)


# the CLI flags whose names are not their setting's
FLAGS = {"agent_role": "--role", "http_token": "--token", "web_read_only": "--read-only"}
# what a value of the wrong type should have been, by pydantic's error type
WANTS = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string in quotes",
    "list_type": 'a list, e.g. ["a", "b"]',
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def load_settings(**overrides: Any) -> Settings:
    """The settings from the CLI's `overrides`, the environment and the config file; SetupError in one
    sentence when any of them is wrong."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SetupError(_invalid(exc, overrides)) from None
    except SettingsError as exc:  # a HIVEBOARD_* variable that should hold JSON (a list, a table) does not
        field = re.search(r'field "(\w+)"', str(exc))
        name = f"HIVEBOARD_{field[1].upper()}" if field else "a HIVEBOARD_* variable"
        raise SetupError(
            f'{name} is not valid JSON, which this setting takes (a list or a table, e.g. ["a", "b"]); correct it'
        ) from None


# HIVEBOARD_* variables read outside Settings: by the hooks and the guard (they run before any setting is
# loaded), by processes hiveboard starts for itself, and by the test suite and the bench
OTHER_VARIABLES = (
    "HIVEBOARD_CONFIG",
    "HIVEBOARD_URL",
    "HIVEBOARD_TOKEN",
    "HIVEBOARD_TOKEN_FILE",
    "HIVEBOARD_GUARD",
    "HIVEBOARD_GUARD_REPO",
    "HIVEBOARD_MIGRATE_TO",
    "HIVEBOARD_MODEL_CACHE",
    "HIVEBOARD_EMBED_NICE",
    "HIVEBOARD_CALL_IN",
    "HIVEBOARD_CALL_OUT",
    "HIVEBOARD_REPORT_FD",
    "HIVEBOARD_HIDDEN",
    "HIVEBOARD_WORK",
    "HIVEBOARD_SCREENSHOTS",
    "HIVEBOARD_UPDATE_SNAPSHOT",
    "HIVEBOARD_CHROMIUM",
    "HIVEBOARD_BENCH_MIRRORS",
)
OTHER_PREFIXES = ("HIVEBOARD_REQUIRE_", "HIVEBOARD_TEST_")  # the CI's switches, the tests' own variables


def unknown_variables(environ: typing.Mapping[str, str]) -> list[str]:
    """A warning for each HIVEBOARD_* variable that no setting or part of hiveboard reads, with the nearest
    known name: config.toml's typos stop the command, but a misspelt variable would be silently ignored and
    its default used, and the environment is often shared with other programs, so it only warns."""
    settings = {f"HIVEBOARD_{name.upper()}" for name in Settings.model_fields}
    known = sorted(settings | set(OTHER_VARIABLES))
    nearby = known + [  # the tables' settings one level down, for the hint
        f"HIVEBOARD_{name.upper()}__{inner_name.upper()}"
        for name, info in Settings.model_fields.items()
        if (inner := _inner_model(info.annotation))[0] is not None and not inner[1]
        for inner_name in inner[0].model_fields
    ]
    warnings = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("HIVEBOARD_") or upper in known or upper.startswith(OTHER_PREFIXES):
            continue
        if "__" in upper and _nested_known(Settings, upper.removeprefix("HIVEBOARD_").lower().split("__")):
            continue
        # compared without the prefix, which every name shares and would make any two look alike
        near = difflib.get_close_matches(upper[10:], [known[10:] for known in nearby], n=1, cutoff=0.75)
        hint = f"did you mean HIVEBOARD_{near[0]}?" if near else "docs/reference.md lists the settings"
        warnings.append(f"{name} is not a hiveboard variable and is ignored ({hint})")
    return warnings


def _nested_known(model: type[BaseModel], parts: list[str]) -> bool:
    """Whether these names, outermost first, lead to a setting of `model` (review, execute: [review] execute)."""
    info = model.model_fields.get(parts[0])
    if info is None:
        return False
    if len(parts) == 1:
        return True
    inner, each = _inner_model(info.annotation)
    if inner is None:
        return False  # a plain value has nothing inside it
    if each:  # a table of free keys ([prices."claude-sonnet-4"]): any key, then its model's fields
        return len(parts) == 2 or _nested_known(inner, parts[2:])
    return _nested_known(inner, parts[1:])


def read_config(path: Path) -> dict:
    """config.toml as a dict, or SetupError: not readable, not TOML (with the line and column), or a table
    or key that no setting has (with the nearest one)."""
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise SetupError(
            f"cannot read {path} ({exc.strerror}); make it readable, or set HIVEBOARD_CONFIG to another file"
        ) from None
    except UnicodeDecodeError as exc:
        raise SetupError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(_not_toml(path, exc)) from None
    problem = unknown_key(Settings, data)
    if problem:
        raise SetupError(f"{path} has {problem}; correct or remove it")
    return data


def _not_toml(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    text = str(exc)
    found = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", text, re.DOTALL)
    if found:
        reason, where = found[1], f"line {found[2]}, column {found[3]}"
    else:
        reason, where = text.removesuffix(" (at end of document)"), "the end of the file"
    return (
        f"{path} is not valid TOML at {where} ({reason[:1].lower()}{reason[1:]}); fix it there, or set "
        "HIVEBOARD_CONFIG to another file"
    )


def unknown_key(model: type[BaseModel], data: dict, path: tuple[str, ...] = ()) -> str | None:
    """The first table or key of `data` that `model` (and the models of its fields, all the way down) does
    not have, described with the nearest known name; None if there is none."""
    known = list(model.model_fields)
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            dotted = ".".join((*path, key))
            near = difflib.get_close_matches(key, known, n=1)
            if isinstance(value, dict):
                hint = f"did you mean [{'.'.join((*path, near[0]))}]?" if near else _takes(path, known)
                return f"an unknown table [{dotted}] ({hint})"
            hint = f"did you mean {'.'.join((*path, near[0]))}?" if near else _takes(path, known)
            return f"an unknown setting {dotted} ({hint})"
        inner, each = _inner_model(field.annotation)
        if inner is None or not isinstance(value, dict):
            continue
        for name, sub in value.items() if each else [(None, value)]:
            if isinstance(sub, dict):
                where = (*path, key) if name is None else (*path, key, name)
                if problem := unknown_key(inner, sub, where):
                    return problem
    return None


def _takes(path: tuple[str, ...], known: list[str]) -> str:
    return f"{'[' + '.'.join(path) + ']' if path else 'the top level'} takes: {', '.join(known)}"


def _inner_model(annotation) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (`Endpoint | None` holds an Endpoint), and whether it holds a table of them
    (`dict[str, CriticConfig]`); (None, False) for a plain value."""
    origin = typing.get_origin(annotation)
    if origin is dict:
        inner, _ = _inner_model(typing.get_args(annotation)[1])
        return inner, inner is not None
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner, each = _inner_model(arg)
            if inner is not None:
                return inner, each
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _invalid(exc: ValidationError, overrides: dict) -> str:
    """The first problem of a ValidationError as one sentence naming the setting where it was set."""
    problems = exc.errors(include_url=False)
    problem = problems[0]
    loc = tuple(str(part) for part in problem["loc"])
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    where = _where(loc, overrides)
    if problem["type"] == "missing":
        return f"{where} is missing{more}; add it"
    shown = repr(problem["input"])
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    message = problem["msg"]
    if problem["type"] in WANTS:
        return f"{where} should be {WANTS[problem['type']]}, not {shown}{more}; correct it"
    if bound := re.match(r"\w+ should (.*)", message):  # "Input should be 'a' or 'b'", "String should have …"
        return f"{where} should {bound[1]}, not {shown}{more}; correct it"
    return f"{where} is not valid: {message.removeprefix('Value error, ')}{more}; correct it"


def _where(loc: tuple[str, ...], overrides: dict) -> str:
    """Where a setting was given: a CLI flag, a HIVEBOARD_* variable or config.toml (in that precedence)."""
    dotted = ".".join(loc)
    if loc and loc[0] in overrides:
        return FLAGS.get(loc[0], "--" + loc[0].replace("_", "-"))
    environ = {name.upper(): name for name in os.environ}
    for end in range(len(loc), 0, -1):
        name = "HIVEBOARD_" + "__".join(loc[:end]).upper()
        if name in environ:
            return environ[name] if end == len(loc) else f"{dotted} in {environ[name]}"
    path = config_file()
    return f"{dotted} in {path}" if path.is_file() else dotted
