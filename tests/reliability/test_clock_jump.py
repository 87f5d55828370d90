"""The wall clock steps forward an hour, then back (NTP correcting a drifted host, a VM resumed), under the
production runtime scraping a simulated fleet.

No rate goes negative or spikes (the cycle across a backward step has unknown rates, the next one measures
again), every cycle is stored, nothing pages because time moved, and what the dashboard shows as a target's
latest state is what was scraped last, not the row stamped furthest in the future.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.model import AlertState
from alerts.service import Service
from collectors.model import SIGNAL_NAMES, TargetSnapshot
from config import Config, parse_config
from sim.fleet import SimFleet
from tests.reliability.harness import Clock, samples_by_target, scenario_fleet

pytestmark = pytest.mark.slow

# The scrape deadline is the interval: the simulated servers answer from this process, and late in a long
# suite a full garbage collection (a large heap by then) can pause both longer than the 0.25 s once allowed.
INTERVAL_S = 0.5
JUMP_S = 3600.0
SCENARIO = {
    "description": "two steady servers",
    "warmup_s": 120,
    "recipes": {"shipped": {"speculative_dspark_block_size": 3}},
    "workloads": {"chat": {"isl": 1024, "osl": 512}},
    "servers": [
        {
            "name": n,
            "deployment": "clock",
            "recipe": "shipped",
            "workload": "chat",
            "load": {"concurrency": 16},
        }
        for n in ("k3-a", "k3-b")
    ],
}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[SimFleet]:
    with scenario_fleet(tmp_path / "clock.yaml", SCENARIO) as fleet:
        yield fleet


def make_config(tmp_path: Path, fleet: SimFleet) -> Config:
    return parse_config(
        {
            "scrape": {"interval_s": INTERVAL_S, "timeout_s": INTERVAL_S},
            "targets": [t.model_dump() for t in fleet.targets],
            "store": {"path": str(tmp_path / "history.sqlite")},
            "alerts": {"rules": {"TargetDown": {"for_s": 1.0}}},
        }
    )


def run(service: Service, cycles: int) -> list[list[TargetSnapshot]]:
    out = []
    for _ in range(cycles):
        out.append(service.run_cycle())
        time.sleep(INTERVAL_S)
    return out


def test_a_clock_step_forward_then_back_loses_nothing_and_pages_nobody(
    tmp_path: Path, fleet: SimFleet
) -> None:
    clock = Clock()
    config = make_config(tmp_path, fleet)
    with Service(config, clock=clock) as service:
        before = run(service, 4)
        clock.offset_s = JUMP_S
        ahead = run(service, 4)
        clock.offset_s = 0.0  # stepped back by an hour
        back = run(service, 4)
        latest = {s.target: s for s in service.store.latest()}
        firing = [i for i in service.alert_store.active() if i.state is AlertState.FIRING]

    cycles = before + ahead + back
    assert samples_by_target(Path(config.store.path)) == {"k3-a": len(cycles), "k3-b": len(cycles)}
    for cycle in cycles:
        for snapshot in cycle:
            assert snapshot.up
            for name in SIGNAL_NAMES:
                value = getattr(snapshot.signals, name)
                assert value is None or value >= 0, (name, value)
    # Rates are timed by the monotonic clock: the window across the backward step is measured like any other
    # (never negative, never a spike), and so is every later one.
    assert all(s.signals.retractions_per_s == 0.0 for s in back[0])
    assert all(s.signals.retractions_per_s == 0.0 for s in back[-1])
    assert firing == []  # nothing pages because the clock moved
    # The newest state is the last scrape, not the rows stamped an hour ahead.
    assert {name: s.ts for name, s in latest.items()} == {s.target: s.ts for s in back[-1]}


def test_a_target_that_dies_after_the_clock_steps_back_is_still_paged(
    tmp_path: Path, fleet: SimFleet
) -> None:
    clock = Clock()
    with Service(make_config(tmp_path, fleet), clock=clock) as service:
        clock.offset_s = 600.0
        run(service, 3)
        clock.offset_s = 0.0  # stepped back ten minutes
        fleet.server("k3-b").set_fault("down")
        run(service, 8)  # 2.4 s: TargetDown's for_s is 1 s
        firing = {(i.rule, i.target) for i in service.alert_store.active() if i.state is AlertState.FIRING}
    assert ("TargetDown", "k3-b") in firing
