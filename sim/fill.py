"""Fill a history store with hours of a simulated fleet, every tier as the collector would have written it.

``python -m sim history --config FILE --hours H``. Time-major, an hour at a time for every server, so rows
land in time order (both raw indexes append) and memory stays one hour of the fleet. Within the store's raw
retention the fleet is sampled every ``step_s`` into raw rows and rollups; older hours — which the collector
would keep only as rollups — are sampled once per minute, each sample standing for the minute's
``60 / step_s`` scrapes (``Batch.weight``). That is what the collector writes for a server whose gauges
change every five minutes (ROLLUP_WINDOW_S), and it makes 500 servers × 24 h a matter of a minute or two.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collectors.model import SIGNAL_NAMES, Event, Recipe, Signals, TargetSnapshot
from collectors.store.history import SqliteStore
from collectors.store.tiers import MINUTE_TIER, Batch
from sim.history import Sampler, sim_server
from sim.scenario import expand_servers, load_scenario

# Decode-log windows: the simulated engine's cost is per window (~0.12 ms), so the fill publishes one every
# minute within raw retention (live servers: 40 steps, usually < 5 s) and one every 5 min beyond.
RAW_WINDOW_S = 60.0
ROLLUP_WINDOW_S = 300.0
ROLLUP_STEP_S = MINUTE_TIER.seconds  # one sample per minute beyond raw retention
CHUNK_S = 900.0  # a quarter hour of the fleet in memory at a time (15 min tier buckets stay whole)
SCRAPE_DURATION_S = 0.004


@dataclass(frozen=True, slots=True)
class FillReport:
    servers: int
    hours: float
    raw_rows: int
    rollup_samples: int  # scrapes the rollup-only hours stand for
    events: int
    seconds: float


class StoreNotEmptyError(ValueError):
    """The store already holds history: filling it would interleave two fleets' pasts."""


def fill_store(
    store_path: str | Path,
    *,
    scenario: str | Path = "demo",
    servers: int | None = None,
    hours: float,
    raw_hours: float = 6.0,
    step_s: float = 5.0,
    end_ts: float | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> FillReport:
    """Write ``hours`` of the scenario's fleet ending at ``end_ts`` (default now) into an empty store."""
    if not 0 < hours <= 400 * 24:
        raise ValueError(f"hours must be in (0, 9600], not {hours}")
    if not 0 < step_s <= ROLLUP_STEP_S or ROLLUP_STEP_S % step_s:
        raise ValueError(f"step_s must divide {ROLLUP_STEP_S:g} s, not {step_s}")
    started = time.monotonic()
    loaded = load_scenario(scenario)
    specs = expand_servers(loaded, servers)
    end = time.time() if end_ts is None else end_ts
    duration_s = math.floor(hours * 3600.0 / ROLLUP_STEP_S) * ROLLUP_STEP_S
    start = math.floor((end - duration_s) / ROLLUP_STEP_S) * ROLLUP_STEP_S  # minute-aligned buckets
    raw_from_t = max(0.0, duration_s - raw_hours * 3600.0)
    raw_from_t = math.floor(raw_from_t / ROLLUP_STEP_S) * ROLLUP_STEP_S
    store = SqliteStore(store_path)
    try:
        if store.count_samples():
            raise StoreNotEmptyError(
                f"history store {store.path} already holds samples; point store.path at a new file "
                "(or delete this one) to fill it with simulated history"
            )
        store.drop_raw_indexes()  # rebuilt once at the end: a sort instead of 2 M index inserts
        recipes: dict[str, Recipe] = {}
        samplers = [
            Sampler(sim_server(spec, i, seed, loaded, ROLLUP_WINDOW_S), start, recipes)
            for i, spec in enumerate(specs)
        ]
        raw_rows = rollup_samples = 0
        last: dict[str, TargetSnapshot] = {}
        chunk_t = 0.0
        while chunk_t < duration_s:
            chunk_end = min(chunk_t + CHUNK_S, duration_s)
            raw_part, rollup_part = _chunk(samplers, chunk_t, chunk_end, raw_from_t, step_s, last)
            if raw_part:
                store.append_raw(sorted(raw_part, key=lambda r: r[0]))  # type: ignore[arg-type,return-value]
                raw_rows += len(raw_part)
            for part, weight in ((raw_part, 1.0), (rollup_part, ROLLUP_STEP_S / step_s)):
                if part:
                    store.append_rollups(_batch(part, weight))
            rollup_samples += len(rollup_part) * int(ROLLUP_STEP_S / step_s)
            for recipe in recipes.values():
                store.put_recipe(recipe, start)
            chunk_t = chunk_end
            if progress is not None:
                progress(f"{chunk_t / 3600:.0f} / {duration_s / 3600:.0f} h")
        events: list[Event] = []
        for sampler in samplers:
            events += sampler.events + sampler.server_events(duration_s)
        events.sort(key=lambda e: e.ts)
        store.add_events(events)
        store.append_rollups(None, latest=list(last.values()))
    finally:
        store.rebuild_indexes()  # also after a failure: the store stays a complete, readable one
        store.close()
    return FillReport(
        len(specs), duration_s / 3600.0, raw_rows, rollup_samples, len(events), time.monotonic() - started
    )


Row = tuple[object, ...]


def _chunk(
    samplers: list[Sampler],
    from_t: float,
    to_t: float,
    raw_from_t: float,
    step_s: float,
    last: dict[str, TargetSnapshot],
) -> tuple[list[Row], list[Row]]:
    """Raw rows (every step) and rollup-only rows (one per minute, at its middle) of every server."""
    raw: list[Row] = []
    rollup: list[Row] = []
    # Signals are shared while no new window is published: convert each once (kept alive, so ids stay unique).
    values: dict[int, tuple[Signals, tuple[float | None, ...]]] = {}
    for sampler in samplers:
        name, deployment, start = sampler.name, sampler.deployment, sampler.start_ts
        t = from_t
        while t < to_t:
            if t >= raw_from_t:
                if t == raw_from_t:
                    sampler.server.set_min_window_s(RAW_WINDOW_S)
                t += step_s
                at, into = t, raw
            else:
                t += ROLLUP_STEP_S
                at, into = t - ROLLUP_STEP_S / 2, rollup  # the minute's mean time stands for its scrapes
            up, error, signals = sampler.sample(at)
            found = values.get(id(signals))
            if found is None:
                found = values[id(signals)] = (signals, tuple(getattr(signals, n) for n in SIGNAL_NAMES))
            duration = SCRAPE_DURATION_S if up else None
            into.append(
                (start + at, name, int(up), error, sampler.recipe_id, deployment, duration, *found[1])
            )
        if t > from_t:  # the server's newest sample so far: the store's "latest" once the fill ends
            last[name] = _snapshot(into[-1], signals)
    return raw, rollup


def _snapshot(row: Row, signals: Signals) -> TargetSnapshot:
    return TargetSnapshot(
        str(row[1]),
        float(str(row[0])),
        bool(row[2]),
        None if row[3] is None else str(row[3]),
        signals,
        None if row[4] is None else str(row[4]),
        str(row[5]),
        None if row[6] is None else float(str(row[6])),
    )


def _batch(rows: list[Row], weight: float) -> Batch:
    batch = Batch.of_rows(rows)
    batch.weight = np.full(len(rows), weight)
    return batch
