"""History reads as frames, for tests: the production read (``read_columns``) and the store's old frame read,
kept as the oracle the column reads are compared with.

``read_frame`` is what a page gets: every sample column of ``HistoryReader.read_columns`` through
``views.frames.samples_frame``. ``oracle_frame`` is the SQLite store's read before column reads existed: the
rows of the chosen tier (or raw) straight from SQL into a DataFrame, regrouped in pandas. It is a second
implementation on purpose (a test oracle): SQL means and pandas regrouping, against the numpy ones.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.frames import samples_frame
from collectors.history import HistoryReader
from collectors.model import SIGNAL_NAMES
from collectors.sample_columns import SAMPLE_COLUMNS, SAMPLE_TEXTS, SAMPLE_VALUES
from collectors.store.sqlite_store import SqliteStore
from collectors.store.tiers import TIERS, Tier, pick_tier

_NUMERIC = ("scrape_duration_s", *SIGNAL_NAMES)


def read_frame(
    reader: HistoryReader,
    start_ts: float,
    end_ts: float,
    targets: Sequence[str] | None = None,
    max_points: int = 2000,
) -> pd.DataFrame:
    """Every sample column in [start_ts, end_ts] as the pages get it (ts, target, up, texts, values)."""
    columns = reader.read_columns(start_ts, end_ts, SAMPLE_VALUES, max_points, targets, texts=SAMPLE_TEXTS)
    return samples_frame(columns)


def oracle_frame(
    store: SqliteStore,
    start_ts: float,
    end_ts: float,
    targets: Sequence[str] | None = None,
    max_points: int = 2000,
) -> pd.DataFrame:
    """The same read through SQL rows and pandas: the columns of ``SAMPLE_COLUMNS``, ``up`` as bool."""
    connection = sqlite3.connect(store.path)
    try:
        if targets is not None and not targets:
            return _frame_of([], 0.0, 1.0, max_points)
        tier = pick_tier(end_ts - start_ts, max_points, _oldest(connection), start_ts)
        column = "ts" if tier is None else "bucket_ts"
        where = [f"{column} >= ?", f"{column} <= ?"]
        params: list[object] = [start_ts, end_ts]
        if targets is not None:
            where.append(f"target IN ({', '.join('?' for _ in targets)})")
            params.extend(targets)
        clause = " AND ".join(where)
        sql = _raw_sql(clause) if tier is None else _tier_sql(tier, clause)
        rows = connection.execute(sql, params).fetchall()
    finally:
        connection.close()
    bucket_s = max((end_ts - start_ts) / max(max_points, 1), 1e-9)
    return _frame_of(rows, start_ts, bucket_s, max_points)


def _oldest(connection: sqlite3.Connection) -> dict[float, float | None]:
    found: dict[float, float | None] = {}
    for seconds, table, column in [
        (0.0, "samples", "ts"),
        *((t.seconds, t.table, "bucket_ts") for t in TIERS),
    ]:
        value = connection.execute(f"SELECT MIN({column}) FROM {table}").fetchone()[0]  # noqa: S608
        found[seconds] = None if value is None else float(value)
    return found


def _raw_sql(where: str) -> str:
    return f"SELECT {', '.join(SAMPLE_COLUMNS)}, 1 FROM samples WHERE {where} ORDER BY target, ts"  # noqa: S608


def _tier_sql(tier: Tier, where: str) -> str:
    """Each bucket's means, per row."""
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
    return f"SELECT {', '.join(columns)} FROM {tier.table} WHERE {where} ORDER BY target, bucket_ts"  # noqa: S608


def _frame_of(
    rows: list[tuple[object, ...]], start_ts: float, bucket_s: float, max_points: int
) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(rows, columns=[*SAMPLE_COLUMNS, "weight"])
    for name in ("ts", "weight", *_NUMERIC):
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    frame["up"] = frame["up"].astype(bool)
    if len(frame) and frame.groupby("target", sort=False).size().max() > max_points:
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
    for name in ("error", "recipe_id", "deployment"):  # the bucket's newest
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
