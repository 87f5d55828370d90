"""Parity: the direct source and the Prometheus source agree on every catalogue signal within 2 %.

Both read the same live loopback servers, whose counters grow linearly with time and whose gauges hold still,
so the only differences left are the ones the catalogue documents (``PROMQL_APPROXIMATION``: rate()
extrapolation, which is exact on a linear counter, and DP-rank aggregation, which these single-rank servers do
not exercise). Real Prometheus (which negotiates OpenMetrics, so it stores ``sglang_...``) and VictoriaMetrics
(which keeps ``sglang:...``) both; the servers cover priority scheduling, a model without a Mamba pool, an
idle server, an older SGLang and plain decoding.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.direct.direct_source import DirectSource
from collectors.model import SIGNAL_NAMES, TargetSnapshot
from collectors.prometheus.promql_source import PrometheusSource
from config import Target, parse_config
from tests.collectors.bodies import SERVER_INFO, Load, render
from tests.collectors.servers import FakeSGLang, Handler, LoopbackServer, send
from tests.prometheus.conftest import GPU_JOIN, netloc, start_engine
from tests.prometheus.engines import Engine, side_by_side, source_config

pytestmark = pytest.mark.engines

WINDOW_S = 6.0
REL_TOLERANCE = 0.02
# Per-second growth of each counter field of ``Load``.
RATES: dict[str, float] = {
    "generation_tokens": 600.0,
    "realtime_decode": 640.0,
    "verify_calls": 240.0,
    "prompt_tokens": 2000.0,
    "cached_tokens": 500.0,
    "retracted": 2.0,
    "itl_sum": 6.4,
    "itl_count": 640.0,
    "ttft_sum": 6.0,
    "ttft_count": 20.0,
    "queue_sum": 2.0,
    "queue_count": 20.0,
}


class LinearSGLang(FakeSGLang):
    """``FakeSGLang`` whose counters grow at ``RATES`` per second of wall time (``moving=False``: frozen)."""

    def __init__(self, load: Load, info: dict[str, Any], *, moving: bool = True) -> None:
        self.t0 = time.time()
        self.moving = moving
        super().__init__(load, info)

    def _metrics(self, handler: Handler) -> None:
        elapsed_s = time.time() - self.t0 if self.moving else 0.0
        deltas = {
            name: rate * elapsed_s for name, rate in RATES.items() if getattr(self.load, name) is not None
        }
        body, content_type = render(self.load.advanced(**deltas), handler.headers.get("Accept") or "*/*")
        send(handler, body, content_type=content_type)


GPU_WATTS = 700.0  # each GPU's steady draw: its energy counter grows by 700 J (700,000 mJ) a second
PRICE = 2.5  # USD per GPU-hour


class LinearDCGM(LoopbackServer):
    """A node's dcgm-exporter under one server: 8 GPUs (the servers' tp_size) drawing GPU_WATTS each, their
    energy counters growing linearly with wall time, labelled with the server's name as ``Hostname``."""

    def __init__(self, hostname: str) -> None:
        self.t0 = time.time()
        self.hostname = hostname
        super().__init__({"/metrics": self._metrics})

    def _metrics(self, handler: Handler) -> None:
        energy_mj = 5e11 + GPU_WATTS * 1000.0 * (time.time() - self.t0)
        lines = []
        for gpu in range(int(SERVER_INFO["tp_size"])):
            labels = f'gpu="{gpu}",UUID="GPU-{self.hostname}-{gpu}",Hostname="{self.hostname}"'
            lines += [
                f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {GPU_WATTS:f}",
                f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {energy_mj:.0f}",
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 87",
            ]
        send(handler, ("\n".join(lines) + "\n").encode())


PLAIN_INFO = dict(SERVER_INFO, speculative_algorithm=None, max_running_requests=570)
SERVERS: dict[str, tuple[Load, dict[str, Any], bool]] = {
    "steady": (Load(), SERVER_INFO, True),
    "priorities": (Load(priorities=("0", "3")), SERVER_INFO, True),
    "no-mamba-pool": (
        Load(mamba_usage=0.0, mamba_used_tokens=0.0, mamba_available_tokens=0.0, mamba_evictable_tokens=0.0),
        SERVER_INFO,
        True,
    ),
    "idle": (Load(running=0.0, queued=0.0, gen_throughput=0.0), SERVER_INFO, False),
    "sglang-0.5.9": (
        Load(
            full_token_usage=None,
            kv_used_tokens=None,
            verify_calls=None,
            mamba_used_tokens=None,
            mamba_available_tokens=None,
            mamba_evictable_tokens=None,
        ),
        SERVER_INFO,
        True,
    ),
    "plain": (Load(spec_accept_length=0.0, spec_accept_rate=0.0, verify_calls=None), PLAIN_INFO, True),
}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, LinearSGLang]]:
    started = {
        name: LinearSGLang(load, info, moving=moving) for name, (load, info, moving) in SERVERS.items()
    }
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture(scope="module")
def exporters(servers: dict[str, LinearSGLang]) -> Iterator[dict[str, LinearDCGM]]:
    started = {name: LinearDCGM(name) for name in servers}
    yield started
    for exporter in started.values():
        exporter.stop()


@pytest.fixture(scope="module", params=["prometheus", "victoria-metrics"])
def engine(
    request: pytest.FixtureRequest,
    servers: dict[str, LinearSGLang],
    exporters: dict[str, LinearDCGM],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    targets = [netloc(Target(name=name, url=server.url)) for name, server in servers.items()]
    nodes = {netloc(Target(name=name, url=s.url)): {"node": name} for name, s in servers.items()}
    gpus = [netloc(Target(name=name, url=exporter.url)) for name, exporter in exporters.items()]
    workdir = tmp_path_factory.mktemp(request.param)
    engine = start_engine(request.param, workdir, {"parity": targets, "dcgm": gpus}, nodes)
    try:
        everyone = str(len(targets))
        engine.wait_for(
            'count(up{job="parity"} == 1)', lambda r: bool(r) and r[0]["value"][1] == everyone, 30
        )
        engine.wait_for('count(up{job="dcgm"} == 1)', lambda r: bool(r) and r[0]["value"][1] == everyone, 30)
        # rate() over the window needs the window full of samples for every server.
        engine.wait_for(
            f'min(count_over_time(up{{job="parity"}}[{int(WINDOW_S)}s]))',
            lambda r: bool(r) and float(r[0]["value"][1]) >= WINDOW_S - 1,
            40,
        )
        yield engine
    finally:
        engine.stop()


def _targets(servers: dict[str, LinearSGLang], exporters: dict[str, LinearDCGM]) -> list[Target]:
    return [
        Target(name=name, url=server.url, gpu_exporter_url=exporters[name].url)
        for name, server in servers.items()
    ]


def _both(
    engine: Engine, servers: dict[str, LinearSGLang], exporters: dict[str, LinearDCGM]
) -> tuple[dict[str, TargetSnapshot], ...]:
    targets = _targets(servers, exporters)
    settings = parse_config(
        {"scrape": {"interval_s": 1, "timeout_s": 1}, "targets": [t.model_dump() for t in targets]}
    ).scrape
    prometheus = PrometheusSource(
        source_config(
            engine.url,
            targets,
            selector='job="parity"',
            rate_window_s=WINDOW_S,
            gpus=GPU_JOIN,
            gpu_hour_usd=PRICE,
        )
    )
    return side_by_side(DirectSource(settings, targets, params={"gpu_hour_usd": PRICE}), prometheus, WINDOW_S)


def test_direct_and_prometheus_agree_on_every_signal(
    engine: Engine, servers: dict[str, LinearSGLang], exporters: dict[str, LinearDCGM]
) -> None:
    direct, prometheus = _both(engine, servers, exporters)
    assert set(direct) == set(prometheus) == set(SERVERS)
    disagreements: list[str] = []
    compared: set[str] = set()
    for name, want_snapshot in direct.items():
        got_snapshot = prometheus[name]
        assert want_snapshot.up, want_snapshot.error
        assert got_snapshot.up, got_snapshot.error
        for signal in SIGNAL_NAMES:
            want = getattr(want_snapshot.signals, signal)
            have = getattr(got_snapshot.signals, signal)
            if (want is None) != (have is None) or (
                want is not None and have != pytest.approx(want, rel=REL_TOLERANCE, abs=1e-9)
            ):
                disagreements.append(f"{name} {signal}: direct {want}, {engine.name} {have}")
            elif want is not None:
                compared.add(signal)
    assert not disagreements, "\n".join(disagreements)
    assert compared == set(SIGNAL_NAMES)  # every catalogue signal carried a number on some server
    # The truths hold on both sources.
    for snapshots in (direct, prometheus):
        steady = snapshots["steady"].signals
        assert steady.output_tok_s == pytest.approx(RATES["realtime_decode"], rel=REL_TOLERANCE)
        split = snapshots["priorities"].signals.as_dict()
        assert split == pytest.approx(
            steady.as_dict(), rel=REL_TOLERANCE
        )  # the priority split changes nothing
        assert snapshots["no-mamba-pool"].signals.state_pool_usage is None
        idle = snapshots["idle"].signals
        assert idle.output_tok_s == 0.0
        assert idle.cache_hit_rate is None
        assert idle.accept_length is None
        assert snapshots["plain"].signals.accept_length == 1.0
        # The GPUs: 8 at 700 W each (the energy counter's rate), tokens per joule = decode tok/s ÷ watts.
        assert steady.gpu_count == 8
        assert steady.gpu_power_w == pytest.approx(8 * GPU_WATTS, rel=REL_TOLERANCE)
        assert steady.tokens_per_joule == pytest.approx(
            RATES["realtime_decode"] / (8 * GPU_WATTS), rel=REL_TOLERANCE
        )
        assert steady.usd_per_million_tokens == pytest.approx(
            PRICE * 8 / (RATES["realtime_decode"] * 3600) * 1e6, rel=REL_TOLERANCE
        )
        assert idle.tokens_per_joule == 0.0
        assert idle.usd_per_million_tokens is None


def test_the_rule_file_records_what_the_source_reads(tmp_path: Path) -> None:
    from collectors.prometheus.recording_rules import render_rules
    from collectors.signals import PROMQL_APPROXIMATION

    text = render_rules(source_config("http://127.0.0.1:9", selector='job="parity"'))
    assert 'mode="decode"' in text  # decode throughput from the per-batch counter
    assert "cache_hit_rate{" not in text.replace("sglang_cache_hit_rate:ratio", "")  # no gauge fallback
    assert " ".join(PROMQL_APPROXIMATION.split()[:6]) in text.replace("\n# ", " ")
