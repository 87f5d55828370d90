"""Recording rules: promtool accepts the exported file, and Prometheus records what the source computes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from collectors.prometheus import downsampled
from collectors.prometheus.promql_source import PrometheusSource
from collectors.prometheus.recording_rules import recordings, render_rules
from config import parse_config
from tests.prometheus.engines import PROMTOOL, Engine, StaticServer, source_config


def _promtool_check(path: Path) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (apt-get install prometheus); .ci/run installs it")
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("selector", "window_s", "gpus", "price"),
    [
        ("", None, {}, None),
        ('job="sglang", region=~"eu-.*|us-\\"east\\""', 90.0, {"gpu_selector": 'job="dcgm"'}, 2.5),
        ('{cluster!="canary"}', 7.5, {"node_label": "pod", "gpu_node_label": "pod"}, 0.8),
    ],
)
def test_exported_rules_pass_promtool(
    tmp_path: Path, selector: str, window_s: float | None, gpus: dict[str, str], price: float | None
) -> None:
    prometheus = {"url": "http://prometheus:9090", "selector": selector, "rate_window_s": window_s, **gpus}
    config = parse_config({"source": "prometheus", "prometheus": prometheus, "cost": {"gpu_hour_usd": price}})
    path = tmp_path / "rules.yml"
    text = render_rules(config)
    path.write_text(text)
    checked = _promtool_check(path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Without a price there is no cost series to record; with one, every signal is recorded. Then the
    # Fleet chart's downsampled recordings: up and each of its signals.
    rules = len(recordings(60)) - (price is None) + 1 + len(downsampled.SIGNALS)
    assert f"SUCCESS: {rules} rules found" in checked.stdout
    assert ("usd_per_million_output_tokens" in text) is (price is not None)


def test_every_issue_signal_has_a_recording() -> None:
    recorded = {r.signal for r in recordings(60)}
    # The issue names these; the rest of the signals are recorded too.
    assert {
        "step_latency_s",
        "per_request_tok_s",
        "avg_context_tokens",
        "kv_usage",
        "state_pool_usage",
    } <= recorded
    assert len({r.record for r in recordings(60)}) == len(recordings(60))


@pytest.mark.engines
@pytest.mark.parametrize("golden_engine", ["prometheus"], indirect=True)  # VictoriaMetrics needs vmalert
def test_prometheus_records_the_signals_the_source_reads(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    labelled, _ = golden_servers
    rules = recordings(4.0)  # the tests' rate window (tests/prometheus/conftest.py loads these rules)
    golden_engine.wait_for(
        f'count({{__name__=~"instance_job:sglang_.*", instance="{labelled.netloc}"}})',
        lambda r: bool(r) and int(r[0]["value"][1]) >= 10,
        20,
    )
    source = PrometheusSource(source_config(golden_engine.url, [("golden", labelled.url)]))
    try:
        snapshot = next(s for s in source.collect(time.time()) if s.target == "golden")
    finally:
        source.close()
    signals = snapshot.signals.as_dict()
    compared = 0
    for rule in rules:
        result = golden_engine.query(f'{rule.record}{{instance="{labelled.netloc}"}}')
        expected = signals[rule.signal]
        if expected is None:
            assert result == [], f"{rule.record} recorded a value the source calls unknown"
            continue
        assert len(result) == 1, rule.record
        assert set(result[0]["metric"]) == {"__name__", "instance", "job"}
        assert float(result[0]["value"][1]) == pytest.approx(expected, rel=1e-6), rule.record
        compared += 1
    assert compared >= 10  # gauges and their fallbacks: running, usages, accept length, context, ...
