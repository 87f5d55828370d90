"""Synthesized history: the collector's model objects, the scenario's events, the mechanism's numbers."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

from collectors.model import Event, Recipe, TargetSnapshot
from sim.sampler import synthesize_history

END = 1_800_000_000.0


@pytest.fixture(scope="module")
def demo_hour() -> tuple[list[TargetSnapshot], list[Event], dict[str, Recipe]]:
    return synthesize_history("demo", duration_s=3600, step_s=5.0, end_ts=END, seed=1)


def by_target(snapshots: list[TargetSnapshot]) -> dict[str, list[TargetSnapshot]]:
    out: dict[str, list[TargetSnapshot]] = defaultdict(list)
    for snapshot in snapshots:
        out[snapshot.target].append(snapshot)
    return out


def test_one_snapshot_per_server_per_step(demo_hour: tuple[list[TargetSnapshot], list[Event], dict]) -> None:
    snapshots, _, recipes = demo_hour
    per_target = by_target(snapshots)
    assert len(per_target) == 11
    for target, rows in per_target.items():
        assert [r.ts for r in rows] == [END - 3600 + 5 * k for k in range(1, 721)], target
        assert all(r.recipe_id in recipes for r in rows)
        assert rows[0].deployment in ("east", "west")


def test_events_follow_the_scenario(demo_hour: tuple[list[TargetSnapshot], list[Event], dict]) -> None:
    _, events, recipes = demo_hour
    assert [(e.target, e.kind) for e in events if e.target == "k3-east-2"] == [
        ("k3-east-2", "down"),
        ("k3-east-2", "up"),
    ]  # the two-minute outage at minute 10
    restarts = [e for e in events if e.target == "k3-west-1"]
    assert [e.kind for e in restarts] == ["down", "restart", "recipe_change", "up"] * 2
    assert restarts[1].ts == END - 3600 + 2400  # onto block size 3 at minute 40, back at minute 55
    assert restarts[5].ts == END - 3600 + 3300
    assert restarts[3].ts - restarts[0].ts == pytest.approx(195, abs=5)  # down while it boots (194 s)
    assert len(recipes) == 4


def test_signals_show_the_mechanism(demo_hour: tuple[list[TargetSnapshot], list[Event], dict]) -> None:
    rows = by_target(demo_hour[0])
    saturated = [r.signals for r in rows["k3-west-saturated"] if r.up][60:]
    assert statistics.fmean(s.state_pool_usage or 0 for s in saturated) >= 0.97
    assert statistics.fmean(s.kv_usage or 0 for s in saturated) == pytest.approx(0.29, abs=0.03)
    assert min(s.queued or 0 for s in saturated) > 0
    longctx = [r.signals for r in rows["k3-east-longctx"]]
    early, late = longctx[12:120], longctx[480:540]  # minutes 1–10 vs 40–45: the ramp's start vs 64K
    assert statistics.fmean(s.avg_context_tokens or 0 for s in late) > 8 * statistics.fmean(
        s.avg_context_tokens or 0 for s in early
    )
    assert (
        statistics.fmean(s.accept_length or 0 for s in late)
        < statistics.fmean(s.accept_length or 0 for s in early) - 0.4
    )
    plain = rows["k3-west-plain"][100].signals
    assert plain.accept_length == 1.0
    assert plain.tokens_per_verify is None
    assert plain.tpot_s is not None
    east = [r.signals for r in rows["k3-east-0"]][60:]
    assert statistics.fmean(s.accept_length or 0 for s in east) == pytest.approx(2.5, abs=0.1)
    assert statistics.fmean(s.step_latency_s or 0 for s in east) == pytest.approx(
        statistics.fmean((s.accept_length or 0) * (s.tpot_s or 0) for s in east), rel=0.02
    )


def test_down_snapshots_say_why(demo_hour: tuple[list[TargetSnapshot], list[Event], dict]) -> None:
    down = [r for r in demo_hour[0] if not r.up]
    assert down
    assert {r.target for r in down} == {"k3-west-1", "k3-east-2"}  # restarts, and a two-minute outage
    assert all(
        ("booting" if r.target == "k3-west-1" else "outage") in (r.error or "") and r.signals.running is None
        for r in down
    )


def test_same_seed_same_history_and_servers_override() -> None:
    first = synthesize_history("faults", servers=12, duration_s=900, step_s=10.0, end_ts=END, seed=4)
    again = synthesize_history("faults", servers=12, duration_s=900, step_s=10.0, end_ts=END, seed=4)
    assert first == again
    snapshots, events, _ = first
    assert len(snapshots) == 12 * 90
    assert {s.target for s in snapshots} == {f"faults-{i:03d}" for i in range(12)}
    assert {e.detail.split(" (")[0] for e in events if e.kind == "down"} >= {
        "connection refused",
        "timed out after 3 s",
        "bad exposition: an HTML page, not Prometheus text",
    }


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="step_s"):
        synthesize_history("demo", duration_s=10, step_s=20)
