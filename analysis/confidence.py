"""Is a recipe really faster? Per-window means of the measured per-request rate, and a bootstrap interval of
the ratio of the two recipes' means, with the seed's ±10% run-to-run noise kept as the floor.

Samples 5 s apart are not independent (a request spans many scrapes), so the unit of evidence is a window:
WINDOW_S of one server's samples. Pure numpy/pandas; the bootstrap is seeded, so a page reads the same twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis.fraction import NOISE_FRACTION

WINDOW_S = 300.0  # five minutes of one server: many requests complete inside, so its mean is a fair draw
MIN_WINDOWS = 3  # per side: fewer and the interval is not worth drawing
RESAMPLES = 2000
LEVEL = 0.95

Call = Literal["faster", "slower", "within noise", "unsure"]


def window_means(rows: pd.DataFrame) -> np.ndarray:
    """Per server and WINDOW_S window: Σ output tok/s ÷ Σ running (the measured per-request rate)."""
    usable = rows.dropna(subset=["output_tok_s", "running"])
    usable = usable[usable["running"] > 0]
    if usable.empty:
        return np.array([])
    window = np.floor(usable["ts"] / WINDOW_S)
    grouped = usable.assign(_window=window).groupby(["target", "_window"])
    means = grouped["output_tok_s"].sum() / grouped["running"].sum()
    return means[np.isfinite(means) & (means > 0)].to_numpy(dtype=float)


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """a ÷ b of the mean per-request rate, its bootstrap interval and the evidence behind it."""

    ratio: float
    low: float
    high: float
    a_windows: int
    b_windows: int
    a_samples: int
    b_samples: int

    def call(self, noise: float = NOISE_FRACTION) -> Call:
        """faster/slower only when the interval excludes 1 and the ratio clears the noise floor."""
        if abs(self.ratio - 1.0) <= noise:
            return "within noise"
        if self.low > 1.0:
            return "faster"
        if self.high < 1.0:
            return "slower"
        return "unsure"

    def describe(self, a: str, b: str, noise: float = NOISE_FRACTION) -> str:
        evidence = (
            f"{LEVEL:.0%} interval {self.low:.2f}–{self.high:.2f}× from {self.a_windows} / {self.b_windows} "
            f"five-minute windows ({self.a_samples:,} / {self.b_samples:,} samples)"
        )
        call = self.call(noise)
        if call == "within noise":
            return (
                f"**{a}** vs **{b}**: {self.ratio:.2f}× — **within noise** (inside the ±{noise:.0%} "
                f"run-to-run floor); {evidence}."
            )
        if call == "unsure":
            return (
                f"**{a}** vs **{b}**: {self.ratio:.2f}×, but the {evidence} spans 1×: **not yet "
                "distinguishable** — widen the range for more windows."
            )
        return f"**{a}** is **{call}** than **{b}**: **{self.ratio:.2f}×** ({evidence})."


def ratio_interval(a_rows: pd.DataFrame, b_rows: pd.DataFrame, seed: int = 0) -> RatioInterval | None:
    """The bootstrap interval of mean(a windows) ÷ mean(b windows); None below MIN_WINDOWS a side."""
    a, b = window_means(a_rows), window_means(b_rows)
    if len(a) < MIN_WINDOWS or len(b) < MIN_WINDOWS:
        return None
    rng = np.random.default_rng(seed)
    draws_a = _resampled_means(rng, a)
    draws_b = _resampled_means(rng, b)
    ratios = draws_a / draws_b
    tail = (1.0 - LEVEL) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    ratio = float(a.mean() / b.mean())
    if not math.isfinite(ratio):
        return None
    return RatioInterval(ratio, float(low), float(high), len(a), len(b), len(a_rows), len(b_rows))


_DRAWS_PER_CHUNK = 1 << 20  # ~8 MB of indices and ~8 MB of values at a time


def _resampled_means(rng: np.random.Generator, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``rng.choice(values, size=(RESAMPLES, n)).mean(axis=1)``, a block of rows at a time: the same draws
    (the generator's stream continues across calls) and the same row means, without the (RESAMPLES, n)
    arrays — at 1,000 servers × 24 h n reaches tens of thousands of windows, i.e. ~1 GB at once."""
    rows_per_chunk = max(1, _DRAWS_PER_CHUNK // len(values))
    means = [
        values[rng.integers(0, len(values), size=(min(rows_per_chunk, RESAMPLES - first), len(values)))].mean(
            axis=1
        )
        for first in range(0, RESAMPLES, rows_per_chunk)
    ]
    return np.concatenate(means)
