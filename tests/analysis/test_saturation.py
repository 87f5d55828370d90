"""Time to saturation: each pool's recent trend extrapolated to where it binds (the alert rules' levels)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import pytest

from alerts.rules import capacity_thresholds
from analysis.capacity import Pool
from analysis.fraction import MIN_SAMPLES
from analysis.saturation import TREND_HORIZON_S, TREND_WINDOW_S, Saturation, saturation_frame, time_to_bind


def test_time_to_bind_extrapolates_the_recent_trend() -> None:
    now = 1_800_000_000.0
    ts = [now - 1500 + 30 * k for k in range(51)]
    # The state pool climbs 40% → 70% over the last 25 minutes (72 pts/h): it binds where StatePoolSaturation
    # fires (95% by default: 25 / 72 h = 20.8 min away).
    history = pd.DataFrame(
        {
            "target": "a",
            "ts": ts,
            "up": True,
            "state_pool_usage": [0.40 + 0.30 * k / 50 for k in range(51)],
            "kv_usage": 0.1,
            "running": 10.0,
            "max_running": 48.0,
        }
    )
    binds_at = capacity_thresholds().binds_at()
    frame = saturation_frame(time_to_bind(history, binds_at, now))
    row = frame.iloc[0]
    assert row["binds_first"] == "state pool"
    assert row["binds_in_min"] == pytest.approx((binds_at["state pool"] - 0.70) / 0.72 * 60, rel=0.01)
    assert row["KV cache"].startswith("10% (+0 pts/h)")


def _time_to_bind_per_group(
    history: pd.DataFrame, binds_at: Mapping[Pool, float], now_ts: float
) -> list[Saturation]:
    """The pandas version time_to_bind replaced (the reference its numbers must equal)."""
    # `duplicates` pairs the arithmetic below with views/scaling.py: deliberately, a test oracle restates the
    # replaced code instead of calling the code under test.
    if history.empty:
        return []
    recent = history[(history["ts"] >= now_ts - TREND_WINDOW_S) & history["up"].astype(bool)]
    recent = recent.assign(
        request_cap=recent["running"] / recent["max_running"].where(recent["max_running"] > 0)
    )
    out = []
    pools: dict[Pool, str] = {
        "state pool": "state_pool_usage",
        "KV cache": "kv_usage",
        "request cap": "request_cap",
    }
    for server, rows in recent.groupby("target"):
        for pool, column in pools.items():
            points = rows[["ts", column]].dropna()
            if len(points) < MIN_SAMPLES:
                continue
            slope_per_s, _ = np.polyfit(points["ts"] - now_ts, points[column], 1)
            usage = float(points.sort_values("ts")[column].iloc[-1])
            if usage >= binds_at[pool]:
                binds: float | None = 0.0
            elif slope_per_s > 0:
                eta = (binds_at[pool] - usage) / slope_per_s
                binds = float(eta) if eta <= TREND_HORIZON_S else None
            else:
                binds = None
            out.append(Saturation(str(server), pool, usage, float(slope_per_s) * 3600.0, binds))
    return out


def test_time_to_bind_equals_the_per_group_pandas_version() -> None:
    rng = np.random.default_rng(11)
    n = 8000
    now = 1_700_000_000.0
    history = pd.DataFrame(
        {
            "ts": now - rng.choice(np.arange(0.0, 2400.0, 5.0), n),  # ties, rows older than the window
            "target": rng.choice([f"k3-{i:03d}" for i in range(60)], n),
            "up": rng.random(n) > 0.05,
            "running": np.where(rng.random(n) > 0.1, rng.uniform(0, 60, n), np.nan),
            "max_running": rng.choice([48.0, 0.0, np.nan, 64.0], n),
            "state_pool_usage": np.where(rng.random(n) > 0.2, rng.uniform(0.5, 1.0, n), np.nan),
            "kv_usage": np.where(rng.random(n) > 0.2, rng.uniform(0.0, 0.5, n), np.nan),
        }
    )
    # A level per pool, each different, so a pool extrapolated to another pool's level would differ.
    binds_at: dict[Pool, float] = {"state pool": 0.93, "KV cache": 0.4, "request cap": 1.0}
    for frame in (history, history.sort_values(["target", "ts"], kind="stable"), history.iloc[:40]):
        assert time_to_bind(frame, binds_at, now) == _time_to_bind_per_group(frame, binds_at, now)
    assert time_to_bind(history.iloc[:0], binds_at, now) == []
    assert time_to_bind(history.assign(up=False), binds_at, now) == []
