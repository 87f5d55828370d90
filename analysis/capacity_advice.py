"""Servers needed per deployment, now and at the next 24 hours' peak, and why — advice only: nothing here (or
anywhere in specwatch) acts on it.

For each deployment (the targets' ``deployment`` label; targets without one are advised together):

- **The binding limit** of the recipe most of its servers run, at the context it serves: of the limits that
  stop a server from serving more as its load rises — the state pool fills, the KV cache fills, the request
  cap holds a queue back (at the alert rules' own levels, ``CapacityThresholds``), or throughput stops
  scaling (the knee of the scaling curve, ``analysis.scaling``) — the one reached at the fewest running
  requests. What one server serves there (running × accept length ÷ step latency, the curve's modelled
  throughput) is its capacity *at the knee*. From the recipe's samples fleet-wide over the last day: the
  recipe's behaviour is the same on every server running it.
- **Demand now**: the last 5 minutes' output tok/s summed over the deployment's servers, plus what its queue
  waits for (queued requests at the running ones' per-request rate: a queue is demand not yet served).
- **Forecast**: the next 24 hours' peak (``analysis.forecast``), never below the demand now.
- **Servers needed** = ⌈demand ÷ (capacity at the knee × (1 − ``HEADROOM``))⌉, at least one; where an SLO
  covering the deployment burns (its page or ticket condition holds), at least one more than are up.

Unknown is never a number: without a knee (or a pool that binds), or without history, the answer is None
and the reason says what is missing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from analysis.capacity import CapacityThresholds
from analysis.forecast import Forecast, Method
from analysis.fraction import MIN_SAMPLES
from analysis.scaling import MIN_LEVELS, find_knee, scaling_curve

AdviceBinding = Literal["state pool", "KV cache", "request cap", "compute", "none"]
Status = Literal["up", "down", "stale", "no data"]

# Each server is sized to serve at most this share below its throughput at the knee: a 5-minute mean at the
# knee would leave no room for the minute-scale bursts the mean hides.
HEADROOM = 0.10
NO_DEPLOYMENT = "(no deployment label)"
ADVICE_NOW_SLACK_S = 60.0  # a peak within the advice's minute is "now"
# Limits reached at the same running count are named in this order (the pool is why the cap holds a queue).
_LIMIT_ORDER: dict[AdviceBinding, int] = {"state pool": 0, "KV cache": 1, "request cap": 2, "compute": 3}


@dataclass(frozen=True, slots=True)
class RecipeLimit:
    """Where one recipe stops scaling at one context, from its samples fleet-wide."""

    recipe: str
    context_bin: str | None
    binding: AdviceBinding | None  # None: unknown (too little history to say)
    running: float | None  # running requests per server where it binds
    tok_s: float | None  # one server's throughput there (modelled: running × accept ÷ step)
    exact: bool  # False: a pool binds but the curve is too short to rule out a knee below it
    levels: int  # concurrency levels of the scaling curve
    words: str


def recipe_limit(
    rows: pd.DataFrame, recipe: str, context_bin: str | None, thresholds: CapacityThresholds
) -> RecipeLimit:
    """The limit of ``recipe`` at ``context_bin`` from ``rows``: its prepared samples there
    (``sample_bins.prepare`` plus state_pool_usage, kv_usage, queued and max_running)."""
    t = thresholds
    where = f"recipe {recipe} at context {context_bin or 'unknown'}"
    busy = rows.dropna(subset=["running", "accept_length", "step_latency_s"])
    busy = busy[(busy["running"] > 0) & (busy["step_latency_s"] > 0)]
    if busy.empty:
        return RecipeLimit(
            recipe, context_bin, None, None, None, False, 0, f"no busy sample of {where} in the last day"
        )
    modelled = busy["running"] * busy["accept_length"] / busy["step_latency_s"]
    at_limit: list[tuple[float, int, AdviceBinding, float]] = []
    pools: tuple[tuple[AdviceBinding, pd.Series], ...] = (
        ("state pool", busy["state_pool_usage"] >= t.state_pool_binds_at),
        ("KV cache", busy["kv_usage"] >= t.kv_binds_at),
        (
            "request cap",
            (busy["max_running"] > 0) & (busy["running"] >= busy["max_running"]) & (busy["queued"] > 0),
        ),
    )
    for name, mask in pools:
        if int(mask.sum()) >= MIN_SAMPLES:
            running = float(busy.loc[mask, "running"].median())
            at_limit.append((running, _LIMIT_ORDER[name], name, float(modelled[mask].mean())))
    curve = scaling_curve(busy)
    knee = find_knee(curve)
    if knee is not None:
        at_limit.append((knee.running, _LIMIT_ORDER["compute"], "compute", knee.modelled_output_tok_s))
    levels = len(curve)
    if not at_limit:
        if levels >= MIN_LEVELS:
            top = float(curve["running"].max())
            return RecipeLimit(
                recipe,
                context_bin,
                "none",
                None,
                None,
                True,
                levels,
                f"nothing binds up to {top:.0f} running for {where}: no pool fills and the scaling curve "
                "still scales (no knee yet)",
            )
        return RecipeLimit(
            recipe,
            context_bin,
            None,
            None,
            None,
            False,
            levels,
            f"only {levels} concurrency level(s) of {where} with {MIN_SAMPLES}+ samples in the last day "
            f"and no pool binds: a knee needs {MIN_LEVELS} levels",
        )
    running, _, binding, tok_s = min(at_limit)
    exact = binding == "compute" or levels >= MIN_LEVELS
    what = {
        "compute": f"throughput stops scaling at {running:.0f} running (the knee of {where})",
        "state pool": f"the state pool binds at {running:.0f} running ({where})",
        "KV cache": f"the KV cache binds at {running:.0f} running ({where})",
        "request cap": f"the request cap binds at {running:.0f} running with a queue ({where})",
    }[binding]
    if not exact:
        what += (
            f"; its scaling curve has {levels} level(s), too few to rule out a knee below that, so the "
            "servers needed are a lower bound"
        )
    return RecipeLimit(recipe, context_bin, binding, running, tok_s, exact, levels, what)


@dataclass(frozen=True, slots=True)
class Member:
    target: str
    status: Status
    recipe_id: str | None


@dataclass(frozen=True, slots=True)
class Demand:
    """The last 5 minutes, summed over a deployment's servers (None: no sample of any of them)."""

    served_tok_s: float | None
    demand_tok_s: float | None  # served + what the queued requests wait for
    queued: float | None  # mean queued requests, summed
    req_s: float | None  # completed requests per second (from the SLO counts; None without them)


@dataclass(frozen=True, slots=True)
class DeploymentAdvice:
    deployment: str  # "" for the targets without a deployment label
    servers: int
    servers_up: int
    recipe: str | None
    context_bin: str | None
    binding: AdviceBinding | None
    knee_running: float | None
    tok_s_per_server_at_knee: float | None
    served_tok_s: float | None
    demand_tok_s: float | None
    demand_req_s: float | None
    forecast_peak_tok_s: float | None
    forecast_peak_ts: float | None
    forecast_method: Method | None
    servers_needed_now: int | None
    servers_needed_peak: int | None
    lower_bound: bool  # the servers needed are at least these (a knee below the pool's limit is possible)
    slos_burning: tuple[str, ...]
    reason: str

    @property
    def label(self) -> str:
        return self.deployment or NO_DEPLOYMENT

    def record(self) -> dict[str, Any]:
        """The JSON line (``specwatch capacity --json``): the documented keys first; null is unknown."""
        return {
            "deployment": self.deployment,
            "servers_up": self.servers_up,
            "binding": self.binding,
            "knee_running": _round(self.knee_running, 1),
            "tok_s_per_server_at_knee": _round(self.tok_s_per_server_at_knee, 1),
            "demand_tok_s": _round(self.demand_tok_s, 1),
            "forecast_peak_tok_s": _round(self.forecast_peak_tok_s, 1),
            "forecast_method": self.forecast_method,
            "servers_needed_now": self.servers_needed_now,
            "servers_needed_peak": self.servers_needed_peak,
            "reason": self.reason,
            "servers": self.servers,
            "recipe": self.recipe,
            "context_bin": self.context_bin,
            "served_tok_s": _round(self.served_tok_s, 1),
            "demand_req_s": _round(self.demand_req_s, 3),
            "forecast_peak_ts": self.forecast_peak_ts,
            "lower_bound": self.lower_bound,
            "slos_burning": list(self.slos_burning),
            "headroom": HEADROOM,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def servers_for(demand_tok_s: float, tok_s_per_server: float, headroom: float = HEADROOM) -> int:
    """⌈demand ÷ (per-server throughput at the knee × (1 − headroom))⌉, at least one server."""
    usable = tok_s_per_server * (1.0 - headroom)
    return max(1, math.ceil(demand_tok_s / usable - 1e-9))


def advise_deployment(
    deployment: str,
    members: Sequence[Member],
    limit: RecipeLimit | None,
    demand: Demand,
    forecast: Forecast,
    burning: Sequence[str],
    now_ts: float,
) -> DeploymentAdvice:
    """The advice for one deployment from its parts (``limit``: of its main recipe, None when it has none)."""
    up = sum(1 for m in members if m.status == "up")
    per_server = limit.tok_s if limit is not None else None
    lower_bound = limit is not None and not limit.exact
    floor = up + 1 if burning else None
    now_d = demand.demand_tok_s
    peak, peak_ts = forecast.peak_tok_s, forecast.peak_ts
    if peak is not None and now_d is not None and now_d >= peak:
        peak, peak_ts = now_d, now_ts  # the next 24 hours begin now: their peak is never below it
    needed_now = needed_peak = None
    if per_server is not None and per_server > 0:
        if now_d is not None:
            needed_now = max(servers_for(now_d, per_server), floor or 0)
        if peak is not None:
            needed_peak = max(servers_for(peak, per_server), floor or 0)
    advice = DeploymentAdvice(
        deployment=deployment,
        servers=len(members),
        servers_up=up,
        recipe=limit.recipe if limit is not None else None,
        context_bin=limit.context_bin if limit is not None else None,
        binding=limit.binding if limit is not None else None,
        knee_running=limit.running if limit is not None else None,
        tok_s_per_server_at_knee=per_server,
        served_tok_s=demand.served_tok_s,
        demand_tok_s=now_d,
        demand_req_s=demand.req_s,
        forecast_peak_tok_s=peak,
        forecast_peak_ts=peak_ts,
        forecast_method=forecast.method,
        servers_needed_now=needed_now,
        servers_needed_peak=needed_peak,
        lower_bound=lower_bound,
        slos_burning=tuple(burning),
        reason="",
    )
    return _with_reason(advice, members, limit, demand, forecast, now_ts)


def main_recipe(members: Sequence[Member]) -> tuple[str | None, str]:
    """The recipe most of the servers up run (of all members when none is up), and the mix in words
    ("" when they all run one)."""
    up = [m for m in members if m.status == "up" and m.recipe_id]
    pool = up or [m for m in members if m.recipe_id]
    counts: dict[str, int] = {}
    for m in pool:
        counts[str(m.recipe_id)] = counts.get(str(m.recipe_id), 0) + 1
    if not counts:
        return None, ""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    main = ranked[0][0]
    if len(ranked) == 1:
        return main, ""
    mix = ", ".join(f"{recipe} ({n} server{'s' if n > 1 else ''})" for recipe, n in ranked)
    return main, (
        f"mixes recipes {mix}: sized on {main}, the recipe most of its servers run (servers added would run "
        "it)"
    )


def _servers_text(members: Sequence[Member]) -> str:
    up = sum(1 for m in members if m.status == "up")
    others: dict[str, int] = {}
    for m in members:
        if m.status != "up":
            others[m.status] = others.get(m.status, 0) + 1
    rest = ", ".join(f"{n} {status}" for status, n in sorted(others.items()))
    if up == 0 and members:
        return f"no server up (all {len(members)}: {rest})"
    servers = "server" if len(members) == 1 else "servers"
    return f"{up} of {len(members)} {servers} up" + (f" ({rest})" if rest else "")


def _with_reason(
    advice: DeploymentAdvice,
    members: Sequence[Member],
    limit: RecipeLimit | None,
    demand: Demand,
    forecast: Forecast,
    now_ts: float,
) -> DeploymentAdvice:
    parts = [_servers_text(members)]
    _, mix = main_recipe(members)
    if mix:
        parts.append(mix)
    if limit is None:
        parts.append("no recipe known for its servers")
    else:
        parts.append(limit.words)
    if advice.tok_s_per_server_at_knee is not None:
        parts.append(f"{advice.tok_s_per_server_at_knee:,.0f} tok/s per server at the knee")
    else:
        parts.append("per-server throughput at the knee unknown")
    if demand.demand_tok_s is None:
        text = "demand unknown: no sample of its servers in the last 5 min"
    else:
        text = f"demand {demand.demand_tok_s:,.0f} tok/s now"
        waiting = demand.demand_tok_s - (demand.served_tok_s or 0.0)
        if demand.queued and waiting > 0.5:
            text += (
                f" ({demand.served_tok_s or 0.0:,.0f} served + {waiting:,.0f} for {demand.queued:.0f} queued)"
            )
        if demand.req_s is not None:
            text += f", {demand.req_s:,.1f} req/s"
    if advice.forecast_peak_tok_s is not None and advice.forecast_peak_ts is not None:
        how = f"({advice.forecast_method}, {forecast.basis})"
        if advice.forecast_peak_ts <= now_ts + ADVICE_NOW_SLACK_S:
            text += f", no higher demand forecast {how}"
        else:
            when = time.strftime("%a %H:%M UTC", time.gmtime(advice.forecast_peak_ts))
            text += f", {advice.forecast_peak_tok_s:,.0f} forecast at {when} {how}"
    else:
        text += f"; forecast unknown: {forecast.basis}"
    parts.append(text)
    sentence = f"{advice.label}: " + "; ".join(parts)
    sentence += " → " + _needed_text(advice)
    if advice.deployment == "":
        sentence += " (these targets have no deployment label and are advised as one group)"
    return dataclasses.replace(advice, reason=sentence + ".")


def _needed_text(advice: DeploymentAdvice) -> str:
    at_least = "at least " if advice.lower_bound else ""
    now, peak = advice.servers_needed_now, advice.servers_needed_peak
    if now is None and peak is None:
        return "servers needed unknown"
    now_text = f"{at_least}{now} now" if now is not None else "unknown now"
    peak_text = f"{at_least}{peak} at peak" if peak is not None else "unknown at peak"
    text = f"{now_text}, {peak_text} (each server at most {1 - HEADROOM:.0%} of its throughput at the knee)"
    if advice.slos_burning:
        text += (
            f"; {', '.join(advice.slos_burning)} burning in this deployment: at least one server more than "
            f"the {advice.servers_up} up"
        )
    return text


def group_members(
    latest: Sequence[tuple[str, str, bool, float, str | None]],
    configured: Mapping[str, str],
    now_ts: float,
    stale_after_s: float,
) -> dict[str, list[Member]]:
    """Deployment → its servers with their status now: ``latest`` holds (target, deployment, up, ts,
    recipe_id) of each target's newest row; configured targets never seen are "no data"."""
    groups: dict[str, list[Member]] = {}
    seen = set()
    for target, deployment, up, ts, recipe_id in latest:
        seen.add(target)
        status: Status = "stale" if now_ts - ts > stale_after_s else ("up" if up else "down")
        groups.setdefault(deployment or configured.get(target, ""), []).append(
            Member(target, status, recipe_id)
        )
    for target in sorted(set(configured) - seen):
        groups.setdefault(configured[target], []).append(Member(target, "no data", None))
    return {name: sorted(found, key=lambda m: m.target) for name, found in sorted(groups.items())}
