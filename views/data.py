"""All data access of the dashboard, cached: history (SQLite) and alert state, turned into DataFrames.

Reads go through a small, process-wide pool of reader threads: however many tabs rerun at once, at most two
reads hit the store, and a read stuck on a locked or huge store becomes a clear error after a deadline
instead of a hung page. Cache keys carry quantised windows, so every tab shares one read per scrape interval.
"""

from __future__ import annotations

import ctypes
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow
import streamlit as st

from alerts.model import AlertInstance, AlertTransition
from alerts.scopes import alert_scope
from alerts.state_store import AlertStateStore
from analysis import sample_bins
from analysis.advice_inputs import DemandSeries, advice_now, capacity_advice, read_hourly_demand
from analysis.capacity import CapacityThresholds
from analysis.capacity_advice import DeploymentAdvice
from analysis.forecast import PROFILE_BUCKET_S
from analysis.slo_budget import slo_scopes
from analysis.slo_report import Goodput, SloStatus, goodput, slo_status, slo_statuses
from collectors.errors import StoreError
from collectors.model import SIGNAL_NAMES, FlagValue, TargetSnapshot
from collectors.prometheus.promql_history import PrometheusHistory, open_history
from collectors.slo import Slo
from collectors.slo_ledger import SloCounts
from collectors.store.columns import RawTail, SampleColumns
from collectors.store.slo_counts import SloCountStore
from collectors.store.sqlite_store import HistoryStore, SqliteStore
from config import Config
from views import fleet_frames
from views.page_context import TimeWindow, quantised_window

T = TypeVar("T")

_READ_TIMEOUT_S = 60.0
_READER_THREADS = 2


# Which history backend serves a store path: ``source: prometheus`` reads range views from Prometheus (events,
# recipes and alert state stay in the SQLite file); anything else reads the SQLite file itself.
_HISTORY_CONFIGS: dict[str, Config] = {}


def serve_history_from(config: Config) -> None:
    """Make reads of ``config.store.path`` go to the history backend of ``config`` (called by app.py)."""
    _HISTORY_CONFIGS[config.store.path] = config


class StoreReader:
    """One history store per path per process, read only from a fixed pool of threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=_READER_THREADS, thread_name_prefix="specwatch-read")
        self._lock = threading.Lock()
        self._store: HistoryStore | None = None
        self._alerts: AlertStateStore | None = None
        self._slo_counts: SloCounts | None = None

    def _open(self) -> HistoryStore:
        with self._lock:
            if self._store is None:
                config = _HISTORY_CONFIGS.get(self.path)
                self._store = open_history(config) if config is not None else SqliteStore(self.path)
            return self._store

    def _open_alerts(self) -> AlertStateStore:
        with self._lock:
            if self._alerts is None:
                self._alerts = AlertStateStore(self.path)
            return self._alerts

    def _open_slo_counts(self) -> SloCounts:
        """The SLO tables (read-only), or with ``source: prometheus`` the fleet's Prometheus itself (its
        collector counts nothing into the tables: the SLIs are its own series there)."""
        history = self._open()
        with self._lock:
            if self._slo_counts is None:
                config = _HISTORY_CONFIGS.get(self.path)
                if config is not None and isinstance(history, PrometheusHistory):
                    from collectors.prometheus.slo_counts import prometheus_slo_counts

                    self._slo_counts = prometheus_slo_counts(config, history)
                else:
                    self._slo_counts = SloCountStore(self.path, create=False)  # a viewer never writes
            return self._slo_counts

    def call(self, fn: Callable[[HistoryStore], T]) -> T:
        return self._wait(self._pool.submit(lambda: fn(self._open())))

    def call_alerts(self, fn: Callable[[AlertStateStore], T]) -> T:
        return self._wait(self._pool.submit(lambda: fn(self._open_alerts())))

    def call_slo(self, fn: Callable[[SloCounts, HistoryStore], T]) -> T:
        """``fn`` on the SLO counts and the history (for the attribution)."""
        return self._wait(self._pool.submit(lambda: fn(self._open_slo_counts(), self._open())))

    def _wait(self, future: Future[T]) -> T:
        try:
            return future.result(timeout=_READ_TIMEOUT_S)
        except TimeoutError as exc:
            raise StoreError(
                f"history store {self.path}: no answer within {_READ_TIMEOUT_S:.0f} s (locked or very large?)"
            ) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            if self._alerts is not None:
                self._alerts.close()
                self._alerts = None
            if isinstance(self._slo_counts, SloCountStore):
                self._slo_counts.close()
            self._slo_counts = None


def _release_reader(reader: StoreReader) -> None:
    reader.close()


@st.cache_resource(show_spinner=False, on_release=_release_reader)
def reader(path: str) -> StoreReader:
    return StoreReader(path)


# -- history -------------------------------------------------------------------------------------------------
_LATEST_COLUMNS = [
    "target",
    "ts",
    "up",
    "error",
    "recipe_id",
    "deployment",
    "scrape_duration_s",
    *SIGNAL_NAMES,
    "unknown",  # the source could not say (Prometheus blind or partial): shown as no data, never down
]


def snapshots_frame(snapshots: Sequence[TargetSnapshot]) -> pd.DataFrame:
    """One row per snapshot: target, ts, up, error, recipe_id, deployment, scrape_duration_s, the signals."""
    return _latest_frame(
        [
            (
                s.target,
                s.ts,
                s.up,
                s.error,
                s.recipe_id,
                s.deployment,
                s.scrape_duration_s,
                *(getattr(s.signals, name) for name in SIGNAL_NAMES),
                s.unknown,
            )
            for s in snapshots
        ]
    )


def latest_rows_frame(rows: Sequence[Sequence[object]]) -> pd.DataFrame:
    """``snapshots_frame`` of ``SqliteStore.latest_rows`` (store column order), without snapshot objects."""
    return _latest_frame(
        [
            (
                str(row[1]),
                row[0],
                bool(row[2]),
                None if row[3] is None else str(row[3]),
                None if row[4] is None else str(row[4]),
                str(row[5] or ""),
                *row[6:],
                False,  # the SQLite store always knows: unknown is a Prometheus source's state
            )
            for row in rows
        ]
    )


def _latest_frame(rows: list[tuple[object, ...]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=_LATEST_COLUMNS)
    for name in ("ts", "scrape_duration_s", *SIGNAL_NAMES):
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    frame["up"] = frame["up"].astype(bool)
    frame["unknown"] = frame["unknown"].astype(bool)
    return frame


def _latest_of(store: HistoryStore, since_ts: float) -> pd.DataFrame:
    if isinstance(store, SqliteStore):
        return latest_rows_frame(store.latest_rows(since_ts))
    return snapshots_frame(store.latest(since_ts))


# Interval-keyed caches (latest, samples, the live series, events, alert frames) hold few entries: a key is
# not asked for again once its interval passed, and at 1,000 servers an entry is up to ~1 MB (an open Server
# tab at 15 min made one per interval: 60 kept for 5 min).
@st.cache_data(ttl=120, max_entries=8, show_spinner=False)
def latest(path: str, since_ts: float) -> pd.DataFrame:
    """The newest snapshot of each target seen since ``since_ts`` (one row per target, sorted by target)."""
    return reader(path).call(lambda store: _latest_of(store, since_ts))


# The collector writes a row for every target every cycle (down ones too), so the newest rows of the last few
# minutes describe the whole fleet; only targets that fell silent (removed, or the collector stopped) need the
# long look-back, which scans the whole range and is refreshed in the background instead of every interval.
RECENT_S = 600.0
# However long the range, a target silent for longer than this is not looked for (cheap on a week-long store).
LATEST_HORIZON_S = 6 * 3600.0


def newest_snapshots(path: str, now_ts: float, range_s: float, interval_s: float) -> pd.DataFrame:
    """The newest snapshot of every target seen in the range (at most 6 h back), one row per target."""
    since = math.floor((now_ts - min(range_s, RECENT_S)) / interval_s) * interval_s
    recent = latest(path, since)
    if range_s <= RECENT_S:
        return recent
    older = _latest_background(path, min(range_s, LATEST_HORIZON_S))
    silent = older[~older["target"].isin(recent["target"])]
    if silent.empty:
        return recent
    return pd.concat([recent, silent], ignore_index=True).sort_values("target", ignore_index=True)


@st.cache_data(ttl=60, max_entries=16, show_spinner=False, refresh_mode="background")
def _latest_background(path: str, horizon_s: float) -> pd.DataFrame:
    since = time.time() - horizon_s
    return reader(path).call(lambda store: _latest_of(store, since))


@st.cache_data(ttl=300, max_entries=32, show_spinner=False)
def samples(
    path: str, start_ts: float, end_ts: float, targets: tuple[str, ...] | None, max_points: int
) -> pd.DataFrame:
    """History in the window, at most ``max_points`` rows per target (bucket means in SQL beyond that)."""
    frame = reader(path).call(
        lambda store: store.read_samples(
            start_ts, end_ts, list(targets) if targets is not None else None, max_points
        )
    )
    frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame


# Fleet-wide reads over long ranges cost seconds in SQLite (every row is bucketed), so beyond this range they
# are served from a cache refreshed in the background once a minute instead of blocking a rerun.
_BACKGROUND_BEYOND_S = 900.0


# glibc keeps the heap a large read freed (a 1 h fleet read builds ~700 k raw rows before regrouping them to
# 300 per target) and each reader thread has its own arena, so those peaks stacked up in the RSS. Handing
# the free pages back after such a read costs a few ms.
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc (macOS, musl): nothing to hand back this way
    _LIBC = None


def release_freed_memory() -> None:
    """Return the heap freed by the last large read to the OS (glibc ``malloc_trim``; no-op elsewhere)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


# Arrow buffers (every table and chart Streamlit sends, pandas' string columns) come from the system
# allocator: pyarrow's default pool (mimalloc) keeps freed segments for reuse, and a 1,000-server dashboard
# that had shown every page held 25–45 MB more that way (`bench dashboard_rss`: 345–368 → 317–326 MB).
# Process-wide, once (this module is imported once; app.py, the script, reruns).
pyarrow.set_memory_pool(pyarrow.system_memory_pool())


# -- the analysis pages: only the signals they use, read as columns ----------------------------------------
def fleet_signals(
    path: str,
    now_ts: float,
    range_s: float,
    interval_s: float,
    max_points: int,
    signals: tuple[str, ...],
    *,
    recipes: bool = False,
    prepared: bool = False,
) -> tuple[TimeWindow, pd.DataFrame]:
    """Every target's history over the selected range (≤ ``max_points`` rows per target) and its window,
    restricted to ts, target, up, ``signals`` (and recipe_id if ``recipes``): ``read_samples``' rows and
    values, read as columns. The Context, Capacity and Recipes pages use 4–8 of the 25 columns: a
    1,000-server day of full frames cost seconds and hundreds of MB.

    ``prepared``: the frame the analysis pages work on instead (``sample_bins.prepare``: rows of servers up
    with an accept length, labelled with recipe and bins; needs ``recipes``), built once per read and held
    instead of the raw frame, rather than rebuilt from it on every rerun."""
    if range_s <= _BACKGROUND_BEYOND_S:
        window = quantised_window(now_ts, range_s, interval_s, max_points)
        frame = _signals_live(path, window.start_ts, window.end_ts, max_points, signals, recipes, prepared)
        return window, frame
    start_ts, end_ts, frame = _signals_background(
        path, range_s, interval_s, max_points, signals, recipes, prepared
    )
    return TimeWindow(start_ts, end_ts), frame


def _signals_frame(
    store: HistoryStore,
    window: TimeWindow,
    max_points: int,
    signals: tuple[str, ...],
    recipes: bool,
    prepared: bool = False,
) -> pd.DataFrame:
    if isinstance(store, SqliteStore):
        columns = store.read_columns(window.start_ts, window.end_ts, signals, max_points, recipes=recipes)
        frame = fleet_frames.frame_of_columns(columns)
        del columns
    else:  # another backend (Prometheus): its frame, cut to the same columns
        frame = store.read_samples(window.start_ts, window.end_ts, None, max_points)
        frame = frame[["ts", "target", "up", *(["recipe_id"] if recipes else []), *signals]]
    if prepared:
        frame = sample_bins.prepare(frame)
    release_freed_memory()
    return frame


# Kept as they are (cache_resource), not pickled: a pickled cache holds a second copy of every ~30 MB frame
# and unpickles a third on every rerun. Pages never modify them (they filter, which copies).
# Few entries, because each holds up to the analysis pages' row budget (~100 k rows, ~15 MB) and the
# dashboard's memory has a budget (300 MB at 1,000 servers): a live window moves every interval, so one entry
# per kind of read (the analysis pages', Capacity's trend) is all a rerun can use, and not for long; longer
# ranges keep two (the range shown and the trend, or the last two ranges: switching back is warm), a third
# evicts the least recently used (three held 44 MB at 1,000 servers).
@st.cache_resource(ttl=60, max_entries=2, show_spinner=False)
def _signals_live(
    path: str,
    start_ts: float,
    end_ts: float,
    max_points: int,
    signals: tuple[str, ...],
    recipes: bool,
    prepared: bool,
) -> pd.DataFrame:
    window = TimeWindow(start_ts, end_ts)
    return reader(path).call(
        lambda store: _signals_frame(store, window, max_points, signals, recipes, prepared)
    )


@st.cache_resource(ttl=60, max_entries=2, show_spinner=False, refresh_mode="background")
def _signals_background(
    path: str,
    range_s: float,
    interval_s: float,
    max_points: int,
    signals: tuple[str, ...],
    recipes: bool,
    prepared: bool,
) -> tuple[float, float, pd.DataFrame]:
    window = quantised_window(time.time(), range_s, interval_s, max_points)
    frame = reader(path).call(
        lambda store: _signals_frame(store, window, max_points, signals, recipes, prepared)
    )
    return window.start_ts, window.end_ts, frame


# -- the Fleet chart: one small series, read as columns ------------------------------------------------------
# Per store path, the Fleet chart's raw window (≤ 15 min, every target) kept between intervals: each new
# interval reads only the rows written since (``RawTail``), not 15 minutes × every server again (~10 MB at
# 1,000 servers). The analysis pages keep none: theirs held eight signals and recipes (~40 MB with the
# allocator's share at 1,000 servers) to save a 0.5 s read on a page that reruns on a click, not every
# interval; Capacity's trend reads the 1 min tier.
_TAILS: dict[str, RawTail] = {}
_TAILS_LOCK = threading.Lock()


def _tail(path: str) -> RawTail:
    with _TAILS_LOCK:
        found = _TAILS.get(path)
        if found is None:
            found = _TAILS[path] = RawTail(fleet_frames.FLEET_SERIES_SIGNALS)
        return found


def _fleet_columns(
    store: HistoryStore, window: TimeWindow, points: int, tail: RawTail | None
) -> SampleColumns:
    if isinstance(store, SqliteStore):
        return store.read_columns(
            window.start_ts, window.end_ts, fleet_frames.FLEET_SERIES_SIGNALS, points, tail=tail
        )
    # Another backend (Prometheus): its frame, as columns.
    frame = store.read_samples(window.start_ts, window.end_ts, None, points)
    return fleet_frames.columns_of_frame(frame, fleet_frames.FLEET_SERIES_SIGNALS)


@dataclass(frozen=True, slots=True)
class FleetSeries:
    """The Fleet chart's data: its window, the series (``fleet_frames.fleet_series``) and the oldest sample
    read (NaN when none)."""

    window: TimeWindow
    series: pd.DataFrame
    first_ts: float


def fleet_series(path: str, now_ts: float, range_s: float, interval_s: float, points: int) -> FleetSeries:
    """Every target's history summed per bucket (``fleet_frames.fleet_series``) over the selected range.

    Only the series (``points`` rows) is cached, never the ~100 k samples behind it. Up to 15 min the raw rows
    are kept in memory and topped up each interval; longer ranges are refreshed in the background.
    """
    if range_s <= _BACKGROUND_BEYOND_S:
        window = quantised_window(now_ts, range_s, interval_s, points)
        series, first_ts = _fleet_series_live(path, window.start_ts, window.end_ts, points)
        return FleetSeries(window, series, first_ts)
    start_ts, end_ts, series, first_ts = _fleet_series_background(path, range_s, interval_s, points)
    return FleetSeries(TimeWindow(start_ts, end_ts), series, first_ts)


def _series_of(columns: SampleColumns, window: TimeWindow, points: int) -> tuple[pd.DataFrame, float]:
    series = fleet_frames.fleet_series_of(columns, window.start_ts, window.duration_s / points)
    first_ts = float(columns.ts.min()) if len(columns) else math.nan
    del columns
    release_freed_memory()
    return series, first_ts


@st.cache_data(ttl=300, max_entries=16, show_spinner=False)
def _fleet_series_live(path: str, start_ts: float, end_ts: float, points: int) -> tuple[pd.DataFrame, float]:
    window = TimeWindow(start_ts, end_ts)
    tail = _tail(path)
    return _series_of(
        reader(path).call(lambda store: _fleet_columns(store, window, points, tail)), window, points
    )


# Cached values are plain types (floats, DataFrames), not ``FleetSeries``: Streamlit pickles them, and a
# class of ours would stop unpickling if its module were reloaded (Streamlit reloads changed modules between
# reruns).
@st.cache_data(ttl=60, max_entries=16, show_spinner=False, refresh_mode="background")
def _fleet_series_background(
    path: str, range_s: float, interval_s: float, points: int
) -> tuple[float, float, pd.DataFrame, float]:
    window = quantised_window(time.time(), range_s, interval_s, points)
    series, first_ts = _series_of(
        reader(path).call(lambda store: _fleet_columns(store, window, points, None)), window, points
    )
    return window.start_ts, window.end_ts, series, first_ts


@st.cache_data(ttl=300, max_entries=32, show_spinner=False)
def events(path: str, start_ts: float, end_ts: float, targets: tuple[str, ...] | None) -> pd.DataFrame:
    """Restarts, recipe changes, up/down and alert transitions: columns ts, time, target, kind, detail."""
    found = reader(path).call(
        lambda store: store.read_events(start_ts, end_ts, list(targets) if targets is not None else None)
    )
    frame = pd.DataFrame(
        [(e.ts, e.target, e.kind, e.detail) for e in found], columns=["ts", "target", "kind", "detail"]
    )
    frame["ts"] = frame["ts"].astype("float64")
    frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame


@st.cache_data(ttl=60, max_entries=16, show_spinner=False)
def recipes(path: str) -> dict[str, dict[str, FlagValue]]:
    """Every recipe ever seen: recipe_id → its flags (RECIPE_FLAGS order)."""
    found = reader(path).call(lambda store: store.recipes())
    return {recipe_id: recipe.as_dict() for recipe_id, recipe in found.items()}


@st.cache_data(ttl=30, max_entries=16, show_spinner=False)
def sample_count(path: str, tick: int) -> int:
    """Rows in the store (``tick`` only refreshes the cache); 0 means nothing was ever collected."""
    del tick
    return reader(path).call(lambda store: store.count_samples())


def clear_interval_caches() -> None:
    """Forget every read keyed by the scrape interval, as a new interval does (the background cache and the
    raw windows kept in memory stay)."""
    for cached in (latest, samples, events, sample_count, _alert_frames, _fleet_series_live, _signals_live):
        cached.clear()
    for slo_cached in (_slo_report, slo_minutes):  # keyed by the interval too
        slo_cached.clear()


def clear_all_caches() -> None:
    """Forget everything read, as a restarted process would (every ``st.cache_data``, the frames kept as
    resources and the raw windows)."""
    st.cache_data.clear()
    _signals_live.clear()
    _signals_background.clear()
    _slo_report.clear()
    _slo_fleet.clear()
    _capacity_advice.clear()
    _hourly_demand.clear()
    with _TAILS_LOCK:
        _TAILS.clear()


def tick(now_ts: float, step_s: float) -> int:
    """A cache key that changes once per ``step_s``."""
    return math.floor(now_ts / max(step_s, 1e-3))


# -- alert state ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AlertBoard:
    """Alert state read from the alert engine: the active alerts now and the transitions in the window."""

    active: pd.DataFrame  # ALERT_ACTIVE_COLUMNS
    transitions: pd.DataFrame  # ALERT_TRANSITION_COLUMNS + time


ALERT_ACTIVE_COLUMNS = [
    "rule",
    "target",
    "state",
    "severity",
    "since_ts",
    "fired_at_ts",
    "value",
    "summary",
    "deployment",
    "recipe_id",
    "suspended",
    "slo",  # ErrorBudgetBurn: the SLO and the scope it burns in (its labels other than the rule's own)
    "scope",
    "description",
]
ALERT_TRANSITION_COLUMNS = [
    "ts",
    "rule",
    "target",
    "from_state",
    "to_state",
    "kind",
    "value",
    "severity",
    "summary",
]


def active_frame(instances: Sequence[AlertInstance]) -> pd.DataFrame:
    rows = [
        (
            a.rule,
            a.target,
            a.state.value,
            a.severity,
            a.since,
            a.fired_at,
            a.value,
            a.summary,
            a.deployment,
            a.recipe_id,
            a.suspended,
            a.label("slo"),
            alert_scope(a.labels_dict).key if a.label("slo") else "",
            a.description,
        )
        for a in instances
    ]
    frame = pd.DataFrame(rows, columns=ALERT_ACTIVE_COLUMNS)
    for column in ("since_ts", "fired_at_ts", "value"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def transitions_frame(transitions: Sequence[AlertTransition]) -> pd.DataFrame:
    rows = [
        (
            t.ts,
            t.rule,
            t.target,
            t.from_state.value,
            t.to_state.value,
            t.kind,
            t.value,
            t.labels_dict.get("severity", ""),
            t.summary,
        )
        for t in transitions
    ]
    frame = pd.DataFrame(rows, columns=ALERT_TRANSITION_COLUMNS)
    for column in ("ts", "value"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame


def has_alert_tables(path: str) -> bool:
    """Whether an alert engine ever wrote to this store (read-only check: a viewer must not create tables)."""
    if not Path(path).exists():
        return False
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            row = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alert_instances'"
            ).fetchone()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise StoreError(f"history store {path}: cannot look for alert tables: {exc}") from exc
    return row is not None


def alert_board(path: str, tick: int, start_ts: float, end_ts: float) -> AlertBoard | None:
    """Active alerts (fresh every ``tick``) and the window's transitions; None while no alert engine has
    written to this store."""
    found = _alert_frames(path, tick, start_ts, end_ts)
    return None if found is None else AlertBoard(*found)


@st.cache_data(ttl=120, max_entries=16, show_spinner=False)
def _alert_frames(
    path: str, tick: int, start_ts: float, end_ts: float
) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    del tick  # only part of the cache key: active alerts must be at most one interval old
    store = reader(path)
    if not store.call(lambda _: has_alert_tables(path)):
        return None
    active, transitions = store.call_alerts(
        lambda alerts: (alerts.active(), alerts.transitions(start_ts, end_ts))
    )
    return active_frame(active), transitions_frame(transitions)


def firing_by_target(board: AlertBoard | None) -> dict[str, list[str]]:
    """Target → names of its firing alerts (empty when the alert engine has no data)."""
    if board is None or board.active.empty:
        return {}
    firing = board.active[board.active["state"] == "firing"]
    result: dict[str, list[str]] = {}
    for target, rule in zip(firing["target"], firing["rule"], strict=True):
        result.setdefault(str(target), []).append(str(rule))
    return result


def firing_slo_alerts(board: AlertBoard | None) -> dict[tuple[str, str], list[str]]:
    """(SLO name, scope key) → severities of its firing ErrorBudgetBurn alerts (page before ticket)."""
    if board is None or board.active.empty:
        return {}
    active = board.active
    firing = active[(active["state"] == "firing") & (active["slo"] != "")]
    result: dict[tuple[str, str], list[str]] = {}
    for slo, scope, severity in zip(firing["slo"], firing["scope"], firing["severity"], strict=True):
        found = result.setdefault((str(slo), str(scope)), [])
        if severity not in found:
            found.append(str(severity))
    return {key: sorted(found, key=lambda s: (s != "page", s)) for key, found in result.items()}


# -- SLOs ----------------------------------------------------------------------------------------------------
# The SLO tables are small SQL sums over a primary-key range (a 28-day burn-down is 40,320 rows), read once
# per interval for every tab, like the other reads. Reports are kept as they are (cache_resource): frozen
# records of collectors/, never modified by a page.
@dataclass(frozen=True, slots=True)
class SloReport:
    """Every SLO in every scope it has events in (whole fleet first), and the goodput bounds per scope."""

    statuses: tuple[SloStatus, ...]
    goodput: tuple[Goodput, ...]
    now_ts: float


def slo_now(now_ts: float, interval_s: float) -> float:
    """``now`` snapped up to the interval: every tab of one interval shares a key."""
    step_s = max(interval_s, 1.0)
    return math.ceil(now_ts / step_s) * step_s


def slo_report(path: str, now_ts: float, interval_s: float, slos: Sequence[Slo]) -> SloReport:
    """The SLO page's report: statuses with the attribution and the worst servers, and goodput."""
    return _slo_report(path, slo_now(now_ts, interval_s), repr(tuple(slos)), tuple(slos))


@st.cache_resource(ttl=120, max_entries=4, show_spinner=False)
def _slo_report(path: str, now_ts: float, slos_key: str, _slos: tuple[Slo, ...]) -> SloReport:
    del slos_key  # the SLOs' identity in the cache key (they are passed unhashed)

    def read(counts: SloCounts, history: HistoryStore) -> SloReport:
        statuses = slo_statuses(counts, _slos, now_ts, history=history)
        return SloReport(tuple(statuses), tuple(goodput(counts, _slos, now_ts)), now_ts)

    return reader(path).call_slo(read)


def slo_fleet_status(path: str, slos: Sequence[Slo]) -> SloReport:
    """The Fleet page's compact status: budget and burn rates per SLO and scope, without the attribution,
    the worst servers or goodput; at most a minute old, refreshed in the background (16 SLO scopes over a
    28-day store sum ~800 k minute rows: 0.2 s, never spent inside a Fleet rerun)."""
    return _slo_fleet(path, repr(tuple(slos)), tuple(slos))


@st.cache_resource(ttl=60, max_entries=4, show_spinner=False, refresh_mode="background")
def _slo_fleet(path: str, slos_key: str, _slos: tuple[Slo, ...]) -> SloReport:
    del slos_key
    now_ts = time.time()

    def read(counts: SloCounts, _history: HistoryStore) -> SloReport:
        statuses = [
            slo_status(counts, slo, scope, now_ts, worst=0)
            for slo in _slos
            for scope in slo_scopes(counts, slo, now_ts)
        ]
        return SloReport(tuple(statuses), (), now_ts)

    return reader(path).call_slo(read)


@st.cache_data(ttl=120, max_entries=16, show_spinner=False)
def slo_minutes(
    path: str, slo: str, scope: str, start_ts: float, end_ts: float
) -> list[tuple[int, float, float]]:
    """(minute_ts, good, total) of one SLO and scope, oldest first (the burn-down's input)."""
    return reader(path).call_slo(lambda counts, _history: counts.minutes(slo, scope, start_ts, end_ts))


# -- capacity advice -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AdviceReport:
    """Servers needed per deployment (``advice_inputs.capacity_advice``) for the minute ``now_ts``."""

    advice: tuple[DeploymentAdvice, ...]
    now_ts: float


def capacity_advice_report(
    path: str,
    thresholds: CapacityThresholds,
    configured: dict[str, str],
    stale_after_s: float,
    slos: Sequence[Slo],
) -> AdviceReport:
    """The Capacity page's advice: at most five minutes old (its minute is shown), refreshed in the background
    (it reads a day of the fleet's samples, 1–6 s at 1,000 servers: never inside a rerun once the first read
    is done), the hourly history kept per hour."""
    items = tuple(sorted(configured.items()))
    key = repr((thresholds, items, stale_after_s, tuple(slos)))
    return _capacity_advice(path, key, thresholds, items, stale_after_s, tuple(slos))


@st.cache_resource(ttl=300, max_entries=4, show_spinner=False, refresh_mode="background")
def _capacity_advice(
    path: str,
    key: str,
    _thresholds: CapacityThresholds,
    _configured: tuple[tuple[str, str], ...],
    stale_after_s: float,
    _slos: tuple[Slo, ...],
) -> AdviceReport:
    del key  # the arguments' identity in the cache key (they are passed unhashed)
    now_ts = advice_now(time.time())
    hourly = _hourly_demand(path, math.floor(now_ts / PROFILE_BUCKET_S) * PROFILE_BUCKET_S)

    def advise(history: HistoryStore, counts: SloCounts | None) -> list[DeploymentAdvice]:
        return capacity_advice(
            history,
            _thresholds,
            now_ts,
            stale_after_s=stale_after_s,
            configured=dict(_configured),
            slo_counts=counts,
            slos=_slos,
            hourly=hourly,
        )

    store = reader(path)
    if _slos:
        found = store.call_slo(lambda counts, history: advise(history, counts))
    else:
        found = store.call(lambda history: advise(history, None))
    release_freed_memory()
    return AdviceReport(tuple(found), now_ts)


@st.cache_resource(ttl=3600, max_entries=2, show_spinner=False)
def _hourly_demand(path: str, hour_ts: float) -> DemandSeries:
    """The complete hours of the last week per deployment: they change once an hour."""
    return reader(path).call(lambda store: read_hourly_demand(store, hour_ts))
