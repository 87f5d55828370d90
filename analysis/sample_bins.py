"""History samples labelled for analysis: context bins (doubling from 1K tokens) and concurrency bins.

Pure pandas: the Context, Recipes and Capacity pages compare like with like through these bins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis.words import tokens_label

# What the Context, Recipes and Capacity pages compute from history (``prepare``, ``fraction.summarize``,
# ``confidence.window_means``, ``scaling.scaling_curve``), besides ts, target, up and recipe_id: the pages
# read only these columns, and one read (same points) serves all three.
ANALYSIS_SIGNALS: tuple[str, ...] = (
    "accept_length",
    "step_latency_s",
    "running",
    "avg_context_tokens",
    "output_tok_s",
    "per_request_tok_s",
    "ttft_s",
    "tpot_s",
    # Energy and cost (``analysis.energy``; output tok/s per GPU is also the fleet's lane of the recipes'
    # Pareto): unknown without GPU telemetry or a price, so NaN columns where a fleet has neither.
    "gpu_count",
    "gpu_power_w",
    "output_tok_s_per_gpu",
    "usd_per_million_tokens",
)

# Context bins double from 1K tokens: acceptance decays per doubling of context, so equal-width bins in log2.
CONTEXT_BIN_BASE_TOKENS = 1024.0


def context_bin(tokens: pd.Series) -> pd.Series:
    """Label each average context with its doubling bin ("<1K", "1K–2K", "2K–4K", …); NaN stays NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        index = np.floor(np.log2(tokens.where(tokens > 0).to_numpy(np.float64) / CONTEXT_BIN_BASE_TOKENS))
    return _labelled(index, tokens.index, lambda i: context_bin_label(int(i)))


def _labelled(keys: npt.NDArray[np.float64], index: pd.Index, label: Callable[[float], str]) -> pd.Series:
    """``label`` of each key (missing for NaN, as ``Series.map`` gave), computed once per distinct key: a
    1,000-server day is ~300 k rows but a dozen bins, and a Python call per row cost ~0.3 s a column."""
    known = ~np.isnan(keys)
    # Series.map's own choice: NaN beside labels, None when no row has one.
    out = np.full(len(keys), np.nan if known.any() else None, dtype=object)
    distinct, slot = np.unique(keys[known], return_inverse=True)
    labels = np.empty(len(distinct), dtype=object)
    labels[:] = [label(float(key)) for key in distinct]
    out[known] = labels[slot.reshape(-1)]
    return pd.Series(out, index=index, dtype="object")


def context_bin_label(index: int) -> str:
    if index < 0:
        return f"<{tokens_label(CONTEXT_BIN_BASE_TOKENS)}"
    low = CONTEXT_BIN_BASE_TOKENS * 2**index
    return f"{tokens_label(low)}–{tokens_label(low * 2)}"


def context_bin_order(labels: Sequence[str]) -> list[str]:
    """Labels sorted by the context they stand for."""

    def key(label: str) -> float:
        if label.startswith("<"):
            return -1.0
        low = label.split("–")[0]
        return float(low[:-1]) * 1024 if low.endswith("K") else float(low)

    return sorted(set(labels), key=key)


# Concurrency bins: 1, 2, 3–4, 5–8, … (matched concurrency compares like with like).
def concurrency_bin(running: pd.Series) -> pd.Series:
    """Label each running-request count with its bin ("1", "2", "3–4", "5–8", …); idle (0) and NaN → None."""

    def label(rounded: float) -> str:
        n = int(rounded)
        if n <= 2:
            return str(n)
        upper = 2 ** math.ceil(math.log2(n))
        return f"{upper // 2 + 1}–{upper}"

    values = running.to_numpy(np.float64)
    with np.errstate(invalid="ignore"):
        idle = np.isnan(values) | (values < 0.5)
    # np.round, like round(), rounds halves to even (0.5 → 0, 2.5 → 2): the labels stay the per-row ones.
    return _labelled(np.where(idle, np.nan, np.round(values)), running.index, label)


def concurrency_bin_order(labels: Sequence[str]) -> list[str]:
    return sorted(set(labels), key=lambda label: int(label.split("–")[0]))


def prepare(history: pd.DataFrame) -> pd.DataFrame:
    """Samples of servers up with an accept length, labelled with recipe, context and concurrency bins."""
    if history.empty:
        return history.assign(recipe=pd.Series(dtype="object"))
    usable = history[history["up"].astype(bool) & history["accept_length"].notna()].copy()
    usable["recipe"] = usable["recipe_id"].fillna("unknown").astype(str)
    usable["context_bin"] = context_bin(usable["avg_context_tokens"])
    usable["concurrency"] = concurrency_bin(usable["running"])
    return usable
