"""The peak of the next 24 hours from stored history: a daily profile once two days exist, else the recent
trend — the method always named, and *unknown* (with why) when the history cannot say.

Pure numpy/pandas over one demand series: a deployment's output tok/s, one value per bucket (index: the
bucket's start, unix seconds; NaN: nothing measured), as ``analysis.advice_inputs`` sums it from the store.

- **Daily profile** (``DAILY_MIN_HISTORY_S`` of history): the mean of each hour of the day over every stored
  day (hourly buckets: the store's 1 h tier), scaled by the recent level (the last ``LEVEL_WINDOW_S`` measured
  ÷ what the profile says for those hours), so a fleet that grew since last week is forecast at its new level.
  The next 24 hours hold every hour of the day once, so the peak is the profile's highest hour × the level.
- **Trend** (``TREND_MIN_HISTORY_S`` to two days): a least-squares line through the last
  ``TREND_WINDOW_S`` (5-min buckets), extrapolated only as far ahead as it reaches back (a line fitted over
  3 hours says nothing about tomorrow), so the horizon is named with the method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

DAY_S = 86400.0
HORIZON_S = DAY_S  # the forecast looks this far ahead
PROFILE_BUCKET_S = 3600.0  # the daily profile's resolution: one value per hour of the day
DAILY_MIN_HISTORY_S = 2 * DAY_S  # from two days of history on, the forecast is the daily profile
LEVEL_WINDOW_S = 3 * 3600.0  # the profile is scaled to what the last three hours measured
TREND_BUCKET_S = 300.0
TREND_WINDOW_S = 6 * 3600.0  # the trend is fitted over the last six hours (or what exists of them)
TREND_MIN_HISTORY_S = 3600.0  # shorter than this, no forecast at all
TREND_MIN_POINTS = 6

Method = Literal["daily profile", "linear trend"]


@dataclass(frozen=True, slots=True)
class Forecast:
    """The highest demand expected within the horizon, when and how it was found — or why it is unknown."""

    peak_tok_s: float | None  # None: unknown (``reason`` says why)
    peak_ts: float | None  # when (the start of the peak hour for the profile)
    method: Method | None
    basis: str  # the method's details in words: "3 days", "last 6 h, next 6 h"; or why unknown
    history_s: float  # how much history the deployment's series holds

    @property
    def known(self) -> bool:
        return self.peak_tok_s is not None


def history_words(seconds: float) -> str:
    """How much history there is, as people say it: 25 min, 5.5 h, 3 days."""
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * DAY_S - PROFILE_BUCKET_S:
        return _hours(seconds)
    return f"{seconds / DAY_S:.0f} days"


def forecast_peak(
    hourly: pd.Series, recent: pd.Series | None, now_ts: float, first_ts: float | None
) -> Forecast:
    """The next 24 hours' peak: the daily profile of ``hourly`` (hourly buckets over the stored days) once
    ``first_ts`` (the deployment's oldest sample) is two days back, else the trend of ``recent`` (5-min
    buckets over the last hours; None when not read), else unknown."""
    history_s = 0.0 if first_ts is None else max(now_ts - first_ts, 0.0)
    if first_ts is None or history_s < TREND_MIN_HISTORY_S:
        return Forecast(
            None,
            None,
            None,
            f"history too short: {history_words(history_s)} stored (a trend needs "
            f"{history_words(TREND_MIN_HISTORY_S)}, a daily profile {history_words(DAILY_MIN_HISTORY_S)})",
            history_s,
        )
    why_not_daily = ""
    # Hourly buckets start on the hour and their means sit mid-bucket: one bucket of slack.
    if history_s >= DAILY_MIN_HISTORY_S - PROFILE_BUCKET_S:
        daily = daily_profile_forecast(hourly, now_ts, history_s)
        if daily.known:
            return daily
        why_not_daily = f"; no daily profile: {daily.basis}"
    if recent is None:
        return Forecast(None, None, None, f"no recent series to fit a trend{why_not_daily}", history_s)
    trend = trend_forecast(recent, now_ts, history_s)
    if not trend.known and why_not_daily:
        return Forecast(None, None, None, f"{trend.basis}{why_not_daily}", history_s)
    return trend


def daily_profile_forecast(hourly: pd.Series, now_ts: float, history_s: float) -> Forecast:
    """Each hour of the day's mean over the stored days × the recent level; the next 24 hours' highest.

    The profile leaves out the last LEVEL_WINDOW_S, which sets the level: a day that started 20% up is
    forecast 20% up, not diluted by its own morning."""
    known = hourly.dropna()
    known = known[known.index <= now_ts]
    level_from = now_ts - LEVEL_WINDOW_S
    base, recent = known[known.index < level_from], known[known.index >= level_from]
    profile = base.groupby(_hour_of_day(base.index)).mean()
    missing = sorted(set(range(24)) - {int(h) for h in profile.index})
    if missing:
        return Forecast(None, None, None, f"no demand stored at {len(missing)} hour(s) of the day", history_s)
    if recent.empty:
        return Forecast(
            None,
            None,
            None,
            f"no demand measured in the last {LEVEL_WINDOW_S / 3600:.0f} h to scale the profile to",
            history_s,
        )
    expected = float(profile.reindex(_hour_of_day(recent.index)).sum())
    # A profile that expects nothing at these hours cannot be scaled: take it as it is.
    level = float(recent.sum()) / expected if expected > 0 else 1.0
    peak_hour = int(profile.index.to_numpy()[int(np.argmax(profile.to_numpy()))])
    this_hour_ts = math.floor(now_ts / PROFILE_BUCKET_S) * PROFILE_BUCKET_S
    this_hour = int((this_hour_ts % DAY_S) // PROFILE_BUCKET_S)
    peak_ts = this_hour_ts + ((peak_hour - this_hour) % 24) * PROFILE_BUCKET_S
    return Forecast(
        float(profile.max()) * level, peak_ts, "daily profile", history_words(history_s), history_s
    )


def _hour_of_day(index: pd.Index) -> np.ndarray:
    return ((index.to_numpy(np.float64) % DAY_S) // PROFILE_BUCKET_S).astype(np.int64)


def trend_forecast(recent: pd.Series, now_ts: float, history_s: float) -> Forecast:
    """The least-squares line through the last TREND_WINDOW_S, extrapolated as far ahead as it reaches back
    (at most HORIZON_S); its highest point (now or at the horizon), never below zero."""
    known = recent.dropna()
    # Buckets reaching into the window (a 5-min bucket straddling its start counts: the window is "6 h").
    known = known[(known.index + TREND_BUCKET_S > now_ts - TREND_WINDOW_S) & (known.index <= now_ts)]
    if len(known) < TREND_MIN_POINTS:
        return Forecast(
            None,
            None,
            None,
            f"too few measured buckets for a trend ({len(known)} of {TREND_MIN_POINTS} needed)",
            history_s,
        )
    ts = known.index.to_numpy(np.float64) + TREND_BUCKET_S / 2  # a bucket's mean sits at its middle
    fitted_s = min(now_ts - float(known.index.min()), TREND_WINDOW_S)
    slope, intercept = np.polyfit(ts - now_ts, known.to_numpy(np.float64), 1)
    horizon_s = min(HORIZON_S, fitted_s)
    at_now, at_horizon = float(intercept), float(intercept + slope * horizon_s)
    peak, peak_ts = (at_horizon, now_ts + horizon_s) if at_horizon > at_now else (at_now, now_ts)
    basis = f"last {_hours(fitted_s)}, next {_hours(horizon_s)}"
    return Forecast(max(peak, 0.0), peak_ts, "linear trend", basis, history_s)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}".removesuffix(".0") + " h"
