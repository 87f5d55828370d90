"""How much of an SLO's period the fleet's Prometheus holds (``first_minute``): found by a search over the
period's hours with instant queries, it is what one period-long subquery at an hour's step finds, on a
Prometheus holding days of backfilled history (``promtool tsdb create-blocks-from openmetrics``)."""

from __future__ import annotations

import logging
import math
import subprocess
import time
from pathlib import Path

import pytest

from collectors.prometheus.client import PromClient
from collectors.prometheus.slo_counts import PrometheusSloCounts
from collectors.prometheus.slo_rules import SloQueries
from collectors.slo import Scope, Slo, build_slos
from config import parse_config
from tests.prometheus.conftest import skip_without
from tests.prometheus.engines import PROMETHEUS, PROMTOOL, Engine, start_prometheus
from tests.prometheus.test_slo_rules import QUERIES

pytestmark = pytest.mark.engines

HOUR_S = 3600.0
STEP_S = 60.0


def _backfill(
    path: Path, series: dict[str, float], now: float, gap: tuple[float, float] | None = None
) -> None:
    """Each request counter from its start (unix s) to ``now``, a sample a minute (none within ``gap``), as
    OpenMetrics."""
    lines = []
    for instance, start in series.items():
        deployment = "east" if instance.startswith("a") else "west"
        labels = f'deployment="{deployment}",instance="{instance}",job="sglang",tp_rank="0"'
        for k, ts in enumerate(range(int(start), int(now), int(STEP_S))):
            if gap is None or not gap[0] <= ts < gap[1]:
                lines.append(f"sglang:num_requests_total{{{labels}}} {10 * k} {ts}")
    path.write_text("\n".join(lines) + "\n# EOF\n", encoding="utf-8")


def _engine(tmp_path: Path, data: Path) -> Engine:
    """A Prometheus holding ``data`` (OpenMetrics) as blocks, scraping nothing."""
    skip_without(PROMETHEUS, "prometheus")
    skip_without(PROMTOOL, "promtool")
    tsdb = tmp_path / "prometheus" / "tsdb"
    done = subprocess.run(
        [str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(data), str(tsdb)],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return start_prometheus(
        tmp_path / "prometheus",
        {"global": {"scrape_interval": "60s"}, "scrape_configs": []},
        extra_args=["--storage.tsdb.retention.time=30d"],
    )


def _availability() -> list[Slo]:
    config = parse_config(
        {"slos": [{"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999}]}, "t"
    )
    return build_slos(config)


def _read_at_first_hour(started: float, period_start: float) -> int:
    """The minute of the sample read at the first whole hour (of the period) a server started before: the
    newest sample at or before it (timestamp() is the sample's)."""
    first_hour = math.ceil(max(started, period_start) / HOUR_S) * HOUR_S
    return int((started + (first_hour - started) // STEP_S * STEP_S) // 60 * 60)


@pytest.mark.parametrize("age_h", [700.5, 77.33, 30.0, 5.5])  # 700.5: older than the 28-day period
def test_coverage_is_the_oldest_hour_a_period_long_hourly_subquery_finds(
    tmp_path: Path, age_h: float, caplog: pytest.LogCaptureFixture
) -> None:
    now = math.floor(time.time() / STEP_S) * STEP_S - STEP_S
    if now % HOUR_S == HOUR_S - STEP_S:  # a minute later the period's first hour would move on
        now -= STEP_S
    # One server from ``age_h`` hours ago, a second from a day later (the fleet's oldest is the first's).
    started = {"a:1": now - age_h * HOUR_S, "b:1": now - max(age_h - 24, 1) * HOUR_S}
    data = tmp_path / "data.om"
    _backfill(data, started, now)
    engine = _engine(tmp_path, data)
    try:
        slos = _availability()
        client = PromClient(engine.url)
        clock = [now]
        counts = PrometheusSloCounts(slos, client, QUERIES, clock=lambda: clock[0], scrape_interval_s=STEP_S)
        # What one subquery over the whole period at an hour's step finds (the answer before days first).
        single = client.query(SloQueries(QUERIES).oldest_request(slos[0], {}), at=now)
        assert single
        assert single[0].value is not None
        want = int(single[0].value // 60 * 60)
        assert want == _read_at_first_hour(started["a:1"], now - slos[0].window_s)
        caplog.set_level(logging.DEBUG, logger="collectors.prometheus.client")
        assert counts.first_minute("availability", Scope(()).key) == want
        sent = [r.getMessage() for r in caplog.records if r.name == "collectors.prometheus.client"]
        assert sent
        # Instant reads of one instant's samples, never a subquery over the period (it reads every sample).
        assert not [q for q in sent if "[28d:" in q], sent
        # A search over the period's 672 hours, four at once: the first and last, then at most five rounds.
        assert len(sent) <= 2 + 4 * 5, sent
        # A minute later the hour found is checked, not searched for again: it and the hour before, at once.
        clock[0] = now + 60
        caplog.clear()
        assert counts.first_minute("availability", Scope(()).key) == want
        again = [r.getMessage() for r in caplog.records if r.name == "collectors.prometheus.client"]
        young = want > now - 2 * HOUR_S  # a store this young is also asked to the scrape interval
        assert 1 <= len(again) <= 2 + young, again
        clock[0] = now
        # Each deployment's scope: its own server's first hour (the younger one's bisection starts at the
        # fleet's first hour, where the older one's is found at once).
        for deployment, instance in (("east", "a:1"), ("west", "b:1")):
            scope = Scope((("deployment", deployment),)).key
            expected = _read_at_first_hour(started[instance], now - slos[0].window_s)
            if expected > now - 2 * HOUR_S:  # a store this young is asked to the scrape: its first sample
                expected = int(started[instance] // 60 * 60)
            assert counts.first_minute("availability", scope) == expected, deployment
        counts.close()
    finally:
        engine.stop()


def test_a_gap_across_the_last_whole_hour_leaves_the_coverage_at_the_oldest_hour(tmp_path: Path) -> None:
    """Samples missing around the last whole hour (the engine or its scrapes down for half an hour) do not
    make the period look two hours young: the search runs up to now, whose samples are there. Before, the
    last hour's empty answer ended the search and the coverage was the oldest sample of the last two hours
    (the bench's week-long history read as covered since the live scrapes began)."""
    # Half past an hour, an hour back: the last whole hour is half an hour old, inside the gap.
    now = math.floor(time.time() / HOUR_S) * HOUR_S - HOUR_S + 30 * 60
    last_hour = now - 30 * 60
    started = now - 30 * HOUR_S
    data = tmp_path / "data.om"
    _backfill(data, {"a:1": started}, now, gap=(last_hour - 20 * 60, last_hour + 10 * 60))
    engine = _engine(tmp_path, data)
    try:
        slos = _availability()
        counts = PrometheusSloCounts(
            slos, PromClient(engine.url), QUERIES, clock=lambda: now, scrape_interval_s=STEP_S
        )
        assert not PromClient(engine.url).query(SloQueries(QUERIES).sampled(slos[0]), at=last_hour)  # the gap
        assert counts.first_minute("availability", Scope(()).key) == _read_at_first_hour(
            started, now - slos[0].window_s
        )
        counts.close()
    finally:
        engine.stop()
