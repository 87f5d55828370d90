"""The bins the Context, Recipes and Capacity pages compare like with like through: context doubles from 1K,
concurrency doubles from 2."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.sample_bins import concurrency_bin, context_bin, context_bin_label, context_bin_order


@pytest.mark.parametrize(
    ("tokens", "label"),
    [(500.0, "<1K"), (1024.0, "1K–2K"), (1536.0, "1K–2K"), (9216.0, "8K–16K"), (98304.0, "64K–128K")],
)
def test_context_bins_double(tokens: float, label: str) -> None:
    assert context_bin(pd.Series([tokens])).iloc[0] == label


def test_context_bin_order_follows_the_tokens() -> None:
    assert context_bin_order(["64K–128K", "1K–2K", "<1K", "8K–16K"]) == ["<1K", "1K–2K", "8K–16K", "64K–128K"]


@pytest.mark.parametrize(
    ("running", "label"), [(1.0, "1"), (2.0, "2"), (3.0, "3–4"), (4.0, "3–4"), (48.0, "33–64"), (0.0, None)]
)
def test_concurrency_bins(running: float, label: str | None) -> None:
    assert concurrency_bin(pd.Series([running])).iloc[0] == label


# -- bins labelled once per distinct value equal the per-row labels they replaced ---------------------------
def _context_bin_per_row(tokens: pd.Series) -> pd.Series:
    index = pd.Series(np.floor(np.log2(tokens.where(tokens > 0) / 1024.0)), index=tokens.index)
    return index.map(lambda i: None if pd.isna(i) else context_bin_label(int(i))).astype("object")


def _concurrency_bin_per_row(running: pd.Series) -> pd.Series:
    def label(value: float) -> str | None:
        if pd.isna(value) or value < 0.5:
            return None
        n = round(value)
        if n <= 2:
            return str(n)
        upper = 2 ** math.ceil(math.log2(n))
        return f"{upper // 2 + 1}–{upper}"

    return running.map(label).astype("object")


def test_bins_equal_the_per_row_labels() -> None:
    rng = np.random.default_rng(7)
    tokens = pd.Series(np.exp(rng.uniform(0, 13, 5000)), index=rng.permutation(5000) + 10)
    tokens.iloc[::17] = np.nan
    tokens.iloc[::23] = 0.0
    tokens.iloc[::29] = -3.0
    tokens.iloc[:6] = [1024.0, 2047.999, 2048.0, 1023.9, 65536.0, 1.0]
    pd.testing.assert_series_equal(context_bin(tokens), _context_bin_per_row(tokens))
    running = pd.Series(rng.uniform(0, 200, 5000))
    running.iloc[::13] = np.nan
    running.iloc[:12] = [0.0, 0.49, 0.5, 0.51, 1.5, 2.5, 3.5, 4.5, 2.49, 8.5, 9.0, 64.5]
    pd.testing.assert_series_equal(concurrency_bin(running), _concurrency_bin_per_row(running))
    empty = pd.Series([], dtype="float64")
    pd.testing.assert_series_equal(context_bin(empty), _context_bin_per_row(empty))
    pd.testing.assert_series_equal(concurrency_bin(empty), _concurrency_bin_per_row(empty))


def test_bins_of_only_unknowns_equal_the_per_row_labels() -> None:
    for values in ([np.nan, np.nan], [0.0, 0.2], [-1.0, np.nan]):
        series = pd.Series(values)
        pd.testing.assert_series_equal(context_bin(series), _context_bin_per_row(series))
        pd.testing.assert_series_equal(concurrency_bin(series), _concurrency_bin_per_row(series))
