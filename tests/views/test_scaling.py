"""The scaling curve's knee and its verdict on the seed's own numbers; time to saturation from a trend."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from views.fraction import MIN_SAMPLES
from views.scaling import (
    KNEE_ELASTICITY,
    TREND_HORIZON_S,
    TREND_WINDOW_S,
    Saturation,
    elasticities,
    find_knee,
    knee_verdict,
    saturation_frame,
    time_to_bind,
)

# Seed, "Scaling, and where the knee is": 16 → 32 buys 51% more throughput, TTFT 849 → 888 ms; 32 → 48 buys
# 11.7% more while TTFT jumps to 2,271 ms and TPOT rises 29.67 → 38.06 ms.
T16 = 600.0
SEED_CURVE = pd.DataFrame(
    {
        "concurrency": ["9–16", "17–32", "33–64"],
        "running": [16.0, 32.0, 48.0],
        "output_tok_s": [T16, T16 * 1.51, T16 * 1.51 * 1.117],
        "per_request_tok_s": [T16 / 16, T16 * 1.51 / 32, T16 * 1.51 * 1.117 / 48],
        "ttft_s": [0.849, 0.888, 2.271],
        "tpot_s": [math.nan, 0.02967, 0.03806],
        "samples": [40, 40, 40],
    }
)


def test_the_seed_curve_bends_at_32() -> None:
    steps = elasticities(SEED_CURVE)
    assert steps[0] == pytest.approx(math.log(1.51) / math.log(2))
    assert steps[1] == pytest.approx(math.log(1.117) / math.log(1.5))
    knee = find_knee(SEED_CURVE)
    assert knee is not None
    assert knee.running == 32
    verdict = knee_verdict(SEED_CURVE, knee)
    assert "16 → 32 running buys +51.0% throughput (TTFT 849 ms → 888 ms" in verdict
    assert "32 → 48 running buys +11.7% throughput (TTFT 888 ms → 2,271 ms, TPOT 30 ms → 38 ms)" in verdict
    assert "stop at 32 if latency matters" in verdict


def test_a_curve_that_keeps_scaling_has_no_knee() -> None:
    linear = SEED_CURVE.assign(output_tok_s=SEED_CURVE["running"] * 30.0)
    assert find_knee(linear) is None
    assert "No clear knee up to 48 running" in knee_verdict(linear, None)
    assert "needs 3" in knee_verdict(SEED_CURVE.head(2), None)
    assert KNEE_ELASTICITY < 1


def test_time_to_bind_extrapolates_the_recent_trend() -> None:
    now = 1_800_000_000.0
    ts = [now - 1500 + 30 * k for k in range(51)]
    # The state pool climbs 40% → 70% over the last 25 minutes (72 pts/h): 90% is 20 / 72 h = 16.7 min away.
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
    frame = saturation_frame(time_to_bind(history, 0.90, now))
    row = frame.iloc[0]
    assert row["binds_first"] == "state pool"
    assert row["binds_in_min"] == pytest.approx(0.20 / 0.72 * 60, rel=0.01)
    assert row["KV cache"].startswith("10% (+0 pts/h)")


def _time_to_bind_per_group(history: pd.DataFrame, binds_at: float, now_ts: float) -> list[Saturation]:
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
    pools = {"state pool": "state_pool_usage", "KV cache": "kv_usage", "request cap": "request_cap"}
    for server, rows in recent.groupby("target"):
        for pool, column in pools.items():
            points = rows[["ts", column]].dropna()
            if len(points) < MIN_SAMPLES:
                continue
            slope_per_s, _ = np.polyfit(points["ts"] - now_ts, points[column], 1)
            usage = float(points.sort_values("ts")[column].iloc[-1])
            if usage >= binds_at:
                binds: float | None = 0.0
            elif slope_per_s > 0:
                eta = (binds_at - usage) / slope_per_s
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
    for frame in (history, history.sort_values(["target", "ts"], kind="stable"), history.iloc[:40]):
        assert time_to_bind(frame, 0.9, now) == _time_to_bind_per_group(frame, 0.9, now)
    assert time_to_bind(history.iloc[:0], 0.9, now) == []
    assert time_to_bind(history.assign(up=False), 0.9, now) == []
