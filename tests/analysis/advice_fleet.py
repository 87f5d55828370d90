"""Simulated fleets with a known capacity story, written into history stores with ``sim.fill`` (the
collector's own tiers, in seconds rather than hours) for the capacity-advice tests.

``FLEET`` (2.5 h): ``hot`` runs the untuned window (block size 7) with 80 clients on 8K prompts, past the
48-request cap: the state pool at ~98%, 32 queued per server; ``idle`` runs the shipped recipe with 2 clients
per server on chat; ``lab`` sweeps the shipped recipe on the same chat from 1 to 64 clients (the scaling
curve's knee); ``gone`` goes down 15 minutes before the end. ``DAILY`` (4 days): ``daily`` climbs from 4 to 40
clients over 12 hours and back, every day (its own scaling curve: 4 to 40 running).

Decode-log windows of 15–30 s (``Segment``'s window lengths): a window much longer than a request would
publish a running count after most requests finished (``sim.fill``'s 300 s default is for gauges that
rarely matter), and the running count is what the scaling curve bins by.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from collectors.direct.slo_backfill import SloBackfill
from collectors.slo import Slo
from collectors.store.slo_counts import SloCountStore
from sim.fill import Segment, write_history

DAY_S = 86400.0
FLEET_S = 2.5 * 3600.0
GONE_FOR_S = 900.0  # gone's servers are down for the last 15 minutes
INTERVAL_S = 120.0  # the configs' scrape interval: the fleet stays fresh (not stale) for 6 minutes
STEP_S = 15.0

RECIPES = {
    "shipped": {"speculative_dspark_block_size": 3},
    "default_window": {"speculative_dspark_block_size": 7},
}


def _server(name: str, deployment: str, recipe: str, workload: str, clients: int) -> dict[str, Any]:
    return {
        "name": name,
        "deployment": deployment,
        "recipe": recipe,
        "workload": workload,
        "load": {"concurrency": clients},
    }


FLEET: dict[str, Any] = {
    "description": "capacity advice: a saturated, an idle, a sweeping and a vanished deployment",
    "warmup_s": 600,
    "recipes": RECIPES,
    "workloads": {"chat": {"isl": 1024, "osl": 1024}, "rag": {"isl": 8192, "osl": 1024}},
    "servers": [
        _server("hot-0", "hot", "default_window", "rag", 80),
        _server("hot-1", "hot", "default_window", "rag", 80),
        _server("idle-0", "idle", "shipped", "chat", 2),
        _server("idle-1", "idle", "shipped", "chat", 2),
        _server("idle-2", "idle", "shipped", "chat", 2),
        _server("lab-sweep", "lab", "shipped", "chat", 1),
        _server("gone-0", "gone", "shipped", "chat", 8),
        _server("gone-1", "gone", "shipped", "chat", 8),
    ],
    "phases": [
        {"at_s": 0, "servers": ["lab-sweep"], "ramp": {"over_s": 7200, "concurrency": [1, 64]}},
        {"at_s": FLEET_S - GONE_FOR_S, "servers": ["gone-0", "gone-1"], "fault": "down"},
    ],
}

DAILY: dict[str, Any] = {
    "description": "capacity advice: a daily load cycle (4 → 40 → 4 clients)",
    "warmup_s": 600,
    "loop_s": DAY_S,
    "recipes": RECIPES,
    "workloads": {"long": {"isl": 1024, "osl": 2048}},
    "servers": [_server("daily-0", "daily", "shipped", "long", 4)],
    "phases": [
        {"at_s": 0, "servers": ["daily-0"], "ramp": {"over_s": DAY_S / 2, "concurrency": [4, 40]}},
        {"at_s": DAY_S / 2, "servers": ["daily-0"], "ramp": {"over_s": DAY_S / 2, "concurrency": [40, 4]}},
    ],
}
# An SLO the idle deployment burns (its TTFT sits just above 200 ms), with conditions a fill's five-minute
# bodies can meet (the workbook's 5-minute short window would hold one body at most).
IDLE_TTFT_SLO: dict[str, Any] = {
    "name": "idle-ttft-200ms",
    "sli": {"kind": "ttft", "threshold_s": 0.2},
    "objective": 0.99,
    "window": "1d",
    "match": {"deployment": "idle"},
    "alerting": {"page": [{"long_s": 3600, "short_s": 1800, "factor": 2}], "ticket": [], "min_events": 10},
}


@dataclass(frozen=True)
class Filled:
    store_path: Path
    start_ts: float
    end_ts: float


def fill(
    folder: Path,
    name: str,
    scenario: dict[str, Any],
    hours: float,
    end_ts: float,
    *,
    window_s: float,
    slos: tuple[Slo, ...] = (),
) -> Filled:
    """Write ``hours`` of ``scenario`` ending at ``end_ts`` into ``folder/name.sqlite`` (raw rows for the
    last 30 min, the 1 min tier before); with ``slos``, their counts from the servers' /metrics bodies."""
    scenario_path = folder / f"{name}.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    store_path = folder / f"{name}.sqlite"
    duration_s = hours * 3600.0
    start = math.floor((end_ts - duration_s) / 60.0) * 60.0
    segment = Segment(start, duration_s, 0, max(duration_s - 1800.0, 0.0), window_s, window_s)
    counts = SloCountStore(str(store_path)) if slos else None
    try:
        write_history(
            store_path,
            [segment],
            scenario=scenario_path,
            servers=None,
            step_s=STEP_S,
            exclusive=True,
            bodies=SloBackfill(slos, counts) if counts is not None else None,
        )
    finally:
        if counts is not None:
            counts.close()
    return Filled(store_path, start, start + duration_s)


def write_config(
    path: Path,
    store_path: Path,
    *,
    targets: list[dict[str, object]] | None = None,
    slos: list[dict[str, Any]] | None = None,
) -> Path:
    config: dict[str, Any] = {
        "source": "direct",
        "scrape": {"interval_s": INTERVAL_S, "timeout_s": 3},
        "store": {"path": str(store_path)},
        "targets": targets or [],
    }
    if slos:
        config["slos"] = slos
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def fill_fleet(folder: Path, *, slos: tuple[Slo, ...] = ()) -> Filled:
    """``FLEET``'s last ``FLEET_S``, ending now, into ``folder/fleet.sqlite``."""
    return fill(folder, "fleet", FLEET, FLEET_S / 3600.0, time.time(), window_s=STEP_S, slos=slos)


def fleet_config(folder: Path) -> Path:
    """``FLEET`` filled into ``folder`` and a config reading it, with one more configured server that has no
    deployment label and is never scraped."""
    filled = fill_fleet(folder)
    spare = {"name": "spare-1", "url": "http://127.0.0.1:9"}
    return write_config(folder / "fleet.yaml", filled.store_path, targets=[spare])
