"""Capacity from history: the scaling curve per recipe (throughput, per-request rate, TTFT and TPOT at each
concurrency), the knee found from the data, and how soon each pool binds at the recent trend.

Pure pandas, no streamlit. Throughput is the fraction, sample by sample: running × accept length ÷ step
latency (accepted tokens per step ÷ step latency), so a bursty completion counter does not bend the curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from views.fraction import MIN_SAMPLES
from views.sample_bins import concurrency_bin_order

# Elasticity of a step = ln(throughput ratio) ÷ ln(concurrency ratio): 1 is linear scaling, 0 buys nothing.
# The knee is the level where it falls the most (the curve bends hardest), provided the step past it buys
# little (below KNEE_ELASTICITY: doubling the requests buys < 41% more) and the fall is clear (≥ MIN_BEND).
# The seed: 16 → 32 runs at 0.59, 32 → 48 at 0.27, so its knee is 32.
KNEE_ELASTICITY = 0.5
MIN_BEND = 0.15
MIN_LEVELS = 3  # a curve needs this many concurrency levels with MIN_SAMPLES each to show a bend
TREND_WINDOW_S = 1800.0  # time to saturation extrapolates the last 30 minutes
TREND_HORIZON_S = 24 * 3600.0  # further out than a day is "not within a day"


def scaling_curve(usable: pd.DataFrame) -> pd.DataFrame:
    """Per concurrency bin of ``usable`` (prepared samples of one recipe at one context bin): the median
    running requests, mean throughput, per-request rate, median TTFT and TPOT, and the sample count; bins
    with fewer than MIN_SAMPLES samples are left out. Sorted by concurrency."""
    columns = ["concurrency", "running", "output_tok_s", "per_request_tok_s", "ttft_s", "tpot_s", "samples"]
    rows = usable.dropna(subset=["concurrency", "accept_length", "step_latency_s", "running"])
    rows = rows[rows["step_latency_s"] > 0]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    per_request = rows["accept_length"] / rows["step_latency_s"]
    rows = rows.assign(_per_request=per_request, _output=per_request * rows["running"])
    grouped = rows.groupby("concurrency")
    curve = pd.DataFrame(
        {
            "running": grouped["running"].median(),
            "output_tok_s": grouped["_output"].mean(),
            "per_request_tok_s": grouped["_per_request"].mean(),
            "ttft_s": grouped["ttft_s"].median(),
            "tpot_s": grouped["tpot_s"].median(),
            "samples": grouped.size(),
        }
    ).reset_index()
    curve = curve[curve["samples"] >= MIN_SAMPLES]
    order = concurrency_bin_order(list(curve["concurrency"]))
    return curve.set_index("concurrency").loc[order].reset_index()[columns]


@dataclass(frozen=True, slots=True)
class Knee:
    """Where the curve bends: the concurrency before the first step that buys too little throughput."""

    running: float  # median running requests at the knee
    index: int  # its row in the curve
    elasticity_before: float | None  # of the step into the knee (None: the knee is the first level)
    elasticity_after: float  # of the step out of it


def elasticities(curve: pd.DataFrame) -> list[float]:
    """ln(throughput ratio) ÷ ln(concurrency ratio) of each step between consecutive levels of the curve."""
    out = []
    for (_, a), (_, b) in zip(curve.iterrows(), curve.iloc[1:].iterrows(), strict=False):
        if (
            a["running"] > 0
            and b["running"] > a["running"]
            and a["output_tok_s"] > 0
            and b["output_tok_s"] > 0
        ):
            out.append(
                math.log(b["output_tok_s"] / a["output_tok_s"]) / math.log(b["running"] / a["running"])
            )
        else:
            out.append(math.nan)
    return out


def find_knee(curve: pd.DataFrame) -> Knee | None:
    """The level where the elasticity falls the most, if the fall is clear and the step past it buys little;
    None if the curve is too short or has no clear bend (still scaling, or flat throughout)."""
    if len(curve) < MIN_LEVELS:
        return None
    steps = elasticities(curve)
    best: Knee | None = None
    best_fall = MIN_BEND
    for i in range(1, len(steps)):
        before, after = steps[i - 1], steps[i]
        if math.isnan(before) or math.isnan(after) or after >= KNEE_ELASTICITY:
            continue
        if before - after >= best_fall:
            best_fall = before - after
            best = Knee(float(curve.iloc[i]["running"]), i, before, after)
    return best


def _ms(seconds: object) -> str:
    value = float(seconds) if isinstance(seconds, int | float) else math.nan
    return "—" if math.isnan(value) else f"{value * 1000:,.0f} ms"


def _step(curve: pd.DataFrame, i: int) -> str:
    a, b = curve.iloc[i], curve.iloc[i + 1]
    gain = b["output_tok_s"] / a["output_tok_s"] - 1.0
    return (
        f"{a['running']:.0f} → {b['running']:.0f} running buys {gain:+.1%} throughput "
        f"(TTFT {_ms(a['ttft_s'])} → {_ms(b['ttft_s'])}, TPOT {_ms(a['tpot_s'])} → {_ms(b['tpot_s'])})"
    )


def knee_verdict(curve: pd.DataFrame, knee: Knee | None) -> str:
    """The curve's story in words: the step into the knee, the step past it, and where to stop."""
    if len(curve) < MIN_LEVELS:
        return (
            f"Only {len(curve)} concurrency level(s) with {MIN_SAMPLES}+ samples here: a knee needs "
            f"{MIN_LEVELS}. Pick a longer range, or run this recipe at more concurrencies."
        )
    top = curve.iloc[-1]
    if knee is None:
        return (
            f"No clear knee up to {top['running']:.0f} running: the gain per step never falls sharply to "
            f"below concurrency^{KNEE_ELASTICITY:g}. Measure higher concurrencies to find where it bends."
        )
    parts = []
    if knee.index > 0:
        parts.append(_step(curve, knee.index - 1) + ";")
    parts.append(_step(curve, knee.index) + ".")
    at = f"{knee.running:.0f}"
    past = f"{curve.iloc[knee.index + 1]['running']:.0f}"
    parts.append(
        f"**The knee is at {at}**: stop at {at} if latency matters; go to {past} only when aggregate "
        "throughput is all that is sold."
    )
    return " ".join(parts)


# -- time to saturation --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Saturation:
    server: str
    pool: str
    usage: float  # now (the newest sample)
    per_hour: float  # fitted change per hour over the trend window
    binds_in_s: float | None  # None: not rising (or not within the horizon); 0: binds already


# What ``time_to_bind`` reads besides ts, target and up.
SATURATION_SIGNALS: tuple[str, ...] = ("running", "max_running", "state_pool_usage", "kv_usage")


def time_to_bind(history: pd.DataFrame, binds_at: float, now_ts: float) -> list[Saturation]:
    """Per server and pool, the least-squares trend of usage over the last TREND_WINDOW_S and when it
    reaches ``binds_at`` (also the request cap, as running ÷ cap).

    In numpy per server (3,000 pandas selections of a 1,000-server fleet took ~4 s), on the same values in
    the same order as ``rows[["ts", column]].dropna()`` gave, so every fit is the same to the last bit."""
    if history.empty:
        return []
    keep = (history["ts"] >= now_ts - TREND_WINDOW_S).to_numpy() & history["up"].astype(bool).to_numpy()
    recent = history[keep]
    running = recent["running"].to_numpy(np.float64)
    cap = recent["max_running"].to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        request_cap = running / np.where(cap > 0, cap, np.nan)
    pools = {
        "state pool": recent["state_pool_usage"].to_numpy(np.float64),
        "KV cache": recent["kv_usage"].to_numpy(np.float64),
        "request cap": request_cap,
    }
    ts = recent["ts"].to_numpy(np.float64)
    targets = recent["target"].to_numpy(dtype=object)
    # groupby("target"): servers in name order, each server's rows in their order in the frame
    names, codes = np.unique(targets.astype(str), return_inverse=True)
    order = np.argsort(codes.reshape(-1), kind="stable")
    bounds = np.searchsorted(codes.reshape(-1)[order], np.arange(len(names) + 1))
    out = []
    for index, server in enumerate(names):
        rows = order[bounds[index] : bounds[index + 1]]
        for pool, values in pools.items():
            picked = rows[~np.isnan(values[rows])]
            if len(picked) < MIN_SAMPLES:
                continue
            x, y = ts[picked], values[picked]
            slope_per_s, _ = np.polyfit(x - now_ts, y, 1)
            usage = float(y[np.argsort(x, kind="quicksort")[-1]])  # sort_values("ts")'s last row
            if usage >= binds_at:
                binds: float | None = 0.0
            elif slope_per_s > 0:
                eta = (binds_at - usage) / slope_per_s
                binds = float(eta) if eta <= TREND_HORIZON_S else None
            else:
                binds = None
            out.append(Saturation(str(server), pool, usage, float(slope_per_s) * 3600.0, binds))
    return out


def saturation_frame(found: list[Saturation]) -> pd.DataFrame:
    """One row per server: each pool's usage now, its trend per hour and when it binds, soonest first."""
    columns = ["server", "binds_first", "binds_in_min", "state pool", "KV cache", "request cap"]
    if not found:
        return pd.DataFrame(columns=columns)
    rows: dict[str, dict[str, object]] = {}
    for s in found:
        row = rows.setdefault(s.server, {"server": s.server, "binds_first": None, "binds_in_min": math.inf})
        trend = f"{s.usage:.0%} ({round(s.per_hour * 100.0):+d} pts/h)"  # round: never "-0"
        row[s.pool] = trend
        if s.binds_in_s is not None and s.binds_in_s / 60.0 < float(str(row["binds_in_min"])):
            row["binds_in_min"], row["binds_first"] = s.binds_in_s / 60.0, s.pool
    frame = pd.DataFrame(list(rows.values()))
    frame["binds_in_min"] = frame["binds_in_min"].replace(math.inf, np.nan)
    return frame.sort_values("binds_in_min", na_position="last").reindex(columns=columns)
