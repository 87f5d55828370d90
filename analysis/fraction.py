"""The accept/step fraction as arithmetic: summaries, ratio splits, the context decay fit, the batch trend.

throughput = accept length ÷ step latency, so the ratio of two throughputs factorises exactly into an
accept-length ratio (numerator) and a step-latency ratio (denominator); what the counters measure beyond
that is the residual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analysis.words import times
from collectors.model import loss_shares

# Run-to-run noise of one throughput measurement (seed: 8–10% on random-token traffic). A ratio closer to 1
# than this is reported as "within noise"; the Recipes page lets the reader change it.
NOISE_FRACTION = 0.10

# Fewer samples than this on one side of a comparison and the page says so instead of printing a ratio
# (ten scrapes: SGLang counts generated tokens at request completion, so a few intervals' rate is bursty).
MIN_SAMPLES = 10
# A residual further from 1× than this means the counters disagree with accept ÷ step: say so.
RESIDUAL_WARNING = 0.25


def measured_tok_s_per_request(frame: pd.DataFrame) -> pd.Series:
    """Output tok/s ÷ running requests: the counter-measured per-request rate (NaN when idle or unknown)."""
    running = frame["running"].where(frame["running"] > 0)
    return frame["output_tok_s"] / running


@dataclass(frozen=True, slots=True)
class FractionSummary:
    """One side of a comparison: mean accept length, mean step latency and the measured per-request rate."""

    label: str
    accept_length: float  # tokens per verify step
    step_latency_s: float  # wall time of one verify step
    tok_s_per_request: float  # measured by the counters (output tok/s ÷ running), not accept ÷ step
    samples: int
    servers: int

    @property
    def predicted_tok_s(self) -> float:
        return self.accept_length / self.step_latency_s


def summarize(frame: pd.DataFrame, label: str) -> FractionSummary | None:
    """Summarise the samples of one bin / window / recipe; None when too few usable samples."""
    usable = frame[(frame["accept_length"] > 0) & (frame["step_latency_s"] > 0)]
    if "up" in usable:
        usable = usable[usable["up"].astype(bool)]
    if len(usable) < MIN_SAMPLES:
        return None
    measured = measured_tok_s_per_request(usable)
    running = usable["running"].where(measured.notna())
    if running.sum() > 0:
        # Σ output ÷ Σ running weights each sample by its batch, as one long run would.
        tok_s = float(usable["output_tok_s"].where(measured.notna()).sum() / running.sum())
    elif usable["per_request_tok_s"].notna().any():
        tok_s = float(usable["per_request_tok_s"].mean())
    else:
        tok_s = float(usable["accept_length"].mean() / usable["step_latency_s"].mean())
    return FractionSummary(
        label=label,
        accept_length=float(usable["accept_length"].mean()),
        step_latency_s=float(usable["step_latency_s"].mean()),
        tok_s_per_request=tok_s,
        samples=len(usable),
        servers=int(usable["target"].nunique()) if "target" in usable else 1,
    )


@dataclass(frozen=True, slots=True)
class FractionRatio:
    """How many times faster ``a`` is than ``b``, split along the fraction.

    measured = a.tok_s / b.tok_s; accept_factor = a.accept / b.accept (numerator);
    step_factor = b.step / a.step (denominator: > 1 when a's step is cheaper); predicted = their product;
    residual = measured / predicted; each factor's share of the change = log(factor) / log(predicted).
    """

    a: FractionSummary
    b: FractionSummary

    @property
    def measured(self) -> float:
        return self.a.tok_s_per_request / self.b.tok_s_per_request

    @property
    def accept_factor(self) -> float:
        return self.a.accept_length / self.b.accept_length

    @property
    def step_factor(self) -> float:
        return self.b.step_latency_s / self.a.step_latency_s

    @property
    def predicted(self) -> float:
        return self.accept_factor * self.step_factor

    @property
    def residual(self) -> float:
        return self.measured / self.predicted

    @property
    def shares(self) -> tuple[float, float] | None:
        """(step share, accept share) of log(predicted); None when the two factors pull in opposite directions
        or the change is too small to split."""
        return loss_shares(self.step_factor, self.accept_factor)

    def within_noise(self, noise: float = NOISE_FRACTION) -> bool:
        return abs(self.measured - 1.0) <= noise


def describe_ratio(ratio: FractionRatio, noise: float = NOISE_FRACTION) -> str:
    """The split in one paragraph (markdown), the way the seed explains its 6.35× collapse."""
    a, b = ratio.a.label, ratio.b.label
    if ratio.within_noise(noise):
        head = (
            f"**{a}** and **{b}** differ by {times(ratio.measured)} in measured per-request throughput — "
            f"**within noise** (±{noise:.0%} run-to-run)."
        )
    elif ratio.measured >= 1:
        head = f"**{a}** is **{times(ratio.measured)}** faster per request than **{b}** (measured)."
    else:
        head = f"**{a}** is **{times(1 / ratio.measured)}** slower per request than **{b}** (measured)."
    body = (
        f" The fraction predicts {times(ratio.predicted)} = step latency {times(ratio.step_factor)} "
        f"({ratio.b.step_latency_s * 1000:.1f} → {ratio.a.step_latency_s * 1000:.1f} ms, denominator) × "
        f"accept length {times(ratio.accept_factor)} "
        f"({ratio.b.accept_length:.3f} → {ratio.a.accept_length:.3f} tokens/step, numerator); "
        f"residual {times(ratio.residual)} (measured ÷ predicted)."
    )
    shares = ratio.shares
    if shares is None:
        tail = (
            " The two factors pull in opposite directions, so neither has a share of the change on its own."
        )
    else:
        step_share, accept_share = shares
        tail = (
            f" Share of the change: **{step_share:.0%} step latency**, **{accept_share:.0%} accept length**. "
            f"Fixing the denominator alone recovers at most {times(ratio.step_factor)}; "
            f"the numerator alone at most {times(ratio.accept_factor)}."
        )
    if abs(ratio.residual - 1.0) > RESIDUAL_WARNING:
        tail += (
            f" **Caution:** the residual {times(ratio.residual)} is far from 1×: the measured rate "
            "(output ÷ running, from counters SGLang bumps at request completion) disagrees with "
            "accept ÷ step: "
            f"too few or too bursty samples ({ratio.a.samples} and {ratio.b.samples}); widen the range."
        )
    return head + body + tail


# -- accept length against context and batch -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Log2Fit:
    """y = intercept + slope × log2(x / x_ref): a straight line per doubling of x."""

    intercept: float  # y at x_ref
    slope_per_doubling: float
    r2: float
    points: int
    x_min: float
    x_max: float
    x_ref: float = 1024.0

    def predict(self, x: np.ndarray | pd.Series | float) -> np.ndarray:
        return self.intercept + self.slope_per_doubling * np.log2(np.asarray(x, dtype=float) / self.x_ref)

    def relative_change(self) -> float:
        """Fitted change across the observed x range, as a fraction of the fitted value at the low end."""
        start = float(self.predict(self.x_min))
        end = float(self.predict(self.x_max))
        return (end - start) / start if start else math.nan


def fit_log2(x: pd.Series, y: pd.Series, x_ref: float = 1024.0) -> Log2Fit | None:
    """Least squares of y on log2(x / x_ref); None with < 3 points or x spanning less than one doubling."""
    mask = (x > 0) & x.notna() & y.notna()
    xs, ys = x[mask].to_numpy(dtype=float), y[mask].to_numpy(dtype=float)
    if len(xs) < 3 or xs.max() < 2 * xs.min():
        return None
    lx = np.log2(xs / x_ref)
    slope, intercept = np.polyfit(lx, ys, 1)
    residuals = ys - (intercept + slope * lx)
    total = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - float((residuals**2).sum()) / total if total > 0 else 1.0
    return Log2Fit(float(intercept), float(slope), r2, len(xs), float(xs.min()), float(xs.max()), x_ref)


TrendKind = Literal["flat", "falling", "rising"]


def trend(fit: Log2Fit, noise: float = NOISE_FRACTION) -> TrendKind:
    """Flat when the fitted change over the observed range stays inside the run-to-run noise."""
    change = fit.relative_change()
    if math.isnan(change) or abs(change) <= noise:
        return "flat"
    return "falling" if change < 0 else "rising"


def binned_means(frame: pd.DataFrame, x: str, y: str, bin_column: str, group: str) -> pd.DataFrame:
    """Mean and spread of ``y`` per (group, bin), with the bin's mean ``x``: what the scatter charts draw."""
    usable = frame.dropna(subset=[x, y, bin_column])
    if usable.empty:
        return pd.DataFrame(columns=[group, bin_column, x, y, "y_low", "y_high", "samples"])
    grouped = usable.groupby([group, bin_column], observed=True)
    result = grouped.agg(
        **{x: (x, "mean"), y: (y, "mean"), "y_std": (y, "std"), "samples": (y, "size")}
    ).reset_index()
    spread = result["y_std"].fillna(0.0)
    result["y_low"] = result[y] - spread
    result["y_high"] = result[y] + spread
    return result.drop(columns="y_std")
