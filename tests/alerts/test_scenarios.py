"""Scenario tests: the production Service scraping the simulator's fleets at high speed, on simulated time.

``context_decay`` fires AcceptanceDecayWithContext (on the server whose prompts grow, not on those held at one
length); ``batch_noise`` never does; ``state_saturation`` fires StatePoolSaturation and not KVPoolSaturation;
killing a server fires TargetDown and nothing else for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_alerts import run_scenario
from sim.fleet import SimFleet

pytestmark = pytest.mark.slow


def test_context_decay_fires_acceptance_decay(tmp_path: Path) -> None:
    run = run_scenario("context_decay", tmp_path, sim_seconds=2400, speed=400)
    decay = [t for t in run.transitions if t.rule == "AcceptanceDecayWithContext"]
    assert {t.target for t in decay} == {"ctx-ramp"}  # ctx-1k … ctx-64k hold one length each: flat context
    firing = next(t for t in decay if t.kind == "firing")
    annotations = dict(firing.annotations)
    assert float(annotations["context_high_tokens"]) > 2 * float(annotations["context_low_tokens"])
    assert float(annotations["accept_length_low"]) > float(annotations["accept_length_high"])
    assert "step cost" in annotations["description"]


def test_batch_noise_never_fires_acceptance_decay(tmp_path: Path) -> None:
    run = run_scenario("batch_noise", tmp_path, sim_seconds=2400, speed=400)
    assert run.cycles >= 24  # ≥ 12 samples (min_samples) per 30-minute window even on a busy machine

    assert [t for t in run.transitions if t.rule == "AcceptanceDecayWithContext"] == []  # not even pending


def test_state_saturation_fires_state_pool_not_kv(tmp_path: Path) -> None:
    run = run_scenario("state_saturation", tmp_path, sim_seconds=600, speed=200)
    assert {"sat-default", "sat-shipped"} <= {
        t.target for t in run.transitions if t.rule == "StatePoolSaturation"
    }
    assert "StatePoolSaturation" in run.fired("sat-default")
    assert "KVPoolSaturation" not in {t.rule for t in run.transitions}
    pool = next(t for t in run.transitions if t.rule == "StatePoolSaturation" and t.kind == "firing")
    assert "trades token budget for slots" in dict(pool.annotations)["description"]
    assert "KV cache at" in pool.summary


def test_killing_a_server_fires_target_down_and_nothing_else_for_it(tmp_path: Path) -> None:
    def kill(fleet: SimFleet) -> None:
        fleet.server("bn-c16").set_fault("down")

    run = run_scenario("batch_noise", tmp_path, sim_seconds=700, speed=200, actions={300.0: kill})
    assert {t.rule for t in run.transitions if t.target == "bn-c16"} == {"TargetDown"}
    assert run.fired("bn-c16") == {"TargetDown"}
    down_at = run.first("TargetDown", "firing", "bn-c16")
    assert down_at is not None
    cycle_s = 700 / run.cycles  # simulated seconds per collector cycle (longer on a busy machine)
    assert 300 + 30 <= down_at <= 300 + 30 + 3 * cycle_s  # for_s is 30 s, then about two cycles late at most
