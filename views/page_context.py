"""What every page shares: the page context from app.py, the time-range picker and the query window.

Windows are quantised (their end snaps up to a step no finer than the scrape interval) so that every browser
tab asks the cache for the same key within one interval, and a long range does not re-query on every sample.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import streamlit as st

from config.settings import Config

if TYPE_CHECKING:
    from views.data import StoreReader

# The picker's choices: key (also the ?range= query value) → (label, seconds).
TIME_RANGES: dict[str, tuple[str, float]] = {
    "15m": ("15 min", 15 * 60.0),
    "1h": ("1 h", 3600.0),
    "6h": ("6 h", 6 * 3600.0),
    "24h": ("24 h", 24 * 3600.0),
    "7d": ("7 d", 7 * 86400.0),
}
DEFAULT_RANGE = "1h"

# A browser never receives more than this many points per series (the issue's ≈2,000 ceiling, with margin).
MAX_POINTS_PER_SERIES = 1500


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A closed time interval [start_ts, end_ts] in unix seconds."""

    start_ts: float
    end_ts: float

    @property
    def duration_s(self) -> float:
        return self.end_ts - self.start_ts

    def contains(self, ts: float) -> bool:
        return self.start_ts <= ts <= self.end_ts


@dataclass(frozen=True, slots=True)
class PageContext:
    """Everything a page needs, built once per script run by app.py. Pages never talk to servers: they read
    through ``reads``, the history backend app.py opened for ``config`` (``views.data``)."""

    config: Config
    reads: StoreReader
    range_key: str = DEFAULT_RANGE
    clock: Callable[[], float] = field(default=time.time, compare=False)

    @property
    def store_path(self) -> str:
        return self.config.store.path

    @property
    def interval_s(self) -> float:
        return self.config.scrape.interval_s

    @property
    def range_s(self) -> float:
        return TIME_RANGES.get(self.range_key, TIME_RANGES[DEFAULT_RANGE])[1]

    @property
    def range_label(self) -> str:
        return TIME_RANGES.get(self.range_key, TIME_RANGES[DEFAULT_RANGE])[0]

    @property
    def stale_after_s(self) -> float:
        """A target whose newest sample is older than this is *stale* (three missed cycles, at least 15 s)."""
        return max(3.0 * self.interval_s, 15.0)

    def now(self) -> float:
        return self.clock()

    def window(self, max_points: int = MAX_POINTS_PER_SERIES) -> TimeWindow:
        """The selected range ending now; its end snapped up to one ``max_points`` bucket (≥ the interval)."""
        return quantised_window(self.now(), self.range_s, self.interval_s, max_points)


def quantised_window(now_ts: float, range_s: float, interval_s: float, max_points: int) -> TimeWindow:
    """[end − range, end] with end = now rounded *up* to a step of max(interval, range / max_points).

    Rounding up keeps the newest sample inside the window; the step bounds how often a cached read re-keys.
    """
    step_s = max(interval_s, range_s / max(max_points, 1))
    end_ts = math.ceil(now_ts / step_s) * step_s
    return TimeWindow(end_ts - range_s, end_ts)


def time_range_picker(key: str = "range") -> str:
    """The sidebar's time-range control (15m … 7d), bound to ``?range=`` so a link reproduces the view."""
    options = list(TIME_RANGES)
    choice = st.segmented_control(
        "Time range",
        options,
        default=DEFAULT_RANGE,
        required=True,
        key=key,  # the option keys are the labels, so a link reads ?range=24h
        bind="query-params",
        help="History shown by every chart and table on every page (the live values refresh regardless).",
    )
    return choice if isinstance(choice, str) and choice in TIME_RANGES else DEFAULT_RANGE
