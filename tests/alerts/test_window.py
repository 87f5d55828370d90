"""The engine's windows in two tiers: whole snapshots for the short rules, columns for the 30-minute ones.

What a user would notice: the dashboard's process growing by ~1 KB per server per scrape it remembers (1,000
servers × 30 min were ~320 MB of a 600 MB budget), a decay alert that stops seeing the start of its window,
a TargetDown that says "down for 310 s" after twenty minutes, a restart that forgets how long ago a silent
target was last seen.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

from alerts.engine import AlertEngine
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from alerts.window import TargetHistory
from collectors.model import Signals, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from tests.alerts.conftest import Clock, snap

INTERVAL_S = 5.0


def _busy(target: str, ts: float, context: float, accept: float) -> TargetSnapshot:
    """A busy server with every signal the collector derives known (a real snapshot's weight)."""
    known = {name: 0.5 for name in Signals.__slots__}
    known.update(running=40.0, avg_context_tokens=context, accept_length=accept, step_latency_s=0.1)
    return TargetSnapshot(target, ts, True, None, Signals(**known), "r-base", "east")


def _ramp(cycle: int, cycles: int) -> tuple[float, float]:
    """Context 1K → 64K over the window, accept length falling ~0.25 per e-fold (the seed's mechanism)."""
    context = 1024 * 64 ** (cycle / cycles)
    return context, 2.5 - 0.25 * math.log(context / 1024) + 0.02 * math.sin(cycle)


def test_the_engine_keeps_30_minutes_of_1000_servers_in_a_fraction_of_whole_snapshots(tmp_path: Path) -> None:
    engine = AlertEngine(build_rules(), AlertStateStore(tmp_path / "a.sqlite"), scrape_interval_s=INTERVAL_S)
    targets, cycles = 200, 362  # the decay rule's 30 min + two cadences, at 5 s
    start = 1_800_000_000.0
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for cycle in range(cycles):
        context, accept = _ramp(cycle, cycles)
        engine.ingest(
            [_busy(f"k3-{i:03d}", start + cycle * INTERVAL_S, context, accept) for i in range(targets)]
        )
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    history = engine.history("k3-000")
    assert history is not None
    assert len(history) == int(engine.horizon_s // INTERVAL_S) + 1  # whole snapshots: the short rules' reach
    assert len(history.samples_since(0.0)) == cycles  # columns: the whole 30 min
    per_sample = held / (targets * cycles)
    # A whole snapshot with its signals is ~930 bytes; at 1,000 servers that was ~340 MB for these windows.
    assert per_sample < 350, f"{per_sample:.0f} bytes per target-cycle held by the engine"

    transitions = engine.evaluate(start + cycles * INTERVAL_S)
    pending = {
        t.target for t in transitions if t.rule == "AcceptanceDecayWithContext" and t.kind == "pending"
    }
    assert len(pending) == targets  # the fit saw the whole window (the short tier alone holds no decay)


def test_target_down_counts_a_down_run_longer_than_the_whole_snapshots() -> None:
    history = TargetHistory("gpu-1", horizon_s=60.0, long_horizon_s=1800.0)
    start = 1_800_000_000.0
    for i in range(10):
        history.add(snap("gpu-1", start + i * INTERVAL_S, running=1.0))
    down_at = start + 10 * INTERVAL_S
    for i in range(240):  # 20 minutes down
        history.add(snap("gpu-1", down_at + i * INTERVAL_S, up=False))
    assert len(history) == 13  # 60 s of whole snapshots, none of them up
    assert history.down_since() == down_at
    rule = next(r for r in build_rules({"TargetDown": {"for_s": 0}}) if r.name == "TargetDown")
    (verdict,) = rule.evaluate(history, down_at + 1200.0, {})
    assert verdict.value == 1200.0
    assert "for 1200 s" in verdict.description


def test_an_unknown_gap_ends_a_down_run() -> None:
    history = TargetHistory("gpu-1", horizon_s=60.0, long_horizon_s=1800.0)
    start = 1_800_000_000.0
    history.add(snap("gpu-1", start, up=False))
    blind = TargetSnapshot("gpu-1", start + 5, False, "Prometheus did not answer", unknown=True)
    history.add(blind)
    history.add(snap("gpu-1", start + 10, up=False))
    assert history.down_since() == start + 10


def test_a_restart_rebuilds_the_columns_and_the_last_sight_of_a_silent_target(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteStore(tmp_path / "history.sqlite")
    cycles = 360
    start = clock.now
    for cycle in range(cycles):
        context, accept = _ramp(cycle, cycles)
        rows = [_busy("busy", start + cycle * INTERVAL_S, context, accept)]
        if cycle < 200:  # silent for the last 13 minutes: only the columns reach it
            rows.append(snap("silent", start + cycle * INTERVAL_S, running=3.0))
        store.append(rows)
    clock.now = start + cycles * INTERVAL_S
    alerts = AlertStateStore(tmp_path / "history.sqlite")
    engine = AlertEngine(build_rules(), alerts, history=store, clock=clock, scrape_interval_s=INTERVAL_S)
    engine.restore()
    busy, silent = engine.history("busy"), engine.history("silent")
    assert busy is not None
    assert silent is not None
    assert len(busy.samples_since(0.0)) == cycles
    assert len(busy) == int(engine.horizon_s // INTERVAL_S)
    latest = silent.latest
    assert latest is not None
    assert latest.up
    assert latest.ts == start + 199 * INTERVAL_S  # when it was last seen, though no whole snapshot survived
    assert latest.signals.running == 3.0
    transitions = engine.evaluate(clock.now)
    assert ("busy", "pending") in {
        (t.target, t.kind) for t in transitions if t.rule == "AcceptanceDecayWithContext"
    }
    alerts.close()
    store.close()
