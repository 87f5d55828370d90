"""The next 24 hours' peak: the daily profile once two days are stored, the trend before, unknown before an
hour — on series whose answer follows from how they were built."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.forecast import (
    DAY_S,
    PROFILE_BUCKET_S,
    TREND_BUCKET_S,
    forecast_peak,
)

MIDNIGHT = 1_800_000_000.0 - 1_800_000_000.0 % DAY_S  # a UTC midnight
PEAK_HOUR = 14


def shape(hour: float) -> float:
    """A daily cycle peaking at 14:00 (1.5×) with its trough at 02:00 (0.5×)."""
    return 1.0 + 0.5 * math.sin(2 * math.pi * (hour - PEAK_HOUR + 6) / 24)


def hourly(levels: list[float], last_hour_ts: float) -> pd.Series:
    """Hourly buckets from MIDNIGHT up to (not including) ``last_hour_ts``: day d at ``levels[d]`` × shape."""
    starts = np.arange(MIDNIGHT, last_hour_ts, PROFILE_BUCKET_S)
    values = [levels[int((t - MIDNIGHT) // DAY_S)] * shape((t % DAY_S) / 3600) for t in starts]
    return pd.Series(values, index=starts)


def test_the_daily_profile_forecasts_the_peak_hour_at_todays_level() -> None:
    # Two days at 1,000, the third grown to 1,200: its morning says the whole day is 20% up.
    now = MIDNIGHT + 2 * DAY_S + 10.5 * 3600  # 10:30 on the third day; hours up to 10:00 are complete
    series = hourly([1000.0, 1000.0, 1200.0], MIDNIGHT + 2 * DAY_S + 10 * 3600)
    found = forecast_peak(series, None, now, MIDNIGHT)
    assert found.method == "daily profile"
    assert found.basis == "2 days"  # 2 days and 10.5 hours
    assert found.peak_tok_s == pytest.approx(1200.0 * shape(PEAK_HOUR))
    assert found.peak_ts == MIDNIGHT + 2 * DAY_S + PEAK_HOUR * 3600  # today at 14:00


def test_after_the_peak_hour_the_forecast_is_tomorrows() -> None:
    now = MIDNIGHT + 2 * DAY_S + 20.25 * 3600
    series = hourly([800.0, 800.0, 800.0], MIDNIGHT + 2 * DAY_S + 20 * 3600)
    found = forecast_peak(series, None, now, MIDNIGHT)
    assert found.peak_tok_s == pytest.approx(800.0 * shape(PEAK_HOUR))
    assert found.peak_ts == MIDNIGHT + 3 * DAY_S + PEAK_HOUR * 3600


def linear(start_ts: float, end_ts: float, at_start: float, per_hour: float) -> pd.Series:
    """5-minute buckets whose mean (at the bucket's middle) lies on a line."""
    starts = np.arange(start_ts, end_ts, TREND_BUCKET_S)
    middles = starts + TREND_BUCKET_S / 2
    return pd.Series(at_start + per_hour * (middles - start_ts) / 3600, index=starts)


def test_before_two_days_the_trend_is_extrapolated_as_far_as_it_reaches_back() -> None:
    start = MIDNIGHT
    now = start + 4 * 3600.0
    recent = linear(start, now, 500.0, 100.0)
    found = forecast_peak(pd.Series(dtype="float64"), recent, now, start)
    assert found.method == "linear trend"
    assert found.basis == "last 4 h, next 4 h"
    assert found.peak_tok_s == pytest.approx(500.0 + 100.0 * 8)  # the line 4 h ahead
    assert found.peak_ts == now + 4 * 3600


def test_a_falling_trend_peaks_now_and_never_below_zero() -> None:
    start = MIDNIGHT
    now = start + 6 * 3600.0
    falling = linear(start, now, 600.0, -100.0)
    found = forecast_peak(pd.Series(dtype="float64"), falling, now, start)
    assert found.peak_ts == now
    assert found.peak_tok_s == pytest.approx(0.0, abs=1e-6)  # 600 − 6 × 100: the line at now


def test_too_short_a_history_is_unknown_and_says_why() -> None:
    start = MIDNIGHT
    now = start + 40 * 60.0
    found = forecast_peak(pd.Series(dtype="float64"), linear(start, now, 500.0, 10.0), now, start)
    assert found.peak_tok_s is None
    assert found.method is None
    assert found.basis == "history too short: 40 min stored (a trend needs 1 h, a daily profile 2 days)"
    assert forecast_peak(pd.Series(dtype="float64"), None, now, None).basis.startswith(
        "history too short: 0 min stored"
    )


def test_a_profile_with_missing_hours_falls_back_to_the_trend() -> None:
    now = MIDNIGHT + 3 * DAY_S + 8 * 3600
    series = hourly([1000.0, 1000.0, 1000.0, 1000.0], MIDNIGHT + 3 * DAY_S + 8 * 3600)
    gaps = series[((series.index % DAY_S) // 3600) != 3]  # the collector never ran at 03:00
    recent = linear(now - 6 * 3600, now, 700.0, 20.0)
    found = forecast_peak(gaps, recent, now, MIDNIGHT)
    assert found.method == "linear trend"
    unknown = forecast_peak(gaps, recent.iloc[:3], now, MIDNIGHT)
    assert unknown.peak_tok_s is None
    assert "no daily profile: no demand stored at 1 hour(s) of the day" in unknown.basis
