"""Small, dependency-free statistics for the rules: least squares, Pearson's r, Student's t, quantiles (and
a table cell read as a number or unknown, ``float_or_nan``).

Population moments and Prometheus's quantile interpolation, so the exported PromQL computes the same numbers
(``avg_over_time``, ``stddev_over_time``, ``quantile_over_time``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def float_or_nan(value: object) -> float:
    """A table cell as a number: None, or anything that is not one, is NaN (unknown, never 0)."""
    if value is None:
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def quantile(values: Sequence[float], phi: float) -> float:
    """The φ-quantile with Prometheus's ``quantile_over_time`` interpolation (rank φ·(n−1), linear)."""
    ordered = sorted(values)
    rank = phi * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return ordered[low] * (1 - weight) + ordered[high] * weight


@dataclass(frozen=True, slots=True)
class LineFit:
    """Ordinary least squares of y on x, with the evidence for a *negative* association."""

    n: int
    x_mean: float
    y_mean: float
    slope: float
    r: float  # Pearson's correlation coefficient
    t_stat: float  # r·sqrt((n−2)/(1−r²)), Student's t with n−2 degrees of freedom
    p_negative: float  # one-sided p-value of "y falls as x grows" (small = significant)

    def predict(self, x: float) -> float:
        return self.y_mean + self.slope * (x - self.x_mean)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """Fit y = a + b·x; None when x does not vary or fewer than 3 points (no slope to speak of)."""
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    x_mean, y_mean = sum(xs) / n, sum(ys) / n
    # One centred pass (numerically fine for a few thousand points; runs per target per cycle).
    sxx = sxy = syy = 0.0
    for x, y in zip(xs, ys, strict=True):
        dx, dy = x - x_mean, y - y_mean
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
    var_x, var_y, cov = sxx / n, syy / n, sxy / n
    if var_x <= 1e-18 * max(1.0, x_mean * x_mean):
        return None

    slope = cov / var_x
    if var_y <= 0:
        return LineFit(n, x_mean, y_mean, 0.0, 0.0, 0.0, 0.5)
    r = max(-1.0, min(1.0, cov / math.sqrt(var_x * var_y)))
    t_stat = math.copysign(math.inf, r) if abs(r) >= 1.0 else r * math.sqrt((n - 2) / (1 - r * r))

    return LineFit(n, x_mean, y_mean, slope, r, t_stat, student_t_cdf(t_stat, n - 2))


def student_t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom (exact: regularized incomplete beta)."""
    if math.isinf(t):
        return 0.0 if t < 0 else 1.0
    if df <= 0:
        return 0.5
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t < 0 else 1.0 - tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by Lentz's continued fraction (Numerical Recipes §6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a - 1.0 + m2) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 3e-14:
            break
    return h
