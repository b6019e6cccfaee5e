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
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from planner.errors import InvalidInputError

REDACTED = "<redacted>"
_PLAIN = (int, float, bool, type(None))
#: Secrets shorter than this are not searched for (a 1-character key would redact every "a").
MIN_SECRET_CHARS = 4

# Linear time on any text (a URL field or an error string of megabytes): a scheme starts only
# where a run of scheme characters starts (the lookbehind), so a long run of letters is tried
# once, not once a letter; possessive runs never give characters back to try again.
_USER_INFO = re.compile(
    r"(?<![a-zA-Z0-9+.-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*+://)(?P<info>[^/@\s?#]*+)@"
)
_PATTERNS = (
    # "Authorization: Bearer abc", "'authorization': 'Basic xyz'", "Proxy-Authorization=..."
    re.compile(
        r"(?i)(?P<keep>(?:proxy-)?authorization['\"]?\s*+[:=]\s*+['\"]?)"
        r"(?P<secret>(?:(?:bearer|basic|token)\s++)?[^\s'\",;}]++)"
    ),
    re.compile(r"(?i)(?P<keep>\b(?:bearer|basic)\s++)(?P<secret>[A-Za-z0-9._~+/=-]{8,}+)"),
    re.compile(
        r"(?i)(?P<keep>(?:x-)?api[-_]?key['\"]?\s*+[:=]\s*+['\"]?)(?P<secret>[^\s'\",;}&]++)"
    ),
    re.compile(r"(?P<keep>\b)(?P<secret>sk-[A-Za-z0-9_-]{16,}+)"),
)


@dataclass(frozen=True)
class EndpointUrl:
    """An endpoint URL without user info, and the Basic-auth header value it carried."""

    url: str
    basic_auth: str | None = None


#: Names of cloud instance-metadata services (their addresses are link-local, below, except
#: where a name is all a check sees): Google Compute Engine, Azure, Alibaba Cloud, Oracle.
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
#: Addresses of cloud metadata services outside the link-local ranges: AWS's IPv6 endpoint
#: (fd00:ec2::254) and Alibaba Cloud's (100.100.100.200).
METADATA_ADDRESSES = (
    ipaddress.ip_address("fd00:ec2::254"),
    ipaddress.ip_address("100.100.100.200"),
)


def _as_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address, also in the legacy IPv4 forms a resolver accepts
    (``2852039166``, ``0xa9fea9fe``, ``169.254.43518``), or None for a name."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except (OSError, ValueError):
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def internal_address(hostname: str) -> str | None:
    """What an endpoint host must not be, in words, or None: a link-local address
    (169.254.0.0/16, fe80::/10; every cloud's instance metadata service lives there) or a
    metadata service by name or address. Names are not resolved here (no network in the
    planner)."""
    host = hostname.strip("[]").rstrip(".").lower()
    if host in METADATA_HOSTS:
        return "a cloud instance-metadata service"
    address = _as_address(host)
    if address is None:
        return None
    if address in METADATA_ADDRESSES:
        return "a cloud instance-metadata address"
    if address.is_link_local:
        return "a link-local address (169.254.0.0/16, fe80::/10: cloud metadata services)"
    return None


def parse_endpoint_url(url: str, field: str = "base_url") -> EndpointUrl:
    """Check ``url`` (http or https, a host, a port in 1..65535, no query or fragment, no
    ``.``/``..`` path segment, not a link-local or cloud-metadata address) and take its user
    info out.

    Raises :class:`InvalidInputError` naming ``field``, the URL (without its user info) and
    what is allowed.
    """
    text = str(url).strip()
    shown = strip_user_info(text)
    if len(shown) > 200:
        shown = shown[:200] + f"... ({len(shown):,} characters)"
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
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise InvalidInputError(
            field,
            shown,
            f"{allowed} (no ? or #: the requests append /v1/... to the URL, which a query or "
            "fragment would swallow; give the server's root, or a path prefix)",
        )
    segments = unquote(parts.path).replace("\\", "/").split("/")
    if any(s in (".", "..") for s in segments):
        raise InvalidInputError(
            field, shown, f"{allowed} (no . or .. in the path: it sends requests to other paths)"
        )
    internal = internal_address(hostname)
    if internal is not None:
        raise InvalidInputError(
            field,
            shown,
            f"an endpoint's address, not {internal}: a benchmark has no business there "
            "(loopback and private addresses are allowed)",
        )
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
