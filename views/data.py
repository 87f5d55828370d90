"""All data access of the dashboard, cached: history, SLO counts and alert state, through one reader.

A ``StoreReader`` reads the history backend its config names (``collectors.history.open_history``: the SQLite
file, or the fleet's Prometheus); app.py makes one per runtime and hands it to every page in its
``PageContext``. Reads go through a small, process-wide pool of reader threads: however many tabs rerun at
once, at most two reads hit the store, and a read stuck on a locked or huge store becomes a clear error after
a deadline instead of a hung page.

Every cached read below is keyed by the reader and a quantised window, so every tab of every session shares
one read (and one prepared frame) per scrape interval: this module is where reads are shared. The frames
themselves are built by ``views/frames.py``. What a live panel derives from them is shared too: the fleet
table as of this interval (``fleet_now``), and whole sections of a page — charts, tiles, banners — drawn
once per interval and replayed to every other session (``per_interval``: Streamlit records the elements a
cached function draws and sends their protobufs as they are, so an Altair chart is built, validated and
turned into Arrow once for all tabs). Only widgets (tables with row selection, filters) are drawn per
session.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import math
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pyarrow
import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from alerts.state_store import AlertStateStore
from analysis import sample_bins
from analysis.advice_inputs import DemandSeries, advice_now, capacity_advice, read_hourly_demand
from analysis.capacity import CapacityThresholds
from analysis.capacity_advice import DeploymentAdvice
from analysis.forecast import PROFILE_BUCKET_S
from analysis.frames import samples_frame
from analysis.slo_budget import slo_scopes
from analysis.slo_report import Goodput, SloStatus, goodput, slo_status, slo_statuses
from collectors.errors import StoreError
from collectors.history import HistoryReader, StoredSloCounts
from collectors.model import FlagValue
from collectors.sample_columns import SAMPLE_TEXTS, SAMPLE_VALUES, SampleColumns
from collectors.slo import Slo
from collectors.slo_ledger import SloCounts
from collectors.source import History, open_history
from collectors.store.offline_runs import OfflineRun, OfflineRunStore
from config import Config
from views import fleet_frames, frames
from views.page_context import MAX_POINTS_PER_SERIES, TimeWindow, quantised_window

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_LOG = logging.getLogger(__name__)
_READ_TIMEOUT_S = 60.0
_READER_THREADS = 2  # SQLite: each thread holds its own connection and page cache
# The fleet's engine: a read mostly waits on it, and a page's table, chart and SLO reads overlap (read_ahead).
_ENGINE_READER_THREADS = 4
_SERIALS = itertools.count(1)


class StoreReader:
    """One history backend (chosen from ``config`` when first read), read only from a fixed pool of threads.

    ``key`` names it in every cache key: readers of the same config made twice (an edited config starts a
    new runtime) never share a cached read.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.path = config.store.path
        self.key = f"{config.source}:{self.path}#{next(_SERIALS)}"
        threads = _ENGINE_READER_THREADS if config.source == "prometheus" else _READER_THREADS
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="specwatch-read")
        self._lock = threading.Lock()
        self._history: History | None = None
        self._alerts: AlertStateStore | None = None
        self._slo_counts: StoredSloCounts | None = None
        _OPEN_READERS.add(self)

    def _open_history(self) -> History:
        with self._lock:
            if self._history is None:
                self._history = open_history(self.config)
            return self._history

    def _open(self) -> HistoryReader:
        return self._open_history().store

    def _open_alerts(self) -> AlertStateStore:
        with self._lock:
            if self._alerts is None:
                self._alerts = AlertStateStore(self.path)
            return self._alerts

    def _open_slo_counts(self) -> SloCounts:
        """The SLO counts, read-only: the SLO tables, or with ``source: prometheus`` the fleet's Prometheus
        itself (its collector counts nothing into the tables: the SLIs are its own series there)."""
        history = self._open_history()
        with self._lock:
            if self._slo_counts is None:
                self._slo_counts = history.slo_counts("config")
            return self._slo_counts

    def call(self, fn: Callable[[HistoryReader], T]) -> T:
        return self._wait(lambda: fn(self._open()))

    def call_alerts(self, fn: Callable[[AlertStateStore], T]) -> T:
        return self._wait(lambda: fn(self._open_alerts()))

    def call_slo(self, fn: Callable[[SloCounts, HistoryReader], T]) -> T:
        """``fn`` on the SLO counts and the history (for the attribution)."""
        return self._wait(lambda: fn(self._open_slo_counts(), self._open()))

    def _wait(self, read: Callable[[], T]) -> T:
        try:
            future: Future[T] = self._pool.submit(read)
        except RuntimeError as exc:  # closed: the runtime was replaced (an edited config) mid-rerun
            raise StoreError(f"history store {self.path}: this reader was closed; reload the page") from exc
        try:
            return future.result(timeout=_READ_TIMEOUT_S)
        except TimeoutError as exc:
            raise StoreError(
                f"history store {self.path}: no answer within {_READ_TIMEOUT_S:.0f} s (locked or very large?)"
            ) from exc

    def drop_caches(self) -> None:
        """Forget what the backend keeps between reads (the Fleet chart's raw window), as a restart would."""
        with self._lock:
            history = self._history
        if history is not None:
            history.store.drop_caches()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            if self._slo_counts is not None:
                self._slo_counts.close()
                self._slo_counts = None
            if self._history is not None:
                self._history.close()
                self._history = None
            if self._alerts is not None:
                self._alerts.close()
                self._alerts = None


# Every reader not yet collected, for ``clear_all_caches`` (what each backend keeps between reads).
_OPEN_READERS: weakref.WeakSet[StoreReader] = weakref.WeakSet()
# Cached reads are keyed by their reader's ``key``: Streamlit hashes nothing else of it (pools, stores).
BY_READER: dict[Any, Callable[[Any], Any]] = {StoreReader: lambda reader: reader.key}


# -- history -------------------------------------------------------------------------------------------------
# Interval-keyed caches (latest, samples, the live series, events, alert frames) hold few entries: a key is
# not asked for again once its interval passed, and at 1,000 servers an entry is up to ~1 MB (an open Server
# tab at 15 min made one per interval: 60 kept for 5 min).
@st.cache_data(ttl=120, max_entries=8, show_spinner=False, hash_funcs=BY_READER)
def latest(reads: StoreReader, since_ts: float) -> pd.DataFrame:
    """The newest snapshot of each target seen since ``since_ts`` (one row per target, sorted by target)."""
    return reads.call(lambda history: frames.latest_frame(history.latest_columns(since_ts)))


# The collector writes a row for every target every cycle (down ones too), so the newest rows of the last few
# minutes describe the whole fleet; only targets that fell silent (removed, or the collector stopped) need the
# long look-back, which scans the whole range and is refreshed in the background instead of every interval.
RECENT_S = 600.0
# However long the range, a target silent for longer than this is not looked for (cheap on a week-long store).
LATEST_HORIZON_S = 6 * 3600.0


def newest_snapshots(reads: StoreReader, now_ts: float, range_s: float, interval_s: float) -> pd.DataFrame:
    """The newest snapshot of every target seen in the range (at most 6 h back), one row per target."""
    since = math.floor((now_ts - min(range_s, RECENT_S)) / interval_s) * interval_s
    recent = latest(reads, since)
    if range_s <= RECENT_S:
        return recent
    older = _latest_background(reads, min(range_s, LATEST_HORIZON_S))
    silent = older[~older["target"].isin(recent["target"])]
    if silent.empty:
        return recent
    return pd.concat([recent, silent], ignore_index=True).sort_values("target", ignore_index=True)


@st.cache_data(ttl=60, max_entries=16, show_spinner=False, refresh_mode="background", hash_funcs=BY_READER)
def _latest_background(reads: StoreReader, horizon_s: float) -> pd.DataFrame:
    since = time.time() - horizon_s
    return reads.call(lambda history: frames.latest_frame(history.latest_columns(since)))


@st.cache_data(ttl=300, max_entries=32, show_spinner=False, hash_funcs=BY_READER)
def samples(
    reads: StoreReader, start_ts: float, end_ts: float, targets: tuple[str, ...] | None, max_points: int
) -> pd.DataFrame:
    """Every sample column in the window (``analysis.frames.samples_frame``, with ``time``), at most
    ``max_points`` rows per target (bucket means beyond that)."""
    columns = reads.call(
        lambda history: history.read_columns(
            start_ts, end_ts, SAMPLE_VALUES, max_points, targets, texts=SAMPLE_TEXTS
        )
    )
    return samples_frame(columns, with_time=True)


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
    reads: StoreReader,
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
    restricted to ts, target, up, ``signals`` (and recipe_id if ``recipes``). The Context, Capacity and
    Recipes pages use 4–8 of the 25 columns: a 1,000-server day of full frames cost seconds and hundreds of
    MB.

    ``prepared``: the frame the analysis pages work on instead (``sample_bins.prepare``: rows of servers up
    with an accept length, labelled with recipe and bins; needs ``recipes``), built once per read and held
    instead of the raw frame, rather than rebuilt from it on every rerun."""
    if range_s <= _BACKGROUND_BEYOND_S:
        window = quantised_window(now_ts, range_s, interval_s, max_points)
        frame = _signals_live(reads, window.start_ts, window.end_ts, max_points, signals, recipes, prepared)
        return window, frame
    start_ts, end_ts, frame = _signals_background(
        reads, range_s, interval_s, max_points, signals, recipes, prepared
    )
    return TimeWindow(start_ts, end_ts), frame


def _signals_frame(
    history: HistoryReader,
    window: TimeWindow,
    max_points: int,
    signals: tuple[str, ...],
    recipes: bool,
    prepared: bool = False,
) -> pd.DataFrame:
    texts = ("recipe_id",) if recipes else ()
    columns = history.read_columns(window.start_ts, window.end_ts, signals, max_points, texts=texts)
    frame = samples_frame(columns)
    del columns
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
@st.cache_resource(ttl=60, max_entries=2, show_spinner=False, hash_funcs=BY_READER)
def _signals_live(
    reads: StoreReader,
    start_ts: float,
    end_ts: float,
    max_points: int,
    signals: tuple[str, ...],
    recipes: bool,
    prepared: bool,
) -> pd.DataFrame:
    window = TimeWindow(start_ts, end_ts)
    return reads.call(lambda history: _signals_frame(history, window, max_points, signals, recipes, prepared))


@st.cache_resource(ttl=60, max_entries=2, show_spinner=False, refresh_mode="background", hash_funcs=BY_READER)
def _signals_background(
    reads: StoreReader,
    range_s: float,
    interval_s: float,
    max_points: int,
    signals: tuple[str, ...],
    recipes: bool,
    prepared: bool,
) -> tuple[float, float, pd.DataFrame]:
    window = quantised_window(time.time(), range_s, interval_s, max_points)
    frame = reads.call(
        lambda history: _signals_frame(history, window, max_points, signals, recipes, prepared)
    )
    return window.start_ts, window.end_ts, frame


# -- the Fleet chart: one small series, read as columns ------------------------------------------------------
# Up to 15 min the Fleet chart's read is ``live``: the backend keeps the raw window (≤ 15 min, every target)
# between intervals and reads only the rows written since (the SQLite store's ``RawTail``), not 15 minutes ×
# every server again (~10 MB at 1,000 servers). The analysis pages' reads are not: theirs held eight signals
# and recipes (~40 MB with the allocator's share at 1,000 servers) to save a 0.5 s read on a page that reruns
# on a click, not every interval; Capacity's trend reads the 1 min tier.
def _fleet_columns(history: HistoryReader, window: TimeWindow, points: int, *, live: bool) -> SampleColumns:
    signals = fleet_frames.FLEET_SERIES_SIGNALS
    return history.read_columns(window.start_ts, window.end_ts, signals, points, live=live)


@dataclass(frozen=True, slots=True)
class FleetSeries:
    """The Fleet chart's data: its window, the series (``fleet_frames.fleet_series``) and the oldest sample
    read (NaN when none)."""

    window: TimeWindow
    series: pd.DataFrame
    first_ts: float


def fleet_series(
    reads: StoreReader, now_ts: float, range_s: float, interval_s: float, points: int
) -> FleetSeries:
    """Every target's history summed per bucket (``fleet_frames.fleet_series``) over the selected range.

    Only the series (``points`` rows) is cached, never the ~100 k samples behind it. Up to 15 min the raw rows
    are kept in memory and topped up each interval; longer ranges are refreshed in the background.
    """
    if range_s <= _BACKGROUND_BEYOND_S:
        window = quantised_window(now_ts, range_s, interval_s, points)
        series, first_ts = _fleet_series_live(reads, window.start_ts, window.end_ts, points)
        return FleetSeries(window, series, first_ts)
    start_ts, end_ts, series, first_ts = _fleet_series_background(reads, range_s, interval_s, points)
    return FleetSeries(TimeWindow(start_ts, end_ts), series, first_ts)


def read_ahead(read: Callable[[], object]) -> None:
    """Start ``read`` (a cached read of this module that the script asks for later, with the same
    arguments) on a thread of its own, so that the reads a page makes one after another overlap: Streamlit
    computes a key once, and the script's own call waits for it (the cache's per-key lock) instead of
    reading again. On the fleet's engine a cold Fleet page read its table, SLO status and chart in turn.
    A read that fails here is read again, and its error shown, by the script's call."""
    context = get_script_run_ctx(suppress_warning=True)

    def run() -> None:
        try:
            read()
        except Exception:  # the script's own call reads again and shows the error
            _LOG.debug("read ahead failed", exc_info=True)

    thread = threading.Thread(target=run, name="specwatch-read-ahead", daemon=True)
    if context is not None:
        add_script_run_ctx(thread, context)
    thread.start()


def fleet_series_ahead(
    reads: StoreReader, now_ts: float, range_s: float, interval_s: float, points: int
) -> None:
    """``fleet_series`` read ahead (``read_ahead``) where its key does not hold the moment: the ranges read
    in the background. A short range's window moves with each interval and is read when drawn."""
    if range_s > _BACKGROUND_BEYOND_S:
        read_ahead(lambda: fleet_series(reads, now_ts, range_s, interval_s, points))


def _series_of(columns: SampleColumns, window: TimeWindow, points: int) -> tuple[pd.DataFrame, float]:
    series = fleet_frames.fleet_series_of(columns, window.start_ts, window.duration_s / points)
    first_ts = float(columns.ts.min()) if len(columns) else math.nan
    del columns
    release_freed_memory()
    return series, first_ts


def _read_fleet_series(
    history: HistoryReader, window: TimeWindow, points: int, *, live: bool
) -> tuple[pd.DataFrame, float]:
    """The Fleet chart's series: summed by the backend where it can (the fleet's Prometheus: one series per
    number instead of every target's), else from every target's columns."""
    totals = history.fleet_chart_totals(window.start_ts, window.end_ts, points, live=live)
    if totals is None:
        return _series_of(_fleet_columns(history, window, points, live=live), window, points)
    series = fleet_frames.fleet_series_of_chart_totals(totals, window.start_ts, window.duration_s / points)
    return series, float(totals.ts.min()) if len(totals) else math.nan


@st.cache_data(ttl=300, max_entries=16, show_spinner=False, hash_funcs=BY_READER)
def _fleet_series_live(
    reads: StoreReader, start_ts: float, end_ts: float, points: int
) -> tuple[pd.DataFrame, float]:
    window = TimeWindow(start_ts, end_ts)
    # The columns are not held here: ``_series_of`` frees them before handing memory back.
    return reads.call(lambda history: _read_fleet_series(history, window, points, live=True))


# Cached values are plain types (floats, DataFrames), not ``FleetSeries``: Streamlit pickles them, and a
# class of ours would stop unpickling if its module were reloaded (Streamlit reloads changed modules between
# reruns).
@st.cache_data(ttl=60, max_entries=16, show_spinner=False, refresh_mode="background", hash_funcs=BY_READER)
def _fleet_series_background(
    reads: StoreReader, range_s: float, interval_s: float, points: int
) -> tuple[float, float, pd.DataFrame, float]:
    window = quantised_window(time.time(), range_s, interval_s, points)
    series, first_ts = reads.call(lambda history: _read_fleet_series(history, window, points, live=False))
    return window.start_ts, window.end_ts, series, first_ts


@st.cache_data(ttl=300, max_entries=32, show_spinner=False, hash_funcs=BY_READER)
def events(
    reads: StoreReader, start_ts: float, end_ts: float, targets: tuple[str, ...] | None
) -> pd.DataFrame:
    """Restarts, recipe changes, up/down and alert transitions: columns ts, time, target, kind, detail."""
    found = reads.call(lambda history: history.read_events(start_ts, end_ts, targets))
    return frames.events_frame(found)


@st.cache_data(ttl=60, max_entries=16, show_spinner=False, hash_funcs=BY_READER)
def recipes(reads: StoreReader) -> dict[str, dict[str, FlagValue]]:
    """Every recipe ever seen: recipe_id → its flags (RECIPE_FLAGS order)."""
    found = reads.call(lambda history: history.recipes())
    return {recipe_id: recipe.as_dict() for recipe_id, recipe in found.items()}


@st.cache_data(ttl=30, max_entries=16, show_spinner=False, hash_funcs=BY_READER)
def sample_count(reads: StoreReader, tick: int) -> int:
    """Rows in the store (``tick`` only refreshes the cache); 0 means nothing was ever collected."""
    del tick
    return reads.call(lambda history: history.count_samples())


def clear_interval_caches() -> None:
    """Forget every read keyed by the scrape interval, as a new interval does (the background cache and the
    raw windows kept in memory stay)."""
    for cached in (latest, samples, events, sample_count, _alert_frames, _fleet_series_live, _signals_live):
        cached.clear()
    for slo_cached in (_slo_report, slo_minutes):  # keyed by the interval too
        slo_cached.clear()
    _fleet_now.clear()
    for section in _PER_INTERVAL:
        section.clear()


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
    offline_runs.clear()
    _fleet_now.clear()
    for section in _PER_INTERVAL:
        section.clear()
    for reads in list(_OPEN_READERS):
        reads.drop_caches()


def tick(now_ts: float, step_s: float) -> int:
    """A cache key that changes once per ``step_s``."""
    return math.floor(now_ts / max(step_s, 1e-3))


# -- shared per interval: what every session's live panel derives from the reads -----------------------------
# Kept as they are (cache_resource): one object per key for every session, never pickled; pages never modify
# them (they filter, which copies). Keyed by ``tick``: a new entry per interval, the last few kept.
_PER_INTERVAL: list[Any] = []
PER_INTERVAL_TTL_S = 120.0


def per_interval(func: F) -> F:
    """``func`` computed once per key for every session, for two minutes at most (PER_INTERVAL_TTL_S); what
    it draws (charts, tiles, banners: no widgets) is recorded and replayed to every other caller of the key.

    Its key should hold ``tick(now, interval)`` (or what changes no more often: the Server page's charts hold
    their window's end) and everything it shows; arguments named ``_x`` are not hashed (pass what the key
    already determines, such as the fleet of that tick, that way)."""
    cached = st.cache_resource(
        ttl=PER_INTERVAL_TTL_S, max_entries=8, show_spinner=False, hash_funcs=BY_READER
    )(func)
    _PER_INTERVAL.append(cached)
    return cached  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class FleetNow:
    """The fleet table of one interval (``fleet_frames.fleet_table``), the alert board it was joined with,
    and the moment it describes (the first render of that interval). Shared: never modify it."""

    table: pd.DataFrame
    board: AlertBoard | None
    now_ts: float


def fleet_now(
    reads: StoreReader,
    now_ts: float,
    range_s: float,
    interval_s: float,
    stale_after_s: float,
    configured: Mapping[str, str],
    only: str | None = None,
) -> FleetNow:
    """The fleet table as of this interval, built once for every session (``only``: that server's row)."""
    return _fleet_now(
        reads, tick(now_ts, interval_s), range_s, interval_s, stale_after_s, only, now_ts, configured
    )


@st.cache_resource(ttl=120, max_entries=8, show_spinner=False, hash_funcs=BY_READER)
def _fleet_now(
    reads: StoreReader,
    tick_: int,
    range_s: float,
    interval_s: float,
    stale_after_s: float,
    only: str | None,
    _now_ts: float,
    _configured: Mapping[str, str],  # the runtime's targets: ``reads`` is that runtime's reader
) -> FleetNow:
    window = quantised_window(_now_ts, range_s, interval_s, MAX_POINTS_PER_SERIES)
    latest_rows = newest_snapshots(reads, _now_ts, range_s, interval_s)
    board = alert_board(reads, tick_, window.start_ts, window.end_ts)
    configured = dict(_configured)
    if only is not None:
        latest_rows = latest_rows[latest_rows["target"] == only]
        configured = {name: deployment for name, deployment in configured.items() if name == only}
    table = fleet_frames.fleet_table(
        latest_rows,
        now_ts=_now_ts,
        stale_after_s=stale_after_s,
        configured=configured,
        firing=firing_by_target(board),
    )
    return FleetNow(table, board, _now_ts)


# -- alert state ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AlertBoard:
    """Alert state read from the alert engine: the active alerts now and the transitions in the window."""

    active: pd.DataFrame  # frames.ALERT_ACTIVE_COLUMNS
    transitions: pd.DataFrame  # frames.ALERT_TRANSITION_COLUMNS + time


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


def alert_board(reads: StoreReader, tick: int, start_ts: float, end_ts: float) -> AlertBoard | None:
    """Active alerts (fresh every ``tick``) and the window's transitions; None while no alert engine has
    written to this store."""
    found = _alert_frames(reads, tick, start_ts, end_ts)
    return None if found is None else AlertBoard(*found)


@st.cache_data(ttl=120, max_entries=16, show_spinner=False, hash_funcs=BY_READER)
def _alert_frames(
    reads: StoreReader, tick: int, start_ts: float, end_ts: float
) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    del tick  # only part of the cache key: active alerts must be at most one interval old
    if not reads.call(lambda _: has_alert_tables(reads.path)):
        return None
    active, transitions = reads.call_alerts(
        lambda alerts: (alerts.active(), alerts.transitions(start_ts, end_ts))
    )
    return frames.active_frame(active), frames.transitions_frame(transitions)


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


def slo_report(reads: StoreReader, now_ts: float, interval_s: float, slos: Sequence[Slo]) -> SloReport:
    """The SLO page's report: statuses with the attribution and the worst servers, and goodput."""
    return _slo_report(reads, slo_now(now_ts, interval_s), repr(tuple(slos)), tuple(slos))


@st.cache_resource(ttl=120, max_entries=4, show_spinner=False, hash_funcs=BY_READER)
def _slo_report(reads: StoreReader, now_ts: float, slos_key: str, _slos: tuple[Slo, ...]) -> SloReport:
    del slos_key  # the SLOs' identity in the cache key (they are passed unhashed)

    def read(counts: SloCounts, history: HistoryReader) -> SloReport:
        statuses = slo_statuses(counts, _slos, now_ts, history=history)
        return SloReport(tuple(statuses), tuple(goodput(counts, _slos, now_ts)), now_ts)

    return reads.call_slo(read)


def slo_fleet_status(reads: StoreReader, slos: Sequence[Slo]) -> SloReport:
    """The Fleet page's compact status: budget and burn rates per SLO and scope, without the attribution,
    the worst servers or goodput; at most a minute old, refreshed in the background (16 SLO scopes over a
    28-day store sum ~800 k minute rows: 0.2 s, never spent inside a Fleet rerun)."""
    return _slo_fleet(reads, repr(tuple(slos)), tuple(slos))


@st.cache_resource(ttl=60, max_entries=4, show_spinner=False, refresh_mode="background", hash_funcs=BY_READER)
def _slo_fleet(reads: StoreReader, slos_key: str, _slos: tuple[Slo, ...]) -> SloReport:
    del slos_key
    now_ts = time.time()

    def read(counts: SloCounts, _history: HistoryReader) -> SloReport:
        statuses = [
            slo_status(counts, slo, scope, now_ts, worst=0)
            for slo in _slos
            for scope in slo_scopes(counts, slo, now_ts)
        ]
        return SloReport(tuple(statuses), (), now_ts)

    return reads.call_slo(read)


@st.cache_data(ttl=120, max_entries=16, show_spinner=False, hash_funcs=BY_READER)
def slo_minutes(
    reads: StoreReader, slo: str, scope: str, start_ts: float, end_ts: float
) -> list[tuple[int, float, float]]:
    """(minute_ts, good, total) of one SLO and scope, oldest first (the burn-down's input)."""
    return reads.call_slo(lambda counts, _history: counts.minutes(slo, scope, start_ts, end_ts))


# -- capacity advice -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AdviceReport:
    """Servers needed per deployment (``advice_inputs.capacity_advice``) for the minute ``now_ts``."""

    advice: tuple[DeploymentAdvice, ...]
    now_ts: float


def capacity_advice_report(
    reads: StoreReader,
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
    return _capacity_advice(reads, key, thresholds, items, stale_after_s, tuple(slos))


@st.cache_resource(
    ttl=300, max_entries=4, show_spinner=False, refresh_mode="background", hash_funcs=BY_READER
)
def _capacity_advice(
    reads: StoreReader,
    key: str,
    _thresholds: CapacityThresholds,
    _configured: tuple[tuple[str, str], ...],
    stale_after_s: float,
    _slos: tuple[Slo, ...],
) -> AdviceReport:
    del key  # the arguments' identity in the cache key (they are passed unhashed)
    # Servers are judged up or stale at the read (the advice's windows end with its minute, ``advice_now``):
    # judged at the minute's end, a fleet scraped seconds ago looked stale.
    read_ts = time.time()
    now_ts = advice_now(read_ts)
    hourly = _hourly_demand(reads, math.floor(now_ts / PROFILE_BUCKET_S) * PROFILE_BUCKET_S)

    def advise(history: HistoryReader, counts: SloCounts | None) -> list[DeploymentAdvice]:
        return capacity_advice(
            history,
            _thresholds,
            read_ts,
            stale_after_s=stale_after_s,
            configured=dict(_configured),
            slo_counts=counts,
            slos=_slos,
            hourly=hourly,
        )

    if _slos:
        found = reads.call_slo(lambda counts, history: advise(history, counts))
    else:
        found = reads.call(lambda history: advise(history, None))
    release_freed_memory()
    return AdviceReport(tuple(found), now_ts)


@st.cache_resource(ttl=3600, max_entries=2, show_spinner=False, hash_funcs=BY_READER)
def _hourly_demand(reads: StoreReader, hour_ts: float) -> DemandSeries:
    """The complete hours of the last week per deployment: they change once an hour."""
    return reads.call(lambda store: read_hourly_demand(store, hour_ts))


# -- offline runs --------------------------------------------------------------------------------------------
# ``specwatch import bench`` stores sglang.bench_serving runs in the history file (a few rows per file): read
# whole, kept as they are (frozen records, never modified by a page), at most a minute old.
@st.cache_resource(ttl=60, max_entries=4, show_spinner=False, hash_funcs=BY_READER)
def offline_runs(reads: StoreReader) -> tuple[OfflineRun, ...]:
    """Every offline benchmark run in the store (by recipe, then concurrency); none before the first import
    (the dashboard never creates the table, nor the file)."""
    return reads.call(lambda _history: _stored_offline_runs(reads.path))


def _stored_offline_runs(path: str) -> tuple[OfflineRun, ...]:
    if path == ":memory:" or not Path(path).is_file():
        return ()
    store = OfflineRunStore(path, create=False)
    try:
        return tuple(store.runs())
    finally:
        store.close()
