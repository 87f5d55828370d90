"""GPU telemetry and cost as the direct source reads them: each server's DCGM exporter beside its /metrics.

The simulated fleet serves dcgm-exporter's format from each server's GPUs (sim/gpu.py), on ports of their own;
time is frozen so the collector and the test read the same instants. A failing or garbage exporter never
marks the SGLang server down: the GPU signals are unknown, and the snapshot says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator

import pytest
import requests

from collectors.derive import GPU_READ_AT, apply_server_gpus, derive_signals, gpu_key
from collectors.direct.direct_source import DirectSource
from collectors.direct.gpu_scrape import parse_gpu_exposition
from collectors.errors import BadExposition
from collectors.model import TargetSnapshot
from config import Target
from sim import gpu
from sim.fleet import SimFleet
from tests.collectors.bodies import SERVER_INFO
from tests.collectors.conftest import scrape_settings
from tests.collectors.servers import FakeSGLang, LoopbackServer, Route, reply

FLEET = """
description: two busy servers and an idle one, frozen in time
recipes:
  shipped: {speculative_dspark_block_size: 3}
  wide: {speculative_dspark_block_size: 3, tp_size: 4}
servers:
  - {name: busy, recipe: shipped, load: {concurrency: 24}}
  - {name: wide, recipe: wide, load: {concurrency: 8}}
  - {name: idle, recipe: shipped, load: {concurrency: 0}}
"""
PRICE = 2.0  # USD per GPU-hour


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimFleet, Clock]]:
    clock = Clock(120.0)
    path = tmp_path_factory.mktemp("gpu") / "fleet.yaml"
    path.write_text(FLEET)
    with SimFleet(path, clock=clock) as fleet:
        yield fleet, clock


def exporter_energy_mj(url: str) -> float:
    body = requests.get(f"{url}/metrics", timeout=5).text
    values = re.findall(r"^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{[^}]*\} (\S+)$", body, re.MULTILINE)
    assert values, body[:300]
    return math.fsum(float(v) for v in values)


def decode_tokens(url: str) -> float:
    body = requests.get(f"{url}/metrics", timeout=5, headers={"Accept": "text/plain"}).text
    found = re.search(r'^sglang:realtime_tokens_total\{[^}]*mode="decode"[^}]*\} (\S+)$', body, re.MULTILINE)
    assert found is not None
    return float(found.group(1))


def collect(source: DirectSource) -> dict[str, TargetSnapshot]:
    return {s.target: s for s in source.collect(0.0)}


def test_tokens_per_joule_is_what_the_exporters_energy_counter_implies(
    frozen: tuple[SimFleet, Clock],
) -> None:
    fleet, clock = frozen
    source = DirectSource(
        scrape_settings(timeout_s=2.0), fleet.targets, rate_clock=clock, params={"gpu_hour_usd": PRICE}
    )
    clock.now = 120.0
    collect(source)
    before = {s.name: (exporter_energy_mj(s.gpu_exporter_url), decode_tokens(s.url)) for s in fleet.servers}
    clock.now = 150.0
    snaps = collect(source)
    for server in fleet.servers:
        energy_mj, tokens = exporter_energy_mj(server.gpu_exporter_url), decode_tokens(server.url)
        joules = (energy_mj - before[server.name][0]) / 1000.0
        generated = tokens - before[server.name][1]
        snap = snaps[server.name]
        assert snap.up
        assert snap.error is None, snap.error
        signals = snap.signals
        assert signals.gpu_count == gpu.gpu_count(server.args)
        assert signals.gpu_power_w == pytest.approx(joules / 30.0, rel=0.02)
        assert signals.tokens_per_joule == pytest.approx(generated / joules, rel=0.02), server.name
        assert signals.gpu_util is not None
        assert 0.0 <= signals.gpu_util <= 1.0
        if generated == 0:  # idle: energy spent, nothing generated — 0 tok/J, no cost per token
            assert server.name == "idle"
            assert signals.tokens_per_joule == 0.0
            assert signals.joules_per_token is None
            assert signals.usd_per_million_tokens is None
            assert signals.gpu_power_w == pytest.approx(
                gpu.IDLE_FRACTION * gpu.TDP_W * signals.gpu_count, rel=0.05
            )
            continue
        tok_s = generated / 30.0
        assert signals.joules_per_token == pytest.approx(joules / generated, rel=0.02)
        assert signals.output_tok_s_per_gpu == pytest.approx(tok_s / signals.gpu_count, rel=0.02)
        usd = PRICE * signals.gpu_count / (tok_s * 3600.0) * 1e6
        assert signals.usd_per_million_tokens == pytest.approx(usd, rel=0.02)
    assert snaps["wide"].signals.gpu_count == 4  # TP 4: four GPU series, and /server_info says so


def test_without_telemetry_or_price_each_figure_is_unknown_for_its_own_reason(
    frozen: tuple[SimFleet, Clock],
) -> None:
    fleet, clock = frozen
    busy = fleet.server("busy")
    plain = busy.target.model_copy(update={"gpu_exporter_url": None})
    no_gpus = DirectSource(scrape_settings(), [plain], rate_clock=clock, params={"gpu_hour_usd": PRICE})
    no_price = DirectSource(scrape_settings(), [busy.target], rate_clock=clock)
    for now in (200.0, 230.0):
        clock.now = now
        without_telemetry, without_price = collect(no_gpus)["busy"], collect(no_price)["busy"]
    # No exporter: no power, no tok/J; the GPU count (and so tok/s per GPU, and the cost) from /server_info.
    signals = without_telemetry.signals
    assert without_telemetry.up
    assert without_telemetry.error is None
    assert signals.gpu_power_w is None
    assert signals.tokens_per_joule is None
    assert signals.joules_per_token is None
    assert signals.gpu_util is None
    assert signals.gpu_count == 2
    assert signals.output_tok_s is not None
    assert signals.output_tok_s > 0
    assert signals.output_tok_s_per_gpu == pytest.approx(signals.output_tok_s / 2)
    assert signals.usd_per_million_tokens == pytest.approx(PRICE * 2 / (signals.output_tok_s * 3600) * 1e6)
    # No price: energy known, cost unknown (never 0).
    assert without_price.signals.tokens_per_joule is not None
    assert without_price.signals.tokens_per_joule > 0
    assert without_price.signals.usd_per_million_tokens is None
    record = without_price.as_record()
    for key in (
        "gpu_count",
        "gpu_power_w",
        "tokens_per_joule",
        "output_tok_s_per_gpu",
        "usd_per_million_tokens",
    ):
        assert key in record
    assert record["usd_per_million_tokens"] is None


def test_a_down_exporter_leaves_the_server_up_and_its_gpus_unknown(frozen: tuple[SimFleet, Clock]) -> None:
    fleet, clock = frozen
    busy = fleet.server("busy")
    source = DirectSource(scrape_settings(timeout_s=1.0), [busy.target], rate_clock=clock)
    busy.set_gpu_exporter_up(False)
    try:
        for now in (300.0, 330.0):
            clock.now = now
            snap = collect(source)["busy"]
    finally:
        busy.set_gpu_exporter_up(True)
    assert snap.up is True
    assert snap.signals.output_tok_s is not None
    assert snap.signals.accept_length is not None
    assert snap.signals.gpu_power_w is None
    assert snap.signals.tokens_per_joule is None
    assert snap.signals.gpu_count == 2  # /server_info still says
    assert snap.error is not None
    assert "GPU telemetry unknown" in snap.error
    assert "connection refused" in snap.error
    assert "targets[].gpu_exporter_url" in snap.error
    # Back: the next window has power again.
    for now in (360.0, 390.0):
        clock.now = now
        again = collect(source)["busy"]
    assert again.error is None
    assert again.signals.tokens_per_joule is not None


DCGM_8_GPUS = "".join(
    f'DCGM_FI_DEV_POWER_USAGE{{gpu="{i}",UUID="GPU-{i}",Hostname="node-a"}} {500.0 + i:f}\n'
    f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="{i}",UUID="GPU-{i}",Hostname="node-a"}} {10_000_000 + i}\n'
    f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}",Hostname="node-a"}} {50 + i}\n'
    for i in range(8)
)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("<html><body>502 Bad Gateway</body></html>", "an HTML page"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "binary data"),
        ("hello from some other service\n", "is this dcgm-exporter"),
        ('DCGM_FI_DEV_POWER_USAGE{gpu="0"} lots\n', "is not a number"),
    ],
)
def test_a_garbage_exporter_body_is_unknown_in_words_and_the_server_stays_up(
    sglang: Callable[..., FakeSGLang],
    loopback: Callable[[dict[str, Route]], LoopbackServer],
    body: str | bytes,
    words: str,
) -> None:
    server = sglang(info=SERVER_INFO)  # tp_size 8
    exporter = loopback({"/metrics": reply(body)})
    source = DirectSource(
        scrape_settings(), [Target(name="k", url=server.url, gpu_exporter_url=exporter.url)]
    )
    snap = source.collect(0.0)[0]
    assert snap.up is True
    assert snap.error is not None
    assert "GPU telemetry unknown" in snap.error
    assert words in snap.error
    assert snap.signals.gpu_power_w is None
    assert snap.signals.accept_length is not None  # the server's own signals are untouched
    assert snap.signals.gpu_count == 8  # from /server_info


def test_a_shared_node_is_unknown_until_gpu_labels_pick_the_servers_gpus(
    sglang: Callable[..., FakeSGLang], loopback: Callable[[dict[str, Route]], LoopbackServer]
) -> None:
    server = sglang(info={**SERVER_INFO, "tp_size": 2})
    exporter = loopback({"/metrics": reply(DCGM_8_GPUS)})
    shared = Target(name="k", url=server.url, gpu_exporter_url=exporter.url)
    picked = shared.model_copy(update={"gpu_labels": {"gpu": "2|3"}})
    unpicked, chosen = DirectSource(
        scrape_settings(), [shared, picked.model_copy(update={"name": "k2"})]
    ).collect(0.0)
    assert unpicked.up
    assert unpicked.signals.gpu_power_w is None
    assert unpicked.error is not None
    assert "8 GPUs the exporter shows" in unpicked.error
    assert "runs on 2" in unpicked.error
    assert "gpu_labels" in unpicked.error
    assert chosen.error is None
    assert chosen.signals.gpu_count == 2
    assert chosen.signals.gpu_power_w == pytest.approx(502.0 + 503.0)  # the gauge: no window yet
    assert chosen.signals.gpu_util == pytest.approx(0.525)


def test_the_energy_counter_falls_back_to_the_gauge_when_it_resets() -> None:
    def values(energy_mj: float) -> dict[str, float]:
        body = (
            f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 700.0\n'
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0"}} {energy_mj:.0f}\n'
            f'DCGM_FI_DEV_POWER_USAGE{{gpu="1"}} 650.0\n'
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="1"}} {energy_mj:.0f}\n'
        )
        return parse_gpu_exposition(body.encode()).values

    first = derive_signals(values(5_000_000), 0.0, None)
    assert first.signals.gpu_power_w == 1350.0  # no window yet: the gauges, summed
    steady = derive_signals(values(5_010_000), 10.0, first.state)
    assert steady.signals.gpu_power_w == pytest.approx(2 * 10_000 / 1000 / 10.0)  # the counter's rate
    reset = derive_signals(values(1_000), 20.0, steady.state)  # the driver reloaded: the counter restarts
    assert reset.signals.gpu_power_w == 1350.0  # never negative: the gauges again
    assert reset.reset == ()  # not an SGLang restart
    after = derive_signals(values(21_000), 30.0, reset.state)
    assert after.signals.gpu_power_w == pytest.approx(2 * 20_000 / 1000 / 10.0)


def test_the_energy_rate_divides_by_when_the_exporters_answers_arrived() -> None:
    """The exporter answers beside SGLang, not with it: a server body 0.2 s late must not bend the power."""

    def values(energy_mj: float, read_at_s: float) -> dict[str, float]:
        body = f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0"}} {energy_mj:.0f}\n'
        return {**parse_gpu_exposition(body.encode()).values, GPU_READ_AT: read_at_s}

    first = derive_signals(values(5_000_000, 100.0), 100.0, None)
    # SGLang's body came 1.2 s after the previous one, the exporter's 1.0 s after its previous: 700 W.
    later = derive_signals(values(5_700_000, 101.0), 101.2, first.state)
    assert later.signals.gpu_power_w == pytest.approx(700.0)
    again = derive_signals(values(6_400_000, 102.0), 101.9, later.state)
    assert again.signals.gpu_power_w == pytest.approx(700.0)


def test_the_parser_reads_only_complete_fields_of_the_selected_gpus() -> None:
    body = DCGM_8_GPUS.replace('DCGM_FI_DEV_GPU_UTIL{gpu="5",UUID="GPU-5",Hostname="node-a"} 55', "")
    reading = parse_gpu_exposition(body.encode())
    assert (reading.gpus, reading.shown) == (8, 8)
    assert reading.values[gpu_key("DCGM_FI_DEV_POWER_USAGE")] == pytest.approx(sum(500 + i for i in range(8)))
    assert gpu_key("DCGM_FI_DEV_GPU_UTIL", "avg") not in reading.values  # one GPU lacks it: unknown
    nan = DCGM_8_GPUS.replace('Hostname="node-a"} 507.000000', 'Hostname="node-a"} NaN')
    assert gpu_key("DCGM_FI_DEV_POWER_USAGE") not in parse_gpu_exposition(nan.encode()).values
    with pytest.raises(BadExposition, match=r"scrape\.max_samples"):
        parse_gpu_exposition(DCGM_8_GPUS.encode(), max_samples=10)


def test_the_prometheus_source_prefers_server_info_and_refuses_a_shared_nodes_power() -> None:
    """PromQL counted the node's GPUs (the join): /server_info's count wins, and a node showing more GPUs than
    the server runs on leaves its power unknown, in words."""
    node = {
        "output_tok_s": 1600.0, "gpu_count": 8.0, "gpu_power_w": 5600.0, "gpu_util": 0.8,
        "tokens_per_joule": 1600.0 / 5600.0, "joules_per_token": 3.5, "output_tok_s_per_gpu": 200.0,
        "usd_per_million_tokens": 2.5 * 8 / (1600.0 * 3600) * 1e6,
    }  # fmt: skip
    shared, problem = apply_server_gpus(node, 2, {"gpu_hour_usd": 2.5})
    assert problem is not None
    assert "shows 8 GPUs" in problem
    assert "runs on 2" in problem
    assert shared["gpu_power_w"] is None
    assert shared["tokens_per_joule"] is None
    assert shared["gpu_count"] == 2
    assert shared["output_tok_s_per_gpu"] == 800.0  # recomputed with the server's own GPUs
    assert shared["usd_per_million_tokens"] == pytest.approx(2.5 * 2 / (1600.0 * 3600) * 1e6)
    whole, problem = apply_server_gpus(node, 8, {"gpu_hour_usd": 2.5})
    assert problem is None
    assert whole == pytest.approx(node)
