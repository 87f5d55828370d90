"""The demo's history derives its signals as the live collector does: the same catalogue, the same formula.

One simulated server is sampled by ``sim.sampler.Sampler`` (no HTTP) and scraped over loopback HTTP by the
collector's ``DirectSource``, its GPUs' DCGM exporter too (``targets[].gpu_exporter_url``), both at the demo's
price. History derives once per published decode-log window, as a scrape at the instant the window was
published: the collector scrapes then too, so both derive from the same bodies and every signal — the GPU
power, tokens per joule and $ per million tokens with the rest — must be equal to the last bit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from collectors.direct.direct_source import DirectSource
from collectors.model import Recipe, Signals
from collectors.signals import config_params
from config import ScrapeSettings
from sim.gpu import gpu_count
from sim.http import Listener
from sim.sampler import Deriver, Sampler
from sim.scenario import expand_servers, load_scenario
from sim.server import SimServer

START_TS = 1_800_000_000.0
STEP_S = 5.0
WINDOW_S = 15.0  # the demo history's decode-log windows (sim.sampler.WINDOW_SAMPLES × 5 s)
PRICE = 2.5  # USD per GPU-hour (config/default.yaml's cost.gpu_hour_usd)


class _Clock:
    """Simulated seconds, shared by the server (its /metrics), the sampler and the collector's rate clock."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _server(name: str, clock: _Clock) -> SimServer:
    scenario = load_scenario("demo")
    index, spec = next((i, s) for i, s in enumerate(expand_servers(scenario, None)) if s.name == name)
    return SimServer(
        spec,
        index=index,
        seed=1,
        clock=clock,
        boot_s=scenario.spec.boot_s,
        warmup_s=scenario.spec.warmup_s,
        min_window_s=WINDOW_S,
    )


@contextmanager
def _served(server: SimServer) -> Iterator[None]:
    """``server`` and its GPUs' exporter answering HTTP on loopback ports, from an event loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    listener = Listener("127.0.0.1", 0, server.handle)
    exporter = Listener("127.0.0.1", 0, server.handle_gpu_exporter)
    try:
        asyncio.run_coroutine_threadsafe(listener.open(), loop).result(10)
        asyncio.run_coroutine_threadsafe(exporter.open(), loop).result(10)
        server.port, server.gpu_exporter_port = listener.port, exporter.port
        yield
    finally:
        asyncio.run_coroutine_threadsafe(exporter.shutdown(), loop).result(10)
        asyncio.run_coroutine_threadsafe(listener.shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _collector(server: SimServer, clock: _Clock) -> DirectSource:
    settings = ScrapeSettings(interval_s=STEP_S, timeout_s=3.0)
    assert server.target.gpu_exporter_url == server.gpu_exporter_url  # the GPUs are read beside /metrics
    # Rates: simulated seconds, as history.
    return DirectSource(settings, [server.target], rate_clock=clock, params=config_params(PRICE))


def _scraped(source: DirectSource) -> Signals:
    (snapshot,) = source.collect(0.0)
    assert snapshot.up, snapshot.error
    assert snapshot.error is None
    return snapshot.signals


@pytest.mark.parametrize("name", ["k3-east-0", "k3-west-plain"])
def test_history_signals_equal_a_live_scrape_of_the_same_server(name: str) -> None:
    clock = _Clock()
    server = _server(name, clock)
    recipes: dict[str, Recipe] = {}
    sampler = Sampler(server, START_TS, recipes, PRICE)
    compared: list[Signals] = []
    with _served(server):
        source = _collector(server, clock)
        window_s = None
        for k in range(1, 121):  # ten minutes, 5 s apart: 40 windows
            clock.t = k * STEP_S
            up, _, history = sampler.sample(clock.t)
            assert up
            if server.engine.published.at_s == window_s:
                continue  # no new window: the history repeats its last signals, as an unchanged body would
            window_s = clock.t = server.engine.published.at_s  # the collector scrapes as it is published
            live = _scraped(source)
            assert history == live, f"{name}, window published at {window_s:g} s"
            compared.append(history)
    assert len(compared) >= 35
    busy = compared[4:]  # after the first minute: every rate has a window, the completion ones too
    assert all(s.output_tok_s is not None and s.output_tok_s > 0 for s in busy)
    # The decode counter, not the completion counter: throughput = accepted tokens per step / step latency.
    assert all(s.tokens_per_verify is None for s in busy) == (name == "k3-west-plain")
    assert all(s.cache_hit_rate is not None and s.state_pool_usage is not None for s in busy)
    # The GPUs: power from the energy counter's rate once it has a window, and what it buys.
    assert all(s.gpu_count == 2 and s.gpu_power_w is not None and s.gpu_power_w > 0 for s in busy)
    for s in busy:
        assert s.output_tok_s is not None
        assert s.gpu_power_w is not None
        assert s.gpu_count is not None
        assert s.tokens_per_joule == pytest.approx(s.output_tok_s / s.gpu_power_w, rel=1e-12)
        assert s.usd_per_million_tokens == pytest.approx(
            PRICE * s.gpu_count / (s.output_tok_s * 3600) * 1e6, rel=1e-12
        )


def test_state_pool_usage_is_unknown_where_the_pool_has_no_slots() -> None:
    """A server that publishes a Mamba usage with no pool slots behind it (a model without a recurrent-state
    pool) shows no state-pool usage, in history as live: never a made-up fraction."""
    clock = _Clock()
    server = _server("k3-east-0", clock)
    clock.t = 300.0
    server.advance(clock.t)
    gauges = server.engine.published.gauges
    clock.t = server.engine.published.at_s
    assert Deriver().derive(server.engine, server.recipe).state_pool_usage == gauges.mamba_usage > 0
    gauges.mamba_used = gauges.mamba_available = gauges.mamba_evictable = 0
    deriver = Deriver(config_params(PRICE))
    history = deriver.derive(server.engine, server.recipe, server.gpu_meter, gpu_count(server.args))
    with _served(server):
        live = _scraped(_collector(server, clock))
    assert history.state_pool_usage is None
    assert history == live
