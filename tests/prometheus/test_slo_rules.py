"""The SLO exports in a real Prometheus: the exported rules, loaded into Prometheus scraping two loopback
servers (histograms from the mechanism, ``deployment`` as a target label), fire ErrorBudgetBurn on the same
(severity, scope) pairs as specwatch's engine scraping the same servers; the Grafana SLO rows query only
recorded ``slo:`` series, ``--check`` knows them, and their queries answer."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.export import render_rules
from alerts.service import Service
from alerts.slo_cli import run as run_slo_cli
from collectors.prometheus.grafana import check_dashboard, dashboard, queries_of
from collectors.prometheus.queries import SignalQueries
from collectors.slo import build_slos
from config import Config, PrometheusSettings, parse_config
from tests.collectors.mechanism_server import MechanismServer
from tests.prometheus.conftest import skip_without
from tests.prometheus.engines import PROMETHEUS, every_group_at, start_prometheus
from tests.views.conftest import page_test

QUERIES = SignalQueries('job="sglang"', 4.0)
SLOS = [
    {"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99},
    {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999, "window": "7d"},
]


def _config(servers: dict[str, MechanismServer] | None = None, store: Path | None = None) -> Config:
    raw: dict[str, Any] = {"scrape": {"interval_s": 1, "timeout_s": 1}, "slos": SLOS}
    if servers is not None:
        raw["targets"] = [
            {"name": name, "url": s.url, "labels": {"deployment": name.split("-")[0]}}
            for name, s in servers.items()
        ]
    if store is not None:
        raw |= {"store": {"path": str(store)}, "exporter": {"listen": None}}
    return parse_config(raw, "test")


def test_a_row_per_slo_reading_only_recorded_slo_series_and_check_knows_them() -> None:
    slos = build_slos(_config())
    board = dashboard(QUERIES, slos=slos)
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert "SLO ttft-1s: requests whose time to first token is at most 1 s, 0.99 over 28d" in rows
    assert "SLO availability: requests not aborted, 0.999 over 7d" in rows
    slo_queries = [expr for where, expr in queries_of(board) if "slo:" in expr]
    assert len(slo_queries) == 2 * (1 + 4 + 2)  # budget left, burn rate over 4 windows, error ratio 5m/1h
    assert all("sglang" not in expr for expr in slo_queries)  # never a raw series: the recordings only
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert check_dashboard(board, QUERIES, slos) == []
    assert check_dashboard(board, QUERIES) == []  # without the config: Sloth's naming
    drifted = copy.deepcopy(board)
    panel = next(p for p in drifted["panels"] if p.get("title") == "Error ratio")
    panel["targets"][0]["expr"] = 'slo:sli_error:ratio_rate4h{sloth_slo="ttft-1s"}'
    assert check_dashboard(drifted, QUERIES, slos) == [
        "panel 'Error ratio' (query A) names slo:sli_error:ratio_rate4h, which the recording rules do not "
        "record"
    ]
    panel["targets"][0]["expr"] = "slo:sli_errors:ratio_rate5m"
    assert check_dashboard(drifted, QUERIES) != []  # not a name Sloth's rules write


@pytest.fixture
def servers() -> Iterator[dict[str, MechanismServer]]:
    made = {"east-a": MechanismServer(seed=1), "west-a": MechanismServer(seed=2)}
    yield made
    for server in made.values():
        server.stop()


def _serve(servers: dict[str, MechanismServer]) -> None:
    # east: every request queues past the 1 s threshold, one in ten aborted; west: 20× the traffic, all fast.
    # The fleet then burns its TTFT budget at 4.8× (a ticket, not a page) while east burns at 100×.
    servers["east-a"].serve(20, context_tokens=4096, queue_s=1.2, prefill_s=0.3, aborted=2)
    servers["west-a"].serve(400, context_tokens=4096, queue_s=0.05, prefill_s=0.3)


def _statuses(out: str) -> dict[tuple[str, str], dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines()]
    return {(line["slo"], json.dumps(line["scope"])): line for line in lines if "slo" in line}


def _firing_in_prometheus(engine: Any) -> set[tuple[str, str, str]]:
    found = engine.query('ALERTS{alertname="ErrorBudgetBurn", alertstate="firing"}')
    return {(r["metric"]["slo"], r["metric"]["severity"], r["metric"].get("deployment", "")) for r in found}


def test_the_exported_rules_in_prometheus_fire_where_the_engine_fires(
    servers: dict[str, MechanismServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skip_without(PROMETHEUS, "prometheus")
    config = _config(servers, tmp_path / "history.sqlite")
    rules = tmp_path / "rules.yml"
    rules.write_text(every_group_at(render_rules(config, "test"), "1s"), encoding="utf-8")
    static = [
        {"targets": [s.url.removeprefix("http://")], "labels": {"deployment": name.split("-")[0]}}
        for name, s in servers.items()
    ]
    scrape = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "sglang", "static_configs": static}],
    }
    prometheus = start_prometheus(tmp_path / "prometheus", scrape, rule_files=[rules])
    service = Service(config, source="test")
    try:
        expected = {("ttft-1s", "page", "east"), ("ttft-1s", "ticket", "east"), ("ttft-1s", "ticket", "")}
        expected |= {
            ("availability", severity, scope) for severity in ("page", "ticket") for scope in ("east", "")
        }
        deadline = time.monotonic() + 30
        engine_fired: set[tuple[str, str, str]] = set()
        while time.monotonic() < deadline:
            _serve(servers)
            service.run_cycle()
            engine_fired = {
                (i.label("slo"), i.severity, i.deployment)
                for i in service.engine.active()
                if i.rule == "ErrorBudgetBurn" and i.state.value == "firing"
            }
            if engine_fired == expected and _firing_in_prometheus(prometheus) == expected:
                break
            time.sleep(0.5)
        assert (
            engine_fired == expected
        )  # east pages on both SLOs; west never; the fleet: tickets (and aborts)
        assert _firing_in_prometheus(prometheus) == engine_fired, prometheus.log()
        # The Grafana SLO panels answer on this Prometheus (all but the period's, evaluated every 5 minutes).
        board = dashboard(QUERIES, slos=service.slos)
        for where, expr in queries_of(board):
            if "slo:" in expr and "period" not in expr:
                assert prometheus.query(expr), f"{where}: {expr} has no series"
        # `specwatch slo` on the same fleet from Prometheus (source: prometheus) says what it says from the
        # store the direct collector writes: the same scopes, the same attainment within what increase()'s
        # extrapolation and the two scrapers' different scrapes allow, the same firing alerts (totals are
        # not compared: over a few seconds of traffic each scraper saw a different number of them).
        capsys.readouterr()
        assert run_slo_cli(config, json_lines=True) == 0
        direct = _statuses(capsys.readouterr().out)
        over_prometheus = config.model_copy(
            update={
                "source": "prometheus",
                "prometheus": PrometheusSettings(url=prometheus.url, selector='job="sglang"'),
            }
        )
        assert run_slo_cli(over_prometheus, json_lines=True) == 0
        from_prometheus = _statuses(capsys.readouterr().out)
        assert (
            set(from_prometheus)
            == set(direct)
            == {
                (slo, scope)
                for slo in ("ttft-1s", "availability")
                for scope in ("{}", '{"deployment": "east"}', '{"deployment": "west"}')
            }
        )
        for key, line in direct.items():
            other = from_prometheus[key]
            assert other["attainment"] == pytest.approx(line["attainment"], abs=0.03), key
            assert other["total"] > 0, key  # totals differ by the scrapes each saw (seconds of traffic here)
            assert other["alerts"] == line["alerts"], key
        # And the SLOs page of a dashboard on that Prometheus shows its attainment (a viewer: its collector
        # would count nothing into the SLO tables; the SLIs are Prometheus's own series).
        config_path = tmp_path / "over-prometheus.yaml"
        config_path.write_text(yaml.safe_dump(over_prometheus.model_dump(mode="json")), encoding="utf-8")
        at = page_test(config_path, "slo").run()
        assert not at.exception
        whole = from_prometheus[("ttft-1s", "{}")]
        shown = {m.label: m.value for m in at.metric}
        # A little later than the CLI's read: increase() extrapolates over the new scrapes of idle servers.
        assert float(shown["Attainment"].rstrip(" %")) / 100 == pytest.approx(whole["attainment"], abs=0.01)
    finally:
        service.stop()
        prometheus.stop()
