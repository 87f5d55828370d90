"""History read from Prometheus: a ``HistoryStore`` whose samples, latest snapshots and up/down/restart
events come from PromQL range and instant queries, so range views read the fleet's Prometheus.

What Prometheus cannot hold (alert transitions, config events, recipe flags) stays in the small SQLite file at
``store.path``; its samples table stays empty in this mode.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd

from collectors.derive import EVALUATION_ORDER, spec_enabled
from collectors.errors import QueryError, StoreError
from collectors.model import SIGNAL_NAMES, Event, Recipe, TargetSnapshot
from collectors.prometheus.naming import TargetKey, by_instance, instance_of_name, target_names
from collectors.prometheus.queries import SignalQueries
from collectors.prometheus.recipe_labels import recipe_from_labels
from collectors.signals import BY_NAME, Expr, Inverse, Product, Ref
from collectors.store.sqlite_store import HistoryStore, SqliteStore
from config.settings import Config

if TYPE_CHECKING:  # the Prometheus client sends HTTP (requests): imported where a PrometheusHistory is built
    from collectors.prometheus.client import RangeSeries
    from collectors.prometheus.promql_source import PrometheusSource

T = TypeVar("T")
log = logging.getLogger(__name__)

COLUMNS: tuple[str, ...] = (
    "ts",
    "target",
    "up",
    "error",
    "recipe_id",
    "deployment",
    "scrape_duration_s",
    *SIGNAL_NAMES,
)
_NUMERIC = ("up", "scrape_duration_s", *SIGNAL_NAMES)  # the float grid, in this order
_META_EVENT_KINDS = frozenset({"alert", "config", "recipe_change"})  # Prometheus cannot tell these
_DOWN_ERROR = "Prometheus could not scrape it (up == 0)"


class PrometheusHistoryError(StoreError, QueryError):
    """History could not be read from Prometheus (a StoreError to the views, a QueryError by cause)."""


def open_history(config: Config) -> HistoryStore:
    """The history store ``config.source`` implies: Prometheus for ``prometheus``, else the SQLite file."""
    if config.source == "prometheus":
        return PrometheusHistory(config)
    return SqliteStore(config.store.path)


def _regex_escape(text: str) -> str:
    # PromQL regexes are RE2 in double-quoted strings: escape regex metacharacters, then the string quotes.
    return re.escape(text).replace("\\", "\\\\").replace('"', '\\"')


class PrometheusHistory:
    """``HistoryStore`` backed by Prometheus for samples, and a small SQLite file for what it cannot hold."""

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
            # Here, not at the top: a viewer of a SQLite store imports this module too (open_history), and
            # the source's client brings requests/urllib3 with it. Only a PrometheusHistory needs it.
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

    @property
    def source(self) -> PrometheusSource:
        """The Prometheus source this history reads through; a collector over this store reuses it, so a
        process builds one source (one client, one recipe book) whatever reads Prometheus."""
        return self._source

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
            snapshots = self._source.collect(now)
            health = self._source.health()
        if not health.answered:
            # Blind: the targets are unknown, not down; the page says why instead of drawing a dead fleet.
            raise PrometheusHistoryError(health.error or f"Prometheus at {health.url} cannot answer")
        if not snapshots:
            self._check_reachable()
        return [s for s in snapshots if since_ts is None or s.ts >= since_ts]

    def count_samples(self) -> int:
        """Targets with data in Prometheus now (0 means nothing to show yet)."""
        return len(
            self._guard(lambda: self._source.client.query(self._source.queries.present(), at=self._clock()))
        )

    def read_samples(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None, max_points: int = 2000
    ) -> pd.DataFrame:
        """Samples in [start_ts, end_ts] on a regular grid of at most ``max_points`` per target.

        Columns as ``SqliteStore.read_samples``. When the grid is coarser than the scrape interval each point
        is the step's average (``avg_over_time``, rates over the step), like the SQLite store's bucket means.
        """
        if targets is not None and not targets:
            return _empty_frame()
        step_s, queries = self._grid(start_ts, end_ts, max_points, targets)
        exprs = {name: expr for name, expr in queries.signals().items()}
        exprs.update(up=queries.up(), scrape_duration_s=queries.scrape_duration_s())
        exprs["__labels"] = queries.labelled()
        answers = self._range_all(exprs, start_ts, end_ts, step_s)
        return self._frame(answers, targets)

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
        instances = sorted({self._instance_of(name) for name in targets})
        return f'instance=~"{"|".join(_regex_escape(i) for i in instances)}"'

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
        return step_s, SignalQueries(
            base.selector, base.rate_window_s, gauge_window, narrow=self._narrow(targets), recorded=recorded
        )

    def _range_all(
        self, exprs: dict[str, str], start_ts: float, end_ts: float, step_s: float
    ) -> dict[str, list[RangeSeries]]:
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

    def _frame(self, answers: dict[str, list[RangeSeries]], targets: Sequence[str] | None) -> pd.DataFrame:
        names = self._names_of(answers)
        all_ts = [s.timestamps for series in answers.values() for s in series]
        if not any(len(a) for a in all_ts):
            return _empty_frame()
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
        frames = []
        for name in sorted(blocks):
            if wanted is not None and name not in wanted:
                continue
            block = blocks[name]
            has_data = ~np.all(np.isnan(block), axis=1)
            frame = pd.DataFrame(block[has_data], columns=list(_NUMERIC))
            frame.insert(0, "ts", grid[has_data])
            frame.insert(1, "target", name)
            # /server_info's recipe (as the source prefers it) when it was read; else the labels' per row,
            # which follow recipe changes over time.
            from_info = self._source.server_info_recipe(name)
            if from_info is not None:
                frame["recipe_id"] = from_info.recipe_id
                spec_known[from_info.recipe_id] = True
                self._label_recipes.setdefault(from_info.recipe_id, from_info)
            else:
                ids = recipe_ids.get(name, [None] * len(grid))
                frame["recipe_id"] = [ids[i] for i in np.flatnonzero(has_data).tolist()]
            frame["deployment"] = self._deployment(name, deployments.get(name, ""))
            frames.append(frame)
        if not frames:
            return _empty_frame()
        result = pd.concat(frames, ignore_index=True)
        # No `up` series (selector without target labels): a row with signals means Prometheus scraped it.
        up = result["up"].fillna(result[list(SIGNAL_NAMES)].notna().any(axis=1).astype("float64")) >= 1
        # A step Prometheus could not scrape has no signals, as a down snapshot (VictoriaMetrics would
        # otherwise repeat the last values: it writes no staleness markers for failed scrapes).
        result.loc[~up, list(SIGNAL_NAMES)] = np.nan
        # Plain decoding (a recipe that says so): one token per request per step, as the live snapshots.
        recipes = {**self._label_recipes, **self._source.recipes}
        plain_ids = [
            recipe_id
            for recipe_id, known in spec_known.items()
            if known and recipe_id in recipes and spec_enabled(recipes[recipe_id]) is False
        ]
        _plain_decoding(result, result["recipe_id"].isin(plain_ids) & up)
        result["up"] = up
        result["error"] = [None if is_up else _DOWN_ERROR for is_up in up]
        return result[list(COLUMNS)]

    def _deployment(self, name: str, label: str) -> str:
        for target in self.config.targets:
            if target.name == name and target.deployment:
                return target.deployment
        return label


def _plain_decoding(frame: pd.DataFrame, rows: pd.Series) -> None:
    """The catalogue's plain-decoding rules (as ``derive.apply_plain_decoding``) on ``rows``, by column."""
    if not rows.any():
        return
    for name in EVALUATION_ORDER:
        rule = BY_NAME[name].plain
        if rule == "one":
            frame.loc[rows, name] = 1.0
        elif rule == "unknown":
            frame.loc[rows, name] = np.nan
        elif rule == "recomputed":
            expr = BY_NAME[name].expr
            assert expr is not None
            frame.loc[rows, name] = _column(expr, frame.loc[rows])


def _column(expr: Expr, rows: pd.DataFrame) -> pd.Series:
    """A derived signal recomputed from the other signals' columns (the nodes plain rules recompute with)."""
    if isinstance(expr, Ref):
        return rows[expr.signal].astype("float64")
    if isinstance(expr, Product):
        return _column(expr.left, rows) * _column(expr.right, rows)
    if isinstance(expr, Inverse):
        value = _column(expr.value, rows)
        return (1.0 / value).where(value > 0)
    raise ValueError(f"a plain-decoding rule cannot recompute {type(expr).__name__} from columns")


def _empty_frame() -> pd.DataFrame:
    frame = pd.DataFrame({name: pd.Series(dtype="float64") for name in COLUMNS})
    frame["target"] = frame["target"].astype("object")
    frame["up"] = frame["up"].astype(bool)
    for name in ("error", "recipe_id", "deployment"):
        frame[name] = frame[name].astype("object")
    return frame
