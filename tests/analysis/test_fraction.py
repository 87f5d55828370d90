"""The fraction's arithmetic: the seed's 6.35× split, recipe ratios, the decay fit, the batch trend."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.fraction import (
    MIN_SAMPLES,
    NOISE_FRACTION,
    FractionRatio,
    FractionSummary,
    describe_ratio,
    fit_log2,
    summarize,
    trend,
)

# Seed §09: concurrency 1, ISL 1K → 64K.
STEP_1K_S, STEP_64K_S = 0.0228, 0.0796
ACCEPT_1K, ACCEPT_64K = 2.514, 1.440
MEASURED = 6.35


def side(label: str, accept: float, step_s: float, tok_s: float) -> FractionSummary:
    return FractionSummary(label, accept, step_s, tok_s, samples=10, servers=1)


def seed_split() -> FractionRatio:
    fast = ACCEPT_1K / STEP_1K_S
    return FractionRatio(
        side("1K", ACCEPT_1K, STEP_1K_S, fast), side("64K", ACCEPT_64K, STEP_64K_S, fast / MEASURED)
    )


def test_seed_loss_splits_into_step_and_accept_factors() -> None:
    split = seed_split()
    assert split.measured == pytest.approx(MEASURED)
    assert split.step_factor == pytest.approx(STEP_64K_S / STEP_1K_S)  # 3.49×, attention cost
    assert split.accept_factor == pytest.approx(ACCEPT_1K / ACCEPT_64K)  # 1.75×, draft degradation
    assert split.predicted == pytest.approx(split.step_factor * split.accept_factor)
    assert split.residual == pytest.approx(MEASURED / split.predicted)
    assert round(split.step_factor, 2) == 3.49
    assert round(split.accept_factor, 2) == 1.75
    assert abs(split.residual - 1.0) < 0.05  # the seed's "4% residual"


def test_shares_are_log_factor_over_log_product() -> None:
    split = seed_split()
    shares = split.shares
    assert shares is not None
    step_share, accept_share = shares
    assert step_share + accept_share == pytest.approx(1.0)
    assert step_share == pytest.approx(math.log(split.step_factor) / math.log(split.predicted))
    assert step_share > accept_share  # the step got more expensive faster than the draft got worse


def test_opposite_factors_have_no_shares() -> None:
    # Seed §06: block size 3 gives up 15% of the numerator for a 2.01× cheaper denominator (1.68× net).
    tuned = side("bs3", 2.552, 0.2553, 10.0)
    default = side("default", 2.999, 0.5127, 10.0 / 1.68)
    ratio = FractionRatio(tuned, default)
    assert ratio.accept_factor < 1 < ratio.step_factor
    assert ratio.shares is None
    assert round(ratio.measured, 2) == 1.68
    assert "opposite directions" in describe_ratio(ratio)


def test_description_carries_the_numbers_and_the_residual() -> None:
    text = describe_ratio(seed_split())
    assert "**6.35×** faster" in text
    assert "3.49×" in text
    assert "1.75×" in text
    assert "79.6 → 22.8 ms" in text
    assert "residual 1.04×" in text


@pytest.mark.parametrize(
    ("measured", "noise", "within"),
    [
        (1.05, NOISE_FRACTION, True),
        (0.92, NOISE_FRACTION, True),
        (1.12, NOISE_FRACTION, False),
        (1.12, 0.15, True),
    ],
)
def test_within_noise(measured: float, noise: float, within: bool) -> None:
    ratio = FractionRatio(side("a", 2.5, 0.1, 25.0 * measured), side("b", 2.5, 0.1, 25.0))
    assert ratio.within_noise(noise) is within
    assert ("within noise" in describe_ratio(ratio, noise)) is within


def test_summarize_measures_throughput_from_the_counters() -> None:
    frame = pd.DataFrame(
        {
            "target": ["a", "a", "b", "b"],
            "up": [True, True, True, False],
            "accept_length": [2.0, 2.0, 3.0, None],
            "step_latency_s": [0.1, 0.1, 0.1, None],
            "running": [10.0, 30.0, 20.0, None],
            "output_tok_s": [150.0, 450.0, 500.0, None],
            "per_request_tok_s": [20.0, 20.0, 30.0, None],
        }
    )
    repeats = MIN_SAMPLES  # the same four scrapes, MIN_SAMPLES times over
    summary = summarize(pd.concat([frame] * repeats, ignore_index=True), "x")
    assert summary is not None
    assert summary.samples == 3 * repeats  # the down samples are dropped
    assert summary.servers == 2
    assert summary.accept_length == pytest.approx(7.0 / 3)
    assert summary.tok_s_per_request == pytest.approx((150 + 450 + 500) / (10 + 30 + 20))
    assert summarize(pd.concat([frame] * (repeats // 3), ignore_index=True), "too few") is None


def test_a_far_residual_is_flagged() -> None:
    # The counters say 3× what accept ÷ step predicts: the page must not present the split as sound.
    ratio = FractionRatio(side("a", 2.5, 0.1, 3 * 25.0), side("b", 2.5, 0.2, 12.5))
    assert ratio.residual == pytest.approx(3.0)
    assert "**Caution:**" in describe_ratio(ratio)
    assert "**Caution:**" not in describe_ratio(seed_split())  # the seed's 4% residual is fine


def test_log2_fit_recovers_a_decay_per_doubling() -> None:
    context = pd.Series([1024.0, 2048, 4096, 8192, 16384, 32768, 65536])
    accept = pd.Series(2.5 - 0.18 * np.log2(context / 1024))
    fit = fit_log2(context, accept)
    assert fit is not None
    assert fit.slope_per_doubling == pytest.approx(-0.18)
    assert fit.intercept == pytest.approx(2.5)
    assert fit.r2 == pytest.approx(1.0)
    assert trend(fit) == "falling"
    assert float(fit.predict(65536.0)) == pytest.approx(2.5 - 0.18 * 6)


def test_seed_batch_jitter_is_flat_and_narrow_ranges_are_not_fitted() -> None:
    running = pd.Series([1.0, 2, 4, 8, 16, 32, 48])
    accept = pd.Series([2.61, 2.55, 2.473, 2.70, 2.732, 2.60, 2.58])  # seed §08: 2.473–2.732, no trend
    fit = fit_log2(running, accept, x_ref=1.0)
    assert fit is not None
    assert trend(fit) == "flat"
    assert fit_log2(pd.Series([8.0, 9, 10, 12]), pd.Series([2.0, 2.1, 2.2, 2.3])) is None  # < one doubling
