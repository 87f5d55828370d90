"""Reading samples for charts: rows of one tier (or raw) as they are, regrouped in numpy when a range holds
more rows per target than there are pixels.

SQLite's GROUP BY pays ~1 µs per aggregate per row (25 of them here): 180 k rows cost seconds. Rows come out
per target in time order, so buckets are contiguous runs and ``np.add.reduceat`` merges them in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from collectors.model import SIGNAL_NAMES
from collectors.store.tiers import Tier

# The store's sample columns, then the number of scrapes each row stands for (the weight of its means).
SAMPLE_COLUMNS: tuple[str, ...] = (
    "ts",
    "target",
    "up",
    "error",
    "recipe_id",
    "deployment",
    "scrape_duration_s",
    *SIGNAL_NAMES,
)
_NUMERIC = ("scrape_duration_s", *SIGNAL_NAMES)


def raw_sql(where: str) -> str:
    return f"SELECT {', '.join(SAMPLE_COLUMNS)}, 1 FROM samples WHERE {where} ORDER BY target, ts"


def tier_sql(tier: Tier, where: str) -> str:
    """Each bucket's means, per row (no GROUP BY: SQLite evaluates these at a fraction of the cost)."""
    columns = [
        "ts_sum / n",
        "target",
        "up_n = n",  # up only if every scrape of the bucket was
        "error",
        "recipe_id",
        "deployment",
        "scrape_duration_s_sum / NULLIF(scrape_duration_s_n, 0)",
        *(f"{name}_sum / NULLIF({name}_n, 0)" for name in SIGNAL_NAMES),
        "n",
    ]
    return f"SELECT {', '.join(columns)} FROM {tier.table} WHERE {where} ORDER BY target, bucket_ts"


def frame_of(
    rows: Sequence[tuple[object, ...]], start_ts: float, bucket_s: float, max_points: int
) -> pd.DataFrame:
    """The rows as the store's sample frame, regrouped into ``bucket_s`` buckets if a target has more than
    ``max_points`` rows (means weighted by scrapes; unknowns skipped, a bucket of unknowns stays NaN)."""
    frame = pd.DataFrame.from_records(rows, columns=[*SAMPLE_COLUMNS, "weight"])
    for name in ("ts", "weight", *_NUMERIC):
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    frame["up"] = frame["up"].astype(bool)
    if frame.groupby("target", sort=False).size().max() > max_points:
        frame = _regroup(frame, start_ts, bucket_s)
    return frame.drop(columns="weight").reset_index(drop=True)


def _regroup(frame: pd.DataFrame, start_ts: float, bucket_s: float) -> pd.DataFrame:
    targets = frame["target"].to_numpy()
    bucket = np.floor((frame["ts"].to_numpy() - start_ts) / bucket_s)
    new_group = np.r_[True, (targets[1:] != targets[:-1]) | (bucket[1:] != bucket[:-1])]
    starts = np.flatnonzero(new_group)
    ends = np.r_[starts[1:], len(frame)] - 1
    weight = frame["weight"].to_numpy()
    out: dict[str, object] = {}
    out["ts"] = np.add.reduceat(frame["ts"].to_numpy() * weight, starts) / np.add.reduceat(weight, starts)
    out["target"] = targets[starts]
    out["up"] = np.minimum.reduceat(frame["up"].to_numpy(), starts).astype(bool)
    for name in ("error", "recipe_id", "deployment"):  # the bucket's newest (SQL MAX of text is no better)
        out[name] = frame[name].to_numpy()[ends]
    values = frame[list(_NUMERIC)].to_numpy()
    known = ~np.isnan(values)
    weights = known * weight[:, None]
    sums = np.add.reduceat(np.where(known, values, 0.0) * weight[:, None], starts, axis=0)
    counts = np.add.reduceat(weights, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)
    for index, name in enumerate(_NUMERIC):
        out[name] = means[:, index]
    out["weight"] = np.add.reduceat(weight, starts)
    return pd.DataFrame(out)[[*SAMPLE_COLUMNS, "weight"]]
