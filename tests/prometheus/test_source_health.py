"""Source health is not target health: a Prometheus that cannot answer, or answers partially, makes targets
*unknown* — never down — and says so as a source problem (health, /metrics, one log line, SourceDown).

The Prometheus here is ``FakePrometheus``, a real HTTP server on 127.0.0.1 speaking the query API, because no
real engine returns Thanos-style ``warnings`` or drops half its series on demand. TargetDown's ``for_s`` is 0,
so a single cycle in which a target were taken for down would page at once.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import requests
import yaml

from alerts.service import Service
from collectors.exporter import MetricsExporter
from collectors.model import TargetSnapshot
from collectors.prometheus.promql_history import PrometheusHistory
from collectors.prometheus.promql_source import PrometheusSource
from config import Config, parse_config
from tests.history_frames import read_frame
from tests.loopback import free_port
from tests.prometheus.fake_api import FakePrometheus

SECRET = "swsecret-0123456789"


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    # Instances nobody listens on: /server_info is refused at once, so recipes come from nowhere (fine here).
    server = FakePrometheus([f"127.0.0.1:{free_port()}" for _ in range(4)])
    yield server
    server.stop()


def _config(fake: FakePrometheus, tmp_path: Path) -> Config:
    return parse_config(
        {
            "source": "prometheus",
            "scrape": {"interval_s": 1.0, "timeout_s": 1.0},
            "prometheus": {
                "url": fake.url,
                "selector": 'job="sglang"',
                "rate_window_s": 4.0,
                "timeout_s": 2.0,
                "headers": {"Authorization": f"Bearer {SECRET}"},
            },
            "store": {"path": str(tmp_path / "specwatch.db")},
            "alerts": {"rules": {"TargetDown": {"for_s": 0}}},
        }
    )


def _cycles(service: Service, count: int) -> dict[str, TargetSnapshot]:
    last: list[TargetSnapshot] = []
    for _ in range(count):
        last = service.run_cycle()
    return {s.target: s for s in last}


def _pages(store_path: str) -> dict[str, int]:
    """Firings and resolutions per alert name ("TargetDown:firing"), as the engine recorded them."""
    with closing(sqlite3.connect(store_path)) as db:
        rows = db.execute("SELECT rule, from_state, to_state FROM alert_transitions").fetchall()
    counts: dict[str, int] = {}
    for rule, before, after in rows:
        kind = "firing" if after == "firing" else "resolved" if before == "firing" else None
        if kind is not None:
            counts[f"{rule}:{kind}"] = counts.get(f"{rule}:{kind}", 0) + 1
    return counts


def test_a_partial_answer_leaves_the_missing_targets_unknown_and_says_so(
    fake: FakePrometheus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(_config(fake, tmp_path))
    exporter = MetricsExporter(service.collector, "127.0.0.1:0")
    kept, dropped = fake.instances[:2], fake.instances[2:]
    try:
        assert all(s.up for s in _cycles(service, 2).values())
        fake.warnings = ["partial response: store 10.0.0.7:10901 did not answer"]
        fake.visible = kept  # half the series are gone from every query
        with caplog.at_level(logging.WARNING, logger="collectors.prometheus.promql_source"):
            snapshots = _cycles(service, 5)
        health = service.collector.health().source
        metrics = requests.get(exporter.url, timeout=5).text
        active = service.engine.active()
        transitions = _pages(service.config.store.path)

        # The same source, now complete but still without them: vanished from a complete answer is down.
        fake.warnings = []
        after = _cycles(service, 1)
        paged = {live.target for live in service.engine.active() if live.rule == "TargetDown"}
    finally:
        exporter.close()
        service.stop()

    for instance in dropped:
        assert snapshots[instance].unknown
        assert not snapshots[instance].up
        assert all(value is None for value in snapshots[instance].signals.as_dict().values())
        assert "partial" in (snapshots[instance].error or "")
    for instance in kept:
        assert snapshots[instance].up
        assert not snapshots[instance].unknown
        assert snapshots[instance].signals.running == 0.0  # known: idle
    assert active == []
    assert transitions == {}
    assert health.answered
    assert any("store 10.0.0.7:10901 did not answer" in w for w in health.warnings)
    assert any(all(i in w for i in dropped) for w in health.warnings)  # which targets went missing
    # /metrics: the source answered with warnings; the unknown targets have no up sample at all (never 0).
    assert f'specwatch_source_up{{source="prometheus",url="{fake.url}"}} 1.0' in metrics
    lines = metrics.splitlines()
    warnings_line = next(line for line in lines if line.startswith("specwatch_source_warnings{"))
    assert float(warnings_line.rsplit(" ", 1)[1]) == len(health.warnings)
    up_lines = [line for line in metrics.splitlines() if line.startswith("specwatch_target_up{")]
    assert sorted(line.split('target="')[1].split('"')[0] for line in up_lines) == sorted(kept)
    # Logged once for the state change, not once per cycle.
    assert len([r for r in caplog.records if "answered partially" in r.getMessage()]) == 1
    assert all(not after[instance].up and not after[instance].unknown for instance in dropped)
    assert paged == set(dropped)


def test_a_blind_prometheus_pages_once_about_itself_and_never_about_its_targets(
    fake: FakePrometheus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(_config(fake, tmp_path))  # SourceDown inherits TargetDown's for_s: 0
    try:
        assert all(s.up for s in _cycles(service, 2).values())
        fake.status = 500  # and it echoes the credential it was sent
        fake.raw_body = f'{{"status":"error","errorType":"internal","error":"bad token {SECRET}"}}'.encode()
        with caplog.at_level(logging.ERROR, logger="collectors.prometheus.promql_source"):
            blind = _cycles(service, 4)
        health = service.collector.health().source
        during = service.engine.active()
        fake.raw_body, fake.status = None, 200
        again = _cycles(service, 2)
        pages = _pages(service.config.store.path)
        failures = [t.consecutive_failures for t in service.collector.health().targets]
    finally:
        service.stop()

    assert set(blind) == set(fake.instances)
    assert all(s.unknown and not s.up for s in blind.values())
    assert not health.answered
    assert health.url == fake.url
    assert health.error is not None
    assert "HTTP 500" in health.error
    assert SECRET not in health.error
    [source_down] = during
    assert source_down.rule == "SourceDown"
    assert source_down.target == fake.url
    description = dict(source_down.annotations)["description"]
    assert fake.url in description
    assert "HTTP 500" in description
    assert SECRET not in description
    assert all(s.up and not s.unknown for s in again.values())
    assert pages == {"SourceDown:firing": 1, "SourceDown:resolved": 1}  # no TargetDown, nothing per target
    assert failures == [0, 0, 0, 0]  # the gap was not a failed scrape of any target
    assert len([r for r in caplog.records if "cannot answer" in r.getMessage()]) == 1


def test_the_dashboard_says_when_its_prometheus_cannot_answer_or_answers_partially(
    fake: FakePrometheus, tmp_path: Path
) -> None:
    """The sidebar, where store errors show: an error while Prometheus is blind, a warning while it answers
    partially, nothing once it answers completely again."""
    import app
    from tests.views.conftest import page_test

    config = tmp_path / "specwatch.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": "prometheus",
                "scrape": {"interval_s": 0.5, "timeout_s": 0.5},
                "prometheus": {"url": fake.url, "selector": 'job="sglang"', "timeout_s": 1},
                "store": {"path": str(tmp_path / "specwatch.db")},
            }
        ),
        encoding="utf-8",
    )
    at = page_test(config, "fleet", collector=True)

    def sidebar(kind: str) -> str:
        at.run()
        return "\n".join(str(e.value) for e in getattr(at.sidebar, kind))

    def wait_until(kind: str, words: str) -> str:
        deadline = time.monotonic() + 20
        while words not in (shown := sidebar(kind)):
            assert time.monotonic() < deadline, shown
            time.sleep(0.3)
        return shown

    try:
        fake.status, fake.raw_body = 503, b"<html>upstream connect error</html>"
        shown = wait_until("error", "source cannot answer")
        assert "HTTP 503" in shown
        assert "not down" in shown
        fake.status, fake.raw_body = 200, None
        fake.warnings = ["partial response: store 10.0.0.7:10901 did not answer"]
        shown = wait_until("warning", "answers partially")
        assert "10.0.0.7:10901 did not answer" in shown
        fake.warnings = []
        deadline = time.monotonic() + 20
        while "source" in sidebar("warning") + sidebar("error"):
            assert time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        app.start_runtime.clear()  # stops the dashboard's collector


def test_a_partial_range_answer_is_logged_once_and_still_read(
    fake: FakePrometheus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = PrometheusHistory(_config(fake, tmp_path))
    fake.warnings = [f"store 10.0.0.7:10901 did not answer (token {SECRET})"]
    try:
        with caplog.at_level(logging.WARNING, logger="collectors.prometheus.promql_history"):
            frames = [read_frame(history, 0.0, 600.0) for _ in range(3)]
    finally:
        history.close()
    assert all(frame.empty for frame in frames)  # read, not refused: the answer had no series
    partial = [r.getMessage() for r in caplog.records if "is partial" in r.getMessage()]
    assert len(partial) == 1
    assert "10.0.0.7:10901 did not answer" in partial[0]
    assert SECRET not in partial[0]


def test_result_type_surprises_leave_what_they_answer_unknown_never_down_or_zero(
    fake: FakePrometheus, tmp_path: Path
) -> None:
    service = Service(_config(fake, tmp_path))
    kept, dropped = fake.instances[:2], fake.instances[2:]
    try:
        assert all(s.up for s in _cycles(service, 2).values())
        # `up` answers a matrix and the state-pool gauge a string: neither can be read as an instant vector.
        fake.surprises = {
            r"\bup\{": {"resultType": "matrix", "result": []},
            "mamba_usage": {"resultType": "string", "result": [0, "0.5"]},
        }
        fake.visible = kept  # and half the targets are missing: without `up`, nobody can say they are down
        snapshots = _cycles(service, 4)
        warnings = service.collector.health().source.warnings
        active = service.engine.active()
    finally:
        service.stop()
    assert active == []
    for instance in kept:
        assert snapshots[instance].up
        assert snapshots[instance].signals.state_pool_usage is None  # unknown, not 0
        assert snapshots[instance].signals.kv_usage == 0.0  # the other signals still read
    for instance in dropped:
        assert snapshots[instance].unknown
    assert any("query for up failed" in w and "resultType 'matrix'" in w for w in warnings)
    assert any("query for state_pool_usage failed" in w for w in warnings)


def test_a_hanging_prometheus_costs_a_cycle_one_query_timeout_not_one_per_pool_round(
    fake: FakePrometheus,
) -> None:
    config = parse_config(
        {
            "source": "prometheus",
            "scrape": {"interval_s": 1.0, "timeout_s": 1.0},
            "prometheus": {"url": fake.url, "selector": 'job="sglang"', "timeout_s": 1.0},
        }
    )
    source = PrometheusSource(config)
    try:
        assert all(s.up for s in source.collect(time.time()))
        fake.delay_s = 30.0  # accepts, then says nothing
        durations = []
        for _ in range(2):
            started = time.monotonic()
            snapshots = source.collect(time.time())
            durations.append(time.monotonic() - started)
        fake.delay_s = 0.0
    finally:
        source.close()
    assert all(s.unknown for s in snapshots)
    assert len(snapshots) == 4
    # ~24 queries on 4 workers took 6 query timeouts per cycle before `present` failed fast.
    assert max(durations) < 3.5, durations
