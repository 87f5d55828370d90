"""Long histories without HTTP: a scenario's servers, sampled as a collector scraping every ``step_s`` would.

The same mechanism runs; the result is ``collectors.model`` snapshots, events and recipes. Signals are the
live collector's: the catalogue's compiled derivation (``collectors.derive``) over the samples a scrape
of the server's published values would read (``sim.readings``), with its GPUs' DCGM exporter (``sim.gpu``:
power following the load, the energy counter) and the config's GPU-hour price, once per published decode-log
window (a window here spans several samples; between two, a sample repeats the last signals, as the body
would).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path

from collectors.derive import CounterState, derive_signals
from collectors.model import Event, Recipe, Signals, TargetSnapshot
from collectors.signals import config_params
from sim import gpu
from sim.readings import GPU_FIELDS, scraped_gpu_samples, scraped_samples
from sim.scenario import Scenario, ServerSpec, expand_servers, load_scenario
from sim.server import SimServer
from sim.server_engine import ServerEngine
from sim.values import signal_families

# A window spans at least WINDOW_SAMPLES samples here (live servers keep SGLang's 40-step window, usually
# shorter than one 5 s sample): gauges refresh every ≥ 15 s, and 200 servers × 6 h cost ~one window per three
# snapshots (measured in bench_sim); counters and rates are unaffected.
WINDOW_SAMPLES = 3
SCRAPE_TIMEOUT_S = 3.0  # the collector's default: a "slow" server slower than this times out
_UNKNOWN = Signals()
_ERRORS = {
    "down": "connection refused (simulated outage)",
    "booting": "connection refused (simulated restart, server booting)",
    "hang": "timed out after 3 s (simulated hang)",
    "slow": "timed out after 3 s (simulated slow server)",
    "garbage": "bad exposition: an HTML page, not Prometheus text (simulated)",
}


class Deriver:
    """Successive published states of one server → ``Signals``, by the collector's own derivation (the
    compiled catalogue, ``collectors.derive``) from what a scrape of each state would read.

    Derived once per published decode-log window, as a scrape at the instant it was published would (the
    body shows the window, nothing of the next one streamed yet): rates span whole windows. Until the next
    window a scrape would read the same body, so a sample repeats these signals. ``params``: the config's
    numbers the catalogue reads (``signals.config_params``: the GPU-hour price)."""

    def __init__(self, params: Mapping[str, float | None] | None = None) -> None:
        self._params = params
        self._state: CounterState | None = None
        self._signals = _UNKNOWN
        self._window_s = -math.inf

    def reset(self) -> None:
        """The server restarted: no rate spans the restart (the collector sees its counters fall)."""
        self._state, self._window_s = None, -math.inf

    def derive(
        self, engine: ServerEngine, recipe: Recipe, meter: gpu.GpuMeter | None = None, gpus: int = 0
    ) -> Signals:
        """The signals of ``engine``'s newest published window; with ``meter``, what the server's ``gpus``
        GPUs' exporter shows at that instant too (as a collector with ``gpu_exporter_url`` reads it)."""
        at_s = engine.published.at_s
        if at_s == self._window_s:
            return self._signals  # no new window since the last sample: nothing moved
        self._window_s = at_s
        values = scraped_samples(signal_families(engine))
        if meter is not None and gpus > 0:
            texts = gpu.field_values(gpus, meter.reading(engine, at_s), None, GPU_FIELDS)
            values.update(scraped_gpu_samples(texts))
        derivation = derive_signals(values, at_s, self._state, recipe, self._params)
        self._state, self._signals = derivation.state, derivation.signals
        return self._signals


def _failure(server: SimServer, now_s: float) -> str | None:
    if now_s < server.booting_until:
        return "booting"
    fault = server.fault
    if fault == "slow" and server.fault_delay_s <= SCRAPE_TIMEOUT_S:
        return None
    return fault


class Sampler:
    """One simulated server sampled as the collector would scrape it (with its GPUs' exporter, and
    ``gpu_hour_usd`` as ``cost.gpu_hour_usd``): ``sample(t)`` for increasing ``t`` (scenario seconds) gives
    (up, error, signals) and records down/up events at unix ``start + t``."""

    def __init__(
        self,
        server: SimServer,
        start_ts: float,
        recipes: dict[str, Recipe],
        gpu_hour_usd: float | None = None,
    ) -> None:
        self.server, self.start_ts, self.recipes = server, start_ts, recipes
        self.name, self.deployment = server.spec.name, server.spec.deployment
        self.events: list[Event] = []
        self._deriver = Deriver(config_params(gpu_hour_usd))
        self._was_up, self._restarts = True, 0
        # Building a recipe and hashing its flags are not free: once per recipe (it changes at restarts).
        self.recipe = server.recipe
        self.recipe_id = self.recipe.recipe_id
        recipes[self.recipe_id] = self.recipe
        self._answer: tuple[bool, str | None, Signals] = (True, None, _UNKNOWN)
        self._same_until = -math.inf  # before this scenario time ``sample`` answers as it last did

    def sample(self, t: float) -> tuple[bool, str | None, Signals]:
        if t < self._same_until:
            return self._answer  # nothing due: most samples between two windows (the fill's hot path)
        self._answer = answer = self._sample(t)
        server = self.server
        # Until the next scenario action, published window or end of a boot, advancing the server is a no-op
        # and the answer (the deriver's cached signals, no up/down transition) cannot change.
        until = min(server.next_action_s, server.engine.quiet_until_s())
        if t < server.booting_until:
            until = min(until, server.booting_until)
        self._same_until = until
        return answer

    def _sample(self, t: float) -> tuple[bool, str | None, Signals]:
        server = self.server
        server.advance(t)
        ts = self.start_ts + t
        if server.restarts != self._restarts:
            self._restarts = server.restarts
            self.recipe = server.recipe
            self.recipe_id = self.recipe.recipe_id
            self.recipes[self.recipe_id] = self.recipe
            self._deriver.reset()  # counters reset: the collector's deltas restart too
        failure = _failure(server, t)
        if failure is not None:
            if self._was_up:
                self.events.append(Event(ts, self.name, "down", _ERRORS[failure]))
            self._was_up = False
            return False, _ERRORS[failure], _UNKNOWN
        if not self._was_up:
            self.events.append(Event(ts, self.name, "up", "scrapes succeed again"))
            self._was_up = True
        return (
            True,
            None,
            self._deriver.derive(server.engine, self.recipe, server.gpu_meter, gpu.gpu_count(server.args)),
        )

    def server_events(self, duration_s: float) -> list[Event]:
        """Restarts and recipe changes of the server within [0, duration_s], at unix timestamps."""
        return [
            Event(self.start_ts + e.ts, e.target, e.kind, e.detail)
            for e in self.server.events
            if e.kind in ("restart", "recipe_change") and 0 <= e.ts <= duration_s
        ]


def sim_server(spec: ServerSpec, index: int, seed: int, scenario: Scenario, window_s: float) -> SimServer:
    """A server of ``scenario`` driven by ``advance`` alone, publishing windows at least ``window_s`` long."""
    return SimServer(
        spec,
        index=index,
        seed=seed,
        clock=lambda: 0.0,
        boot_s=scenario.spec.boot_s,
        warmup_s=scenario.spec.warmup_s,
        min_window_s=window_s,
    )


def synthesize_history(
    scenario: str | Path = "demo",
    *,
    servers: int | None = None,
    duration_s: float,
    step_s: float = 5.0,
    end_ts: float | None = None,
    seed: int = 0,
    gpu_hour_usd: float | None = None,
) -> tuple[list[TargetSnapshot], list[Event], dict[str, Recipe]]:
    """Snapshots every ``step_s`` for ``duration_s`` ending at ``end_ts`` (default now), in time order per
    server; events (restart, recipe_change, down, up) with unix timestamps; every recipe seen, by
    recipe_id. ``gpu_hour_usd``: the price $ per million tokens is derived at (None: unknown)."""
    if not 0 < step_s <= duration_s:
        raise ValueError(f"step_s must be in (0, duration_s]; got step_s={step_s}, duration_s={duration_s}")
    if duration_s > 400 * 86_400:
        raise ValueError(f"duration_s must be at most 400 days, not {duration_s}")
    loaded = load_scenario(scenario)
    specs = expand_servers(loaded, servers)
    end = time.time() if end_ts is None else end_ts
    start = end - duration_s
    samples = math.floor(duration_s / step_s + 1e-9)
    snapshots: list[TargetSnapshot] = []
    events: list[Event] = []
    recipes: dict[str, Recipe] = {}
    for index, spec in enumerate(specs):
        server = sim_server(spec, index, seed, loaded, WINDOW_SAMPLES * step_s)
        sampler = Sampler(server, start, recipes, gpu_hour_usd)
        for k in range(1, samples + 1):
            up, error, signals = sampler.sample(k * step_s)
            snapshots.append(
                TargetSnapshot(
                    spec.name,
                    start + k * step_s,
                    up,
                    error,
                    signals,
                    sampler.recipe_id,
                    spec.deployment,
                    scrape_duration_s=0.004 if up else None,
                )
            )
        events += sampler.events + sampler.server_events(duration_s)
    events.sort(key=lambda e: e.ts)
    return snapshots, events, recipes
