"""Servers needed per deployment on simulated fleets written into real stores: a saturated deployment needs
more than it has, an idle one fewer, one whose servers are all down says so, a burning SLO asks for one
more — and every number is checked against the store read another way (``tests.history_frames.oracle_frame``,
the SQL frame read kept as the tests' reference), never against a constant."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from alerts.rules import capacity_thresholds
from analysis.advice_inputs import DEMAND_WINDOW_S, LIMIT_HISTORY_S, advice_now, capacity_advice
from analysis.capacity_advice import HEADROOM, DeploymentAdvice, servers_for
from analysis.sample_bins import prepare
from analysis.scaling import find_knee, scaling_curve
from collectors.slo import build_slos
from collectors.store.slo_counts import SloCountStore
from collectors.store.sqlite_store import SqliteStore
from config import load_config
from tests.analysis import advice_fleet as af
from tests.history_frames import oracle_frame

STALE_AFTER_S = 3 * af.INTERVAL_S


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> af.Filled:
    """The fleet, with the counts of an SLO the idle deployment burns (its config: ``slo_config``)."""
    folder = tmp_path_factory.mktemp("advice-fleet")
    config = af.write_config(folder / "slo.yaml", folder / "fleet.sqlite", slos=[af.IDLE_TTFT_SLO])
    slos = build_slos(load_config(config))
    return af.fill_fleet(folder, slos=slos)


def advise(store_path: Path, now: float, **kw: Any) -> dict[str, DeploymentAdvice]:
    store = SqliteStore(store_path)
    try:
        found = capacity_advice(store, capacity_thresholds(), now, stale_after_s=STALE_AFTER_S, **kw)
    finally:
        store.close()
    return {a.deployment: a for a in found}


def recent_demand(store_path: Path, targets: list[str], now: float) -> tuple[float, float]:
    """(served, demand) tok/s of ``targets`` over the advice's 5 minutes, from ``oracle_frame``: each
    server's mean output, and its mean of output × (running + queued) ÷ running, summed."""
    store = SqliteStore(store_path)
    try:
        frame = oracle_frame(store, now - DEMAND_WINDOW_S, now, targets, 10_000)
    finally:
        store.close()
    frame = frame[frame["up"] & frame["output_tok_s"].notna()]
    per_request = frame["output_tok_s"] / frame["running"].where(frame["running"] > 0)
    demand = frame["output_tok_s"] + (per_request * frame["queued"].fillna(0)).fillna(0)
    by = frame.assign(_demand=demand).groupby("target")
    return float(by["output_tok_s"].mean().sum()), float(by["_demand"].mean().sum())


def test_a_saturated_deployment_needs_more_servers_than_it_has(fleet: af.Filled) -> None:
    now = time.time()
    hot = advise(fleet.store_path, now)["hot"]
    assert hot.servers_up == 2
    assert hot.binding == "state pool"  # 98% of the state slots, KV ~29%: the alert rule's level is 95%
    store = SqliteStore(fleet.store_path)
    cap = store.recipes()[str(hot.recipe)].max_running
    store.close()
    assert hot.knee_running == cap  # the pool fills exactly as the cap is reached (48), the rest queue
    served, demand = recent_demand(fleet.store_path, ["hot-0", "hot-1"], advice_now(now))
    assert hot.served_tok_s == pytest.approx(served, rel=1e-9)
    assert hot.demand_tok_s == pytest.approx(demand, rel=1e-9)
    assert demand > 1.3 * served  # 32 queued per server: a queue is demand not yet served
    assert hot.tok_s_per_server_at_knee is not None
    assert hot.servers_needed_now == servers_for(demand, hot.tok_s_per_server_at_knee)
    assert hot.servers_needed_now is not None
    assert hot.servers_needed_now > hot.servers_up
    # Only one concurrency level of this recipe was ever seen: a knee below 48 cannot be ruled out.
    assert hot.lower_bound
    assert f"at least {hot.servers_needed_now} now" in hot.reason
    assert "the state pool binds at 48 running" in hot.reason
    assert "64 queued" in hot.reason


def test_an_idle_deployment_needs_fewer_servers_than_it_has(fleet: af.Filled) -> None:
    now = time.time()
    idle = advise(fleet.store_path, now)["idle"]
    assert idle.servers_up == 3
    assert idle.binding == "compute"
    # The knee of the recipe's curve at its context, from the last day read as the Server page reads it.
    store = SqliteStore(fleet.store_path)
    end = advice_now(now)
    usable = prepare(oracle_frame(store, end - LIMIT_HISTORY_S, end, None, 300))
    store.close()
    rows = usable[(usable["recipe"] == idle.recipe) & (usable["context_bin"] == idle.context_bin)]
    knee = find_knee(scaling_curve(rows[rows["running"] > 0]))
    assert knee is not None
    assert idle.knee_running == pytest.approx(knee.running)
    assert idle.tok_s_per_server_at_knee == pytest.approx(knee.modelled_output_tok_s)
    _, demand = recent_demand(fleet.store_path, ["idle-0", "idle-1", "idle-2"], end)
    assert idle.demand_tok_s == pytest.approx(demand, rel=1e-9)
    expected = max(1, math.ceil(demand / (knee.modelled_output_tok_s * (1 - HEADROOM))))
    assert idle.servers_needed_now == expected
    assert expected < idle.servers_up
    assert not idle.lower_bound
    assert f"→ {expected} now" in idle.reason


def test_a_deployment_whose_servers_are_all_down_says_so(fleet: af.Filled) -> None:
    gone = advise(fleet.store_path, time.time())["gone"]
    assert (gone.servers, gone.servers_up) == (2, 0)
    assert gone.demand_tok_s is None  # unknown, never 0
    assert gone.servers_needed_now is None
    assert "no server up (all 2: 2 down)" in gone.reason
    assert "demand unknown: no sample of its servers in the last 5 min" in gone.reason
    # Its past still forecasts a peak: what it needs when it comes back.
    assert gone.forecast_method == "linear trend"
    assert gone.servers_needed_peak is not None


def test_configured_targets_without_a_deployment_are_one_group(fleet: af.Filled) -> None:
    found = advise(fleet.store_path, time.time(), configured={"new-1": "", "new-2": "hot"})
    assert (found["hot"].servers, found["hot"].servers_up) == (3, 2)
    loose = found[""]
    assert (loose.servers, loose.servers_up, loose.servers_needed_now) == (1, 0, None)
    assert loose.reason.startswith("(no deployment label): no server up (all 1: 1 no data)")
    assert "no deployment label and are advised as one group" in loose.reason


def test_a_burning_latency_slo_asks_for_one_server_more(fleet: af.Filled) -> None:
    slos = build_slos(load_config(fleet.store_path.parent / "slo.yaml"))
    # The counts as the collector makes them, from the servers' /metrics bodies (``af.fill``).
    counts = SloCountStore(str(fleet.store_path), create=False)
    try:
        now = time.time()
        found = advise(fleet.store_path, now, slo_counts=counts, slos=slos)
        without = advise(fleet.store_path, now)
    finally:
        counts.close()
    idle = found["idle"]
    assert without["idle"].servers_needed_now is not None
    assert without["idle"].servers_needed_now < idle.servers_up  # throughput alone: fewer
    assert idle.slos_burning == ("idle-ttft-200ms (page)",)
    assert idle.servers_needed_now == idle.servers_up + 1  # the SLO burns: one more than are up
    assert "idle-ttft-200ms (page) burning in this deployment" in idle.reason
    assert idle.demand_req_s is not None  # the SLO's requests over 5 min
    assert idle.demand_req_s > 0
    assert found["hot"].slos_burning == ()  # the SLO covers idle only
    assert found["hot"].servers_needed_now == without["hot"].servers_needed_now


# -- the forecast on four simulated days -----------------------------------------------------------------
@pytest.fixture(scope="module")
def daily(tmp_path_factory: pytest.TempPathFactory) -> af.Filled:
    """Four days of a daily cycle ending now: advice is asked for a day back, and the fourth day is the
    future it forecasts (the simulation repeats each day, with noise)."""
    folder = tmp_path_factory.mktemp("advice-daily")
    return af.fill(folder, "daily", af.DAILY, 4 * 24.0, time.time(), window_s=30.0)


@pytest.mark.slow
def test_three_days_forecast_the_next_days_peak_from_the_daily_profile(daily: af.Filled) -> None:
    now = daily.end_ts - af.DAY_S
    advice = advise(daily.store_path, now)["daily"]
    assert advice.forecast_method == "daily profile"
    assert "(daily profile, 3 days)" in advice.reason
    # What the next day really held: its hourly demand, read from the store's future.
    store = SqliteStore(daily.store_path)
    future = oracle_frame(store, advice_now(now), advice_now(now) + af.DAY_S, ["daily-0"], 24)
    store.close()
    hours = future.assign(_demand=future["output_tok_s"] * (1 + future["queued"] / future["running"]))
    truth = hours.loc[hours["_demand"].idxmax()]
    assert advice.forecast_peak_tok_s == pytest.approx(float(truth["_demand"]), rel=0.1)
    assert advice.forecast_peak_ts is not None
    assert abs(advice.forecast_peak_ts - math.floor(float(truth["ts"]) / 3600) * 3600) <= 3600
    # Now is the cycle's trough (4 clients), its peak 40: one server now, more at the peak.
    per_server = advice.tok_s_per_server_at_knee
    assert per_server is not None
    assert advice.servers_needed_peak == servers_for(advice.forecast_peak_tok_s, per_server)
    assert advice.servers_needed_now is not None
    assert advice.servers_needed_peak > advice.servers_needed_now


@pytest.mark.slow
def test_before_two_days_the_forecast_is_the_trend(daily: af.Filled) -> None:
    advice = advise(daily.store_path, daily.start_ts + 30 * 3600.0)["daily"]
    assert advice.forecast_method == "linear trend"
    assert "(linear trend, last 6 h, next 6 h)" in advice.reason
    assert advice.servers_needed_peak is not None


@pytest.mark.slow
def test_too_short_a_history_is_unknown_with_the_reason(daily: af.Filled) -> None:
    advice = advise(daily.store_path, daily.start_ts + 40 * 60.0)["daily"]
    assert advice.forecast_peak_tok_s is None
    assert advice.servers_needed_peak is None
    assert "forecast unknown: history too short: 40 min stored" in advice.reason
    # Forty minutes of a slowly rising load never reached the knee: per-server capacity is unknown too.
    assert advice.tok_s_per_server_at_knee is None
    assert advice.servers_needed_now is None
    assert advice.reason.endswith("→ servers needed unknown.")
