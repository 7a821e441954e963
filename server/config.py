"""All configuration in one place: HIVEBOARD_* environment variables, an optional TOML file, CLI flags.

Precedence: CLI flags > environment > TOML file (`$HIVEBOARD_HOME/config.toml`, or the path in
HIVEBOARD_CONFIG) > defaults. The defaults work offline with no setup.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from hiveboard.critics.config import Endpoint, ReviewConfig

Profile = Literal["lean", "full"]  # what results and tools/list carry: see `Settings.tool_profile`


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


class DigestConfig(BaseModel):
    """Digests per task type (memory/digests.py): when they are written, and by which model."""

    min_lessons: int = Field(10, ge=2, le=10_000, description="lessons a task type needs before it gets a digest")
    refresh_after: int = Field(3, ge=1, le=10_000, description="new lessons that make a digest be written again")
    max_rules: int = Field(8, ge=1, le=50, description="rules in a digest, most frequent first")
    llm: Endpoint | None = Field(
        None,
        description="a model that writes the rules; default: review.llm when set, else the extractive digest (offline)",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIVEBOARD_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(default_factory=default_home, description="data directory")
    db: Path | None = Field(None, description="SQLite file; default <home>/hiveboard.db")
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
    review_workers: int = Field(2, ge=0, le=32, description="review jobs this process runs at once (0: none)")
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
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file()))

    @property
    def db_path(self) -> Path:
        return self.db or self.home / "hiveboard.db"
