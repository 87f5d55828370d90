"""History read from Prometheus: the history contract (``collectors/history.py``) whose samples, latest
snapshots and up/down/restart events come from PromQL range and instant queries, so range views read the
fleet's Prometheus.

What Prometheus cannot hold (alert transitions, config events, recipe flags) stays in the small SQLite file at
``store.path``; its samples table stays empty in this mode.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from collectors.derive import EVALUATION_ORDER, spec_enabled
from collectors.errors import QueryError, StoreError
from collectors.model import SIGNAL_NAMES, Event, Recipe, TargetSnapshot
from collectors.prometheus.naming import (
    TargetKey,
    by_instance,
    instance_of_name,
    instances_matcher,
    target_names,
)
from collectors.prometheus.queries import SignalQueries
from collectors.prometheus.recipe_labels import recipe_from_labels
from collectors.sample_columns import (
    SAMPLE_VALUES,
    FloatArray,
    SampleColumns,
    check_columns,
    columns_of_snapshots,
    empty_columns,
    objects,
    target_codes,
)
from collectors.signals import BY_NAME, Expr, Inverse, Product, Ref
from collectors.store.sqlite_store import SqliteStore
from config.settings import Config

if TYPE_CHECKING:  # the Prometheus client sends HTTP (requests): imported where a PrometheusHistory is built
    from collectors.prometheus.client import RangeSeries
    from collectors.prometheus.promql_source import PrometheusSource

T = TypeVar("T")
log = logging.getLogger(__name__)

_NUMERIC = ("up", *SAMPLE_VALUES)  # the float grid, in this order (the signals from index 2)
_META_EVENT_KINDS = frozenset({"alert", "config", "recipe_change"})  # Prometheus cannot tell these
_DOWN_ERROR = "Prometheus could not scrape it (up == 0)"
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
        self.interval_s = config.scrape.interval_s
        self._label_recipes: dict[str, Recipe] = {}
        self._partial: str | None = None  # the last range answer's warnings, logged once per change
        self._met_at = float("-inf")
        self._recipe_wait_s = max(2 * config.scrape.timeout_s, 5.0)  # /server_info reads of targets met

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
        """Every target now, computed with instant queries (the same as one Prometheus-source cycle)."""
        now = self._clock()
        with self._lock:  # the source keeps per-target state between calls: one reader at a time
            met = self._source.met()
            snapshots = self._source.collect(now)
            health = self._source.health()
        if not self._source.met() <= met:
            # New targets (a viewer's first read): their recipes, as a page shows them, and their caps.
            self._source.settle_recipes(self._recipe_wait_s)
            with self._lock:
                snapshots = self._source.collect(self._clock())
                health = self._source.health()
        if not health.answered:
            # Blind: the targets are unknown, not down; the page says why instead of drawing a dead fleet.
            raise PrometheusHistoryError(health.error or f"Prometheus at {health.url} cannot answer")
        if not snapshots:
            self._check_reachable()
        return [s for s in snapshots if since_ts is None or s.ts >= since_ts]

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
        the SQLite store's bucket means. ``live`` changes nothing yet: every read is its own range queries.
        """
        check_columns(values, texts)
        del live
        if targets is not None and not targets:
            return empty_columns(values, texts)
        step_s, queries = self._grid(start_ts, end_ts, max_points, targets)
        exprs = dict(queries.signals())
        exprs.update(up=queries.up(), scrape_duration_s=queries.scrape_duration_s())
        exprs["__labels"] = queries.labelled()
        answers = self._range_all(exprs, start_ts, end_ts, step_s)
        return self._columns(answers, targets, values, texts)

    def drop_caches(self) -> None:
        """Nothing is kept between reads (each is its own range queries)."""

    def read_events(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None
    ) -> list[Event]:
        """up/down transitions and restarts from Prometheus; alert/config/recipe events from SQLite."""
        if targets is not None and not targets:
            return []
        step_s, _ = self._grid(start_ts, end_ts, 2000, targets)
        queries = SignalQueries(self._source.queries.selector, step_s, step_s, narrow=self._narrow(targets))
        answers = self._range_all(
            {"up": queries.up(), "resets": queries.restarts()}, start_ts, end_ts, step_s
        )
        names = self._names_of(answers)
        events: list[Event] = []
        for series in answers["up"]:
            name = names(series)
            known = ~np.isnan(series.values)
            times, values = series.timestamps[known].tolist(), series.values[known].tolist()
            if times and values[0] == 0 and times[0] > start_ts + step_s:
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

    def _narrow(self, targets: Sequence[str] | None) -> str:
        """Matchers narrowing the fleet to the instances of ``targets`` (a Server page reads one)."""
        if targets is None:
            return ""
        return instances_matcher(self._instance_of(name) for name in targets)

    def _instance_of(self, name: str) -> str:
        return instance_of_name(name, self.config.targets)

    def _grid(
        self, start_ts: float, end_ts: float, max_points: int, targets: Sequence[str] | None
    ) -> tuple[float, SignalQueries]:
        step_s = max((end_ts - start_ts) / max(max_points - 1, 1), self.interval_s)
        # Finer than the scrape interval there is nothing to average: plain gauges, the source's rate window.
        gauge_window = step_s if step_s > self.interval_s * 1.5 else None
        base = self._source.queries
        recorded = self.config.prometheus is not None and self.config.prometheus.use_recording_rules
        # The source's queries (selector, rate window, the GPU join, the price) at the read's grid.
        return step_s, replace(
            base, gauge_window_s=gauge_window, narrow=self._narrow(targets), recorded=recorded
        )

    def _range_all(
        self, exprs: dict[str, str], start_ts: float, end_ts: float, step_s: float
    ) -> dict[str, list[RangeSeries]]:
        """Every range query of a read, sent concurrently: the one way history reads reach Prometheus (the
        place for aligned steps and results shared between reads)."""
        client = self._source.client
        said: list[str] = []  # list.append is atomic: the pool's threads share it
        futures = {
            name: self._pool.submit(client.query_range, expr, start_ts, end_ts, step_s, warnings=said)
            for name, expr in exprs.items()
        }
        answers = {name: self._guard(future.result) for name, future in futures.items()}
        # A partial range answer still draws (its gaps are NaN: unknown, never 0); say so once per change.
        partial = "; ".join(dict.fromkeys(said)) or None
        if partial != self._partial:
            self._partial = partial
            if partial is not None:
                log.warning("history from Prometheus at %s is partial: %s", client.safe_url, partial)
        return answers

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
        names = self._names_of(answers)
        all_ts = [s.timestamps for series in answers.values() for s in series]
        if not any(len(a) for a in all_ts):
            return empty_columns(values, texts)
        self._meet({names(s) for series in answers.values() for s in series})
        grid = np.unique(np.concatenate(all_ts))
        blocks: dict[str, np.ndarray] = {}
        recipe_ids: dict[str, list[str | None]] = {}
        spec_known: dict[str, bool] = {}  # recipe_id -> whether it says if speculative decoding is on
        deployments: dict[str, str] = {}
        for column, series_list in answers.items():
            for series in series_list:
                name = names(series)
                index = np.searchsorted(grid, series.timestamps)
                if column == "__labels":
                    recipe = recipe_from_labels(series.labels)
                    if recipe is not None:
                        recipe_id = recipe.recipe_id  # a hash: once per series, not per point
                        self._label_recipes.setdefault(recipe_id, recipe)
                        spec_known[recipe_id] = "speculative_algorithm" in series.labels
                        ids = recipe_ids.setdefault(name, [None] * len(grid))
                        for i in index.tolist():
                            ids[i] = recipe_id
                    deployments.setdefault(name, series.labels.get("deployment", ""))
                    continue
                block = blocks.get(name)
                if block is None:
                    block = blocks[name] = np.full((len(grid), len(_NUMERIC)), np.nan)
                block[index, _NUMERIC.index(column)] = series.values
        wanted = set(targets) if targets is not None else None
        target: list[str] = []
        stamps: list[FloatArray] = []
        rows: list[np.ndarray] = []
        recipe_of: list[str | None] = []
        deployment_of: list[str] = []
        for name in sorted(blocks):
            if wanted is not None and name not in wanted:
                continue
            block = blocks[name]
            has_data = ~np.all(np.isnan(block), axis=1)
            count = int(has_data.sum())
            target += [name] * count
            stamps.append(grid[has_data])
            rows.append(block[has_data])
            # /server_info's recipe (as the source prefers it) when it was read; else the labels' per row,
            # which follow recipe changes over time.
            from_info = self._source.server_info_recipe(name)
            if from_info is not None:
                recipe_of += [from_info.recipe_id] * count
                spec_known[from_info.recipe_id] = True
                self._label_recipes.setdefault(from_info.recipe_id, from_info)
            else:
                ids = recipe_ids.get(name, [None] * len(grid))
                recipe_of += [ids[i] for i in np.flatnonzero(has_data).tolist()]
            deployment_of += [self._deployment(name, deployments.get(name, ""))] * count
        if not target:
            return empty_columns(values, texts)
        numeric = np.concatenate(rows)
        found = {name: numeric[:, i].copy() for i, name in enumerate(_NUMERIC)}
        signals = numeric[:, 2:]
        # No `up` series (selector without target labels): a row with signals means Prometheus scraped it.
        up_or_nan = found.pop("up")
        scraped = (~np.all(np.isnan(signals), axis=1)).astype(np.float64)
        up = np.where(np.isnan(up_or_nan), scraped, up_or_nan) >= 1
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
        _plain_decoding(found, np.array([r in plain_ids for r in recipe_of], dtype=bool) & up)
        names_column = objects(target)
        text_of = {
            "error": objects([None if is_up else _DOWN_ERROR for is_up in up.tolist()]),
            "recipe_id": objects(recipe_of),
            "deployment": objects(deployment_of),
        }
        return SampleColumns(
            names_column,
            target_codes(names_column),
            np.concatenate(stamps),
            up.astype(np.float64),
            np.ones(len(target), np.float64),
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
        with self._lock:
            self._source.collect(now)
        # Rows are labelled once, so their /server_info answers are worth the wait a cycle does not make.
        self._source.settle_recipes(self._recipe_wait_s)

    def _deployment(self, name: str, label: str) -> str:
        for target in self.config.targets:
            if target.name == name and target.deployment:
                return target.deployment
        return label


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
