"""The scaling curve's knee and its verdict on the seed's own numbers."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest

from analysis.fraction import MIN_SAMPLES
from analysis.scaling import (
    CURVE_COLUMNS,
    KNEE_ELASTICITY,
    elasticities,
    find_knee,
    knee_verdict,
    scaling_curve,
)

# Seed, "Scaling, and where the knee is": 16 → 32 buys 51% more throughput, TTFT 849 → 888 ms; 32 → 48 buys
# 11.7% more while TTFT jumps to 2,271 ms and TPOT rises 29.67 → 38.06 ms.
T16 = 600.0
SEED_CURVE = pd.DataFrame(
    {
        "concurrency": ["9–16", "17–32", "33–64"],
        "running": [16.0, 32.0, 48.0],
        "modelled_output_tok_s": [T16, T16 * 1.51, T16 * 1.51 * 1.117],
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
    assert knee.modelled_output_tok_s == pytest.approx(T16 * 1.51)  # what one replica serves at the knee
    verdict = knee_verdict(SEED_CURVE, knee)
    assert "16 → 32 running buys +51.0% throughput (TTFT 849 ms → 888 ms" in verdict
    assert "32 → 48 running buys +11.7% throughput (TTFT 888 ms → 2,271 ms, TPOT 30 ms → 38 ms)" in verdict
    assert "stop at 32 if latency matters" in verdict


def test_a_curve_that_keeps_scaling_has_no_knee() -> None:
    linear = SEED_CURVE.assign(modelled_output_tok_s=SEED_CURVE["running"] * 30.0)
    assert find_knee(linear) is None
    assert "No clear knee up to 48 running" in knee_verdict(linear, None)
    assert "needs 3" in knee_verdict(SEED_CURVE.head(2), None)
    assert KNEE_ELASTICITY < 1


def test_the_curve_models_throughput_from_the_fraction_not_the_counter() -> None:
    """Each level's throughput is the median of running × accept ÷ step (modelled), whatever the completion
    counter said; levels with fewer than MIN_SAMPLES samples are left out."""
    rows = []
    for running, accept, step_s, n in (
        (16.0, 2.9, 0.05, MIN_SAMPLES),
        (32.0, 2.6, 0.07, MIN_SAMPLES),
        (48, 2.5, 0.09, 3),
    ):
        for k in range(n):
            rows.append(
                {
                    "concurrency": {16.0: "9–16", 32.0: "17–32"}.get(running, "33–64"),
                    "running": running,
                    "accept_length": accept,
                    "step_latency_s": step_s * (1 + 0.01 * k),
                    "output_tok_s": 1.0,  # a bursty counter: must not bend the curve
                    "ttft_s": 0.5,
                    "tpot_s": step_s / accept,
                }
            )
    curve = scaling_curve(pd.DataFrame(rows))
    assert tuple(curve.columns) == CURVE_COLUMNS
    assert list(curve["concurrency"]) == ["9–16", "17–32"]
    expected = [
        statistics.median(r * a / (s * (1 + 0.01 * k)) for k in range(MIN_SAMPLES))
        for r, a, s in ((16.0, 2.9, 0.05), (32.0, 2.6, 0.07))
    ]
    assert list(curve["modelled_output_tok_s"]) == pytest.approx(expected)


def test_a_level_mixed_with_its_ramp_keeps_the_levels_throughput() -> None:
    """A bin holds its level and the ramp into it (running 10 → 16 in the 9–16 bin): the curve's point is the
    level's (running 16 and its throughput), not pulled toward the ramp, so the knee does not move with how
    much of a ramp a range happened to catch."""

    def row(running: float) -> dict[str, object]:
        step_s = 0.02 + 0.002 * running  # throughput rises with running, more slowly
        return {
            "concurrency": "9–16",
            "running": running,
            "accept_length": 2.5,
            "step_latency_s": step_s,
            "ttft_s": 0.5,
            "tpot_s": step_s / 2.5,
        }

    level = [row(16.0)] * (2 * MIN_SAMPLES)
    ramp = [row(r) for r in (10.0, 11.0, 12.0, 13.0, 14.0, 15.0)] * (MIN_SAMPLES // 6 + 1)
    curve = scaling_curve(pd.DataFrame(level + ramp))
    assert list(curve["running"]) == [16.0]
    assert curve["modelled_output_tok_s"].iloc[0] == pytest.approx(16.0 * 2.5 / (0.02 + 0.002 * 16.0))
