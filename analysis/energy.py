"""Energy and cost per output token, pooled over servers and time: per deployment (now) and per recipe at
matched concurrency (over the range).

Pooled means ratios of sums, never means of ratios: tokens per joule of a group is its tokens over its joules
(Σ output tok/s ÷ Σ GPU watts), and its $ per million tokens is its spend over its tokens — the mean of
``usd_per_million_tokens`` weighted by output tok/s, since usd × tok/s is each sample's spend rate. A mean of
per-sample ratios would let a nearly idle minute (a huge $/Mtok) outweigh a busy hour.

Pure pandas: the Capacity and Recipes pages call it; nothing here reads a store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.fraction import MIN_SAMPLES
from analysis.sample_bins import ANALYSIS_SIGNALS, concurrency_bin_order

# What the pooled figures read from history besides output_tok_s (``sample_bins.ANALYSIS_SIGNALS`` has them).
ENERGY_SIGNALS: tuple[str, ...] = (
    "gpu_count",
    "gpu_power_w",
    "output_tok_s_per_gpu",
    "usd_per_million_tokens",
)
assert set(ENERGY_SIGNALS) <= set(ANALYSIS_SIGNALS), "the analysis read carries the energy signals"


@dataclass(frozen=True, slots=True)
class Pooled:
    """A group's pooled figures; NaN where no sample carried what the figure needs."""

    tokens_per_joule: float
    usd_per_million_tokens: float
    tok_s_per_gpu: float
    samples: int  # samples with a GPU figure (power, or a GPU count)


def _ratio(top: float, bottom: float) -> float:
    return top / bottom if bottom > 0 and math.isfinite(top) else math.nan


def pooled(frame: pd.DataFrame) -> Pooled:
    """Tokens per joule, $ per million tokens and tok/s per GPU of ``frame``'s samples, as ratios of sums."""
    output = frame["output_tok_s"].to_numpy(np.float64)
    power = frame["gpu_power_w"].to_numpy(np.float64)
    usd = frame["usd_per_million_tokens"].to_numpy(np.float64)
    gpus = frame["gpu_count"].to_numpy(np.float64)
    with_power = ~np.isnan(output) & ~np.isnan(power)
    with_cost = ~np.isnan(usd) & (output > 0)
    with_gpus = ~np.isnan(output) & ~np.isnan(gpus)
    return Pooled(
        tokens_per_joule=_ratio(float(output[with_power].sum()), float(power[with_power].sum())),
        usd_per_million_tokens=_ratio(
            float((usd[with_cost] * output[with_cost]).sum()), float(output[with_cost].sum())
        ),
        tok_s_per_gpu=_ratio(float(output[with_gpus].sum()), float(gpus[with_gpus].sum())),
        samples=int((with_power | with_gpus).sum()),
    )


def recipe_energy(usable: pd.DataFrame) -> pd.DataFrame:
    """Per recipe and concurrency bin (``sample_bins.prepare``'s frame): pooled tokens per joule, $ per
    million tokens and tok/s per GPU, with the samples behind them; bins where at least two recipes have
    ``MIN_SAMPLES`` GPU samples each come first (matched concurrency), then the rest, by concurrency."""
    columns = [
        "concurrency",
        "recipe",
        "tokens_per_joule",
        "usd_per_million_tokens",
        "tok_s_per_gpu",
        "samples",
    ]
    if usable.empty or not set(ENERGY_SIGNALS) <= set(usable.columns):
        return pd.DataFrame(columns=[*columns, "matched"])
    rows = []
    for (recipe, concurrency), group in usable.dropna(subset=["concurrency"]).groupby(
        ["recipe", "concurrency"]
    ):
        found = pooled(group)
        if found.samples < MIN_SAMPLES:
            continue
        rows.append(
            {
                "concurrency": concurrency,
                "recipe": recipe,
                "tokens_per_joule": found.tokens_per_joule,
                "usd_per_million_tokens": found.usd_per_million_tokens,
                "tok_s_per_gpu": found.tok_s_per_gpu,
                "samples": found.samples,
            }
        )
    table = pd.DataFrame(rows, columns=columns)
    if table.empty:
        return table.assign(matched=pd.Series(dtype=bool))
    shared = table.groupby("concurrency")["recipe"].transform("nunique") >= 2
    table = table.assign(matched=shared)
    order = {label: index for index, label in enumerate(concurrency_bin_order(list(table["concurrency"])))}
    table = table.assign(_order=table["concurrency"].map(order))
    table = table.sort_values(["matched", "_order", "recipe"], ascending=[False, True, True])
    return table.drop(columns="_order").reset_index(drop=True)


def deployment_cost(latest: pd.DataFrame, gpu_hour_usd: float | None) -> pd.DataFrame:
    """Per deployment, from the servers up now (the fleet table: ``status``, ``deployment``, ``gpu_count``,
    ``gpu_power_w``, ``output_tok_s``): GPUs, $ per hour (price × GPUs: idle GPUs cost too), output tok/s,
    $ per million tokens (spend over tokens), GPU watts and tokens per joule (servers with telemetry)."""
    columns = [
        "deployment", "servers", "gpus", "usd_per_hour", "output_tok_s", "usd_per_million_tokens",
        "gpu_power_w", "tokens_per_joule", "without_gpu_count",
    ]  # fmt: skip
    live = latest[latest["status"] == "up"]
    rows = []
    for deployment, group in live.groupby(live["deployment"].replace("", "(none)")):
        gpus = group["gpu_count"]
        known = gpus.notna()
        total_gpus = float(gpus[known].sum()) if known.any() else math.nan
        per_hour = gpu_hour_usd * total_gpus if gpu_hour_usd is not None else math.nan
        output = float(group["output_tok_s"].sum(min_count=1))
        # The spend of servers without a GPU count is unknown: $/Mtok over the servers whose spend is known.
        output_known = float(group.loc[known, "output_tok_s"].sum(min_count=1))
        usd = _ratio(per_hour, output_known * 3600.0) * 1e6 if known.any() else math.nan
        metered = group["gpu_power_w"].notna() & group["output_tok_s"].notna()
        power = float(group.loc[metered, "gpu_power_w"].sum()) if metered.any() else math.nan
        rows.append(
            {
                "deployment": deployment,
                "servers": len(group),
                "gpus": total_gpus,
                "usd_per_hour": per_hour,
                "output_tok_s": output,
                "usd_per_million_tokens": usd,
                "gpu_power_w": power,
                "tokens_per_joule": _ratio(float(group.loc[metered, "output_tok_s"].sum()), power),
                "without_gpu_count": int((~known).sum()),
            }
        )
    return pd.DataFrame(rows, columns=columns)


__all__ = ["ENERGY_SIGNALS", "Pooled", "deployment_cost", "pooled", "recipe_energy"]
