"""The statistics the rules and the analyses share: Student's t, Prometheus-style quantiles, least squares."""

from __future__ import annotations

import math

import pytest

from analysis.stats import fit_line, quantile, student_t_cdf


@pytest.mark.parametrize(
    ("t", "df", "expected"),
    [
        (-2.228, 10, 0.025),  # textbook two-sided 5% critical value
        (-1.812, 10, 0.05),
        (-2.764, 10, 0.01),
        (-3.169, 10, 0.005),
        (-1.96, 100_000, 0.025),  # large df: the normal distribution
        (0.0, 7, 0.5),
        (2.228, 10, 0.975),
    ],
)
def test_student_t_cdf_matches_tables(t: float, df: float, expected: float) -> None:
    assert student_t_cdf(t, df) == pytest.approx(expected, abs=2e-4)


def test_quantile_interpolates_like_prometheus_quantile_over_time() -> None:
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.1) == pytest.approx(1.3)  # rank 0.1 × 3 = 0.3
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.9) == pytest.approx(3.7)
    assert quantile([5.0], 0.9) == 5.0


def test_fit_recovers_a_line_and_calls_a_clean_decline_significant() -> None:
    xs = [float(i) for i in range(20)]
    fit = fit_line(xs, [3.0 - 0.1 * x for x in xs])
    assert fit is not None
    assert fit.slope == pytest.approx(-0.1)
    assert fit.r == pytest.approx(-1.0)
    assert fit.p_negative < 1e-100
    assert fit.predict(10.0) == pytest.approx(2.0)


def test_fit_of_unrelated_noise_is_not_significant() -> None:
    xs = [float(i) for i in range(40)]
    ys = [2.5 + 0.05 * math.sin(i * 2.7) for i in range(40)]  # jitter with no trend
    fit = fit_line(xs, ys)
    assert fit is not None
    assert fit.p_negative > 0.05


def test_no_fit_without_spread_in_x() -> None:
    assert fit_line([3.0] * 10, [float(i) for i in range(10)]) is None
    assert fit_line([1.0, 2.0], [1.0, 2.0]) is None
