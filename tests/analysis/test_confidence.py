"""The bootstrap interval drawn a block of resamples at a time equals the one drawn at once."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import confidence
from analysis.confidence import LEVEL, MIN_WINDOWS, RESAMPLES, RatioInterval, ratio_interval, window_means


def _ratio_interval_at_once(
    a_rows: pd.DataFrame, b_rows: pd.DataFrame, seed: int = 0
) -> RatioInterval | None:
    """The version that held (RESAMPLES, n) arrays: the reference."""
    # `duplicates` pairs this with analysis/confidence.py: deliberately, a test oracle restates the replaced
    # code instead of calling the code under test.
    a, b = window_means(a_rows), window_means(b_rows)
    if len(a) < MIN_WINDOWS or len(b) < MIN_WINDOWS:
        return None
    rng = np.random.default_rng(seed)
    draws_a = rng.choice(a, size=(RESAMPLES, len(a)), replace=True).mean(axis=1)
    draws_b = rng.choice(b, size=(RESAMPLES, len(b)), replace=True).mean(axis=1)
    ratios = draws_a / draws_b
    tail = (1.0 - LEVEL) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    ratio = float(a.mean() / b.mean())
    if not math.isfinite(ratio):
        return None
    return RatioInterval(ratio, float(low), float(high), len(a), len(b), len(a_rows), len(b_rows))


def _rows(rng: np.random.Generator, n: int, servers: int, rate: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": rng.uniform(0, 6 * 3600, n),
            "target": rng.choice([f"s{i}" for i in range(servers)], n),
            "output_tok_s": rng.normal(rate, rate / 5, n),
            "running": rng.integers(0, 9, n).astype(float),
        }
    )


@pytest.mark.parametrize(("n_a", "n_b", "chunk"), [(40, 60, 7), (500, 333, 1000), (3000, 2500, 1 << 20)])
def test_ratio_interval_in_blocks_equals_at_once(
    monkeypatch: pytest.MonkeyPatch, n_a: int, n_b: int, chunk: int
) -> None:
    rng = np.random.default_rng(n_a)
    a, b = _rows(rng, n_a, 7, 30.0), _rows(rng, n_b, 5, 25.0)
    monkeypatch.setattr(confidence, "_DRAWS_PER_CHUNK", chunk)
    for seed in (0, 3):
        got = ratio_interval(a, b, seed)
        assert got is not None
        assert got == _ratio_interval_at_once(a, b, seed)


def test_too_few_windows_is_no_interval() -> None:
    rng = np.random.default_rng(1)
    assert ratio_interval(_rows(rng, 2, 1, 30.0), _rows(rng, 50, 5, 25.0)) is None
