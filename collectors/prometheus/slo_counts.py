"""SLO counts from the fleet's Prometheus (``source: prometheus``): the ``SloCounts`` the reports and the
ErrorBudgetBurn rule read, answered by PromQL instead of the SLO tables.

A window's events are ``increase()`` of SGLang's own series over it, rendered once by
``collectors.prometheus.slo_rules``, per target. Each target then counts in the scopes its labels give it
(``Slo.scopes``, the direct ledger's one definition): the labels of its series (``deployment`` set as a target
label in the scrape config) under its configured target's labels, as the direct source reads them — so a
deployment or a ``match`` label given only in specwatch's config scopes the same events here as there.

Where this cannot say what the direct source's ledger says: ``increase()`` extrapolates to the window's edges
(the catalogue's ``PROMQL_APPROXIMATION``), so counts are not whole numbers and a window within a scrape of a
restart can be a request or two off; how much of the period Prometheus holds is asked of it (the oldest sample
of the SLI's series within the period: to the hour, to the scrape within the last two hours); and a window of
an hour or more is re-read at most once a minute (``LONG_WINDOW_REUSE_S``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from collectors.prometheus.naming import TargetKey, by_instance, instances_matcher
from collectors.prometheus.queries import SignalQueries, signal_queries
from collectors.prometheus.slo_rules import ScopeShape, SloQueries, window_name
from collectors.slo import EventCounts, Scope, Slo, build_slos
from config import Config

if TYPE_CHECKING:  # the Prometheus client sends HTTP (requests): a viewer of a SQLite store never loads it
    from collectors.prometheus.client import PromClient
    from collectors.prometheus.promql_source import PrometheusSource

MINUTE_S = 60.0
# A window of an hour or more, asked again within a minute, is answered from the last read: the alert engine
# asks every cycle, and an increase() over days of every server's histograms is the heaviest query specwatch
# sends. A minute of a window of hours moves no burn rate or budget that anyone reads.
LONG_WINDOW_S = 3600.0
LONG_WINDOW_REUSE_S = 60.0
_YOUNG_S = 7200.0  # younger than this, how much of the period Prometheus holds is asked to the minute
_BURN_DOWN_POINTS = 500  # a period's minutes as the burn-down draws them, not 40,320 of them

# Per target over one window: the scopes it counts in and its events.
_Targets = dict[TargetKey, tuple[tuple[Scope, ...], EventCounts]]


def _no_labels(_key: TargetKey) -> Mapping[str, str]:
    return {}


class PrometheusSloCounts:
    """``SloCounts`` on Prometheus for these SLOs; ``names`` turns an (instance, job) into the target's name
    and ``labels`` into its configured labels (``collectors.prometheus.naming``); ``clock`` bounds evaluation
    times to now."""

    def __init__(
        self,
        slos: Sequence[Slo],
        client: PromClient,
        queries: SignalQueries,
        *,
        names: Callable[[TargetKey], str] | None = None,
        labels: Callable[[TargetKey], Mapping[str, str]] = _no_labels,
        scrape_interval_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._slos = {slo.name: slo for slo in slos}
        self._client = client
        self._queries = queries
        self._names = names
        self._labels = labels
        self._young_every = window_name(max(round(scrape_interval_s), 1))
        self._clock = clock
        self._cache: dict[tuple[str, int], tuple[float, _Targets]] = {}

    def close(self) -> None:
        """Nothing to close: the client is the Prometheus source's, closed with it."""

    def _targets(self, slo: Slo, window_s: float, at: float) -> _Targets:
        """Every target's scopes and events over ``window_s`` ending at ``at`` (two queries)."""
        long = window_s >= LONG_WINDOW_S
        key = (slo.name, round(window_s / MINUTE_S) if long else -round(window_s))
        cached = self._cache.get(key)
        # An empty answer is asked again (a Prometheus that has not scraped the fleet yet).
        if (
            cached is not None
            and cached[1]
            and 0.0 <= at - cached[0] <= (LONG_WINDOW_REUSE_S if long else 0.5)
        ):
            return cached[1]
        # The match and deployment labels are read per target, not matched in PromQL: a configured target's
        # labels may give them where its series have none.
        keys = tuple(sorted({name for name, _ in slo.match} | {"deployment"}))
        bad_expr, total_expr = SloQueries(self._queries).per_target(
            dataclasses.replace(slo, match=()), ScopeShape(keys), window_s
        )
        bads: dict[TargetKey, float] = {}
        for sample in self._client.query(bad_expr, at=at):
            target = TargetKey.of(sample.labels)
            bads[target] = bads.get(target, 0.0) + max(sample.value or 0.0, 0.0)
        totals: dict[TargetKey, float] = {}
        series_labels: dict[TargetKey, dict[str, str]] = {}
        for sample in self._client.query(total_expr, at=at):
            target = TargetKey.of(sample.labels)
            totals[target] = totals.get(target, 0.0) + (sample.value or 0.0)
            found = series_labels.setdefault(target, {})
            found.update({k: sample.labels[k] for k in keys if sample.labels.get(k)})
        out: _Targets = {}
        for target, total in totals.items():
            scopes = slo.scopes({**series_labels[target], **self._labels(target)})
            if total > 0 and scopes:
                out[target] = (scopes, EventCounts(total - min(bads.get(target, 0.0), total), total))
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[key] = (at, out)
        return out

    def _per_scope(self, slo: Slo, window_s: float, at: float) -> dict[str, EventCounts]:
        out: dict[str, EventCounts] = {}
        for scopes, counts in self._targets(slo, window_s, at).values():
            for scope in scopes:
                out[scope.key] = out.get(scope.key, EventCounts()) + counts
        return out

    def _members(self, slo: Slo, scope: str, window_s: float, at: float) -> list[TargetKey] | None:
        """The targets counting in ``scope`` over the window; None when that is every target the SLO's
        series answer for (the whole fleet of an SLO without ``match``: nothing to narrow)."""
        found = self._targets(slo, window_s, at)
        if not scope and not slo.match:
            return None
        wanted = Scope.from_key(scope)
        return sorted(target for target, (scopes, _) in found.items() if wanted in scopes)

    def _narrowed(self, members: Sequence[TargetKey] | None) -> SloQueries:
        if members is None:
            return SloQueries(self._queries)
        narrow = instances_matcher(t.instance for t in members)
        return SloQueries(dataclasses.replace(self._queries, narrow=narrow))

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
        """The oldest minute of the period in which Prometheus holds the scope's SLI series (asked to the
        hour, and to the scrape interval within the last two hours)."""
        found = self._slos.get(slo)
        if found is None:
            return None
        now = self._clock()
        members = self._members(found, scope, found.window_s, now)
        if members == []:
            return None
        queries = self._narrowed(members)

        def oldest(expr: str) -> float | None:
            samples = self._client.query(expr, at=now)
            value = samples[0].value if samples else None
            return value if value is not None and math.isfinite(value) else None

        found_ts = oldest(queries.oldest_request(found, {}))
        if found_ts is None or found_ts > now - _YOUNG_S:
            # Hours are a period's resolution, not a young store's: one that began after the last whole hour
            # has no sample at any hour and would read as empty (goodput then divided by five minutes). So
            # the last two hours are asked again at the scrape interval.
            young = queries.oldest_request(found, {}, within_s=_YOUNG_S, every=self._young_every)
            found_ts = oldest(young) or found_ts
        return int(found_ts // MINUTE_S * MINUTE_S) if found_ts is not None else None

    def by_target(self, slo: str, start_ts: float, end_ts: float) -> dict[str, EventCounts]:
        found = self._slos.get(slo)
        at = min(end_ts, self._clock())
        if found is None or at - start_ts < 1.0:
            return {}
        out: dict[str, EventCounts] = {}
        for target, (_, counts) in self._targets(found, at - start_ts, at).items():
            name = self._names(target) if self._names is not None else target.instance
            out[name] = out.get(name, EventCounts()) + counts
        return out

    def minutes(self, slo: str, scope: str, start_ts: float, end_ts: float) -> list[tuple[int, float, float]]:
        """The scope's events per step over [start_ts, end_ts): minutes for an hour, coarser for a period
        (at most ``_BURN_DOWN_POINTS`` steps, each the increase over its own step)."""
        found = self._slos.get(slo)
        end = min(end_ts, self._clock())
        if found is None or end <= start_ts:
            return []
        members = self._members(found, scope, end - start_ts, end)
        if members == []:
            return []
        step = max(MINUTE_S, math.ceil((end - start_ts) / _BURN_DOWN_POINTS / MINUTE_S) * MINUTE_S)
        queries = self._narrowed(members)
        unmatched = dataclasses.replace(found, match=())
        bad_expr, total_expr = queries.per_target(unmatched, ScopeShape(()), step)

        def series(expr: str) -> Mapping[float, float]:
            for item in self._client.query_range(f"sum ({expr})", start_ts + step, end, step):
                return {
                    float(t): float(v)
                    for t, v in zip(item.timestamps, item.values, strict=True)
                    if math.isfinite(v)
                }
            return {}

        totals, bads = series(total_expr), series(bad_expr)
        steps = [(t - step, total, bads.get(t, 0.0)) for t, total in sorted(totals.items())]
        # The grid stops up to a step short of now (VictoriaMetrics aligns it to the step): the rest is one
        # more, shorter step, or a fresh SLO's burn-down would say "no events" for the first step's length.
        last = max(totals, default=start_ts)
        if end - last >= 1.0:
            tail_bad, tail_total = queries.per_target(unmatched, ScopeShape(()), end - last)
            total = sum(s.value or 0.0 for s in self._client.query(f"sum ({tail_total})", at=end))
            bad = sum(s.value or 0.0 for s in self._client.query(f"sum ({tail_bad})", at=end))
            steps.append((last, total, bad))
        return [(int(ts), total - min(max(bad, 0.0), total), total) for ts, total, bad in steps if total > 0]


def prometheus_slo_counts(
    config: Config, prometheus: PrometheusSource, source: str = "config"
) -> PrometheusSloCounts:
    """The SLO counts of ``config``'s SLOs from the Prometheus ``prometheus`` reads, targets named and
    labelled as that source names them (a configured target's where its URL is the instance)."""
    configured = by_instance(config.targets)

    def name_of(key: TargetKey) -> str:
        target = configured.get(key.instance)
        return target.name if target is not None else key.instance

    def labels_of(key: TargetKey) -> Mapping[str, str]:
        target = configured.get(key.instance)
        return target.labels if target is not None else {}

    return PrometheusSloCounts(
        build_slos(config, source),
        prometheus.client,
        signal_queries(config, source=source),
        names=name_of,
        labels=labels_of,
        scrape_interval_s=config.scrape.interval_s,
    )
