"""Settings of Servewise, read from the environment (prefix ``SERVEWISE_``).

``SERVEWISE_DB_PATH=/team/share/servewise.duckdb`` points every user of a team at one database
file; ``SERVEWISE_PARQUET_DIR`` makes the store read measured results from a directory of
Parquet files instead of (in addition to) its own tables.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from planner.errors import InvalidInputError


def _default_user_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "servewise"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SERVEWISE_", extra="ignore")

    user_data_dir: Path = Field(
        default_factory=_default_user_data_dir,
        description="Where the database, benchmark run files and user catalog files live.",
    )
    db_path: Path | None = Field(
        default=None, description="DuckDB file; default <user_data_dir>/servewise.duckdb."
    )
    parquet_dir: Path | None = Field(
        default=None,
        description="A directory of Parquet files with measured results shared by a team.",
    )
    runs_dir: Path | None = Field(
        default=None, description="Benchmark run files; default <user_data_dir>/runs."
    )
    max_upload_mb: float = Field(
        default=5.0,
        gt=0,
        description="Largest catalog CSV or config.json accepted (upload or file), in MB; the "
        "embedded catalog's largest file is 0.16 MB.",
    )
    max_price_snapshot_mb: float = Field(
        default=100.0,
        gt=0,
        description="Largest SkyPilot catalog file (vms.csv) read by a price refresh, file or "
        "upload, in MB; SkyPilot's AWS vms.csv is a few MB.",
    )
    max_trace_mb: float = Field(
        default=1024.0,
        gt=0,
        description="Largest request trace read (file or upload), in MB; traces are streamed, "
        "so memory stays bounded whatever the size.",
    )
    cache_dir: Path | None = Field(
        default=None,
        description="Derived data that can be rebuilt (the fitted performance model); "
        "default <user_data_dir>/cache.",
    )
    fit_cache: bool = Field(
        default=True,
        description="Reuse a fitted performance model from cache_dir (0 to refit every time).",
    )
    fit_simulated_runs: bool = Field(
        default=False,
        description="Let runs against the simulated endpoint refit the performance model (they "
        "were timed by the model itself: by default they stay runs, not calibration points).",
    )
    ingest_wait_s: float = Field(
        default=1.0,
        ge=0,
        description="How long a dashboard page waits for run files being ingested in the "
        "background before it draws what is in so far.",
    )
    default_region: str = "us-east-1"
    price_stale_days: int = Field(
        default=90, ge=1, description="A price older than this many days is marked stale."
    )
    currency: str = "USD"

    @field_validator("currency")
    @classmethod
    def _only_usd(cls, value: str) -> str:
        if value.upper() != "USD":
            raise ValueError(f"currency={value!r} is not supported: only 'USD' (prices are in USD)")
        return value.upper()

    @property
    def database_file(self) -> Path:
        return self.db_path or self.user_data_dir / "servewise.duckdb"

    @property
    def runs_directory(self) -> Path:
        return self.runs_dir or self.user_data_dir / "runs"

    @property
    def cache_directory(self) -> Path:
        return self.cache_dir or self.user_data_dir / "cache"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings; a bad environment variable raises InvalidInputError naming it."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "SERVEWISE_" + str(first["loc"][0]).upper() if first["loc"] else "SERVEWISE_*"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInputError(name, first.get("input"), message) from None
