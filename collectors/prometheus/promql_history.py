"""History read from Prometheus: the history contract (``collectors/history.py``) whose samples, latest
snapshots and up/down/restart events come from PromQL range and instant queries, so range views read the
fleet's Prometheus.

What Prometheus cannot hold (alert transitions, config events, recipe flags) stays in the small SQLite file at
``store.path``; its samples table stays empty in this mode.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

from collectors.derive import EVALUATION_ORDER, spec_enabled
from collectors.errors import QueryError, StoreError
from collectors.fleet_chart import FLEET_CHART_SIGNALS, FleetChartTotals
from collectors.model import SIGNAL_NAMES, Event, Recipe, TargetSnapshot
from collectors.prometheus import downsampled
from collectors.prometheus.matrix import RangeSeries
from collectors.prometheus.naming import (
    TargetKey,
    by_instance,
    instance_of_name,
    instances_matcher,
    target_names,
)
from collectors.prometheus.queries import SignalQueries
from collectors.prometheus.read_plan import Grid, aligned_grid, needs_labels, signals_to_query
from collectors.prometheus.recipe_labels import RECIPE_LABELS, recipe_from_labels
from collectors.prometheus.result_cache import RANGE_RESULTS, RangeKey
from collectors.sample_columns import (
    SAMPLE_VALUES,
    FloatArray,
    ObjectArray,
    SampleColumns,
    check_columns,
    columns_of_snapshots,
    empty_columns,
    objects,
)
from collectors.signals import BY_NAME, Expr, Inverse, Product, Ref
from collectors.store.sqlite_store import SqliteStore
from config.settings import Config

if TYPE_CHECKING:  # the Prometheus client sends HTTP (requests): imported where a PrometheusHistory is built
    from collectors.prometheus.promql_source import PrometheusSource

T = TypeVar("T")
log = logging.getLogger(__name__)

_NUMERIC = ("up", *SAMPLE_VALUES)  # the float grid, in this order (the signals from index 2)
_META_EVENT_KINDS = frozenset({"alert", "config", "recipe_change"})  # Prometheus cannot tell these
_DOWN_ERROR = "Prometheus could not scrape it (up == 0)"
# The plain-decoding rules the Fleet chart's totals render (fleet_chart_totals): output as computed, accept
# length one, step latency recomputed as accept length × TPOT, so TPOT.
_CHART_PLAIN = {"output_tok_s": "as computed", "accept_length": "one", "step_latency_s": "recomputed"}
_STEP_LATENCY = Product(Ref("accept_length"), Ref("tpot_s"))
_UP_VALUE = "up"  # the label count_values gives each value of `up` in the Fleet chart's target counts
_MEET_EVERY_S = 60.0  # at most one source cycle a minute to meet targets a range read found first


class PrometheusHistoryError(StoreError, QueryError):
    """History could not be read from Prometheus (a StoreError to the views, a QueryError by cause)."""


class PrometheusHistory:
    """``HistoryStore`` backed by Prometheus for samples, and a small SQLite file for what it cannot hold.
    ``source``: the Prometheus source it reads through (closed with it); a collector over this history is
    handed the same one (``open_history``)."""

    def __init__(
        self,
        config: Config,
        *,
        source: PrometheusSource | None = None,
        meta: SqliteStore | None = None,
        clock: Callable[[], float] = time.time,
        max_workers: int = 4,
    ) -> None:
        self.config = config
        if source is None:
            # Here, not at the top: the source's client brings requests/urllib3 with it.
            from collectors.prometheus.promql_source import PrometheusSource

            source = PrometheusSource(config)
        self._source = source
        self._meta = meta if meta is not None else SqliteStore(config.store.path)
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="specwatch-promhist")
        self._lock = threading.Lock()
        self._latest_lock = threading.Lock()  # held while the interval's cycle is read (``latest``)
        self.interval_s = config.scrape.interval_s
        self._label_recipes: dict[str, Recipe] = {}
        self._partial: str | None = None  # the last range answer's warnings, logged once per change
        self._droppers: list[Callable[[], None]] = []
        self._met_at = float("-inf")
        self._recipe_wait_s = max(2 * config.scrape.timeout_s, 5.0)  # /server_info reads of targets met
        # The newest snapshots and when they were read (monotonic): every page of an interval shares them.
        self._latest: tuple[float, list[TargetSnapshot]] | None = None

    # -- writes: samples already live in Prometheus ---------------------------------------------------------
    def append(self, snapshots: Sequence[TargetSnapshot]) -> None:
        """Nothing to write: Prometheus scraped these samples itself."""

    def add_events(self, events: Sequence[Event]) -> None:
        self._meta.add_events(events)

    def put_recipe(self, recipe: Recipe, ts: float) -> None:
        self._meta.put_recipe(recipe, ts)

    def prune(
        self,
        older_than_ts: float,
        *,
        raw_older_than_ts: float | None = None,
        minute_older_than_ts: float | None = None,
    ) -> int:
        """Prometheus keeps its own retention; only old events and recipes of the SQLite side go."""
        del raw_older_than_ts, minute_older_than_ts  # no samples here
        return self._meta.prune(older_than_ts)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._source.close()
        self._meta.close()

    # -- reads -----------------------------------------------------------------------------------------------
    def recipes(self) -> dict[str, Recipe]:
        """Recipes the collector stored, plus those Prometheus's labels describe now or in frames read."""
        found = self._meta.recipes()
        labelled = self._guard(
            lambda: self._source.client.query(self._source.queries.labelled(), at=self._clock())
        )
        for sample in labelled:
            recipe = recipe_from_labels(sample.labels)
            if recipe is not None:
                self._label_recipes.setdefault(recipe.recipe_id, recipe)
        for known in (self._source.recipes, dict(self._label_recipes)):
            for recipe_id, recipe in known.items():
                found.setdefault(recipe_id, recipe)
        return found

    def latest(self, since_ts: float | None = None) -> list[TargetSnapshot]:
        """Every target now, computed with instant queries (the same as one Prometheus-source cycle); read
        at most once per scrape interval (the Fleet table, its background look-back and every other page
        of the interval share one cycle's snapshots)."""
        # One reader makes the interval's cycle; readers arriving meanwhile (the Fleet table, its chart's
        # background read meeting the same targets, another page) wait for it and share it.
        with self._latest_lock:
            kept = self._latest
            if kept is None or time.monotonic() - kept[0] >= self.interval_s:
                kept = (time.monotonic(), self._cycle())
                self._latest = kept
        return [s for s in kept[1] if since_ts is None or s.ts >= since_ts]

    def _cycle(self) -> list[TargetSnapshot]:
        with self._lock:  # the source keeps per-target state between calls: one reader at a time
            met = self._source.met()
            snapshots = self._source.collect(self._clock())
            health = self._source.health()
        if not self._source.met() <= met:
            # New targets (a viewer's first read): their recipes, as a page shows them, and their caps,
            # built into the same cycle's answers (no second round of queries).
            self._source.settle_recipes(self._recipe_wait_s)
            with self._lock:
                snapshots = self._source.resnapshot() or self._source.collect(self._clock())
                health = self._source.health()
        if not health.answered:
            # Blind: the targets are unknown, not down; the page says why instead of drawing a dead fleet.
            raise PrometheusHistoryError(health.error or f"Prometheus at {health.url} cannot answer")
        if not snapshots:
            self._check_reachable()
        return snapshots

    def latest_columns(self, since_ts: float | None = None) -> SampleColumns:
        """``latest`` as columns (an unknown target's ``up`` is NaN)."""
        return columns_of_snapshots(self.latest(since_ts))

    def count_samples(self) -> int:
        """Targets with data in Prometheus now (0 means nothing to show yet)."""
        return len(
            self._guard(lambda: self._source.client.query(self._source.queries.present(), at=self._clock()))
        )

    def read_columns(
        self,
        start_ts: float,
        end_ts: float,
        values: Sequence[str],
        max_points: int = 2000,
        targets: Sequence[str] | None = None,
        *,
        texts: Sequence[str] = (),
        live: bool = False,
    ) -> SampleColumns:
        """Samples in [start_ts, end_ts] on a regular grid of at most ``max_points`` per target, with the
        ``values`` and ``texts`` asked for (as ``SqliteStore.read_columns``). When the grid is coarser than
        the scrape interval each point is the step's average (``avg_over_time``, rates over the step), like
        the SQLite store's bucket means.

        Only what the columns need is queried (``read_plan``): the signals asked for and those their
        plain-decoding rules recompute them from, ``up``, the scrape duration when asked, and the recipe
        labels when a text or a plain-decoding rule needs them. Answers are shared between readers for about
        a scrape interval (``result_cache``); a ``live`` read queries only the instants newer than its last
        answer's final ones."""
        check_columns(values, texts)
        if targets is not None and not targets:
            return empty_columns(values, texts)
        grid, queries = self._grid(start_ts, end_ts, max_points, targets)
        every = queries.signals()
        exprs = {name: every[name] for name in signals_to_query(values) if name in every}
        exprs["up"] = queries.up()
        if "scrape_duration_s" in values:
            exprs["scrape_duration_s"] = queries.scrape_duration_s()
        said: list[str] = []  # the engine's warnings about this read (a partial answer), said once per change
        answers = self._range_all(exprs, grid, said, live=live)
        if needs_labels(values, texts):
            answers["__labels"] = self._label_series(queries, grid, said, live=live)
        self._note_partial(said)
        return self._columns(answers, targets, values, texts)

    def fleet_chart_totals(
        self, start_ts: float, end_ts: float, max_points: int, *, live: bool = False
    ) -> FleetChartTotals | None:
        """The Fleet chart's numbers summed by the engine (``fleet_chart.FLEET_CHART_SIGNALS``): four range
        queries answered with a series or two each (``count_values`` of `up`: targets scraped and up; a
        ``sum`` and two ``quantile``s across the fleet), on the grid ``read_columns`` uses. The chart
        otherwise read every target's series of four signals and ``up`` (1,000 targets × 150 points: ~4 MB a
        query, 1.5 s of Prometheus's time each) to sum them here. With ``use_recording_rules``, a step of
        ``downsampled.STEPS_PER_SAMPLE`` × ``prometheus.downsample_s`` or more (7 d, 30 d) reads the
        downsampled recordings (``collectors/prometheus/downsampled.py``) where they reach.

        A target whose recipe says it decodes plainly counts as the catalogue's plain-decoding rules say
        (``_plain_decoding``: accept length 1, step latency its TPOT), by its recipe now (the interval's
        cycle): one that switched between plain and speculative decoding within the range counts as its
        current recipe says over all of it, where the columns follow the recipe labels instant by instant.
        None (read the columns) when the catalogue's rules for these signals are not those rendered here."""
        rules = {name: BY_NAME[name].plain for name in FLEET_CHART_SIGNALS}
        if rules != _CHART_PLAIN or BY_NAME["step_latency_s"].expr != _STEP_LATENCY:
            return None
        plain = self._plain_instances()
        grid, queries = self._grid(start_ts, end_ts, max_points, None)
        said: list[str] = []
        if queries.recorded and downsampled.serves(queries, grid.step_s):
            # A long range from the downsampled recordings. Their first step with a sample, and any before
            # it (their rules loaded after the samples began; the first step of a history), at full
            # resolution: a recording's window there holds only part of the step (13% off the full-resolution
            # sum at the start of the bench's week, where every later point was within 1%).
            columns = self._chart_columns(grid, plain, said, live=live, down=True)
            held = np.flatnonzero(~np.isnan(columns["servers"]))
            upto = int(held[0]) if len(held) else grid.points - 1
            before = Grid(grid.first_ts, grid.first_ts + upto * grid.step_s, grid.step_s)
            for name, values in self._chart_columns(before, plain, said, live=live).items():
                columns[name][: upto + 1] = values
        else:
            columns = self._chart_columns(grid, plain, said, live=live)
        self._note_partial(said)
        instants = np.arange(grid.points, dtype=np.float64) * grid.step_s + grid.first_ts
        held_at = ~np.isnan(columns["servers"])  # an instant with no target scraped is no row
        return FleetChartTotals(
            instants[held_at],
            columns["servers"][held_at],
            np.nan_to_num(columns["servers_up"][held_at]),
            {name: columns[name][held_at] for name in FLEET_CHART_SIGNALS},
        )

    def _chart_columns(
        self, grid: Grid, plain: Sequence[str], said: list[str], *, live: bool, down: bool = False
    ) -> dict[str, FloatArray]:
        """The Fleet chart's numbers at each instant of ``grid`` (NaN where unknown): ``servers``,
        ``servers_up`` and each of ``FLEET_CHART_SIGNALS``, from the signals' recordings (or raw series), or
        from the downsampled recordings (``down``)."""
        queries = self._queries(grid.step_s, None)

        def signal(q: SignalQueries, name: str) -> str:
            return downsampled.signal(q, name, grid.step_s) if down else q.signals()[name]

        def up_each(q: SignalQueries) -> str:
            return downsampled.up(q, grid.step_s) if down else q.up_each()

        # Targets with a sample and targets up, in one query: how many targets had each value of `up` (1: up
        # the whole step). On Prometheus each query re-reads `up` over the whole range.
        counted = downsampled.up(queries, grid.step_s) if down else queries.up()
        exprs = {"servers": f'count_values ("{_UP_VALUE}", {counted})'}
        up = f"(({up_each(queries)}) == 1)"
        # Output counts every target up; accept length and step latency as computed only the speculative ones,
        # the plain ones by their rules.
        spec, plain_values = up, {}
        if plain:
            narrowed = self._queries(grid.step_s, plain, instances=True)
            up_plain = f"(({up_each(narrowed)}) == 1)"  # its value is 1: a plain target's accept length
            spec = f"({up} unless on (instance, job) {up_plain})"
            plain_values = {
                "accept_length": up_plain,
                "step_latency_s": f"({signal(narrowed, 'tpot_s')}) and on (instance, job) {up_plain}",
            }
        per_target = {
            name: f"({signal(queries, name)}) and on (instance, job) {up if name == 'output_tok_s' else spec}"
            for name in FLEET_CHART_SIGNALS
        }
        for name, value in plain_values.items():
            per_target[name] = f"({per_target[name]}) or ({value})"
        for name, how in FLEET_CHART_SIGNALS.items():
            exprs[name] = (
                f"sum ({per_target[name]})" if how == "sum" else f"quantile (0.5, {per_target[name]})"
            )
        answers = self._range_all(exprs, grid, said, live=live)
        instants = np.arange(grid.points, dtype=np.float64) * grid.step_s + grid.first_ts

        def column(found: list[RangeSeries]) -> FloatArray:
            values = np.full(len(instants), np.nan)
            for series in found:
                values[np.searchsorted(instants, series.timestamps)] = series.values
            return values

        by_up = {series.labels.get(_UP_VALUE): column([series]) for series in answers.pop("servers")}
        counts = np.array(list(by_up.values())) if by_up else np.full((1, len(instants)), np.nan)
        scraped = ~np.isnan(counts).all(axis=0)
        out = {
            "servers": np.where(scraped, np.nansum(counts, axis=0), np.nan),
            "servers_up": by_up.get("1", np.full(len(instants), np.nan)),
        }
        out.update({name: column(answers[name]) for name in FLEET_CHART_SIGNALS})
        return out

    def _plain_instances(self) -> list[str]:
        """The instances whose recipe now (the interval's cycle, shared) says they decode plainly."""
        snapshots = self.latest()
        recipes = {**self._label_recipes, **self._source.recipes}
        return sorted(
            {
                self._instance_of(s.target)
                for s in snapshots
                if s.recipe_id in recipes and spec_enabled(recipes[s.recipe_id]) is False
            }
        )

    def drop_caches(self) -> None:
        """Forget the answers kept for this engine (``result_cache``) and what else read through it kept
        (``forget_with``), as a restarted process would."""
        RANGE_RESULTS.drop(self._source.client.identity)
        with self._lock:
            self._latest = None
            droppers = list(self._droppers)
        for drop in droppers:
            drop()

    def forget_with(self, drop: Callable[[], None]) -> None:
        """Call ``drop`` too when this history's caches are dropped (the SLO counts read beside it)."""
        with self._lock:
            self._droppers.append(drop)

    def read_events(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None
    ) -> list[Event]:
        """up/down transitions and restarts from Prometheus; alert/config/recipe events from SQLite.

        Two sparse queries first (the steps where a target was down, the steps with a counter reset): most of
        a fleet has neither, so only the targets that were ever down have their ``up`` read step by step."""
        if targets is not None and not targets:
            return []
        grid, queries = self._grid(start_ts, end_ts, 2000, targets)
        said: list[str] = []
        # Counter resets over each step and one scrape before it: every pair of consecutive samples falls in
        # one window, so a restart is one event (a rate-window-long window counted it in every step it
        # spans, and read each sample that many times).
        resets = replace(queries, rate_window_s=grid.step_s + self.interval_s, gauge_window_s=None)
        answers = self._range_all(
            {"down": f"({queries.up()}) == 0", "resets": f"({resets.restarts()}) > 0"}, grid, said
        )
        down = sorted({TargetKey.of(s.labels).instance for s in answers["down"]})
        if down:
            narrowed = self._queries(grid.step_s, down, instances=True)
            answers["up"] = self._range_all({"up": narrowed.up()}, grid, said)["up"]
        else:
            answers["up"] = []
        self._note_partial(said)
        names = self._names_of(answers)
        events: list[Event] = []
        for series in answers["up"]:
            name = names(series)
            known = ~np.isnan(series.values)
            times, values = series.timestamps[known].tolist(), series.values[known].tolist()
            if times and values[0] == 0 and times[0] > grid.first_ts + grid.step_s:
                # First seen within the range, and down: the collector's first sight of it is a down event.
                events.append(Event(times[0], name, "down", _DOWN_ERROR))
            for previous, ts, value in zip(values, times[1:], values[1:], strict=False):
                if value != previous:
                    if value == 1:
                        events.append(Event(ts, name, "up", "scrapes succeed again"))
                    else:
                        events.append(Event(ts, name, "down", _DOWN_ERROR))
        for series in answers["resets"]:
            for ts, value in zip(series.timestamps.tolist(), series.values.tolist(), strict=True):
                if value > 0:  # NaN (no data) compares False
                    events.append(
                        Event(ts, names(series), "restart", "request counters went down: it restarted")
                    )
        wanted = set(targets) if targets is not None else None
        events = [e for e in events if wanted is None or e.target in wanted]
        events += [
            e for e in self._meta.read_events(start_ts, end_ts, targets) if e.kind in _META_EVENT_KINDS
        ]
        return sorted(events, key=lambda e: (e.ts, e.target, e.kind))

    # -- helpers ---------------------------------------------------------------------------------------------
    def _guard(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except QueryError as exc:
            raise PrometheusHistoryError(f"history from Prometheus: {exc}") from exc

    def _check_reachable(self) -> None:
        self._guard(lambda: self._source.client.query("vector(1)", at=self._clock()))

    def _narrow(self, names: Sequence[str] | None, *, instances: bool = False) -> str:
        """Matchers narrowing the fleet to the instances of ``names`` (target names, or instances)."""
        if names is None:
            return ""
        found = sorted(set(names) if instances else {self._instance_of(name) for name in names})
        return instances_matcher(found)

    def _instance_of(self, name: str) -> str:
        return instance_of_name(name, self.config.targets)

    def _queries(
        self, step_s: float, names: Sequence[str] | None, *, instances: bool = False
    ) -> SignalQueries:
        # Finer than the scrape interval there is nothing to average: plain gauges, the source's rate window.
        gauge_window = step_s if step_s > self.interval_s * 1.5 else None
        base = self._source.queries
        recorded = self.config.prometheus is not None and self.config.prometheus.use_recording_rules
        narrow = self._narrow(names, instances=instances)
        # The source's queries (selector, rate window, the GPU join, the price) at the read's grid.
        return replace(base, gauge_window_s=gauge_window, narrow=narrow, recorded=recorded)

    def _grid(
        self, start_ts: float, end_ts: float, max_points: int, targets: Sequence[str] | None
    ) -> tuple[Grid, SignalQueries]:
        grid = aligned_grid(start_ts, end_ts, max_points, self.interval_s)
        return grid, self._queries(grid.step_s, targets)

    def _label_series(
        self, queries: SignalQueries, grid: Grid, said: list[str], *, live: bool
    ) -> list[RangeSeries]:
        """The recipe labels over the grid, as series of the running gauge: its label sets from the index
        (``/api/v1/series``, no samples read), each spread over the grid; only targets with more than one
        label set in the range (a restart onto another recipe) have the gauge read step by step, to know
        which set held when."""
        try:
            sets = self._source.client.series(
                queries.labelled(), grid.first_ts - self.interval_s, grid.last_ts, warnings=said
            )
        except QueryError:  # no series API here (a proxy in front of the query API): read the gauge itself
            return self._range_all({"labels": queries.labelled()}, grid, said, live=live)["labels"]
        by_key: dict[TargetKey, list[dict[str, str]]] = {}
        for labels in sets:
            found = by_key.setdefault(TargetKey.of(labels), [])
            if labels not in found:
                found.append(labels)
        instants = np.arange(grid.points, dtype=np.float64) * grid.step_s + grid.first_ts
        out = [
            RangeSeries(found[0], instants, np.ones(len(instants)))
            for found in by_key.values()
            if len(found) == 1
        ]
        changed = sorted(key.instance for key, found in by_key.items() if len(found) > 1)
        if changed:
            narrowed = self._queries(grid.step_s, changed, instances=True)
            out += self._range_all({"labels": narrowed.labelled()}, grid, said, live=live)["labels"]
        return out

    def _range_all(
        self, exprs: dict[str, str], grid: Grid, said: list[str], *, live: bool = False
    ) -> dict[str, list[RangeSeries]]:
        """Every range query of a read, sent concurrently (at most the pool's threads at once) through the
        process's shared answers (``result_cache``): the one way history reads reach Prometheus. Warnings of
        partial answers go to ``said`` (list.append is atomic: the pool's threads share it)."""
        client = self._source.client
        ttl_s = max(self.interval_s, 1.0)
        # A live read's instants older than this are final: scraped (an interval), recorded (another), a third
        # for a slow scrape, and past the engine's latency offset (VictoriaMetrics answers from samples at
        # least -search.latencyOffset old: newer instants may still change).
        offset_s = self.config.prometheus.latency_offset_s if self.config.prometheus is not None else 0.0
        final_before = self._clock() - 3 * self.interval_s - offset_s if live else None

        def read(expr: str) -> list[RangeSeries]:
            key = RangeKey(client.identity, expr, grid.step_s)

            def fetch(first_ts: float, last_ts: float, warnings: list[str]) -> list[RangeSeries]:
                return client.query_range(expr, first_ts, last_ts, grid.step_s, warnings=warnings)

            return RANGE_RESULTS.read(
                key,
                grid.first_ts,
                grid.last_ts,
                fetch,
                ttl_s=ttl_s,
                final_before=final_before,
                warnings=said,
            )

        futures = {name: self._pool.submit(read, expr) for name, expr in exprs.items()}
        return {name: self._guard(future.result) for name, future in futures.items()}

    def _note_partial(self, said: list[str]) -> None:
        # A partial range answer still draws (its gaps are NaN: unknown, never 0); say so once per change.
        partial = "; ".join(dict.fromkeys(said)) or None
        if partial != self._partial:
            self._partial = partial
            if partial is not None:
                log.warning(
                    "history from Prometheus at %s is partial: %s", self._source.client.safe_url, partial
                )

    def _names_of(self, answers: dict[str, list[RangeSeries]]) -> Callable[[RangeSeries], str]:
        """Target name of a series: as the Prometheus source names it (configured name, else instance)."""
        keys = {TargetKey.of(s.labels) for series in answers.values() for s in series}
        names = target_names(keys, by_instance(self.config.targets))
        return lambda series: names[TargetKey.of(series.labels)]

    def _columns(
        self,
        answers: dict[str, list[RangeSeries]],
        targets: Sequence[str] | None,
        values: Sequence[str],
        texts: Sequence[str],
    ) -> SampleColumns:
        """The answers as sample columns: one row per target and grid instant with any value, targets in name
        order. Built in numpy (one assignment per series, not per point: 1,000 targets × 150 points × a few
        signals are a few thousand series but a million points)."""
        names = self._names_of(answers)
        # Most series share their timestamps: the grid is the union of the distinct arrays.
        distinct = {s.timestamps.tobytes(): s.timestamps for found in answers.values() for s in found}
        stamps = [ts for ts in distinct.values() if len(ts)]
        if not stamps:
            return empty_columns(values, texts)
        self._meet({names(s) for found in answers.values() for s in found})
        grid = np.unique(np.concatenate(stamps))
        columns = [column for column in answers if column != "__labels"]
        slot = {column: i for i, column in enumerate(columns)}
        numeric = [(names(s), slot[column], s) for column in columns for s in answers[column]]
        wanted = set(targets) if targets is not None else None
        ordered = sorted({name for name, _, _ in numeric if wanted is None or name in wanted})
        if not ordered:
            return empty_columns(values, texts)
        code_of = {name: code for code, name in enumerate(ordered)}
        block = np.full((len(ordered), len(grid), len(columns)), np.nan)
        at = _Instants(grid)
        for name, column, series in numeric:
            code = code_of.get(name)
            if code is not None:
                block[code, at(series.timestamps), column] = series.values
        has_data = ~np.all(np.isnan(block), axis=2)
        row_target, row_step = np.nonzero(has_data)  # target by target, then in time order
        rows = block[row_target, row_step]
        del block
        recipe_of, spec_known, deployment_of = self._row_texts(
            answers, names, code_of, at, row_target, row_step
        )
        count = len(row_target)
        found = {
            name: rows[:, slot[name]].copy() if name in slot else np.full(count, np.nan) for name in _NUMERIC
        }
        # No `up` series (selector without target labels): a row with signals means Prometheus scraped it.
        signal_slots = [slot[name] for name in slot if name not in ("up", "scrape_duration_s")]
        scraped = (
            (~np.all(np.isnan(rows[:, signal_slots]), axis=1)) if signal_slots else np.zeros(count, bool)
        )
        up_or_nan = found.pop("up")
        up = np.where(np.isnan(up_or_nan), scraped.astype(np.float64), up_or_nan) >= 1
        # A step Prometheus could not scrape has no signals, as a down snapshot (VictoriaMetrics would
        # otherwise repeat the last values: it writes no staleness markers for failed scrapes).
        for name in SIGNAL_NAMES:
            found[name][~up] = np.nan
        # Plain decoding (a recipe that says so): one token per request per step, as the live snapshots.
        recipes = {**self._label_recipes, **self._source.recipes}
        plain_ids = {
            recipe_id
            for recipe_id, known in spec_known.items()
            if known and recipe_id in recipes and spec_enabled(recipes[recipe_id]) is False
        }
        if plain_ids:
            plain = pd.Series(recipe_of).isin(plain_ids).to_numpy()
            _plain_decoding(found, plain & up)
        errors = np.full(count, None, dtype=object)
        errors[~up] = _DOWN_ERROR
        names_column = objects(ordered)[row_target]
        text_of = {"error": errors, "recipe_id": recipe_of, "deployment": deployment_of}
        return SampleColumns(
            names_column,
            row_target.astype(np.int64),
            grid[row_step],
            up.astype(np.float64),
            np.ones(count, np.float64),
            {name: found[name] for name in values},
            {name: text_of[name] for name in texts},
        )

    def _meet(self, names: set[str]) -> None:
        """One source cycle when the answer holds targets the source never met: a viewer whose first read is
        a range (the Context page opened first) would otherwise label every row "recipe unknown" and leave a
        plain-decoding server's accept length unknown, where the fleet table's ``latest`` reads their
        /server_info. At most once a minute (a target gone from discovery is never met)."""
        now = self._clock()
        if names <= self._source.met() or now - self._met_at < _MEET_EVERY_S:
            return
        self._met_at = now
        # The interval's cycle, shared with the fleet table (a cold Fleet page reads its chart and its table
        # at once: they made two cycles of the fleet-wide queries); it waits for the /server_info reads of
        # the targets it meets, as rows are labelled once. Blind, the rows stay unlabelled.
        with contextlib.suppress(PrometheusHistoryError):
            self.latest()

    def _row_texts(
        self,
        answers: dict[str, list[RangeSeries]],
        names: Callable[[RangeSeries], str],
        code_of: dict[str, int],
        at: _Instants,
        row_target: npt.NDArray[np.intp],
        row_step: npt.NDArray[np.intp],
    ) -> tuple[ObjectArray, dict[str, bool], ObjectArray]:
        """Each row's recipe id and deployment, and whether each recipe says if speculative decoding is on:
        /server_info's recipe (as the source prefers it) when it was read, else the labels' at each instant,
        which follow recipe changes over time."""
        ids = np.full((len(code_of), len(at.grid)), None, dtype=object)
        spec_known: dict[str, bool] = {}  # recipe_id -> whether it says if speculative decoding is on
        deployments: dict[str, str] = {}
        parsed: dict[tuple[tuple[str, str], ...], Recipe | None] = {}  # label sets repeat: parse each once
        for series in answers.get("__labels", []):
            name = names(series)
            deployments.setdefault(name, series.labels.get("deployment", ""))
            key = tuple(sorted((k, v) for k, v in series.labels.items() if k in RECIPE_LABELS))
            if key not in parsed:
                parsed[key] = recipe_from_labels(series.labels)
            recipe = parsed[key]
            code = code_of.get(name)
            if recipe is None or code is None:
                continue
            self._label_recipes.setdefault(recipe.recipe_id, recipe)
            spec_known[recipe.recipe_id] = "speculative_algorithm" in series.labels
            ids[code, at(series.timestamps)] = recipe.recipe_id
        for name, recipe in self._source.server_info_recipes().items():
            code = code_of.get(name)
            if code is not None:
                ids[code, :] = recipe.recipe_id
                spec_known[recipe.recipe_id] = True
                self._label_recipes.setdefault(recipe.recipe_id, recipe)
        configured = {t.name: t.deployment for t in self.config.targets if t.deployment}
        per_target = objects([configured.get(name) or deployments.get(name, "") for name in code_of])
        return ids[row_target, row_step], spec_known, per_target[row_target]


class _Instants:
    """Where a series' timestamps sit on the grid: series mostly share their timestamps, so each distinct
    array is looked up once (the whole grid: a slice)."""

    def __init__(self, grid: FloatArray) -> None:
        self.grid = grid
        self._found: dict[bytes, npt.NDArray[np.intp] | slice] = {}

    def __call__(self, timestamps: FloatArray) -> npt.NDArray[np.intp] | slice:
        key = timestamps.tobytes()
        found = self._found.get(key)
        if found is None:
            whole = len(timestamps) == len(self.grid) and np.array_equal(timestamps, self.grid)
            found = self._found[key] = slice(None) if whole else np.searchsorted(self.grid, timestamps)
        return found


def _plain_decoding(values: dict[str, FloatArray], rows: npt.NDArray[np.bool_]) -> None:
    """The catalogue's plain-decoding rules (as ``derive.apply_plain_decoding``) on ``rows``, by column."""
    if not rows.any():
        return
    for name in EVALUATION_ORDER:
        rule = BY_NAME[name].plain
        if rule == "one":
            values[name][rows] = 1.0
        elif rule == "unknown":
            values[name][rows] = np.nan
        elif rule == "recomputed":
            expr = BY_NAME[name].expr
            assert expr is not None
            values[name][rows] = _column(expr, values, rows)


def _column(expr: Expr, values: dict[str, FloatArray], rows: npt.NDArray[np.bool_]) -> FloatArray:
    """A derived signal recomputed from the other signals' columns (the nodes plain rules recompute with)."""
    if isinstance(expr, Ref):
        return values[expr.signal][rows]
    if isinstance(expr, Product):
        return _column(expr.left, values, rows) * _column(expr.right, values, rows)
    if isinstance(expr, Inverse):
        value = _column(expr.value, values, rows)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(value > 0, 1.0 / value, np.nan)
    raise ValueError(f"a plain-decoding rule cannot recompute {type(expr).__name__} from columns")
