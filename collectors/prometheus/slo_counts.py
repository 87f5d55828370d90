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

Speed: one report asks for a dozen windows within a second or two; they share one evaluation instant
(``_AT_STEP_S``), and the first miss of an instant asks for the SLO's own windows (period, page and ticket
windows) at once, concurrently. With ``prometheus.use_recording_rules`` the windows the SLO recording rules
record are read from them (each scope's recorded total and error ratio; scopes then come from the series'
labels only, as the rules group them).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from collectors.prometheus import slo_rules
from collectors.prometheus.naming import TargetKey, by_instance, instances_matcher
from collectors.prometheus.queries import SignalQueries, signal_queries
from collectors.prometheus.slo_rules import ScopeShape, SloQueries, window_name
from collectors.slo import EventCounts, Scope, Slo, build_slos
from config import Config

if TYPE_CHECKING:  # the Prometheus client sends HTTP (requests): a viewer of a SQLite store never loads it
    from collectors.prometheus.client import InstantSample, PromClient
    from collectors.prometheus.promql_source import PrometheusSource

MINUTE_S = 60.0
# A window of an hour or more, asked again within a minute, is answered from the last read: the alert engine
# asks every cycle, and an increase() over days of every server's histograms is the heaviest query specwatch
# sends. A minute of a window of hours moves no burn rate or budget that anyone reads.
LONG_WINDOW_S = 3600.0
LONG_WINDOW_REUSE_S = 60.0
HOUR_S = 3600.0
_YOUNG_S = 7200.0  # younger than this, how much of the period Prometheus holds is asked to the minute
_PROBES_PER_ROUND = 4  # hours asked at once per round of the coverage search (the query pool's width)
_AT_STEP_S = 10.0  # one report's window counts share the instant its first count was asked at
_NOT_SCOPE = frozenset({"__name__", *slo_rules.SLOTH_LABELS})
_BURN_DOWN_POINTS = 500  # a period's minutes as the burn-down draws them, not 40,320 of them

# Per target over one window: the scopes it counts in and its events.
_Targets = dict[TargetKey, tuple[tuple[Scope, ...], EventCounts]]


def _no_labels(_key: TargetKey) -> Mapping[str, str]:
    return {}


def _scope_key(labels: Mapping[str, str]) -> str:
    """The scope a recorded series stands for: its labels but the name and Sloth's."""
    return Scope(tuple(sorted((k, v) for k, v in labels.items() if k not in _NOT_SCOPE))).key


def _own_windows(slo: Slo) -> set[float]:
    """The windows an SLO's report always asks for: its period and its alert conditions' windows."""
    windows = {slo.window_s}
    for condition in (*slo.page, *slo.ticket):
        windows |= {condition.long_s, condition.short_s}
    return windows


def _window_s(slo: Slo, asked_s: float) -> float:
    """The window a count asked over ``asked_s`` stands for. Callers end a window a second past their ``now``
    (the ledger's current minute) and ask a moment later, and a report's counts share an instant up to
    ``_AT_STEP_S`` old: a window up to that much longer than one of the SLO's own (recorded, period, alert)
    is that window, so its recorded series and its cached answer serve it. A window of an hour or more is
    its own up to ``LONG_WINDOW_REUSE_S`` longer, as its answer is reused for that long: a report whose
    reads took seconds (a cold page on a busy engine) asked its scopes over the period 11.2 s after its
    ``now``, missed the recordings and sent two raw 28-day increases (7 s of Prometheus each at 1,000
    servers). Any other is as asked."""
    for window_s in sorted(_own_windows(slo) | set(slo_rules.windows_s(slo))):
        slack_s = LONG_WINDOW_REUSE_S if window_s >= LONG_WINDOW_S else _AT_STEP_S + 1.0
        if window_s <= asked_s < window_s + slack_s:
            return window_s
    return asked_s


def _parent_scope(slo: Slo, scope: str) -> str | None:
    """The SLO's scope without the deployment of ``scope`` (None when it has none, or the SLO's match fixes
    the deployment: then it is the SLO's only scope)."""
    labels = Scope.from_key(scope).as_dict()
    if "deployment" not in labels or any(name == "deployment" for name, _ in slo.match):
        return None
    del labels["deployment"]
    return Scope(tuple(sorted(labels.items()))).key


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
        recorded: bool = False,
    ) -> None:
        self._slos = {slo.name: slo for slo in slos}
        self._recorded = recorded  # read the SLO recording rules' series where they exist
        self._client = client
        self._queries = queries
        self._names = names
        self._labels = labels
        self._young_every = window_name(max(round(scrape_interval_s), 1))
        self._clock = clock
        self._cache: dict[tuple[str, int], tuple[float, _Targets]] = {}
        self._recordings: dict[tuple[str, int, float], dict[str, EventCounts]] = {}
        self._prefetched: set[tuple[str, float]] = set()
        self._recorded_slos: set[str] = set()  # SLOs whose recording rules answered (their rules are loaded)
        self._unrecorded: dict[str, float] = {}  # SLO → when its recording rules last did not answer
        self._at: float | None = None  # the instant the current report reads at
        self._first: dict[tuple[str, str, float], int | None] = {}
        # Per ``sampled`` query: the oldest hour with a sample, and when it was searched for.
        self._hours: dict[str, tuple[float, float]] = {}
        # Each SLO's series index by window (read once for all its scopes, reused as long windows' answers).
        self._index: dict[tuple[str, int], tuple[float, dict[TargetKey, tuple[Scope, ...]]]] = {}
        self._index_locks: dict[tuple[str, int], threading.Lock] = {}  # one read per key at a time
        self._lock = threading.Lock()
        # The queries of one report go out together (a dozen windows, bad and total).
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="specwatch-slo")

    def drop_caches(self) -> None:
        """Forget every count read, as a restarted process would."""
        with self._lock:
            self._cache.clear()
            self._recordings.clear()
            self._prefetched.clear()
            self._recorded_slos.clear()
            self._unrecorded.clear()
            self._first.clear()
            self._hours.clear()
            self._index.clear()
            self._at = None

    def close(self) -> None:
        """The query threads go; the client is the Prometheus source's, closed with it."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _instant(self, at: float) -> float:
        """``at``, or the instant last evaluated when that is less than ``_AT_STEP_S`` earlier (never later
        than asked): every window of one report sees the same instant and its cached answers."""
        with self._lock:
            if self._at is not None and 0.0 <= at - self._at < _AT_STEP_S:
                return self._at
            self._at = at
            return at

    @staticmethod
    def _key(slo: Slo, window_s: float) -> tuple[str, int]:
        long = window_s >= LONG_WINDOW_S
        return (slo.name, round(window_s / MINUTE_S) if long else -round(window_s))

    def _fresh(self, slo: Slo, window_s: float, at: float) -> _Targets | None:
        cached = self._cache.get(self._key(slo, window_s))
        reuse_s = LONG_WINDOW_REUSE_S if window_s >= LONG_WINDOW_S else 0.5
        # An empty answer is asked again (a Prometheus that has not scraped the fleet yet).
        if cached is not None and cached[1] and 0.0 <= at - cached[0] <= reuse_s:
            return cached[1]
        return None

    def _targets(self, slo: Slo, window_s: float, at: float) -> _Targets:
        """Every target's scopes and events over ``window_s`` ending at ``at`` (two queries a window; the
        first miss of an instant asks for the SLO's own windows too, all at once)."""
        with self._lock:
            found = self._fresh(slo, window_s, at)
            if found is not None:
                return found
        recorded = self._rules_answer(slo, at)
        with self._lock:
            windows = {window_s}
            # The SLO's own windows at once, unless its recording rules answer them (then only this one).
            if not recorded and (slo.name, at) not in self._prefetched:
                self._prefetched.add((slo.name, at))
                windows |= {w for w in _own_windows(slo) if self._fresh(slo, w, at) is None}
        # The match and deployment labels are read per target, not matched in PromQL: a configured target's
        # labels may give them where its series have none.
        keys = tuple(sorted({name for name, _ in slo.match} | {"deployment"}))
        queries = SloQueries(self._queries)
        jobs = {
            window: tuple(
                self._pool.submit(self._client.query, expr, at=at)
                for expr in queries.per_target(dataclasses.replace(slo, match=()), ScopeShape(keys), window)
            )
            for window in windows
        }
        answered = {
            window: self._by_target(slo, keys, bad_job.result(), total_job.result())
            for window, (bad_job, total_job) in jobs.items()
        }
        with self._lock:
            if len(self._cache) + len(answered) > 256:
                self._cache.clear()
                self._prefetched.clear()
            for window, out in answered.items():
                self._cache[self._key(slo, window)] = (at, out)
        return answered[window_s]

    def _by_target(
        self,
        slo: Slo,
        keys: tuple[str, ...],
        bad_samples: Sequence[InstantSample],
        total_samples: Sequence[InstantSample],
    ) -> _Targets:
        """Per target: the scopes its series' and configured labels give it, and its events."""
        bads: dict[TargetKey, float] = {}
        for sample in bad_samples:
            target = TargetKey.of(sample.labels)
            bads[target] = bads.get(target, 0.0) + max(sample.value or 0.0, 0.0)
        totals: dict[TargetKey, float] = {}
        series_labels: dict[TargetKey, dict[str, str]] = {}
        for sample in total_samples:
            target = TargetKey.of(sample.labels)
            totals[target] = totals.get(target, 0.0) + (sample.value or 0.0)
            found = series_labels.setdefault(target, {})
            found.update({k: sample.labels[k] for k in keys if sample.labels.get(k)})
        out: _Targets = {}
        for target, total in totals.items():
            scopes = slo.scopes({**series_labels[target], **self._labels(target)})
            if total > 0 and scopes:
                out[target] = (scopes, EventCounts(total - min(bads.get(target, 0.0), total), total))
        return out

    def _from_recordings(self, slo: Slo, window_s: float, at: float) -> dict[str, EventCounts] | None:
        """Each scope's events over ``window_s`` from the SLO recording rules (``export rules``): the
        recorded total and error ratio, the newest evaluation within ``slo_rules.RECORDED_LOOKBACK_S`` (the
        windows of a day or more are evaluated every 5 minutes). None when the window is not recorded or
        the rules are not loaded."""
        window = round(window_s)
        if window not in {round(w) for w in (*slo_rules.windows_s(slo), slo.window_s)}:
            return None
        key = (slo.name, window, at)
        with self._lock:
            if key in self._recordings:
                return self._recordings[key]
        selector, lookback = slo_rules.selector(slo), window_name(slo_rules.RECORDED_LOOKBACK_S)
        total_job, ratio_job = (
            self._pool.submit(
                self._client.query,
                f"last_over_time({name}{window_name(window)}{selector}[{lookback}])",
                at=at,
            )
            for name in ("slo:sli_total:increase", "slo:sli_error:ratio_rate")
        )
        totals, ratios = total_job.result(), {_scope_key(s.labels): s.value for s in ratio_job.result()}
        if not totals:
            return None
        out: dict[str, EventCounts] = {}
        for sample in totals:
            total, scope = sample.value, _scope_key(sample.labels)
            if total is None or total <= 0:
                continue
            bad = min(max((ratios.get(scope) or 0.0) * total, 0.0), total)
            out[scope] = EventCounts(total - bad, total)
        with self._lock:
            if len(self._recordings) > 256:
                self._recordings.clear()
            self._recordings[key] = out
            self._recorded_slos.add(slo.name)
        return out

    def _rules_answer(self, slo: Slo, at: float) -> bool:
        """Whether the SLO's recording rules answer (its period's recordings read once to know). Asked before
        any raw read of its counts: the Fleet page's coverage and status reads run at once, and a coverage
        read that came first used to take the raw path, its own windows with it (increase() over 3 and 28
        days of every server's histograms: 7–14 s each on the bench's Prometheus, a 51 s cold page)."""
        if not self._recorded:
            return False
        with self._lock:
            known = slo.name in self._recorded_slos
            asked_at = self._unrecorded.get(slo.name, -math.inf)
        if not known and not 0.0 <= at - asked_at < MINUTE_S:  # rules not loaded: asked again a minute on
            known = self._from_recordings(slo, slo.window_s, at) is not None
            if not known:
                with self._lock:
                    self._unrecorded[slo.name] = at
        return known

    def _per_scope(self, slo: Slo, window_s: float, at: float) -> dict[str, EventCounts]:
        at = self._instant(at)
        if self._recorded:
            recorded = self._from_recordings(slo, window_s, at)
            if recorded is not None:
                return recorded
        out: dict[str, EventCounts] = {}
        for scopes, counts in self._targets(slo, window_s, at).values():
            for scope in scopes:
                out[scope.key] = out.get(scope.key, EventCounts()) + counts
        return out

    def _members(self, slo: Slo, scope: str, window_s: float, at: float) -> list[TargetKey] | None:
        """The targets counting in ``scope`` over the window; None when that is every target the SLO's
        series answer for (the whole fleet of an SLO without ``match``: nothing to narrow).

        Where the SLO's recording rules answer its counts, the members come from the series index (the label
        sets of the SLI's series with samples in the window: no sample read) and not from an ``increase()``
        of every target's raw series over the window, which over a 28-day period is the heaviest query
        specwatch could send. A target whose series hold no event in the window is then a member too."""
        if not scope and not slo.match:
            return None
        wanted = Scope.from_key(scope)
        if self._rules_answer(slo, at):
            return sorted(
                target for target, scopes in self._indexed(slo, window_s, at).items() if wanted in scopes
            )
        found = self._targets(slo, window_s, at)
        return sorted(target for target, (scopes, _) in found.items() if wanted in scopes)

    def _indexed(self, slo: Slo, window_s: float, at: float) -> dict[TargetKey, tuple[Scope, ...]]:
        """Every target with the SLI's series in the window and the scopes its labels give it (as
        ``_by_target`` gives them), from ``/api/v1/series``: read once for every scope of the SLO (each
        deployment asked it again: ~0.3 s of Prometheus a time over a 28-day period at 1,000 servers) and
        reused for ``LONG_WINDOW_REUSE_S``, as the long windows' counts are."""
        key = self._key(slo, window_s)
        with self._lock:
            reading = self._index_locks.setdefault(key, threading.Lock())
        with reading:  # a second scope of the same SLO waits for the first's read; other SLOs do not
            cached = self._index.get(key)
            if cached is not None and cached[1] and 0.0 <= at - cached[0] <= LONG_WINDOW_REUSE_S:
                return cached[1]
            found = self._read_index(slo, window_s, at)
            self._index[key] = (at, found)
            return found

    def _read_index(self, slo: Slo, window_s: float, at: float) -> dict[TargetKey, tuple[Scope, ...]]:
        keys = {name for name, _ in slo.match} | {"deployment"}
        labels: dict[TargetKey, dict[str, str]] = {}
        for found in self._client.series(SloQueries(self._queries).event_series(slo), at - window_s, at):
            labels.setdefault(TargetKey.of(found), {}).update(
                {k: v for k, v in found.items() if k in keys and v}
            )
        out: dict[TargetKey, tuple[Scope, ...]] = {}
        for target, series_labels in labels.items():
            if scopes := slo.scopes({**series_labels, **self._labels(target)}):
                out[target] = scopes
        return out

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
        return self._per_scope(found, _window_s(found, at - start_ts), at).get(scope, EventCounts())

    def scopes(self, slo: str, since_ts: float) -> list[str]:
        found = self._slos.get(slo)
        if found is None:
            return []
        now = self._clock()
        return sorted(self._per_scope(found, _window_s(found, max(now - since_ts, MINUTE_S)), now))

    def first_minute(self, slo: str, scope: str) -> int | None:
        """The oldest minute of the period in which Prometheus holds the scope's SLI series (asked to the
        hour, and to the scrape interval within the last two hours)."""
        found = self._slos.get(slo)
        if found is None:
            return None
        # Asked at an hour's resolution: the answer holds for a minute (a period-long subquery per scope).
        now = self._clock()
        key = (slo, scope, math.floor(now / MINUTE_S))
        with self._lock:
            if key in self._first:
                return self._first[key]
        minute = self._oldest_minute(found, scope, now)
        with self._lock:
            if len(self._first) > 256:
                self._first.clear()
            self._first[key] = minute
        return minute

    def _oldest_minute(self, found: Slo, scope: str, now: float) -> int | None:
        members = self._members(found, scope, found.window_s, now)
        if members == []:
            return None
        queries = self._narrowed(members)
        not_before: float | None = None
        parent = _parent_scope(found, scope)
        if parent is not None:
            # Every member of a deployment's scope is a member of the SLO's scope without it: its first hour
            # is no older, and most often the same (one probe instead of a search per deployment).
            parent_minute = self.first_minute(found.name, parent)
            if parent_minute is None:
                return None
            not_before = math.ceil(parent_minute / HOUR_S) * HOUR_S
        found_ts = self._oldest_hour(found, queries, now, not_before)
        if found_ts is None or found_ts > now - _YOUNG_S:
            # Hours are a period's resolution, not a young store's: one that began after the last whole hour
            # has no sample at any hour and would read as empty (goodput then divided by five minutes). So
            # the last two hours are asked again at the scrape interval.
            young = queries.oldest_request(found, {}, within_s=_YOUNG_S, every=self._young_every)
            found_ts = self._oldest(young, now) or found_ts
        return int(found_ts // MINUTE_S * MINUTE_S) if found_ts is not None else None

    def _oldest_hour(
        self, found: Slo, queries: SloQueries, now: float, not_before: float | None = None
    ) -> float | None:
        """When the sample read at the oldest whole hour of the period with one (within the 5-minute lookback)
        was taken, found by a search over the period's hours with instant queries of one instant's samples
        each (``SloQueries.sampled``), ``_PROBES_PER_ROUND`` hours at once: ~6 rounds of cheap queries, or
        one when the period's first hour has samples, as on any engine older than the period. A subquery
        over the period (``oldest_request``: the same answer for series that ran on from their first
        sample) reads every sample of the period, whatever its step: 1.2–1.7 s of Prometheus's time at 1,000
        servers × 24 h. ``not_before``: an hour before which none can be (the search starts there: a
        deployment's scope at its SLO's first hour).

        The hour found is kept for an hour: the oldest data only goes (retention), so asked again, an hour
        that still has a sample and none an hour before stands, in one round of two queries instead of a
        search (the Fleet page's SLO status asks every minute); history backfilled before it is found at
        the next search, within the hour."""
        first = math.ceil((now - found.window_s) / HOUR_S) * HOUR_S
        if not_before is not None:
            first = max(first, not_before)
        last = math.floor(now / HOUR_S) * HOUR_S
        if first > last:
            return None
        expr = queries.sampled(found)
        with self._lock:
            known, found_at = self._hours.get(expr, (None, -math.inf))
        if known is not None and first <= known <= last and now - found_at < HOUR_S:
            earlier = [known - HOUR_S] if known > first else []
            at_known, *before = self._probe(expr, [known, *earlier])
            if at_known is not None and not (before and before[0] is not None):
                return at_known
        # Searched up to now, not to the last whole hour: a gap in the samples across that hour (the engine
        # or its scrapes down for a while) read as a store younger than two hours, whose coverage is then
        # its oldest sample within them: a week's budget said to cover two hours.
        found_ts, hour = self._search(expr, first, now)
        with self._lock:
            if len(self._hours) > 256:
                self._hours.clear()
            if hour is None:
                self._hours.pop(expr, None)
            else:
                self._hours[expr] = (hour, now)
        return found_ts

    def _search(self, expr: str, first: float, last: float) -> tuple[float | None, float | None]:
        """(the sample's timestamp, the hour) of the oldest hour from ``first`` with a sample of ``expr``, or
        ``last`` when no hour before it has one; (None, None) when ``last`` has none. Each round asks
        ``_PROBES_PER_ROUND`` hours evenly spread between the newest known without a sample and the oldest
        known with one."""
        at_first, *at_last = self._probe(expr, [first, *([last] if last > first else [])])
        if at_first is not None:
            return at_first, first
        if not at_last or at_last[0] is None:
            return None, None
        # No sample at ``older``; ``newest_ts`` read at ``newer``.
        older, newer, newest_ts = first, last, at_last[0]
        while newer - older > HOUR_S:
            step = math.ceil((newer - older) / HOUR_S / (_PROBES_PER_ROUND + 1)) * HOUR_S
            hours = [h for h in (older + k * step for k in range(1, _PROBES_PER_ROUND + 1)) if h < newer]
            for hour, at in zip(hours, self._probe(expr, hours), strict=True):
                if at is not None:
                    newer, newest_ts = hour, at
                    break
                older = hour
        return newest_ts, newer

    def _probe(self, expr: str, hours: Sequence[float]) -> list[float | None]:
        """``_oldest`` of ``expr`` at each of ``hours``, asked at once."""
        if len(hours) == 1:
            return [self._oldest(expr, hours[0])]
        jobs = [self._pool.submit(self._oldest, expr, hour) for hour in hours]
        return [job.result() for job in jobs]

    def _oldest(self, expr: str, at: float) -> float | None:
        """The timestamp an ``oldest_request`` or ``sampled`` query answers at ``at`` (None: no sample)."""
        samples = self._client.query(expr, at=at)
        value = samples[0].value if samples else None
        return value if value is not None and math.isfinite(value) else None

    def by_target(self, slo: str, start_ts: float, end_ts: float) -> dict[str, EventCounts]:
        found = self._slos.get(slo)
        at = min(end_ts, self._clock())
        if found is None or at - start_ts < 1.0:
            return {}
        out: dict[str, EventCounts] = {}
        for target, (_, counts) in self._targets(found, _window_s(found, at - start_ts), at).items():
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
        recorded=config.prometheus is not None and config.prometheus.use_recording_rules,
    )
