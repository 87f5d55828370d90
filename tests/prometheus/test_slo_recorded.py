"""SLO counts from the SLO recording rules (``use_recording_rules``): in a real Prometheus with the exported
rules loaded, the recorded totals and error ratios give the counts ``increase()`` over the raw series gives
(same scopes, same events), and an SLO whose rules are not loaded is still counted, from the raw series."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from alerts.export import render_rules
from analysis.slo_budget import slo_scopes
from analysis.slo_report import slo_status
from collectors.prometheus.client import PromClient
from collectors.prometheus.slo_counts import PrometheusSloCounts
from collectors.prometheus.slo_rules import window_name
from collectors.slo import Scope, Slo, build_slos
from config import Config, parse_config
from tests.collectors.mechanism_server import MechanismServer
from tests.prometheus.conftest import skip_without
from tests.prometheus.engines import PROMETHEUS, Engine, every_group_at, start_prometheus
from tests.prometheus.test_slo_rules import QUERIES

pytestmark = pytest.mark.engines

SLOS = [
    {"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99},
    {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999, "window": "7d"},
]
EAST = Scope((("deployment", "east"),)).key
UNRECORDED = {"name": "ttft-4s", "sli": {"kind": "ttft", "threshold_s": 4}, "objective": 0.99}


def _config(servers: dict[str, MechanismServer], slos: list[dict[str, object]]) -> Config:
    targets = [
        {"name": name, "url": s.url, "labels": {"deployment": name.split("-")[0]}}
        for name, s in servers.items()
    ]
    return parse_config({"scrape": {"interval_s": 1, "timeout_s": 1}, "slos": slos, "targets": targets}, "t")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Engine, dict[str, MechanismServer]]]:
    skip_without(PROMETHEUS, "prometheus")
    servers = {"east-a": MechanismServer(seed=1), "west-a": MechanismServer(seed=2)}
    rules = tmp_path / "rules.yml"
    rules.write_text(every_group_at(render_rules(_config(servers, SLOS), "test"), "1s"), encoding="utf-8")
    static = [
        {"targets": [s.url.removeprefix("http://")], "labels": {"deployment": name.split("-")[0]}}
        for name, s in servers.items()
    ]
    scrape = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "sglang", "static_configs": static}],
    }
    engine = start_prometheus(tmp_path / "prometheus", scrape, rule_files=[rules])
    try:
        yield engine, servers
    finally:
        engine.stop()
        for server in servers.values():
            server.stop()


def _counts(engine: Engine, slos: Sequence[Slo], *, recorded: bool, at: float) -> PrometheusSloCounts:
    return PrometheusSloCounts(slos, PromClient(engine.url), QUERIES, recorded=recorded, clock=lambda: at)


def test_recorded_slo_counts_equal_the_raw_ones_and_unrecorded_slos_still_count(
    prometheus: tuple[Engine, dict[str, MechanismServer]],
) -> None:
    engine, servers = prometheus
    # Scraped before the traffic: the counters' rise is what increase() counts.
    engine.wait_for("count(count_over_time(up[1m]) >= 2)", lambda r: bool(r) and r[0]["value"][1] == "2", 30)
    # east: slow first tokens and aborts; west: twenty times the traffic, all fast (test_slo_rules' fleet).
    servers["east-a"].serve(20, context_tokens=4096, queue_s=1.2, prefill_s=0.3, aborted=2)
    servers["west-a"].serve(400, context_tokens=4096, queue_s=0.05, prefill_s=0.3)
    for deployment in ("east", "west"):
        engine.wait_for(
            f'slo:sli_total:increase5m{{sloth_slo="ttft-1s", deployment="{deployment}"}} > 0',
            lambda r: bool(r),
            30,
        )
    # No sample after this: a rule and a later query then see the same samples. While scrapes went on, one
    # ingested after a rule's evaluation but stamped before it entered the query's increase() and not the
    # rule's, and on a loaded CI box that moved east's 5-minute total 20.0 → 25.0 (extrapolation).
    for server in servers.values():
        server.stop()
    time.sleep(3)  # a few more evaluations, over the same samples: the recorded values settle
    slos = build_slos(_config(servers, [*SLOS, UNRECORDED]))
    at = time.time()
    recorded = _counts(engine, slos, recorded=True, at=at)
    try:
        for slo in slos:
            for window_s in (300.0, 3600.0):
                # The raw counts at the instant the rules recorded (increase() extrapolates to the window's
                # edges, so a second later is another number; a scrape landing during the rule's evaluation
                # moves it by a few %); an unrecorded SLO's at the same ``at``.
                recorded_at = PromClient(engine.url).query(
                    f'timestamp(slo:sli_total:increase{window_name(window_s)}{{sloth_slo="{slo.name}"}})',
                    at=at,
                )
                when = max((s.value for s in recorded_at if s.value is not None), default=at)
                raw = _counts(engine, slos, recorded=False, at=when)
                scopes = raw.scopes(slo.name, when - slo.window_s)
                assert set(scopes) == {Scope(()).key, EAST, Scope((("deployment", "west"),)).key}
                for scope in scopes:
                    want = raw.counts(slo.name, scope, when - window_s, when + 1.0)
                    got = recorded.counts(slo.name, scope, at - window_s, at + 1.0)
                    assert want.total > 0, (slo.name, scope)
                    assert got.total == pytest.approx(want.total, rel=0.05), (slo.name, scope, window_s)
                    assert got.good == pytest.approx(want.good, rel=0.05), (slo.name, scope, window_s)
                raw.close()
        east = recorded.counts("ttft-1s", EAST, at - 300, at + 1.0)
        assert east.good < east.total  # east's first tokens were slow: bad events, counted
    finally:
        recorded.close()


def test_fleet_slo_status_from_recordings_reads_no_raw_increase_and_keeps_its_coverage(
    prometheus: tuple[Engine, dict[str, MechanismServer]], caplog: pytest.LogCaptureFixture
) -> None:
    """The Fleet page's SLO status (budget, burn rates, how much of the period is held) read from the
    recording rules sends no ``increase()`` of the raw series: over a 28-day period that is the heaviest
    query there is (seconds of the engine's CPU per render at 1,000 servers). Counts asked a moment after
    the report's ``now`` (as a page asks them) still read the recorded windows, and each deployment scope's
    coverage, found from the series index, is the raw path's."""
    engine, servers = prometheus
    engine.wait_for("count(count_over_time(up[1m]) >= 2)", lambda r: bool(r) and r[0]["value"][1] == "2", 30)
    servers["east-a"].serve(20, context_tokens=4096, queue_s=1.2, prefill_s=0.3, aborted=2)
    servers["west-a"].serve(400, context_tokens=4096, queue_s=0.05, prefill_s=0.3)
    slos = build_slos(_config(servers, SLOS))
    for slo in slos:  # the period's rules hold both deployments' traffic (every recorded window is read)
        for deployment in ("east", "west"):
            period = f'slo:sli_total:increase{window_name(slo.window_s)}{{sloth_slo="{slo.name}"'
            engine.wait_for(f'{period}, deployment="{deployment}"}} > 0', lambda r: bool(r), 30)
    now = time.time()
    later = now + 0.7  # the report's counts are asked a moment after its now: windows 0.7 s too long
    # Coverage is asked to the scrape interval within the last two hours: this Prometheus is seconds old.
    recorded, raw = (
        PrometheusSloCounts(
            slos, PromClient(engine.url), QUERIES, recorded=kind, clock=lambda: later, scrape_interval_s=1.0
        )
        for kind in (True, False)
    )
    slow = PrometheusSloCounts(slos, PromClient(engine.url), QUERIES, recorded=True, clock=lambda: now + 30.0)
    caplog.set_level(logging.DEBUG, logger="collectors.prometheus.client")
    try:
        # A scope's coverage asked before any count (the page reads them at once, either may come first),
        # and a report whose reads took seconds asking its scopes over the period 30 s after its now.
        for slo in slos:
            assert recorded.first_minute(slo.name, EAST) is not None
            assert slow.scopes(slo.name, now - slo.window_s)
        statuses = [
            slo_status(recorded, slo, scope, now, worst=0)
            for slo in slos
            for scope in slo_scopes(recorded, slo, now)
        ]
        sent = [r.getMessage() for r in caplog.records if r.name == "collectors.prometheus.client"]
        caplog.set_level(logging.WARNING, logger="collectors.prometheus.client")
        assert {(s.slo.name, s.scope.key) for s in statuses} == {
            (slo.name, key)
            for slo in slos
            for key in (Scope(()).key, EAST, Scope((("deployment", "west"),)).key)
        }
        assert sent
        assert not [q for q in sent if "increase(sglang" in q], sent
        assert any("slo:sli_total:increase" in q for q in sent)
        # Which targets each deployment holds: the series index read once per SLO, not once per scope.
        assert len([q for q in sent if q.startswith("series ")]) == len(slos), sent
        for status in statuses:
            assert status.period.total > 0, status.scope
            assert status.covered_s > 0, status.scope
            assert recorded.first_minute(status.slo.name, status.scope.key) == raw.first_minute(
                status.slo.name, status.scope.key
            ), status.scope
    finally:
        recorded.close()
        raw.close()
        slow.close()
