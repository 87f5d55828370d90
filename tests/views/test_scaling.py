"""The scaling curve's knee and its verdict on the seed's own numbers; time to saturation from a trend."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from views.scaling import (
    KNEE_ELASTICITY,
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
