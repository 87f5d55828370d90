"""One redaction for every message built from something a server said: targets, Prometheus, receivers.

Servers echo what they were sent (an auth proxy puts the Authorization header into its 401 body, a redirect
carries it in a query string), and what they say becomes errors in logs, history events, the outbox, pages,
/metrics and exported files. The secrets are the ones in the config (bearer tokens from the environment,
Prometheus headers, URL passwords); ``Authorization``-style credentials and URL userinfo are removed by shape
too, so a secret specwatch never knew is not printed either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

from config import Config

REDACTED = "<redacted>"

# "Bearer abc", "Basic dXNlcjpw", "token=abc", "password: abc": the credential, not its name, is replaced.
_SCHEMES = re.compile(
    r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=\-]{4,})"
    r"|\b(token|password|passwd|secret|api[_-]?key)(\s*[=:]\s*)([A-Za-z0-9._~+/=\-]{4,})"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"<>]+@")

__all__ = ["REDACTED", "Redactor", "config_secrets", "redact", "safe_url", "url_secrets"]


def safe_url(url: str) -> str:
    """The URL without ``user:password@`` so it can go into messages and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced: servers can echo what they were sent (a status line, a header, a
    quoted body line), and whatever they say ends up in errors, history, logs and pages."""
    for secret in secrets:
        if not secret:
            continue
        text = text.replace(secret, REDACTED)
        head = secret[:8]
        if len(head) >= 4 and head in text:  # a quote cut the secret short ('Bearer swsecret-09b8…')
            text = re.sub(re.escape(head) + r"[^\s'\"]*", REDACTED, text)
    return text


def url_secrets(url: str | None) -> list[str]:
    """The user name and password of a URL's userinfo (as written and decoded)."""
    if not url or "@" not in url:
        return []
    parts = urlsplit(url)
    found = [p for p in (parts.password, parts.username) if p and len(p) >= 4]
    return found + [unquote(p) for p in found if unquote(p) != p]


def config_secrets(config: Config) -> tuple[str, ...]:
    """Every secret the config gives specwatch to send somewhere (values, not names)."""
    found: list[str] = []
    envs = [t.bearer_token_env for t in config.targets]
    urls: list[str | None] = [t.url for t in config.targets]
    urls += [*config.alerts.webhook_urls, config.alerts.alertmanager_url]
    if config.prometheus is not None:
        envs.append(config.prometheus.bearer_token_env)
        urls.append(config.prometheus.url)
        found += [v for v in config.prometheus.headers.values() if len(v) >= 4]
    found += [os.environ.get(name, "") for name in envs if name]
    for url in urls:
        found += url_secrets(url)
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


class Redactor:
    """``redactor(text)``: the text with every known secret, credential and URL userinfo replaced."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: a secret that contains another (a header value and its token) is replaced whole.
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    @classmethod
    def for_config(cls, config: Config) -> Redactor:
        return cls(config_secrets(config))

    def __call__(self, text: str) -> str:
        text = redact(text, self.secrets)
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
        return _SCHEMES.sub(_keep_name, text)


def _keep_name(match: re.Match[str]) -> str:
    name = match.group(1) or match.group(4)
    gap = match.group(2) if match.group(1) else match.group(5)
    return f"{name}{gap}{REDACTED}"
