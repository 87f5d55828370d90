"""A short soak (≈ 40 s wall, 20 simulated minutes at 30×): the production runtime over a simulated fleet with
flapping, slow, garbage, hanging and restarting servers, a load swing that saturates the state pool, and the
notification receiver down for six simulated minutes. ``bench/bench_soak.py`` runs the same for hours.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_soak import run_soak

pytestmark = [pytest.mark.slow, pytest.mark.box_loading]


def test_short_soak_loses_nothing_and_stays_flat(tmp_path: Path) -> None:
    result = run_soak(sim_duration_s=1200, speed=30, steady_servers=4, folder=tmp_path, outage=(0.3, 0.6))
    assert result["cycles"] >= 150
    assert result["samples_stored"] == result["samples_expected"]  # one row per target per cycle
    assert result["dropped_rows"] == 0
    assert result["store_errors"] is None
    assert result["notifications_queued_at_outage_end"] > 0  # the outage held notifications back...
    assert result["notifications_lost"] == 0  # ...and every one arrived afterwards
    assert result["notifications_duplicated"] == 0
    assert result["notifications_unexpected"] == 0
    assert result["transitions_without_notification"] == 0
    assert result["outbox_not_delivered"] == 0
    assert {"TargetDown", "StatePoolSaturation"} <= set(result["alerts_fired"])
    assert result["rss_mb_growth_second_half"] < 15.0
    assert result["cycle_wall_s_max"] < 1.0  # hanging and slow servers never held a cycle
