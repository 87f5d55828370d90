"""How soon each pool binds on each server: the least-squares trend of its usage over the last half hour,
extrapolated to the level where it binds (the alert rules' levels, ``capacity.CapacityThresholds``).

In numpy per server: a 1,000-server fleet's trends are fitted in well under a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.capacity import Pool
from analysis.fraction import MIN_SAMPLES

TREND_WINDOW_S = 1800.0  # time to saturation extrapolates the last 30 minutes
TREND_HORIZON_S = 24 * 3600.0  # further out than a day is "not within a day"


@dataclass(frozen=True, slots=True)
class Saturation:
    server: str
    pool: Pool
    usage: float  # now (the newest sample)
    per_hour: float  # fitted change per hour over the trend window
    binds_in_s: float | None  # None: not rising (or not within the horizon); 0: binds already


# What ``time_to_bind`` reads besides ts, target and up.
SATURATION_SIGNALS: tuple[str, ...] = ("running", "max_running", "state_pool_usage", "kv_usage")


def time_to_bind(history: pd.DataFrame, binds_at: Mapping[Pool, float], now_ts: float) -> list[Saturation]:
    """Per server and pool, the least-squares trend of usage over the last TREND_WINDOW_S and when it
    reaches that pool's level in ``binds_at`` (``CapacityThresholds.binds_at``; the request cap as
    running ÷ cap).

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
    pools: dict[Pool, np.ndarray] = {
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
            level = binds_at[pool]
            if usage >= level:
                binds: float | None = 0.0
            elif slope_per_s > 0:
                eta = (level - usage) / slope_per_s
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
