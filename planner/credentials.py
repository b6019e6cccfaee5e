"""Credentials never persist: URLs lose their ``user:password@``, text loses keys and tokens.

An endpoint URL may carry credentials (``http://user:pass@host:8000``) and a server may echo
the ``Authorization`` header back in an error body. Whatever is stored (run files, the DuckDB
store, exports, logs) or put in a page's URL passes through here first:

- :func:`parse_endpoint_url` checks a URL (scheme, host, port) and splits it into the URL
  without user info and the ``Authorization: Basic`` value its user info stands for (sent as a
  header instead, never stored);
- :func:`strip_user_info` removes user info from any URL-looking text, never failing;
- :class:`Scrubber` replaces the given secrets, and anything that looks like a bearer token,
  a basic-auth value, an ``Authorization`` or ``api-key`` header value or URL user info, by
  ``<redacted>``.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from planner.errors import InvalidInputError

REDACTED = "<redacted>"
_PLAIN = (int, float, bool, type(None))
#: Secrets shorter than this are not searched for (a 1-character key would redact every "a").
MIN_SECRET_CHARS = 4

_USER_INFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<info>[^/@\s?#]*)@")
_PATTERNS = (
    # "Authorization: Bearer abc", "'authorization': 'Basic xyz'", "Proxy-Authorization=..."
    re.compile(
        r"(?i)(?P<keep>(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)"
        r"(?P<secret>(?:(?:bearer|basic|token)\s+)?[^\s'\",;}]+)"
    ),
    re.compile(r"(?i)(?P<keep>\b(?:bearer|basic)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    re.compile(r"(?i)(?P<keep>(?:x-)?api[-_]?key['\"]?\s*[:=]\s*['\"]?)(?P<secret>[^\s'\",;}&]+)"),
    re.compile(r"(?P<keep>\b)(?P<secret>sk-[A-Za-z0-9_-]{16,})"),
)


@dataclass(frozen=True)
class EndpointUrl:
    """An endpoint URL without user info, and the Basic-auth header value it carried."""

    url: str
    basic_auth: str | None = None


def parse_endpoint_url(url: str, field: str = "base_url") -> EndpointUrl:
    """Check ``url`` (http or https, a host, a port in 1..65535) and take its user info out.

    Raises :class:`InvalidInputError` naming ``field``, the URL (without its user info) and
    what is allowed.
    """
    text = str(url).strip()
    shown = strip_user_info(text)
    allowed = "an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000"
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port out of 0..65535 or not a number
        hostname = parts.hostname
    except ValueError as exc:
        raise InvalidInputError(field, shown, f"{allowed} ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInputError(field, shown, allowed)
    if not hostname:
        raise InvalidInputError(field, shown, f"{allowed} (the host is missing)")
    if port == 0:
        raise InvalidInputError(field, shown, f"{allowed} (port 0 is not a port to connect to)")
    if any(c.isspace() for c in text):
        raise InvalidInputError(field, shown, f"{allowed} (no spaces)")
    if parts.username is None and parts.password is None:
        return EndpointUrl(text)
    netloc = parts.netloc.rpartition("@")[2]
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username or "")
    password = unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return EndpointUrl(clean, f"Basic {token}")


_CREDENTIAL_HEADER = re.compile(r"(?i)key|token|auth|secret|cookie|passw")


def is_credential_header(name: str) -> bool:
    """Whether a header's name says its value is a credential (``X-Api-Key``, ``Cookie``)."""
    return bool(_CREDENTIAL_HEADER.search(name))


def strip_user_info(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it removed (never fails)."""
    return _USER_INFO.sub(lambda m: m.group("scheme"), str(text))


def has_user_info(text: str) -> bool:
    return bool(_USER_INFO.search(str(text)))


class Scrubber:
    """Replaces secrets in text: the ones given (an API key, a basic-auth value and its
    decoded ``user:password``) and anything that looks like a credential."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets: list[str] = []
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        if not secret:
            return
        values = {secret.strip()}
        if secret.lower().startswith(("basic ", "bearer ")):
            token = secret.split(None, 1)[1]
            values.add(token)
            if secret.lower().startswith("basic "):
                with contextlib.suppress(ValueError):
                    values.add(base64.b64decode(token, validate=True).decode())
        for value in values:
            if len(value) >= MIN_SECRET_CHARS and value not in self.secrets:
                self.secrets.append(value)
        self.secrets.sort(key=len, reverse=True)  # longest first: a key inside a longer one

    def text(self, text: str) -> str:
        out = strip_user_info(text)
        for secret in self.secrets:
            out = out.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            out = pattern.sub(_keep_label, out)
        return out

    def value(self, obj: Any) -> Any:
        """``obj`` (JSON-like: dicts, lists, strings) with every string scrubbed."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: self.value(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            if all(type(v) in _PLAIN for v in obj):  # the long lists: times, token counts
                return obj
            return [self.value(v) for v in obj]
        return obj


def _keep_label(match: re.Match[str]) -> str:
    secret = match.group("secret")
    if secret == REDACTED or secret.endswith(REDACTED):
        return match.group(0)
    return match.group("keep") + REDACTED


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` without ``secrets`` and without anything that looks like a credential."""
    return Scrubber(secrets).text(text)
