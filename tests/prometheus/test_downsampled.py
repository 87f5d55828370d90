"""The Fleet chart's long ranges read the downsampled recordings (``collectors.prometheus.downsampled``) on
Prometheus with the exported rules loaded: the chart they draw is the one at full resolution, and without
those rules the chart is read at full resolution."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from collectors.fleet_chart import FLEET_CHART_SIGNALS, FleetChartTotals
from collectors.prometheus.promql_history import PrometheusHistory
from collectors.prometheus.read_plan import aligned_grid
from config import Config
from tests.prometheus.engines import Engine, StaticServer, source_config

pytestmark = [
    pytest.mark.engines,
    pytest.mark.old_samples,  # waits until the engine holds 50 s of recordings: runs last on it (conftest)
    pytest.mark.parametrize("golden_engine", ["prometheus"], indirect=True),  # VictoriaMetrics needs vmalert
]

_CLIENT = "collectors.prometheus.client"
_POINTS = 5  # a 40 s range: steps of 10 s, 5 × the session's 2 s downsampled recordings


def _config(engine: Engine, labelled: StaticServer, tmp_path: Path, downsample_s: float) -> Config:
    config = source_config(engine.url, [("golden", labelled.url)], downsample_s=downsample_s)
    assert config.prometheus is not None
    prometheus = config.prometheus.model_copy(update={"use_recording_rules": True, "latency_offset_s": 0.0})
    store = config.store.model_copy(update={"path": str(tmp_path / f"meta-{downsample_s:g}.db")})
    return config.model_copy(update={"prometheus": prometheus, "store": store})


def _chart(
    config: Config, start: float, end: float, caplog: pytest.LogCaptureFixture
) -> tuple[FleetChartTotals, list[str]]:
    history = PrometheusHistory(config)
    try:
        history.drop_caches()  # the answers another read of the same grid left in the process's cache
        history.latest()  # the interval's cycle (the fleet table's): not the chart's queries
        caplog.clear()
        caplog.set_level(logging.DEBUG, logger=_CLIENT)
        totals = history.fleet_chart_totals(start, end, _POINTS)
    finally:
        caplog.set_level(logging.WARNING, logger=_CLIENT)
        history.close()
    assert totals is not None
    return totals, [r.getMessage() for r in caplog.records if r.name == _CLIENT]


def _span_s(sent: str) -> float:
    """The seconds a logged range query spans (its first to its last instant)."""
    first, last = re.search(r"(\d+\.\d+)\.\.(\d+\.\d+)", sent).groups()  # type: ignore[union-attr]
    return float(last) - float(first)


def _wait_for_downsampled(engine: Engine, age_s: float) -> None:
    deadline = time.monotonic() + age_s + 30
    while True:
        found = engine.query("min(min_over_time(timestamp(instance_job:up:min2s)[10m:1s]))")
        if found and time.time() - float(found[0]["value"][1]) >= age_s:
            return
        assert time.monotonic() < deadline, f"no downsampled recording older than {age_s:.0f} s"
        time.sleep(1)


def _assert_same_chart(got: FleetChartTotals, full: FleetChartTotals) -> None:
    assert got.ts.tolist() == full.ts.tolist()
    assert got.servers.tolist() == full.servers.tolist()
    # The golden servers serve constant values: where both reads count every target up, the same numbers.
    everyone_up = (got.servers_up == got.servers) & (full.servers_up == full.servers)
    assert everyone_up.sum() >= 2
    assert np.isfinite(full.values["accept_length"][everyone_up]).all()
    for name in FLEET_CHART_SIGNALS:
        np.testing.assert_allclose(got.values[name][everyone_up], full.values[name][everyone_up], rtol=1e-9)


Charts = Callable[[float], tuple[FleetChartTotals, list[str], FleetChartTotals, list[str]]]


@pytest.fixture
def charts(
    golden_engine: Engine,
    golden_servers: tuple[StaticServer, StaticServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> Charts:
    """Reads of the Fleet chart over the last 40 s (steps of 10 s): with the downsampled recordings at the
    resolution given, and at full resolution (20 s recordings serve no step under 80 s), each with the
    queries it sent."""
    labelled, _ = golden_servers
    _wait_for_downsampled(golden_engine, 50.0)
    end = time.time() - 5
    start = end - 40
    assert aligned_grid(start, end, _POINTS, 1.0).step_s >= 4 * 2.0  # a step 2 s recordings serve

    def read(downsample_s: float) -> tuple[FleetChartTotals, list[str], FleetChartTotals, list[str]]:
        got, sent = _chart(_config(golden_engine, labelled, tmp_path, downsample_s), start, end, caplog)
        full, full_sent = _chart(_config(golden_engine, labelled, tmp_path, 20.0), start, end, caplog)
        return got, sent, full, full_sent

    return read


def test_a_long_range_chart_reads_the_downsampled_recordings_and_draws_the_full_resolution_chart(
    charts: Charts,
) -> None:
    down, sent, full, full_sent = charts(2.0)
    over_range = [q for q in sent if _span_s(q) > 0]
    assert len(over_range) == 4
    assert all("instance_job:up:min2s" in q for q in over_range)
    assert sum("_avg2s" in q for q in over_range) == 3
    # The scrapes' `up` is read for the first step only (a recording's first window holds part of it).
    assert all(_span_s(q) == 0 for q in sent if "min_over_time(up{" in q)
    assert any("min_over_time(up{" in q and _span_s(q) > 0 for q in full_sent)
    _assert_same_chart(down, full)


def test_without_the_downsampled_recordings_a_long_range_is_read_at_full_resolution(charts: Charts) -> None:
    # No rule records at 2.5 s: the read finds nothing there and reads the whole range at full resolution.
    fallback, sent, full, _ = charts(2.5)
    assert any("instance_job:up:min2500ms" in q for q in sent)
    assert sum("min_over_time(up{" in q for q in sent) >= 2, sent
    _assert_same_chart(fallback, full)
