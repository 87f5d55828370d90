"""SLO counts from the fleet's Prometheus (``source: prometheus``): the ``SloCounts`` the reports read,
answered by PromQL instead of the SLO tables.

A window's events are ``increase()`` of SGLang's own series over it, rendered once by
``collectors.prometheus.slo_rules`` and summed per scope, evaluated at the window's end. Where this cannot say
what the direct source's ledger says: ``increase()`` extrapolates to the window's edges (the catalogue's
``PROMQL_APPROXIMATION``), so counts are not whole numbers and a window within a scrape of a restart can be a
request or two off; and how much of the period Prometheus holds is asked of it (the oldest request counter
sample within the period, at an hour's resolution), not known to the minute.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from collectors.prometheus import slo_rules
from collectors.prometheus.naming import TargetKey, by_instance
from collectors.prometheus.queries import SignalQueries, signal_queries
from collectors.prometheus.slo_rules import ScopeShape, SloQueries, scope_shapes, window_name
from collectors.slo import EventCounts, Scope, Slo, build_slos
from config import Config

if TYPE_CHECKING:  # the Prometheus client sends HTTP (requests): a viewer of a SQLite store never loads it
    from collectors.prometheus.client import PromClient
    from collectors.prometheus.promql_source import PrometheusSource

MINUTE_S = 60.0
_AT_STEP_S = 10.0  # one report's window counts share the instant its first count was asked at


_RECORDED_LOOKBACK = "10m"  # twice the period rules' evaluation interval (slo_rules.PERIOD_INTERVAL_S)
_NOT_SCOPE = frozenset({"__name__", *slo_rules.SLOTH_LABELS})


def _scope_key(labels: Mapping[str, str]) -> str:
    """The scope a recorded series stands for: its labels but the name and Sloth's."""
    return Scope(tuple(sorted((k, v) for k, v in labels.items() if k not in _NOT_SCOPE))).key


def _own_windows(slo: Slo) -> set[float]:
    """The windows an SLO's report always asks for: its period and its alert conditions' windows."""
    windows = {slo.window_s}
    for condition in (*slo.page, *slo.ticket):
        windows |= {condition.long_s, condition.short_s}
    return windows


_BURN_DOWN_POINTS = 500  # a period's minutes as the burn-down draws them, not 40,320 of them


class PrometheusSloCounts:
    """``SloCounts`` on Prometheus for these SLOs; ``names`` turns an (instance, job) into the target's name
    (``collectors.prometheus.naming``); ``clock`` bounds evaluation times to now."""

    def __init__(
        self,
        slos: Sequence[Slo],
        client: PromClient,
        queries: SignalQueries,
        *,
        names: Callable[[TargetKey], str] | None = None,
        clock: Callable[[], float] = time.time,
        recorded: bool = False,
    ) -> None:
        self._slos = {slo.name: slo for slo in slos}
        self._recorded = recorded  # read the SLO recording rules' series where they exist
        self._client = client
        self._queries = SloQueries(queries)
        self._names = names
        self._clock = clock
        self._cache: dict[tuple[str, float, float], dict[str, EventCounts]] = {}
        self._prefetched: set[tuple[str, float]] = set()
        self._at: float | None = None  # the instant the current report reads at
        self._first: dict[tuple[str, str, float], int | None] = {}
        self._lock = threading.Lock()
        # The queries of one report go out together (a dozen windows × scope kinds × bad and total).
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="specwatch-slo")

    def drop_caches(self) -> None:
        """Forget every count read, as a restarted process would."""
        with self._lock:
            self._cache.clear()
            self._prefetched.clear()
            self._first.clear()
            self._at = None

    def close(self) -> None:
        """The query threads go; the client is the Prometheus source's, closed with it."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _per_scope(self, slo: Slo, window_s: float, at: float) -> dict[str, EventCounts]:
        """Every scope's events over ``window_s`` ending at ``at`` (two queries per kind of scope).

        One report asks for a dozen windows over a second or more, and each must see the same instant (and
        the answers cached for it): an ``at`` less than ``_AT_STEP_S`` after the instant last evaluated is
        read at that instant (never later than asked, never missing what was there when the report began).
        The first miss of an instant also asks for the SLO's own windows (its period, page and ticket
        windows), every query at once."""
        with self._lock:
            if self._at is not None and 0.0 <= at - self._at < _AT_STEP_S:
                at = self._at
            else:
                self._at = at
        key = (slo.name, round(window_s), at)
        with self._lock:
            found = self._cache.get(key)
        if found is not None:
            return found
        windows = {round(window_s)}
        if (slo.name, at) not in self._prefetched:
            self._prefetched.add((slo.name, at))
            windows |= {round(w) for w in _own_windows(slo)}
        with self._lock:
            windows = {w for w in windows if (slo.name, w, at) not in self._cache}
        if self._recorded:
            windows -= self._from_recordings(slo, windows, at)
        jobs = {
            (window, shape.by, kind): self._pool.submit(self._client.query, expr, at=at)
            for window in windows
            for shape in scope_shapes(slo)
            for kind, expr in zip(("bad", "total"), self._scope_exprs(slo, shape, window), strict=True)
        }
        answers = {job: future.result() for job, future in jobs.items()}
        for window in windows:
            out: dict[str, EventCounts] = {}
            for shape in scope_shapes(slo):
                bads = {
                    tuple(sample.labels.get(name, "") for name in shape.by): sample.value
                    for sample in answers[(window, shape.by, "bad")]
                }
                for sample in answers[(window, shape.by, "total")]:
                    values = tuple(sample.labels.get(name, "") for name in shape.by)
                    total = sample.value
                    if total is None or total <= 0:
                        continue
                    bad = min(max(bads.get(values) or 0.0, 0.0), total)
                    scope = Scope(tuple(sorted(zip(shape.by, values, strict=True))))
                    out[scope.key] = EventCounts(total - bad, total)
            with self._lock:
                if len(self._cache) > 256:
                    self._cache.clear()
                    self._prefetched.clear()
                self._cache[(slo.name, window, at)] = out
        with self._lock:
            return self._cache.get(key, {})

    def _from_recordings(self, slo: Slo, windows: set[int], at: float) -> set[int]:
        """The windows answered from the SLO recording rules (``export rules``): each scope's recorded total
        and error ratio, the newest evaluation within ``_RECORDED_LOOKBACK`` (the period's rules run every
        5 minutes). None when the rules are not loaded (no recorded total at all): raw series then."""
        recorded = {round(w) for w in (*slo_rules.windows_s(slo), slo.window_s)}
        wanted = sorted(w for w in windows if w in recorded)
        if not wanted:
            return set()
        jobs = {
            (window, kind): self._pool.submit(
                self._client.query,
                f"last_over_time({name}{window_name(window)}{slo_rules.selector(slo)}[{_RECORDED_LOOKBACK}])",
                at=at,
            )
            for window in wanted
            for kind, name in (("total", "slo:sli_total:increase"), ("ratio", "slo:sli_error:ratio_rate"))
        }
        answers = {job: future.result() for job, future in jobs.items()}
        if not any(answers[(window, "total")] for window in wanted):
            return set()
        for window in wanted:
            ratios = {_scope_key(s.labels): s.value for s in answers[(window, "ratio")]}
            out: dict[str, EventCounts] = {}
            for sample in answers[(window, "total")]:
                total, key = sample.value, _scope_key(sample.labels)
                if total is None or total <= 0:
                    continue
                bad = min(max((ratios.get(key) or 0.0) * total, 0.0), total)
                out[key] = EventCounts(total - bad, total)
            with self._lock:
                self._cache[(slo.name, window, at)] = out
        return set(wanted)

    def _scope_exprs(self, slo: Slo, shape: ScopeShape, window_s: float) -> tuple[str, str]:
        bad_expr, total_expr = self._queries.per_target(slo, shape, window_s)
        by = f"sum by ({', '.join(shape.by)})" if shape.by else "sum"
        return f"{by} ({bad_expr})", f"{by} ({total_expr})"

    def counts(self, slo: str, scope: str, start_ts: float, end_ts: float) -> EventCounts:
        found = self._slos.get(slo)
        at = min(end_ts, self._clock())
        if found is None or at - start_ts < 1.0:
            return EventCounts()
        return self._per_scope(found, at - start_ts, at).get(scope, EventCounts())

    def scopes(self, slo: str, since_ts: float) -> list[str]:
        found = self._slos.get(slo)
        if found is None:
            return []
        now = self._clock()
        return sorted(self._per_scope(found, max(now - since_ts, MINUTE_S), now))

    def first_minute(self, slo: str, scope: str) -> int | None:
        """The oldest hour within the period in which Prometheus holds the scope's request counters."""
        found = self._slos.get(slo)
        if found is None:
            return None
        # Asked at an hour's resolution: the answer holds for a minute (a 28-day subquery per scope).
        now = self._clock()
        key = (slo, scope, math.floor(now / MINUTE_S))
        with self._lock:
            if key in self._first:
                return self._first[key]
        expr = self._queries.oldest_request(found, Scope.from_key(scope).as_dict())
        samples = self._client.query(expr, at=now)
        value = samples[0].value if samples else None
        minute = int(value // MINUTE_S * MINUTE_S) if value is not None and math.isfinite(value) else None
        with self._lock:
            if len(self._first) > 256:
                self._first.clear()
            self._first[key] = minute
        return minute

    def by_target(self, slo: str, start_ts: float, end_ts: float) -> dict[str, EventCounts]:
        found = self._slos.get(slo)
        at = min(end_ts, self._clock())
        if found is None or at - start_ts < 1.0:
            return {}
        whole = scope_shapes(found)[0]
        bad_expr, total_expr = self._queries.per_target(found, whole, at - start_ts)
        bads = {TargetKey.of(s.labels): s.value for s in self._client.query(bad_expr, at=at)}
        out: dict[str, EventCounts] = {}
        for sample in self._client.query(total_expr, at=at):
            total = sample.value
            if total is None or total <= 0:
                continue
            key = TargetKey.of(sample.labels)
            name = self._names(key) if self._names is not None else key.instance
            bad = min(max(bads.get(key) or 0.0, 0.0), total)
            out[name] = out.get(name, EventCounts()) + EventCounts(total - bad, total)
        return out

    def minutes(self, slo: str, scope: str, start_ts: float, end_ts: float) -> list[tuple[int, float, float]]:
        """The scope's events per step over [start_ts, end_ts): minutes for an hour, coarser for a period
        (at most ``_BURN_DOWN_POINTS`` steps, each the increase over its own step)."""
        found = self._slos.get(slo)
        end = min(end_ts, self._clock())
        if found is None or end <= start_ts:
            return []
        step = max(MINUTE_S, math.ceil((end - start_ts) / _BURN_DOWN_POINTS / MINUTE_S) * MINUTE_S)
        shape = next(
            (s for s in scope_shapes(found) if set(s.by) == {k for k, _ in Scope.from_key(scope).labels}),
            None,
        )
        if shape is None:
            return []
        wanted = dict(Scope.from_key(scope).labels)
        bad_expr, total_expr = self._queries.per_target(found, shape, step)
        by = f"sum by ({', '.join(shape.by)})" if shape.by else "sum"

        def series(expr: str) -> Mapping[float, float]:
            for item in self._client.query_range(f"{by} ({expr})", start_ts + step, end, step):
                if all(item.labels.get(k, "") == v for k, v in wanted.items()):
                    return {
                        float(t): float(v)
                        for t, v in zip(item.timestamps, item.values, strict=True)
                        if math.isfinite(v)
                    }
            return {}

        totals, bads = series(total_expr), series(bad_expr)
        return [
            (int(t - step), total - min(max(bads.get(t, 0.0), 0.0), total), total)
            for t, total in sorted(totals.items())
            if total > 0
        ]


def prometheus_slo_counts(
    config: Config, prometheus: PrometheusSource, source: str = "config"
) -> PrometheusSloCounts:
    """The SLO counts of ``config``'s SLOs from the Prometheus ``prometheus`` reads, targets named as that
    source names them (a configured target's name where its URL is the instance)."""
    configured = by_instance(config.targets)

    def name_of(key: TargetKey) -> str:
        target = configured.get(key.instance)
        return target.name if target is not None else key.instance

    return PrometheusSloCounts(
        build_slos(config, source),
        prometheus.client,
        signal_queries(config, source=source),
        names=name_of,
        recorded=config.prometheus is not None and config.prometheus.use_recording_rules,
    )
