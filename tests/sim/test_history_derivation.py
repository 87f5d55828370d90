"""The demo's history derives its signals as the live collector does: the same catalogue, the same formula.

One simulated server is sampled by ``sim.sampler.Sampler`` (no HTTP) and scraped over loopback HTTP by the
collector's ``DirectSource``. History derives once per published decode-log window, as a scrape at the instant
the window was published: the collector scrapes then too, so both derive from the same body and every signal
must be equal to the last bit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from collectors.direct.direct_source import DirectSource
from collectors.model import Recipe, Signals
from config import ScrapeSettings
from sim.http import Listener
from sim.sampler import Deriver, Sampler
from sim.scenario import expand_servers, load_scenario
from sim.server import SimServer

START_TS = 1_800_000_000.0
STEP_S = 5.0
WINDOW_S = 15.0  # the demo history's decode-log windows (sim.sampler.WINDOW_SAMPLES × 5 s)


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
    """``server`` answering HTTP on a loopback port, from an event loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    listener = Listener("127.0.0.1", 0, server.handle)
    try:
        asyncio.run_coroutine_threadsafe(listener.open(), loop).result(10)
        server.port = listener.port
        yield
    finally:
        asyncio.run_coroutine_threadsafe(listener.shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _collector(server: SimServer, clock: _Clock) -> DirectSource:
    settings = ScrapeSettings(interval_s=STEP_S, timeout_s=3.0)
    # SGLang's own signals: the synthesised history has no GPU telemetry (nor is the exporter served here).
    target = server.target.model_copy(update={"gpu_exporter_url": None})
    return DirectSource(settings, [target], rate_clock=clock)  # rates: simulated seconds, as history


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
    sampler = Sampler(server, START_TS, recipes)
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
    history = Deriver().derive(server.engine, server.recipe)
    with _served(server):
        live = _scraped(_collector(server, clock))
    assert history.state_pool_usage is None
    assert history == live
