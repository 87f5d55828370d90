"""The Prometheus source reads the simulated fleet like the direct source does, on Prometheus (which scrapes
OpenMetrics, so it stores ``sglang_...``) and on VictoriaMetrics (which keeps ``sglang:...``); and the CLI's
snapshot JSON is the same whichever source fed it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from collectors.direct.direct_source import DirectSource
from collectors.model import TargetSnapshot
from collectors.prometheus.promql_history import PrometheusHistory
from collectors.prometheus.promql_source import PrometheusSource
from config import Config, parse_config
from sim.fleet import SimFleet
from tests.history_frames import read_frame
from tests.prometheus.conftest import GPU_JOIN
from tests.prometheus.engines import PROMTOOL, Engine, side_by_side, source_config

pytestmark = pytest.mark.engines

WINDOW_S = 6.0
# Both sources see the same servers over (nearly) the same 6 s, but not at the same instants: Prometheus's
# gauges are up to one scrape (1 s) old and its rates are extrapolated over scrape-aligned windows.
REL_TOLERANCE = 0.2
PRICE = 2.5  # USD per GPU-hour


def _direct_config(fleet: SimFleet) -> Config:
    return parse_config(
        {
            "scrape": {"interval_s": 1, "timeout_s": 1},
            "targets": [t.model_dump() for t in fleet.targets],
            "cost": {"gpu_hour_usd": PRICE},
        }
    )


def _prometheus_config(engine: Engine, fleet: SimFleet) -> Config:
    return source_config(
        engine.url,
        fleet.targets,
        selector='job="sim"',
        rate_window_s=WINDOW_S,
        gpus=GPU_JOIN,
        gpu_hour_usd=PRICE,
    )


def _both(engine: Engine, fleet: SimFleet) -> tuple[dict[str, TargetSnapshot], dict[str, TargetSnapshot]]:
    """Direct snapshots with rates over the last 6 s, and the Prometheus source's at the same moment."""
    direct = DirectSource(_direct_config(fleet).scrape, fleet.targets, params={"gpu_hour_usd": PRICE})
    return side_by_side(direct, PrometheusSource(_prometheus_config(engine, fleet)), WINDOW_S)


def test_the_prometheus_source_reads_what_the_direct_source_reads(
    golden_engine: Engine, sim_fleet: SimFleet
) -> None:
    direct, prometheus = _both(golden_engine, sim_fleet)
    assert set(prometheus) == set(direct) == {t.name for t in sim_fleet.targets}
    compared = 0
    for name, expected in direct.items():
        got = prometheus[name]
        assert got.up
        assert expected.up
        assert got.error is None, got.error
        assert got.recipe_id == expected.recipe_id  # both read the server's /server_info
        assert got.deployment == expected.deployment
        for signal, want in expected.signals.as_dict().items():
            have = got.signals.as_dict()[signal]
            assert (have is None) == (want is None), f"{name} {signal}: direct {want}, prometheus {have}"
            if want is None or have is None:
                continue
            assert have == pytest.approx(want, rel=REL_TOLERANCE, abs=1e-9), f"{name} {signal}"
            compared += 1
    assert compared >= 3 * 12  # most signals of every server carried a number
    # The GPUs, joined by node in PromQL and scraped beside /metrics directly: the same figures.
    for name, expected in direct.items():
        got = prometheus[name].signals
        assert got.gpu_count == expected.signals.gpu_count == 2  # TP 2: /server_info and the exporter agree
        for signal in ("gpu_power_w", "tokens_per_joule", "output_tok_s_per_gpu", "usd_per_million_tokens"):
            assert getattr(got, signal) is not None, f"{name} {signal}"
    # The plain (non-speculative) server: one token per step, as the direct source says.
    assert prometheus["k3-steady-plain"].signals.accept_length == 1.0
    shipped, default = prometheus["k3-steady-shipped"].signals, prometheus["k3-steady-default"].signals
    assert shipped.step_latency_s is not None
    assert default.step_latency_s is not None
    assert shipped.step_latency_s < default.step_latency_s  # the narrow window's cheaper step (the seed's 2×)


def test_each_engine_stores_the_spelling_it_negotiated(golden_engine: Engine, sim_fleet: SimFleet) -> None:
    colon = golden_engine.query('count({__name__="sglang:num_running_reqs", job="sim"})')
    underscore = golden_engine.query('count({__name__="sglang_num_running_reqs", job="sim"})')
    if golden_engine.name == "prometheus":
        # Prometheus asks for OpenMetrics; prometheus_client then renames sglang:* to sglang_*.
        assert underscore
        assert not colon
    else:
        assert colon
        assert not underscore


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collectors", *args, "--log-level", "ERROR"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_snapshot_json_does_not_tell_which_source_fed_it(
    golden_engine: Engine, sim_fleet: SimFleet, tmp_path: Path
) -> None:
    records: dict[str, list[dict[str, object]]] = {}
    for source in ("direct", "prometheus"):
        if source == "direct":
            config = _direct_config(sim_fleet)
        else:
            config = _prometheus_config(golden_engine, sim_fleet)
        document = config.model_dump(mode="json", exclude_none=True)
        document["store"] = {"path": str(tmp_path / f"{source}.sqlite")}
        document["exporter"] = {"listen": None}
        path = tmp_path / f"{source}.yaml"
        path.write_text(yaml.safe_dump(document))
        done = _cli("--config", str(path), "--cycles", "2", "--json")
        assert done.returncode == 0, done.stderr
        records[source] = [json.loads(line) for line in done.stdout.splitlines()]
    direct, prometheus = records["direct"], records["prometheus"]
    assert [list(r) for r in prometheus] == [list(r) for r in direct]  # same keys, same order
    assert [r["target"] for r in prometheus] == [r["target"] for r in direct]
    assert [r["recipe"] for r in prometheus] == [r["recipe"] for r in direct]
    assert all(r["up"] for r in prometheus)
    # Prometheus-mode history lives in Prometheus: the collector wrote no sample rows of its own.
    with sqlite3.connect(tmp_path / "prometheus.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM recipes").fetchone()[0] == 3


@pytest.mark.parametrize("golden_engine", ["prometheus"], indirect=True)
def test_export_recording_rules_prints_a_rule_file_promtool_accepts(
    golden_engine: Engine, sim_fleet: SimFleet, tmp_path: Path
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_prometheus_config(golden_engine, sim_fleet).model_dump(mode="json")))
    done = _cli("export-recording-rules", "--config", str(path))
    assert done.returncode == 0, done.stderr
    assert 'job="sim"' in done.stdout
    assert "instance_job:sglang_step_latency_seconds:mean6s" in done.stdout
    rules = tmp_path / "rules.yml"
    rules.write_text(done.stdout)
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (apt-get install prometheus); .ci/run installs it")
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_history_from_prometheus_matches_the_live_snapshots(
    golden_engine: Engine, sim_fleet: SimFleet, tmp_path: Path
) -> None:
    config = _prometheus_config(golden_engine, sim_fleet)
    config = config.model_copy(
        update={"store": config.store.model_copy(update={"path": str(tmp_path / "m.db")})}
    )
    history = PrometheusHistory(config)
    try:
        live = {s.target: s for s in history.latest()}
        now = time.time()
        frame = read_frame(history, now - 4, now)
    finally:
        history.close()
    assert set(frame["target"]) == set(live)
    last = frame.sort_values("ts").groupby("target").tail(1).set_index("target")
    for name, snapshot in live.items():
        row = last.loc[name]
        assert row["recipe_id"] == snapshot.recipe_id
        for signal in (
            "accept_length",
            "tpot_s",
            "step_latency_s",
            "running",
            "state_pool_usage",
            "kv_usage",
        ):
            want = snapshot.signals.as_dict()[signal]
            assert want is not None
            assert row[signal] == pytest.approx(want, rel=REL_TOLERANCE), f"{name} {signal}"
    # The plain server's history says one token per step, like its live snapshot (not "unknown").
    plain = frame[frame["target"] == "k3-steady-plain"]
    assert (plain["accept_length"] == 1.0).all()
    assert plain["step_latency_s"].to_list() == pytest.approx(plain["tpot_s"].to_list(), nan_ok=True)
