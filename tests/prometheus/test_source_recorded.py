"""With ``use_recording_rules`` the source's cycle reads the recorded series, and the raw ones only where no
recording answers (rules not loaded): the same numbers either way, on the real engines."""

from __future__ import annotations

import logging

import pytest

from collectors.model import TargetSnapshot
from collectors.prometheus.promql_source import PrometheusSource
from collectors.prometheus.recording_rules import recordings
from config import Config
from tests.prometheus.engines import Engine, StaticServer, collect_sending, source_config

pytestmark = pytest.mark.engines


def _recorded(config: Config) -> Config:
    assert config.prometheus is not None
    prometheus = config.prometheus.model_copy(update={"use_recording_rules": True})
    return config.model_copy(update={"prometheus": prometheus})


def _cycle(config: Config, caplog: pytest.LogCaptureFixture) -> tuple[TargetSnapshot, list[str]]:
    """The golden server's snapshot from one cycle of a new source, and the queries the cycle sent."""
    source = PrometheusSource(config)
    try:
        snapshots, sent = collect_sending(source, caplog)
    finally:
        source.close()
    return next(s for s in snapshots if s.target == "golden"), sent


def _raw_signal_queries(sent: list[str]) -> list[str]:
    return [q for q in sent if "rate(sglang" in q or "avg_over_time(sglang" in q]


@pytest.mark.parametrize("golden_engine", ["prometheus"], indirect=True)  # VictoriaMetrics needs vmalert
def test_a_cycle_reads_the_recordings_and_sees_what_the_raw_cycle_sees(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer], caplog: pytest.LogCaptureFixture
) -> None:
    labelled, _ = golden_servers
    config = source_config(golden_engine.url, [("golden", labelled.url)])
    every = [r.record for r in recordings(4.0)]  # the tests' rate window (conftest loads these rules)
    golden_engine.wait_for(
        f'count({{__name__=~"{"|".join(every)}", instance="{labelled.netloc}"}})',
        lambda r: bool(r) and int(r[0]["value"][1]) >= 10,
        20,
    )
    raw, raw_sent = _cycle(config, caplog)
    recorded, sent = _cycle(_recorded(config), caplog)
    assert _raw_signal_queries(raw_sent)  # the raw cycle recomputes rates from SGLang's series
    # The recorded cycle reads rates and means from the rules' series: none over SGLang's raw ones.
    assert not _raw_signal_queries(sent), _raw_signal_queries(sent)
    assert any("instance_job:sglang_" in q for q in sent)
    # The golden server serves constant gauges and counters that do not move: the same numbers.
    raw_signals, recorded_signals = raw.signals.as_dict(), recorded.signals.as_dict()
    known = [name for name, value in raw_signals.items() if value is not None]
    assert {"running", "kv_usage", "state_pool_usage", "accept_length", "avg_context_tokens"} <= set(known)
    for name, value in raw_signals.items():
        if value is None:
            assert recorded_signals[name] is None, name
        else:
            assert recorded_signals[name] == pytest.approx(value, rel=1e-6), name
    assert recorded.up
    assert recorded.recipe_id == raw.recipe_id


@pytest.mark.parametrize("golden_engine", ["victoria-metrics"], indirect=True)  # no vmalert: nothing recorded
def test_without_the_rules_a_recorded_cycle_reads_raw_series_and_says_so(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer], caplog: pytest.LogCaptureFixture
) -> None:
    labelled, _ = golden_servers
    config = source_config(golden_engine.url, [("golden", labelled.url)])
    raw, _ = _cycle(config, caplog)
    caplog.set_level(logging.INFO, logger="collectors.prometheus.promql_source")
    recorded, sent = _cycle(_recorded(config), caplog)
    assert any("no recorded series answers" in r.getMessage() for r in caplog.records)
    assert _raw_signal_queries(sent)  # asked again from raw series
    assert recorded.signals.running == raw.signals.running == 41
    assert recorded.signals.kv_usage == pytest.approx(raw.signals.kv_usage)
    assert recorded.signals.accept_length == pytest.approx(raw.signals.accept_length)
