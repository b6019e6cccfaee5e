"""Pydantic models of a benchmark run's configuration.

Validation errors are turned into one line that names the field, the value and the allowed
range (see :func:`format_validation_error`), so a CLI user or a dashboard page can act on it.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from benchmarks_runner.errors import ConfigError
from planner.credentials import is_credential_header, parse_endpoint_url
from planner.errors import InvalidInputError
from planner.loads import RunLoadKind

Api = Literal["completions", "chat"]
SloName = Literal["ttft", "tpot", "e2el"]


#: the largest seed (a signed 64-bit integer, as the store holds it)
MAX_SEED = 2**63 - 1
#: the longest run label
MAX_LABEL_CHARS = 200
#: what a scrape path may not hold: a query or fragment (``?``, ``#``), user info (``@``: the
#: scrape, with the Authorization header, would go to the host after it), a backslash, a
#: space or a control character
_NOT_IN_PATH = re.compile(r"[?#@\\\s\x00-\x1f\x7f]")


def check_metrics_path(path: str, field: str) -> str:
    """``path`` as the Prometheus path of the endpoint's own server (``/metrics``); raises
    ValueError naming ``field`` otherwise: a URL or user info would send the scrape, and the
    API key with it, to another host."""
    if not path.startswith("/") or _NOT_IN_PATH.search(path) or "/../" in f"{path}/":
        raise ValueError(
            f"{field}={path[:120]!r}: a path on the endpoint's server such as /metrics "
            "(starting with /, without ?, #, @, .. segments, spaces or control characters)"
        )
    return path


class RunConfig(BaseModel):
    """Everything that shapes one run against one endpoint.

    ``base_url`` is the server root without ``/v1`` (as in ``vllm bench serve --base-url``).
    The API key comes from ``api_key`` or from the environment variable ``api_key_env``; it is
    sent as ``Authorization: Bearer`` and never written to run files, logs or exports
    (:meth:`public_dict`). User info in ``base_url`` (``http://user:pass@host``) is taken out
    on validation: ``base_url`` keeps the URL without it and ``basic_auth`` the
    ``Authorization: Basic`` value sent instead (never stored, like the key).

    ``seed`` draws the lengths and arrivals; ``prompt_seed`` the prompt text (None: a fresh one
    each run, recorded in run.json, so a second run does not hit the prefix cache the first one
    filled; give one to send the same prompts again).

    ``continuous_usage_stats`` (vLLM's per-chunk usage) is off by default so the request body
    is the one ``vllm bench serve`` sends; turn it on to get exact per-chunk token deltas from
    servers that batch several tokens per chunk (output token totals come from the final
    ``usage`` either way).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api: Api = "completions"
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    basic_auth: SecretStr | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    tls_verify: bool = True
    tls_ca_file: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    connect_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    read_timeout_s: float = Field(default=300.0, gt=0, le=86_400)
    request_timeout_s: float = Field(default=3600.0, gt=0, le=86_400)

    load: RunLoadKind = "concurrency"
    concurrency: int | None = Field(default=None, ge=1, le=100_000)
    request_rate: float | None = Field(default=None, gt=0, le=1_000_000)
    burstiness: float = Field(default=1.0, gt=0, le=1000)
    time_scale: float = Field(default=1.0, gt=0, le=1_000_000)
    warmup: int = Field(default=0, ge=0, le=100_000)
    duration_s: float | None = Field(default=None, gt=0, le=7 * 86_400)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    #: A run that went to its end with more than this share of its requests failed is
    #: ``failed`` (None: any share but all): it measured the failures, not the serving.
    max_failed_share: float | None = Field(default=0.5, ge=0, le=1)
    min_requests_for_error_rate: int = Field(default=20, ge=1, le=1_000_000)
    # a seed is recorded in run.json and the store's BIGINT columns
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    prompt_seed: int | None = Field(default=None, ge=0, le=MAX_SEED)

    ignore_eos: bool = True
    use_min_tokens: bool = True
    continuous_usage_stats: bool = False
    temperature: float | None = Field(default=None, ge=0, le=10)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    goodput_slos_ms: dict[SloName, float] = Field(default_factory=dict)
    percentiles: list[float] = Field(default_factory=lambda: [90.0, 95.0, 99.0])
    scrape_metrics: bool = True
    metrics_interval_s: float = Field(default=1.0, gt=0, le=3600)
    metrics_url: str | None = None
    calibrate: bool = True
    preflight: bool = True
    label: str | None = None
    workload: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _user_info_to_header(cls, data: Any) -> Any:
        """``http://user:pass@host`` -> ``http://host`` and an ``Authorization: Basic``."""
        if not isinstance(data, dict) or not isinstance(data.get("base_url"), str):
            return data
        try:
            parsed = parse_endpoint_url(data["base_url"])
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None
        if parsed.basic_auth is None:
            return data
        if data.get("api_key") or data.get("api_key_env"):
            raise ValueError(
                f"base_url={parsed.url!r} with user:password@: an API key is given too, and "
                "only one of them can be the Authorization header; drop one of the two"
            )
        return {**data, "base_url": parsed.url, "basic_auth": parsed.basic_auth}

    @model_validator(mode="after")
    def _check_consistency(self) -> RunConfig:
        if self.load == "concurrency" and self.concurrency is None:
            raise ValueError(
                "concurrency=None: load 'concurrency' needs concurrency >= 1 "
                "(CLI: --concurrency C, or --request-rate R)"
            )
        if self.load == "rate" and self.request_rate is None:
            raise ValueError("request_rate=None: load 'rate' needs request_rate > 0")
        for name, value in self.goodput_slos_ms.items():
            if value <= 0:
                raise ValueError(f"goodput_slos_ms.{name}={value}: must be > 0 ms")
        for p in self.percentiles:
            if not 0 < p < 100:
                raise ValueError(f"percentiles={p}: each must be in (0, 100)")
        for key, text in self.headers.items():
            # a line break would end the header and start another (header injection); aiohttp
            # refuses it only once the request is sent, mid-run
            if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key + text) or not key:
                raise ValueError(
                    f"headers.{key}={text!r}: a header name and value without control "
                    "characters (line breaks, NUL)"
                )
            if key.lower() == "authorization":
                raise ValueError(
                    "headers.Authorization: pass the key with api_key or api_key_env, "
                    "so it is kept out of run files"
                )
        if self.metrics_url is not None:
            check_metrics_path(self.metrics_url, "metrics_url")
        label = self.label
        if label is not None and (
            len(label) > MAX_LABEL_CHARS or any(ord(c) < 0x20 or ord(c) == 0x7F for c in label)
        ):
            raise ValueError(
                f"label={label[:80]!r}: at most {MAX_LABEL_CHARS} characters, none of them "
                "a control character (it is shown on the pages and in tables)"
            )
        bad = _not_finite_in(self.extra_body)
        if bad is not None:
            raise ValueError(
                f"extra_body.{bad}: every number of the request body is finite (JSON has no "
                "NaN or infinity; 1e400 reads as infinity)"
            )
        return self

    @property
    def root_url(self) -> str:
        return self.base_url.rstrip("/")

    def resolved_api_key(self) -> str | None:
        """The key to send: ``api_key`` if set, else the environment variable ``api_key_env``."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise ConfigError(
                    f"api_key_env={self.api_key_env!r}: environment variable is unset or empty"
                )
            return value
        return None

    def resolved_basic_auth(self) -> str | None:
        return self.basic_auth.get_secret_value() if self.basic_auth is not None else None

    def secrets(self) -> list[str]:
        """What must never be written: the key, the basic-auth value, the values of headers
        whose names say they carry a credential."""
        values = [self.resolved_api_key(), self.resolved_basic_auth()]
        values += [v for k, v in self.headers.items() if is_credential_header(k)]
        return [v for v in values if v]

    def public_dict(self) -> dict[str, Any]:
        """The configuration as written into run.json: no key, header values redacted."""
        data = self.model_dump(mode="json", exclude={"api_key", "basic_auth"})
        data["api_key_set"] = self.api_key is not None or bool(self.api_key_env)
        data["basic_auth_set"] = self.basic_auth is not None
        data["headers"] = {k: "<redacted>" for k in self.headers}
        return data


def _field_range(model: type[BaseModel] | None, name: str) -> str | None:
    """``lo..hi`` of a numeric field from its declared constraints (None if unbounded)."""
    if model is None or name not in model.model_fields:
        return None
    lo = hi = None
    for m in model.model_fields[name].metadata:
        for attr in ("ge", "gt"):
            if getattr(m, attr, None) is not None:
                lo = f"{'>' if attr == 'gt' else '>='} {getattr(m, attr)}"
        for attr in ("le", "lt"):
            if getattr(m, attr, None) is not None:
                hi = f"{'<' if attr == 'lt' else '<='} {getattr(m, attr)}"
    parts = [p for p in (lo, hi) if p]
    return " and ".join(parts) if parts else None


def format_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``field=value: allowed range``."""
    parts: list[str] = []
    for err in exc.errors():
        loc_parts = [str(x) for x in err["loc"] if str(x) != "[key]"]
        loc = ".".join(loc_parts) or "config"
        ctx = err.get("ctx") or {}
        value = err.get("input")
        msg = err["msg"]
        if err["type"] == "value_error":
            parts.append(msg.removeprefix("Value error, "))
            continue
        bound = _field_range(model, str(err["loc"][0])) if err["loc"] else None
        if bound is None:
            pieces = [
                f"{op} {ctx[k]}"
                for k, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                if k in ctx
            ]
            bound = " and ".join(pieces) or None
        allowed = f"allowed {bound}" if bound else msg
        if "expected" in ctx:
            allowed = f"allowed {ctx['expected']}"
        shown = value if not isinstance(value, dict) else "{...}"
        parts.append(f"{loc}={shown!r}: {allowed}")
    return "; ".join(parts)


def make_run_config(**kwargs: Any) -> RunConfig:
    """Build a RunConfig, raising :class:`ConfigError` with a one-line message on bad input."""
    try:
        return RunConfig(**kwargs)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, RunConfig)) from None


def _not_finite_in(value: Any, where: str = "") -> str | None:
    """The path of the first number in ``value`` (a JSON value) that is NaN or infinite."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'value'}={value}"
    if isinstance(value, dict):
        for key, item in value.items():
            found = _not_finite_in(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _not_finite_in(item, f"{where}.{i}" if where else str(i))
            if found is not None:
                return found
    return None
