"""The Grafana dashboard: its shape, the --check mode, and every panel query answered by a real Prometheus
that scrapes the simulated fleet with the recording rules loaded."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.prometheus.grafana import NO_TRAFFIC, check_dashboard, dashboard, queries_of
from collectors.prometheus.queries import SignalQueries, signal_queries
from collectors.prometheus.recording_rules import render_rules
from collectors.slo import build_slos
from config import parse_config
from sim import gpu
from sim.fleet import SimFleet
from tests.prometheus.conftest import GPU_JOIN, gpu_jobs
from tests.prometheus.engines import Engine, StaticServer, source_config, start_prometheus
from tests.prometheus.golden import EXTRA_LABELS

QUERIES = SignalQueries('job="sglang"', 4.0)


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        if panel["type"] != "row":
            yield panel


def test_a_grafana_10_dashboard_with_the_three_variables_and_no_traffic_on_idle_servers() -> None:
    board = dashboard(QUERIES)
    assert board["schemaVersion"] >= 38  # Grafana 10.0's schema
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "deployment", "recipe", "instance"]
    assert "speculative_dspark_block_size" in variables["recipe"]["definition"]
    titles = {p["title"] for p in panels(board)}
    assert {"Accept length", "Step latency", "State pool vs KV", "TTFT", "TPOT", "Per server"} <= titles
    for panel in panels(board):
        for target in panel["targets"]:
            for name in ("$deployment", "$instance", "$recipe"):
                assert name in target["expr"], f"{panel['title']} ignores {name}"
    accept = next(p for p in panels(board) if p["title"] == "Accept length")
    assert accept["fieldConfig"]["defaults"]["noValue"] == NO_TRAFFIC
    assert "instance_job:sglang_num_running_reqs:sum > 0" in accept["targets"][0]["expr"]
    pools = next(p for p in panels(board) if p["title"] == "State pool vs KV")
    assert [t["legendFormat"].split()[0] for t in pools["targets"]] == ["state", "KV"]
    assert "noValue" not in pools["fieldConfig"]["defaults"]  # 0 % of an idle pool is a real 0
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))  # Grafana keys panels by id
    cells = [
        (p["gridPos"]["y"] + dy, p["gridPos"]["x"] + dx)
        for p in board["panels"]
        for dy in range(p["gridPos"]["h"])
        for dx in range(p["gridPos"]["w"])
    ]
    assert len(cells) == len(set(cells))  # no panel hides another
    assert max(x for _, x in cells) < 24
    assert check_dashboard(board, QUERIES) == []


def test_slo_panels_read_the_five_minute_recordings_at_their_newest_evaluation() -> None:
    """The budget (the period's group) and the 1 d / 3 d burn rates are evaluated every 5 minutes: a panel
    reading them plainly would show gaps where the engine's 5-minute lookback just misses one. A period
    under a day too; the windows under a day, evaluated at least once a minute, are read plainly."""
    ttft = {"kind": "ttft", "threshold_s": 4}
    config = parse_config(
        {"slos": [
            {"name": "ttft-4s", "sli": ttft, "objective": 0.99},
            {"name": "ttft-12h", "sli": ttft, "objective": 0.99, "window": "12h", "alerting": {
                "page": [{"long_s": 3600, "short_s": 300, "factor": 14.4}],
                "ticket": [{"long_s": 21600, "short_s": 1800, "factor": 1}]}},
        ]}
    )  # fmt: skip
    exprs = [expr for _, expr in queries_of(dashboard(QUERIES, slos=build_slos(config)))]
    budgets = [e for e in exprs if "period_error_budget_remaining" in e]
    assert len(budgets) == 2
    assert all("last_over_time(slo:period_error_budget_remaining:ratio{" in e for e in budgets)
    burns = " ".join(e for e in exprs if "slo:error_budget:ratio" in e)
    assert 'last_over_time(slo:sli_error:ratio_rate3d{sloth_slo="ttft-4s"}[10m])' in burns
    assert 'slo:sli_error:ratio_rate6h{sloth_slo="ttft-4s"}' in burns
    assert "last_over_time(slo:sli_error:ratio_rate6h" not in burns


def test_check_names_the_panel_and_the_series_that_drifted() -> None:
    board = dashboard(QUERIES)
    drifted = copy.deepcopy(board)
    step = next(p for p in drifted["panels"] if p.get("title") == "Step latency")
    # A dashboard generated for another rate window names series these rules never record.
    step["targets"][0]["expr"] = step["targets"][0]["expr"].replace("mean4s", "mean5m")
    table = next(p for p in drifted["panels"] if p.get("title") == "Per server")
    table["targets"][0]["expr"] += " + sglang:no_such_family"
    problems = check_dashboard(drifted, QUERIES)
    assert problems == [
        "panel 'Step latency' (query A) names instance_job:sglang_step_latency_seconds:mean5m, which the "
        "recording rules do not record",
        "panel 'Per server' (query A) names sglang:no_such_family, which the signal catalogue does not read",
    ]
    assert check_dashboard({"title": "not a dashboard"}, QUERIES) != []


def _served(expr: str) -> str:
    # What Grafana sends with every variable on "All".
    return re.sub(r"\$(deployment|instance|recipe)\b", ".*", expr)


def _unanswered(engine: Engine, board: dict[str, Any], idle: str) -> Iterator[str]:
    """What a user would see wrong: an empty panel or variable, or an idle server shown as busy (or gone)."""
    for where, expr in queries_of(board):
        if where.startswith("variable"):
            inner, label = re.fullmatch(r"label_values\((.*), (\w+)\)", expr).groups()  # type: ignore[union-attr]
            if not {r["metric"].get(label) for r in engine.query(_served(inner))} - {None}:
                yield f"{where}: no {label} values"
            continue
        instances = {r["metric"].get("instance") for r in engine.query(_served(expr))}
        busy_only = "num_running_reqs:sum > 0" in expr
        if len(instances - {idle}) < 2:
            yield f"{where} has data for {sorted(instances)} only: {expr}"
        # Idle: traffic panels show nothing ("No traffic"); capacity panels still show the server.
        elif (idle in instances) is busy_only:
            yield f"{where}: the idle server is {'shown' if busy_only else 'missing'}"


@pytest.mark.engines
def test_every_panel_query_returns_data_from_prometheus_with_the_recording_rules(
    sim_fleet: SimFleet, golden_text: str, tmp_path: Path
) -> None:
    # The idle stand-in: SGLang's gauges keep their last busy values, but nothing runs; its GPUs idle.
    idle = StaticServer(re.sub(r"(sglang:num_running_reqs\{[^}]*\}) \S+", r"\1 0.0", golden_text).encode())
    idle_gpus = StaticServer(
        gpu.render(
            gpu.GpuIdentity("idle-node", 2, "idle"), gpu.Reading(gpu.idle_power_w(), 9e8, 0.0, 0.0), 0.9
        )
    )
    # The GPUs are joined by node (GPU_JOIN), and cost is priced: every energy and cost panel has data.
    config = source_config(
        "http://127.0.0.1:9", selector='job="sglang"', rate_window_s=4.0, gpus=GPU_JOIN, gpu_hour_usd=2.5
    )
    queries = signal_queries(config)
    rules = tmp_path / "recording.yml"
    rules.write_text(render_rules(config), encoding="utf-8")
    # Target labels as an operator sets them (or SGLang's --extra-metric-labels): deployment and the recipe.
    static = [
        {
            "targets": [s.url.removeprefix("http://")],
            "labels": {
                "deployment": s.deployment,
                "speculative_dspark_block_size": str(s.recipe.get("speculative_dspark_block_size")),
                "node": s.name,
            },
        }
        for s in sim_fleet.servers
    ]
    static.append(
        {"targets": [idle.netloc], "labels": {"deployment": EXTRA_LABELS["deployment"], "node": "idle-node"}}
    )
    exporters, _ = gpu_jobs(sim_fleet)
    scrape = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "sglang", "static_configs": static},
            {"job_name": "dcgm", "static_configs": [{"targets": [*exporters, idle_gpus.netloc]}]},
        ],
    }
    engine: Engine = start_prometheus(tmp_path / "prometheus", scrape, rule_files=[rules])
    try:
        board = dashboard(queries)
        assert check_dashboard(board, queries) == []
        titles = {p["title"] for p in panels(board)}
        assert {"GPU power", "Output tokens per joule", "Cost per million output tokens"} <= titles
        deadline = time.monotonic() + 60  # rate windows and histogram means need a few scrapes
        while True:
            problems = list(_unanswered(engine, board, idle.netloc))
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert problems == []
    finally:
        engine.stop()
        idle.stop()
        idle_gpus.stop()
