"""Pure DataFrame shaping: the fleet table and totals, fleet series, context and concurrency bins.

No streamlit here: everything takes and returns DataFrames (or small frozen records); tests call it directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from collectors.fleet_chart import FLEET_CHART_SIGNALS, FleetChartTotals
from collectors.sample_columns import SampleColumns, runs

STATUS_UP = "up"
STATUS_DOWN = "down"
STATUS_STALE = "stale"
STATUS_NO_DATA = "no data"
STATUSES: tuple[str, ...] = (STATUS_UP, STATUS_DOWN, STATUS_STALE, STATUS_NO_DATA)

# Signals shown as the sample holds them, and only while the server is up (never a down server's old numbers).
_AS_SAMPLED: tuple[str, ...] = (
    "output_tok_s",
    "per_request_tok_s",
    "state_pool_usage",
    "kv_usage",
    "avg_context_tokens",
    "ttft_s",
    "cache_hit_rate",
    "gpu_count",
    "gpu_power_w",
    "tokens_per_joule",
    "usd_per_million_tokens",
)
FLEET_COLUMNS: tuple[str, ...] = (
    "server",
    "status",
    "deployment",
    "recipe",
    "running_cap",
    "running",
    "cap",
    "queued",
    "accept_length",
    "step_latency_ms",
    *_AS_SAMPLED,
    "firing_alerts",
    "alerts",
    "last_seen_s",
    "error",
)


def fleet_table(
    latest: pd.DataFrame,
    *,
    now_ts: float,
    stale_after_s: float,
    configured: Mapping[str, str] | None = None,
    firing: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """One row per server: status (up / down / stale / no data), recipe, the fraction, pools, alerts.

    ``latest`` holds the newest snapshot per target; ``configured`` maps configured target names to their
    deployment so that a configured server with no history still gets a row ("no data").
    """
    configured = configured or {}
    firing = firing or {}
    count = len(latest)
    # Column by column, not row by row: at 1,000 servers the rows' dicts cost ~20 ms every interval.
    targets = [str(t) for t in latest["target"]] if count else []
    age_s = now_ts - latest["ts"].to_numpy(np.float64, na_value=np.nan) if count else np.empty(0)
    up = latest["up"].to_numpy(bool) if count else np.empty(0, bool)
    unknown = latest["unknown"].to_numpy(bool) if "unknown" in latest and count else np.zeros(count, bool)
    # The source could not say how an unknown target is: no data, never down.
    status = np.where(
        age_s > stale_after_s,
        STATUS_STALE,
        np.where(up, STATUS_UP, np.where(unknown, STATUS_NO_DATA, STATUS_DOWN)),
    ).astype(object)
    live = status == STATUS_UP

    def number(column: str) -> npt.NDArray[np.float64]:
        if column not in latest:
            return np.full(count, math.nan)
        return pd.to_numeric(latest[column], errors="coerce").to_numpy(np.float64, na_value=np.nan)

    def when_live(column: str, scale: float = 1.0) -> npt.NDArray[np.float64]:
        return np.where(live, number(column) * scale, math.nan)  # a server not up shows no stale numbers

    def texts(column: str) -> list[str]:
        return [_text(value) for value in latest[column]] if column in latest else [""] * count

    running, cap = when_live("running"), number("max_running")
    alerts = [sorted(firing.get(target, ())) for target in targets]
    columns: dict[str, object] = {
        "server": targets,
        "status": status,
        "deployment": [d or configured.get(t, "") for d, t in zip(texts("deployment"), targets, strict=True)],
        "recipe": texts("recipe_id"),
        "running_cap": [_running_cap(r, c) for r, c in zip(running.tolist(), cap.tolist(), strict=True)],
        "running": running,
        "cap": cap,
        "queued": when_live("queued"),
        "accept_length": when_live("accept_length"),
        "step_latency_ms": when_live("step_latency_s", 1000.0),
        **{column: when_live(column) for column in _AS_SAMPLED},
        "firing_alerts": [len(a) for a in alerts],
        "alerts": [", ".join(a) for a in alerts],
        "last_seen_s": age_s,
        "error": texts("error"),
    }
    rows: list[dict[str, object]] = []
    for target in sorted(set(configured) - set(targets)):
        rows.append(
            {
                **{column: math.nan for column in FLEET_COLUMNS},
                "server": target,
                "status": STATUS_NO_DATA,
                "deployment": configured[target],
                "recipe": "",
                "running_cap": "–",
                "firing_alerts": len(firing.get(target, ())),
                "alerts": ", ".join(sorted(firing.get(target, ()))),
                "error": "no sample in the history store yet",
            }
        )
    table = pd.DataFrame(columns, columns=list(FLEET_COLUMNS))
    if rows:
        table = pd.concat([table, pd.DataFrame(rows, columns=list(FLEET_COLUMNS))], ignore_index=True)
    table["firing_alerts"] = table["firing_alerts"].astype("int64")
    order = {status: i for i, status in enumerate((STATUS_DOWN, STATUS_STALE, STATUS_NO_DATA, STATUS_UP))}
    # Trouble first: an on-call engineer reads the top of the table.
    table["_order"] = table["status"].map(order)
    table = table.sort_values(["_order", "firing_alerts", "server"], ascending=[True, False, True])
    return table.drop(columns="_order").reset_index(drop=True)


def _text(value: object) -> str:
    """A text cell: None and NaN (pandas' missing text) become the empty string, never "nan"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _running_cap(running: float, cap: float) -> str:
    left = "–" if math.isnan(running) else f"{running:.0f}"
    right = "?" if math.isnan(cap) else f"{cap:.0f}"
    return f"{left} / {right}"


def filter_table(
    table: pd.DataFrame,
    *,
    deployments: Sequence[str] = (),
    recipes: Sequence[str] = (),
    statuses: Sequence[str] = (),
) -> pd.DataFrame:
    """Rows matching every non-empty filter (an empty filter keeps everything)."""
    mask = pd.Series(True, index=table.index)
    if deployments:
        mask &= table["deployment"].isin(list(deployments))
    if recipes:
        mask &= table["recipe"].isin(list(recipes))
    if statuses:
        mask &= table["status"].isin(list(statuses))
    return table[mask]


@dataclass(frozen=True, slots=True)
class FleetTotals:
    """The Fleet page's headline numbers; medians are over servers that are up."""

    servers: int
    up: int
    down: int
    stale: int
    no_data: int
    output_tok_s: float
    running: float
    cap: float
    queued: float
    accept_length_median: float
    step_latency_ms_median: float
    firing_alerts: int


def fleet_totals(table: pd.DataFrame) -> FleetTotals:
    status = table["status"]
    live = table[status == STATUS_UP]
    return FleetTotals(
        servers=len(table),
        up=int((status == STATUS_UP).sum()),
        down=int((status == STATUS_DOWN).sum()),
        stale=int((status == STATUS_STALE).sum()),
        no_data=int((status == STATUS_NO_DATA).sum()),
        output_tok_s=float(live["output_tok_s"].sum(min_count=1)),
        running=float(live["running"].sum(min_count=1)),
        cap=float(live["cap"].sum(min_count=1)),
        queued=float(live["queued"].sum(min_count=1)),
        accept_length_median=float(live["accept_length"].median()),
        step_latency_ms_median=float(live["step_latency_ms"].median()),
        firing_alerts=int(table["firing_alerts"].sum()),
    )


# The Fleet chart's frame, however it is made (fleet_series, fleet_series_of, fleet_series_of_chart_totals).
FLEET_SERIES_COLUMNS = (
    "time",
    "output_tok_s",
    "servers_up",
    "servers_down",
    "accept_length",
    "step_latency_ms",
)


def fleet_series(samples: pd.DataFrame, start_ts: float, bucket_s: float) -> pd.DataFrame:
    """Fleet-wide series per time bucket: total output tok/s, servers up, median accept length and step (ms).

    Each target is averaged within a bucket first, so a target sampled twice in a bucket is not counted twice.
    """
    columns = list(FLEET_SERIES_COLUMNS)
    if samples.empty:
        return pd.DataFrame(columns=columns)
    frame = samples[["ts", "target", "up", "output_tok_s", "accept_length", "step_latency_s"]].copy()
    frame["bucket"] = np.floor((frame["ts"] - start_ts) / bucket_s).astype("int64")
    frame["up"] = frame["up"].astype(float)
    per_target = frame.groupby(["bucket", "target"], sort=False).mean(numeric_only=True).reset_index()
    per_target["is_up"] = per_target["up"] >= 0.5
    grouped = per_target.groupby("bucket")
    series = pd.DataFrame(
        {
            "output_tok_s": grouped["output_tok_s"].sum(min_count=1),
            "servers_up": grouped["is_up"].sum(),
            "servers_down": grouped["is_up"].count() - grouped["is_up"].sum(),
            "accept_length": grouped["accept_length"].median(),
            "step_latency_ms": grouped["step_latency_s"].median() * 1000.0,
        }
    ).reset_index()
    series["time"] = pd.to_datetime(start_ts + (series["bucket"] + 0.5) * bucket_s, unit="s", utc=True)
    return series[columns]


# The signals fleet_series_of reads: a Fleet chart read asks the store for these columns only.
# output_tok_s, accept_length, step_latency_s: summed or medians as the backend's totals say (fleet_chart.py)
FLEET_SERIES_SIGNALS: tuple[str, ...] = tuple(FLEET_CHART_SIGNALS)


def fleet_series_of_chart_totals(totals: FleetChartTotals, start_ts: float, bucket_s: float) -> pd.DataFrame:
    """``fleet_series_of`` from the backend's own sums (``HistoryReader.fleet_chart_totals``): the same
    frame. The grid's step is longer than a bucket (``read_plan.aligned_grid`` spreads the same points over
    the same window), so a bucket holds at most one instant and each number is that instant's, as
    ``fleet_series_of`` makes it from every target's row at that instant."""
    columns = list(FLEET_SERIES_COLUMNS)
    if len(totals) == 0:
        return pd.DataFrame(columns=columns)
    frame = (
        pd.DataFrame(
            {
                "bucket": np.floor((totals.ts - start_ts) / bucket_s).astype("int64"),
                "servers": totals.servers,
                "servers_up": totals.servers_up,
                **totals.values,
            }
        )
        .groupby("bucket")
        .mean()
    )
    up = frame["servers_up"].round().astype("int64").to_numpy()
    return pd.DataFrame(
        {
            "time": pd.to_datetime(start_ts + (frame.index.to_numpy() + 0.5) * bucket_s, unit="s", utc=True),
            "output_tok_s": frame["output_tok_s"].to_numpy(),
            "servers_up": up,
            "servers_down": frame["servers"].round().astype("int64").to_numpy() - up,
            "accept_length": frame["accept_length"].to_numpy(),
            "step_latency_ms": frame["step_latency_s"].to_numpy() * 1000.0,
        }
    )[columns]


def fleet_series_of(samples: SampleColumns, start_ts: float, bucket_s: float) -> pd.DataFrame:
    """``fleet_series`` of samples read as columns (``HistoryReader.read_columns`` of
    FLEET_SERIES_SIGNALS): the same numbers, in numpy. Rows come sorted by target then time, so a target's
    rows in one bucket are a contiguous run (one ``reduceat``); only the medians across targets go through
    pandas."""
    columns = list(FLEET_SERIES_COLUMNS)
    if len(samples) == 0:
        return pd.DataFrame(columns=columns)
    bucket = np.floor((samples.ts - start_ts) / bucket_s).astype("int64")
    starts = runs(samples.code, bucket)
    rows = np.add.reduceat(np.ones(len(bucket)), starts)

    def mean(values: np.ndarray) -> np.ndarray:  # per target and bucket, unknowns skipped (pandas' mean)
        known = ~np.isnan(values)
        total = np.add.reduceat(np.where(known, values, 0.0), starts)
        count = np.add.reduceat(known.astype(np.float64), starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.where(count > 0, count, 1.0), np.nan)

    group_bucket = bucket[starts]
    is_up = np.add.reduceat(samples.up, starts) / rows >= 0.5
    output = mean(samples.values["output_tok_s"])
    known_output = ~np.isnan(output)
    buckets, slot = np.unique(group_bucket, return_inverse=True)
    output_sum = np.bincount(slot, np.where(known_output, output, 0.0), len(buckets))
    output_known = np.bincount(slot, known_output.astype(np.float64), len(buckets))
    servers = np.bincount(slot, minlength=len(buckets))
    up = np.bincount(slot, is_up.astype(np.float64), len(buckets)).astype("int64")
    medians = (
        pd.DataFrame(
            {
                "slot": slot,
                "accept_length": mean(samples.values["accept_length"]),
                "step_latency_s": mean(samples.values["step_latency_s"]),
            }
        )
        .groupby("slot")
        .median()
        .reindex(range(len(buckets)))
    )
    series = pd.DataFrame(
        {
            "time": pd.to_datetime(start_ts + (buckets + 0.5) * bucket_s, unit="s", utc=True),
            "output_tok_s": np.where(output_known > 0, output_sum, np.nan),  # sum(min_count=1)
            "servers_up": up,
            "servers_down": servers - up,
            "accept_length": medians["accept_length"].to_numpy(),
            "step_latency_ms": medians["step_latency_s"].to_numpy() * 1000.0,
        }
    )
    return series[columns]
