"""Typed exceptions of the benchmark runner.

Every exception carries a one-line, user-actionable message; the CLI prints ``str(exc)`` and
exits non-zero, the dashboard shows it as is. No traceback should reach a user.
"""

from __future__ import annotations


class BenchmarkError(Exception):
    """Base class of every error the runner raises on purpose."""

    exit_code: int = 2


class ConfigError(BenchmarkError):
    """A configuration value is out of range or inconsistent (names field, value, range)."""


class EndpointError(BenchmarkError):
    """The endpoint could not be used for a benchmark."""

    exit_code = 3


class EndpointUnreachable(EndpointError):
    """No HTTP connection could be made to the endpoint (refused, DNS, TLS, timeout)."""


class ResponseTooLarge(EndpointError):
    """The endpoint answered with more bytes than the client reads for that page."""


class EndpointStartError(EndpointError):
    """The endpoint a run brings (simulated server, vLLM) did not come up."""


class ModelNotServed(EndpointError):
    """The endpoint answered /v1/models but does not list the requested model."""


class AuthenticationFailed(EndpointError):
    """The endpoint answered 401/403: missing or wrong API key."""


class ProbeFailed(EndpointError):
    """The calibration probe request failed, so no request of the run could succeed."""


class TraceFormatError(BenchmarkError):
    """A trace file does not match the format it was declared as."""


class ImportFormatError(BenchmarkError):
    """A result file of another tool does not match the format it was declared as."""
