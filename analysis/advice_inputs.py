"""What the capacity advice reads from the history (and SLO counts), and the advice per deployment from it:
one function, ``capacity_advice``, for the Capacity page and ``specwatch capacity`` alike, so both show the
same numbers for the same minute.

Reads, each as columns of only the signals it needs (``read_columns`` on the SQLite store, the sample frame
cut down on another backend):

- the newest row of every target (who is in which deployment, up or not, which recipe);
- the last ``DEMAND_WINDOW_S`` of every target (demand now);
- the last ``LIMIT_HISTORY_S`` of every target, ≤ ``LIMIT_ROWS`` samples in all (where each recipe binds);
- the complete hours of the last ``FORECAST_HISTORY_S`` (the daily profile: the 1 h tier, cacheable for the
  hour — ``read_hourly_demand``) and the last ``TREND_WINDOW_S`` at 5 min (the trend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.capacity import CapacityThresholds
from analysis.capacity_advice import (
    Demand,
    DeploymentAdvice,
    RecipeLimit,
    advise_deployment,
    group_members,
    main_recipe,
    recipe_limit,
)
from analysis.forecast import DAY_S, PROFILE_BUCKET_S, TREND_BUCKET_S, TREND_WINDOW_S, forecast_peak
from analysis.frames import samples_frame
from analysis.sample_bins import ANALYSIS_SIGNALS, prepare
from analysis.slo_budget import burn_checks, slo_scopes, window_counts
from collectors.history import HistoryReader
from collectors.slo import Slo
from collectors.slo_ledger import SloCounts

ADVICE_STEP_S = 60.0  # the advice is for a whole minute: page and CLI agree within it
DEMAND_WINDOW_S = 300.0
LIMIT_HISTORY_S = 86400.0  # where each recipe binds: its samples over the last day
LIMIT_ROWS = 100_000  # ... at most this many in all (the analysis pages' budget), 60–300 per server
LIMIT_POINTS = 300
LIMIT_MIN_POINTS = 60
FORECAST_HISTORY_S = 7 * 86400.0
MEMBER_HORIZON_S = 6 * 3600.0  # a target silent longer than this (and not configured) has left its deployment
DEMAND_SIGNALS: tuple[str, ...] = ("output_tok_s", "running", "queued")
LIMIT_SIGNALS: tuple[str, ...] = (
    *ANALYSIS_SIGNALS,
    *(s for s in ("state_pool_usage", "kv_usage", "queued", "max_running") if s not in ANALYSIS_SIGNALS),
)
# Latency SLOs burning in a deployment ask for a server more.
LATENCY_SLIS = ("ttft", "tpot", "e2e")
# SLIs whose totals count requests, best first (an availability SLO counts every request; TPOT may count
# tokens).
REQUEST_SLIS = ("availability", "e2e", "ttft")


def advice_now(now_ts: float) -> float:
    """The end of the minute the advice is for: every read within that minute sees the same windows, and
    (rounded up, as the pages' windows are) they hold the newest samples."""
    return math.ceil(now_ts / ADVICE_STEP_S) * ADVICE_STEP_S


def stale_after_s(interval_s: float) -> float:
    """A target whose newest row is older than this is stale (three missed cycles, at least 15 s), as the
    pages judge it (``PageContext.stale_after_s``)."""
    return max(3.0 * interval_s, 15.0)


def read_frame(
    history: HistoryReader,
    start_ts: float,
    end_ts: float,
    signals: Sequence[str],
    max_points: int,
    *,
    recipes: bool = False,
) -> pd.DataFrame:
    """ts, target, up (and recipe_id) and ``signals`` of every target in [start, end], ≤ ``max_points`` rows
    per target."""
    texts = ("recipe_id",) if recipes else ()
    return samples_frame(history.read_columns(start_ts, end_ts, signals, max_points, texts=texts))


def row_demand_tok_s(frame: pd.DataFrame) -> pd.Series:
    """Per row: output tok/s plus what its queue waits for (queued × the running requests' per-request rate);
    NaN where the output rate is unknown."""
    output = frame["output_tok_s"]
    running = frame["running"].where(frame["running"] > 0)
    queued = frame["queued"].fillna(0.0).clip(lower=0.0)
    waiting = (output / running * queued).fillna(0.0)
    return output + waiting


@dataclass(frozen=True, slots=True)
class DemandSeries:
    """Per deployment: demand summed over its servers per bucket (index: bucket start); its oldest sample."""

    series: dict[str, pd.Series] = field(default_factory=dict)
    first_ts: dict[str, float] = field(default_factory=dict)


def deployment_series(frame: pd.DataFrame, deployments: Mapping[str, str], bucket_s: float) -> DemandSeries:
    """Sum each bucket's per-server demand over each deployment's servers (a bucket nobody measured: NaN)."""
    if frame.empty:
        return DemandSeries()
    rows = frame.assign(
        _demand=row_demand_tok_s(frame),
        _deployment=frame["target"].map(lambda t: deployments.get(str(t), "")),
        _bucket=np.floor(frame["ts"].to_numpy(np.float64) / bucket_s) * bucket_s,
    ).dropna(subset=["_demand"])
    if rows.empty:
        return DemandSeries()
    # One value per server and bucket (a regrouped read may leave two rows of one server in a bucket).
    per_server = rows.groupby(["_deployment", "_bucket", "target"])["_demand"].mean()
    summed = per_server.groupby(level=["_deployment", "_bucket"]).sum()
    first = rows.groupby("_deployment")["ts"].min()
    series = {
        str(name): summed.xs(name, level="_deployment").sort_index()
        for name in summed.index.get_level_values("_deployment").unique()
    }
    return DemandSeries(series, {str(k): float(v) for k, v in first.items()})


def target_deployments(history: HistoryReader) -> dict[str, str]:
    """Every target ever seen → its deployment as of its newest row."""
    return {s.target: s.deployment for s in history.latest()}


def read_hourly_demand(history: HistoryReader, now_ts: float) -> DemandSeries:
    """The complete hours of the last FORECAST_HISTORY_S before ``now_ts``'s hour, per deployment: the same
    for every read within one hour (a page may keep it that long).

    Read a day at a time, newest first, back to the first day without a sample: a day the store holds whole
    comes from the 1 h tier (24 rows a server), and only the day the store began reads a finer tier — one
    read of the week on a store younger than a week reads the 1 min tier of its whole life."""
    hour = math.floor(now_ts / PROFILE_BUCKET_S) * PROFILE_BUCKET_S
    per_day = int(DAY_S / PROFILE_BUCKET_S)
    frames: list[pd.DataFrame] = []
    for k in range(int(FORECAST_HISTORY_S // DAY_S)):
        day = read_frame(history, hour - (k + 1) * DAY_S, hour - k * DAY_S - 1e-3, DEMAND_SIGNALS, per_day)
        if day.empty:
            break  # before the store began (or a whole day without samples: older days are not used)
        frames.append(day)
    if not frames:
        return DemandSeries()
    frame = pd.concat(frames[::-1], ignore_index=True)
    return deployment_series(frame, target_deployments(history), PROFILE_BUCKET_S)


def capacity_advice(
    history: HistoryReader,
    thresholds: CapacityThresholds,
    now_ts: float,
    *,
    stale_after_s: float,
    configured: Mapping[str, str] | None = None,
    slo_counts: SloCounts | None = None,
    slos: Sequence[Slo] = (),
    hourly: DemandSeries | None = None,
) -> list[DeploymentAdvice]:
    """The advice for every deployment (by name; the targets without one last), for the minute of
    ``now_ts``. ``configured``: configured target → deployment (a configured server never seen counts as a
    server, not up); ``hourly``: ``read_hourly_demand`` of this hour, when the caller keeps it."""
    now = advice_now(now_ts)
    configured = dict(configured or {})
    latest = history.latest()
    deployments = {s.target: s.deployment or configured.get(s.target, "") for s in latest}
    rows = [
        (s.target, deployments[s.target], s.up, s.ts, s.recipe_id)
        for s in latest
        if s.ts >= now - MEMBER_HORIZON_S or s.target in configured
    ]
    groups = group_members(rows, configured, now_ts, stale_after_s)  # up, down or stale as of now
    if not groups:
        return []
    demand_now = _demand_now(history, now, deployments)
    trend = deployment_series(
        read_frame(
            history,
            math.floor((now - TREND_WINDOW_S) / TREND_BUCKET_S) * TREND_BUCKET_S,
            now,
            DEMAND_SIGNALS,
            int(TREND_WINDOW_S / TREND_BUCKET_S) + 1,
        ),
        deployments,
        TREND_BUCKET_S,
    )
    if hourly is None:
        hourly = read_hourly_demand(history, now)
    usable = prepare(
        read_frame(
            history,
            now - LIMIT_HISTORY_S,
            now,
            LIMIT_SIGNALS,
            max(LIMIT_MIN_POINTS, min(LIMIT_POINTS, LIMIT_ROWS // max(len(deployments), 1))),
            recipes=True,
        )
    )
    limits: dict[tuple[str, str | None], RecipeLimit] = {}
    out = []
    for name, members in sorted(groups.items(), key=lambda item: (item[0] == "", item[0])):
        recipe, _ = main_recipe(members)
        limit = None
        if recipe is not None:
            context = _context_bin(usable, recipe, {m.target for m in members})
            key = (recipe, context)
            if key not in limits:
                if usable.empty:  # nothing busy in the last day (``prepare`` adds no bins to nothing)
                    rows_of = pd.DataFrame(columns=[*LIMIT_SIGNALS, "concurrency"])
                else:
                    rows_of = usable[(usable["recipe"] == recipe) & (usable["context_bin"] == context)]
                limits[key] = recipe_limit(rows_of, recipe, context, thresholds)
            limit = limits[key]
        firsts = [d.first_ts[name] for d in (hourly, trend) if name in d.first_ts]
        forecast = forecast_peak(
            hourly.series.get(name, pd.Series(dtype="float64")),
            trend.series.get(name),
            now,
            min(firsts) if firsts else None,
        )
        served, demand, queued = demand_now.get(name, (None, None, None))
        req_s = _requests_per_s(slo_counts, slos, name, now) if slo_counts is not None else None
        burning = _burning(slo_counts, slos, name, now) if slo_counts is not None else []
        out.append(
            advise_deployment(
                name, members, limit, Demand(served, demand, queued, req_s), forecast, burning, now
            )
        )
    return out


def _demand_now(
    history: HistoryReader, now: float, deployments: Mapping[str, str]
) -> dict[str, tuple[float, float, float]]:
    """Deployment → (served tok/s, demand tok/s, queued): each server's mean over the last
    DEMAND_WINDOW_S (while up), summed."""
    frame = read_frame(history, now - DEMAND_WINDOW_S, now, DEMAND_SIGNALS, int(DEMAND_WINDOW_S))
    frame = frame[frame["up"] & frame["output_tok_s"].notna()]
    if frame.empty:
        return {}
    per_server = (
        frame.assign(_demand=row_demand_tok_s(frame), _queued=frame["queued"].fillna(0.0))
        .groupby("target")[["output_tok_s", "_demand", "_queued"]]
        .mean()
    )
    per_server["deployment"] = [deployments.get(str(t), "") for t in per_server.index]
    summed = per_server.groupby("deployment")[["output_tok_s", "_demand", "_queued"]].sum()
    return {
        str(name): (float(row["output_tok_s"]), float(row["_demand"]), float(row["_queued"]))
        for name, row in summed.iterrows()
    }


def _context_bin(usable: pd.DataFrame, recipe: str, targets: set[str]) -> str | None:
    """The context the deployment serves with ``recipe``: the bin most of its busy samples fall in (the
    recipe's fleet-wide when its own servers have none)."""
    if usable.empty:
        return None
    of_recipe = usable[(usable["recipe"] == recipe) & (usable["running"] > 0)]
    own = of_recipe[of_recipe["target"].isin(targets)]
    for rows in (own, of_recipe):
        counts = rows["context_bin"].dropna().value_counts()
        if not counts.empty:
            return str(counts.index[0])
    return None


def _scope_of(slo: Slo, deployment: str, counts: SloCounts, now: float) -> str | None:
    """The SLO's scope key for the deployment, if it counts one."""
    if not deployment:
        return None
    for scope in slo_scopes(counts, slo, now):
        if scope.as_dict().get("deployment") == deployment:
            return scope.key
    return None


def _burning(counts: SloCounts | None, slos: Sequence[Slo], deployment: str, now: float) -> list[str]:
    """ "ttft-1s (page)" for each latency SLO whose burn condition holds in the deployment."""
    found = []
    for slo in slos:
        if counts is None or slo.sli.kind not in LATENCY_SLIS:
            continue
        key = _scope_of(slo, deployment, counts, now)
        if key is None:
            continue
        scope = next(s for s in slo_scopes(counts, slo, now) if s.key == key)
        holding = {c.severity for c in burn_checks(counts, slo, scope, now) if c.holds(slo.min_events)}
        severities = [s for s in ("page", "ticket") if s in holding]
        if severities:
            found.append(f"{slo.name} ({'+'.join(severities)})")
    return found


def _requests_per_s(
    counts: SloCounts | None, slos: Sequence[Slo], deployment: str, now: float
) -> float | None:
    """Requests per second over the last DEMAND_WINDOW_S in the deployment, from an SLO that counts every
    request in it (None without one)."""
    ranked = sorted(
        (s for s in slos if s.sli.kind in REQUEST_SLIS), key=lambda s: REQUEST_SLIS.index(s.sli.kind)
    )
    for slo in ranked:
        if counts is None:
            return None
        key = _scope_of(slo, deployment, counts, now)
        if key is None:
            continue
        scope = next(s for s in slo_scopes(counts, slo, now) if s.key == key)
        window = window_counts(counts, slo, scope, DEMAND_WINDOW_S, now)
        if window.total > 0:
            return window.total / DEMAND_WINDOW_S
    return None
