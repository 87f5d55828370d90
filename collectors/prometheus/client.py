"""A small client for the Prometheus HTTP query API (instant and range queries).

Speaks the ``/api/v1/query(_range)`` contract of Prometheus, Thanos Query, Mimir and VictoriaMetrics; every
failure (unreachable, timeout, bad query, refused, non-JSON) becomes one ``QueryError`` saying what to check.
Requests go through the HTTP edge (``collectors.http``): its deadline, body cap, redirect policy and transport
error words; what Prometheus answered (its status, its JSON) is read here.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from yarl import URL

from collectors.errors import QueryError
from collectors.http.exchange import exchange, read_body
from collectors.http.failures import What
from collectors.http.loop import HTTP_LOOP
from collectors.prometheus.matrix import RangeSeries, decode_matrix
from collectors.prometheus.naming import TargetKey
from collectors.prometheus.vector import decode_vector, finite, vector_by_target
from collectors.secrets import Redactor, safe_url, url_secrets
from config.settings import PrometheusSettings

log = logging.getLogger(__name__)

# Prometheus refuses range queries above 11,000 points per series; stay just under it.
MAX_POINTS_PER_SERIES = 11_000
_DEFAULT_MAX_BODY_BYTES = 512 * 1024 * 1024
_QUOTE_LIMIT = 300
_WARNINGS_KEPT = 5  # a Thanos fan-out can send one warning per store; the first few say enough
# Header values that are credentials (a tenant id such as X-Scope-OrgID is not, and stays readable).
_SECRET_HEADER_WORDS = ("auth", "token", "key", "secret", "cookie", "password", "session")


class QueryStats:
    """Queries sent and answer bytes read by every client of the process, by endpoint (the benchmark's
    "queries and bytes per render"; cheap: a lock and two additions per query)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.queries: dict[str, int] = {}
        self.bytes: dict[str, int] = {}

    def count(self, endpoint: str, size: int) -> None:
        with self._lock:
            self.queries[endpoint] = self.queries.get(endpoint, 0) + 1
            self.bytes[endpoint] = self.bytes.get(endpoint, 0) + size

    def snapshot(self) -> tuple[int, int]:
        """(queries, bytes) so far, every endpoint."""
        with self._lock:
            return sum(self.queries.values()), sum(self.bytes.values())

    def snapshot_of(self, endpoint: str) -> int:
        """Queries so far to one endpoint (``query``: instant queries)."""
        with self._lock:
            return self.queries.get(endpoint, 0)


QUERY_STATS = QueryStats()


@dataclass(frozen=True, slots=True)
class InstantSample:
    """One series of an instant-vector answer. ``value`` is None for NaN/±Inf (unknown, never zero)."""

    labels: Mapping[str, str]
    value: float | None
    ts: float


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 3] + "..."


class PromClient:
    """Queries one Prometheus-compatible endpoint; safe to share between a few threads.

    ``url`` is the base the API hangs off: ``http://prometheus:9090``, Thanos Query's root, Mimir's
    ``.../prometheus``, or VictoriaMetrics' root (single node) / ``.../select/0/prometheus`` (cluster).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        bearer_token: str | None = None,
        max_body_bytes: int = _DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.url = url.rstrip("/")
        # Messages and logs name the server without any user:password@ (the requests still carry it).
        self.safe_url = safe_url(self.url)
        secrets = [bearer_token or "", *url_secrets(url)]
        for name, value in (headers or {}).items():
            if any(word in name.lower() for word in _SECRET_HEADER_WORDS):
                # "Bearer <token>" / "Basic <b64>": servers echo the credential without its scheme.
                secrets += [value, value.split(" ", 1)[-1]]
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        # Integer milliseconds parse in Prometheus and VictoriaMetrics alike, so the server gives up first.
        self._timeout_param = f"{max(int(timeout_s * 1000), 1)}ms"
        self._headers = {"Accept": "application/json", **(headers or {})}
        if bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        # Auth proxies echo the Authorization header in a 401 body, and the URL may carry a password: every
        # message built here goes through the one redaction (collectors.secrets), which also removes
        # credentials by shape.
        self._redact = Redactor(s for s in secrets if len(s) >= 4)

    @classmethod
    def from_settings(cls, settings: PrometheusSettings) -> PromClient:
        """Build a client from ``prometheus:`` settings; the bearer token is read from the named variable."""
        token: str | None = None
        if settings.bearer_token_env:
            token = os.environ.get(settings.bearer_token_env)
            if not token:
                raise QueryError(
                    f"prometheus.bearer_token_env names {settings.bearer_token_env}, which is not set (or is "
                    "empty) in the environment; export it or remove the setting"
                )
        return cls(
            settings.url,
            timeout_s=settings.timeout_s,
            headers=settings.headers,
            bearer_token=token,
        )

    @property
    def identity(self) -> str:
        """Who this client reads as: its URL and a digest of its headers (a tenant, a token), so answers
        kept for one engine and credentials are never handed to another (``result_cache``)."""
        digest = hashlib.sha256(repr(sorted(self._headers.items())).encode()).hexdigest()[:16]
        return f"{self.url}#{digest}"

    def redact(self, text: str) -> str:
        """``text`` without the credentials this client sends (servers echo them in errors)."""
        return self._redact(text)

    def close(self) -> None:
        """Nothing to release: the HTTP loop and its connections belong to the process."""

    # -- queries -----------------------------------------------------------------------------------------
    def query(
        self, expr: str, *, at: float | None = None, warnings: list[str] | None = None
    ) -> list[InstantSample]:
        """Evaluate ``expr`` at unix time ``at`` (server time if None); a scalar is one unlabelled sample.

        A partial answer (Thanos/Mimir ``warnings``: a store or querier did not answer) still returns its
        samples; the server's warnings (quoted, credentials redacted) are appended to ``warnings`` when given,
        so callers can treat what is missing as unknown rather than gone.
        """
        data = self._call("query", self._instant_params(expr, at), expr, warnings)
        result_type, result = data.get("resultType"), data.get("result")
        try:
            if result_type == "vector" and isinstance(result, list):
                return [
                    InstantSample(
                        dict(item.get("metric", {})), finite(item["value"][1]), float(item["value"][0])
                    )
                    for item in result
                ]
            if result_type == "scalar" and isinstance(result, list):
                return [InstantSample({}, finite(result[1]), float(result[0]))]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed(expr, f"a vector entry is malformed ({exc!r})") from exc
        raise self._malformed(expr, f"expected an instant vector, got resultType {result_type!r}")

    def query_by_target(
        self, expr: str, *, at: float | None = None, warnings: list[str] | None = None
    ) -> dict[TargetKey, float | None]:
        """``query``'s answer as each series' (instance, job) → value, the last series of a key winning: what
        the source's cycle reads, ~28 answers of 1,000 series every interval, with no object per series for
        the garbage collector to track (``vector.py``)."""
        status, content_type, body = self._exchange("query", self._instant_params(expr, at), expr)
        vector = decode_vector(body) if status < 300 else None
        if vector is not None and vector.envelope.get("status") == "success":
            # The lean read (collectors/prometheus/vector.py): the same answer as the parsed one below.
            data, said = self._checked(status, content_type, body, expr, vector.envelope)
            self._warn(said, warnings)
            if data.get("resultType") == "vector":
                return vector.by_target
        data, said = self._checked(status, content_type, body, expr)
        self._warn(said, warnings)
        result = data.get("result")
        if data.get("resultType") != "vector" or not isinstance(result, list):
            found = data.get("resultType")
            raise self._malformed(expr, f"expected an instant vector, got resultType {found!r}")
        try:
            return vector_by_target(result)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed(expr, f"a vector entry is malformed ({exc!r})") from exc

    def _instant_params(self, expr: str, at: float | None) -> dict[str, str]:
        params = {"query": expr, "timeout": self._timeout_param}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return params

    def query_range(
        self,
        expr: str,
        start_ts: float,
        end_ts: float,
        step_s: float,
        *,
        warnings: list[str] | None = None,
    ) -> list[RangeSeries]:
        """Evaluate ``expr`` every ``step_s`` seconds over [start_ts, end_ts].

        The step is widened when needed so no series exceeds Prometheus's 11,000-point limit. A partial
        answer's warnings are appended to ``warnings`` when given (as ``query``).
        """
        if end_ts < start_ts:
            raise QueryError(f"range query on {self.safe_url}: end ({end_ts}) is before start ({start_ts})")
        step_s = max(step_s, (end_ts - start_ts) / (MAX_POINTS_PER_SERIES - 1), 0.001)
        params = {
            "query": expr,
            "start": f"{start_ts:.3f}",
            "end": f"{end_ts:.3f}",
            "step": f"{step_s:.3f}",
            "timeout": self._timeout_param,
        }
        status, content_type, body = self._exchange("query_range", params, expr)
        matrix = decode_matrix(body) if status < 300 else None
        if matrix is not None and matrix.envelope.get("status") == "success":
            # The fast read (collectors/prometheus/matrix.py): the same answer as the JSON one below.
            data, said = self._checked(status, content_type, body, expr, matrix.envelope)
            self._warn(said, warnings)
            if data.get("resultType") != "matrix":
                raise self._malformed(expr, f"expected a matrix, got resultType {data.get('resultType')!r}")
            return [
                RangeSeries(labels, timestamps, values)
                for labels, timestamps, values in zip(
                    matrix.labels, matrix.timestamps, matrix.values, strict=True
                )
            ]
        data, said = self._checked(status, content_type, body, expr)
        self._warn(said, warnings)
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise self._malformed(expr, f"expected a matrix, got resultType {data.get('resultType')!r}")
        series: list[RangeSeries] = []
        try:
            for item in result:
                points = item.get("values", [])
                timestamps = np.fromiter((p[0] for p in points), np.float64, len(points))
                values = np.array([p[1] for p in points], dtype=np.float64)
                values[~np.isfinite(values)] = np.nan
                series.append(RangeSeries(dict(item.get("metric", {})), timestamps, values))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed(expr, f"a matrix entry is malformed ({exc!r})") from exc
        return series

    def series(
        self, match: str, start_ts: float, end_ts: float, *, warnings: list[str] | None = None
    ) -> list[dict[str, str]]:
        """The label sets of the series ``match`` selects with samples in [start_ts, end_ts] (no values):
        ``/api/v1/series``, which reads the index only."""
        params = {"match[]": match, "start": f"{start_ts:.3f}", "end": f"{end_ts:.3f}"}
        status, content_type, body = self._exchange("series", params, match)
        payload, said = self._checked(status, content_type, body, match, key="data", want=list)
        self._warn(said, warnings)
        if not all(isinstance(item, dict) for item in payload):
            raise self._malformed(match, "a series entry is not a label set")
        return [dict(item) for item in payload]

    # -- transport: through the edge; Prometheus's answers are read here ------------------------------------
    def _call(
        self, endpoint: str, params: dict[str, str], expr: str, warnings: list[str] | None
    ) -> dict[str, Any]:
        status, content_type, body = self._exchange(endpoint, params, expr)
        data, said = self._checked(status, content_type, body, expr)
        self._warn(said, warnings)
        found: dict[str, Any] = data
        return found

    def _exchange(self, endpoint: str, params: dict[str, str], expr: str) -> tuple[int, str, bytes]:
        """Status, Content-Type and body of one request (counted in ``QUERY_STATS``)."""
        started = time.perf_counter()
        try:
            status, content_type, body = HTTP_LOOP.run(self._send(endpoint, params, expr))
        except QueryError as exc:
            # Every message may quote the server (its error text, a body snippet): never its credentials.
            raise QueryError(self.redact(str(exc))) from None
        QUERY_STATS.count(endpoint, len(body))
        if log.isEnabledFor(logging.DEBUG):  # the query log: bench prometheus, SPECWATCH_BENCH_PROM_QUERY_LOG
            span = f"{params.get('start', '')}..{params.get('end', params.get('time', ''))}"
            log.debug(
                "%s %.3f s %d B step=%s %s %s",
                endpoint,
                time.perf_counter() - started,
                len(body),
                params.get("step", "-"),
                span,
                self.redact(expr),
            )
        return status, content_type, body

    def _checked(
        self,
        status: int,
        content_type: str,
        body: bytes,
        expr: str,
        envelope: dict[str, Any] | None = None,
        *,
        key: str = "data",
        want: type = dict,
    ) -> tuple[Any, list[str]]:
        """The answer's ``data`` and warnings, or the QueryError saying why there are none (``envelope``:
        the answer already parsed, but for its result)."""
        try:
            return self._decode(status, content_type, body, expr, envelope, want=want)
        except QueryError as exc:
            raise QueryError(self.redact(str(exc))) from None

    def _warn(self, said: list[str], warnings: list[str] | None) -> None:
        if said and warnings is not None:
            warnings.extend(self.redact(_quote(text)) for text in said[:_WARNINGS_KEPT])
            if len(said) > _WARNINGS_KEPT:
                warnings.append(f"and {len(said) - _WARNINGS_KEPT} more warnings")

    def _what(self, expr: str) -> What:
        return What(
            f"Prometheus at {self.safe_url}",
            self.timeout_s,
            timeout_setting="prometheus.timeout_s",
            url_setting="prometheus.url",
            tls_setting="its certificate against this machine's CA certificates",
            cap_setting="",
            slow="it may be overloaded or the query too heavy: narrow the range or selector",
            too_large="narrow the time range or the selector",
            detail=f" (query: {_quote(expr)})",
            error=QueryError,
        )

    async def _send(self, endpoint: str, params: dict[str, str], expr: str) -> tuple[int, str, bytes]:
        """The answer's status, Content-Type and whole body (at most ``max_body_bytes``) within one deadline
        for both tries; Prometheus's error answers are JSON too, so they are read like the rest."""
        url = f"{self.url}/api/v1/{endpoint}"
        what = self._what(expr)
        deadline = time.monotonic() + self.timeout_s
        # POST keeps long fleet selectors clear of URL-length limits; GET for proxies refusing POST.
        for post in (True, False):
            async with exchange(
                "POST" if post else "GET",
                url if post else URL(url).with_query(params),
                what,
                deadline=deadline,
                headers=self._headers,
                data=params if post else None,
                services=True,
            ) as response:
                if response.status == 405 and post:
                    continue
                body = await read_body(response, self.max_body_bytes, deadline)
                return response.status, response.headers.get("Content-Type", "no Content-Type"), body
        raise AssertionError("unreachable: the GET answers")  # pragma: no cover

    def _decode(
        self,
        status: int,
        content_type: str,
        body: bytes,
        expr: str,
        envelope: dict[str, Any] | None = None,
        *,
        want: type = dict,
    ) -> tuple[Any, list[str]]:
        payload: Any = envelope
        if payload is None:
            try:
                payload = orjson.loads(body)  # 1.4–1.5× the speed of json.loads on a cycle's answers
            except orjson.JSONDecodeError:  # a ValueError: not JSON, or not UTF-8
                payload = None
        if not isinstance(payload, dict):
            snippet = _quote(body[:200].decode("utf-8", "replace")) or "an empty body"
            hint = _status_hint(status) or "is prometheus.url the query API's base URL?"
            raise QueryError(
                f"Prometheus at {self.safe_url} answered HTTP {status} with something that is not Prometheus "
                f"API JSON ({content_type}: {snippet}); {hint}"
            )
        if status < 300 and payload.get("status") == "success" and isinstance(payload.get("data"), want):
            data = payload["data"]
            said = payload.get("warnings")
            # Thanos and Mimir send a list of strings; anything else still means "this answer is partial".
            if isinstance(said, list):
                return data, [str(text) for text in said if text]
            return data, [str(said)] if said else []
        error_type = str(payload.get("errorType") or "error")
        error = _quote(str(payload.get("error") or payload.get("message") or "no error text"))
        if status in (400, 422) or error_type in ("bad_data", "execution"):
            # VictoriaMetrics answers 422 where Prometheus answers 400 (parse errors): both are bad queries.
            raise QueryError(
                f"Prometheus at {self.safe_url} rejected a bad query (HTTP {status}, {error_type}): {error}; "
                f"query: {_quote(expr)}"
            )
        if status == 503 or error_type in ("timeout", "canceled"):
            raise QueryError(
                f"Prometheus at {self.safe_url} timed out or aborted the query (HTTP {status}): {error}; "
                "narrow the range or selector, or raise its query timeout"
            )
        hint = _status_hint(status)
        raise QueryError(
            f"Prometheus at {self.safe_url} failed the query (HTTP {status}, {error_type}): {error}"
            + (f"; {hint}" if hint else "")
        )

    def _malformed(self, expr: str, what: str) -> QueryError:
        return QueryError(
            f"Prometheus at {self.safe_url} sent an unexpected answer: {what} (query: {_quote(expr)})"
        )


def _status_hint(status: int) -> str:
    if 300 <= status < 400:
        return "redirects are not followed: set prometheus.url to the address it points to"
    if status in (401, 403):
        return f"access refused (HTTP {status}): check prometheus.bearer_token_env and prometheus.headers"
    if status == 404:
        return "HTTP 404: nothing serves /api/v1/query there; is prometheus.url the query API's base URL?"
    if status >= 500:
        return f"the server failed (HTTP {status}); see its logs"
    return ""
