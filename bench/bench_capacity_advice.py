"""Capacity advice benchmark: what ``specwatch capacity`` (and the Capacity page's background refresh) costs
against the read the Capacity page already does at its 24 h range.

On a store of the demo fleet written by ``sim.fill`` (``SERVERS`` servers × ``HOURS`` hours; or the store at
``SPECWATCH_BENCH_ADVICE_STORE``), CPU time of this thread (``time.thread_time``), best of ``ROUNDS``:

- baseline: the Scaling section's read at 24 h — every target's analysis signals and recipes as columns at
  the analysis pages' points per server (``read_columns``, what ``data.fleet_signals`` reads);
- the hourly history (``read_hourly_demand``: the complete hours of the last week; the page keeps it an
  hour);
- the advice with the hourly history given (what the page refreshes every five minutes), and cold (the CLI).

A store younger than the week (or the day) reads its finest tier that holds the range, so the young-store
case costs the most; ``SPECWATCH_BENCH_SERVERS`` / ``SPECWATCH_BENCH_HOURS`` set the fleet.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alerts.rules import capacity_thresholds
from analysis.advice_inputs import LIMIT_HISTORY_S, capacity_advice, read_hourly_demand
from analysis.sample_bins import ANALYSIS_SIGNALS
from bench.measure import best_s
from collectors.store.sqlite_store import SqliteStore
from sim.fill import fill_store

SERVERS = int(os.environ.get("SPECWATCH_BENCH_SERVERS", "200"))
HOURS = float(os.environ.get("SPECWATCH_BENCH_HOURS", "26"))
ROUNDS = 3
ANALYSIS_ROWS, ANALYSIS_POINTS, ANALYSIS_MIN_POINTS = 100_000, 300, 60  # views.blocks.analysis_points


def _best(fn: Callable[[], Any]) -> float:
    return best_s(fn, ROUNDS, clock=time.thread_time)


def _measure(path: str) -> dict[str, object]:
    store = SqliteStore(path)
    try:
        now = max(s.ts for s in store.latest())
        servers = len(store.latest())
        points = max(ANALYSIS_MIN_POINTS, min(ANALYSIS_POINTS, ANALYSIS_ROWS // servers))
        thresholds = capacity_thresholds()
        baseline = _best(
            lambda: store.read_columns(
                now - LIMIT_HISTORY_S, now, ANALYSIS_SIGNALS, points, texts=("recipe_id",)
            )
        )
        hourly_s = _best(lambda: read_hourly_demand(store, now))
        hourly = read_hourly_demand(store, now)
        warm = _best(lambda: capacity_advice(store, thresholds, now, stale_after_s=15.0, hourly=hourly))
        cold = _best(lambda: capacity_advice(store, thresholds, now, stale_after_s=15.0))
    finally:
        store.close()
    return {
        "servers": servers,
        "baseline_24h_analysis_read_cpu_s": round(baseline, 3),
        "hourly_history_cpu_s": round(hourly_s, 3),
        "advice_with_hourly_cpu_s": round(warm, 3),
        "advice_cold_cpu_s": round(cold, 3),
        "advice_with_hourly_vs_baseline": round(warm / baseline, 2),
        "advice_cold_vs_baseline": round(cold / baseline, 2),
    }


def main() -> dict[str, object]:
    given = os.environ.get("SPECWATCH_BENCH_ADVICE_STORE")
    if given:
        return {"store": given, **_measure(given)}
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "history.sqlite")
        fill_store(path, servers=SERVERS, hours=HOURS, raw_hours=6.0, sample_in_process=True)
        return {"store": f"demo × {SERVERS} servers × {HOURS:g} h (sim.fill)", **_measure(path)}
