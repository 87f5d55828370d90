"""Long histories without HTTP: a scenario's servers, sampled as a collector scraping every ``step_s`` would.

The same mechanism runs; the result is ``collectors.model`` snapshots, events and recipes. Signals are derived
as the collector documents them (gauges as read; rates and means from counter deltas). When a server's
counters did not move between two samples (a decode-log window longer than ``step_s``), delta-based signals
carry the previous value forward instead of dropping to unknown.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from collectors.model import Event, Recipe, Signals, TargetSnapshot
from sim.scenario import Scenario, ServerSpec, expand_servers, load_scenario
from sim.server import SimServer

# A window spans at least WINDOW_SAMPLES samples here (live servers keep SGLang's 40-step window, usually
# shorter than one 5 s sample): gauges refresh every ≥ 15 s, and 200 servers × 6 h cost ~one window per three
# snapshots (measured in bench_sim); counters and rates are unaffected.
WINDOW_SAMPLES = 3
SCRAPE_TIMEOUT_S = 3.0  # the collector's default: a "slow" server slower than this times out
_ERRORS = {
    "down": "connection refused (simulated outage)",
    "booting": "connection refused (simulated restart, server booting)",
    "hang": "timed out after 3 s (simulated hang)",
    "slow": "timed out after 3 s (simulated slow server)",
    "garbage": "bad exposition: an HTML page, not Prometheus text (simulated)",
}


class _Deriver:
    """Successive published states of one server → Signals, by the collector's rules: gauges as read, rates
    and window means from counter deltas, a plain server's accept length 1, KV from full_token_usage."""

    _DELTA_KEYS = (
        "generation_tokens",
        "prompt_tokens",
        "cached_tokens",
        "spec_verify_calls",
        "itl_sum",
        "itl_count",
        "ttft_sum",
        "ttft_count",
        "queue_sum",
        "queue_count",
        "retracted",
    )

    def __init__(self) -> None:
        self._last: dict[str, float] | None = None
        self._last_ts = 0.0
        self._carried: dict[str, float | None] = {}
        self._last_signals: Signals | None = None
        self._last_window_s = -math.inf

    def reset(self) -> None:
        self._last, self._carried, self._last_signals = None, {}, None

    def derive(self, server: SimServer, ts: float) -> Signals:
        published, layout = server.engine.published, server.engine.layout
        if self._last_signals is not None and published.at_s == self._last_window_s:
            return self._last_signals  # no new window since the last sample: nothing moved
        self._last_window_s = published.at_s
        g, h, count = published.gauges, published.histograms, published.count
        now = {
            "generation_tokens": count("generation_tokens:true") + count("generation_tokens:false"),
            "prompt_tokens": count("prompt_tokens:true") + count("prompt_tokens:false"),
            "cached_tokens": count("cached_tokens"),
            "spec_verify_calls": count("spec_verify_calls"),
            "itl_sum": h["itl"].sum,
            "itl_count": h["itl"].count,
            "ttft_sum": h["ttft:true"].sum + h["ttft:false"].sum,
            "ttft_count": h["ttft:true"].count + h["ttft:false"].count,
            "queue_sum": h["queue"].sum,
            "queue_count": h["queue"].count,
            "retracted": count("retracted_requests"),
        }
        last, elapsed = self._last, ts - self._last_ts
        self._last, self._last_ts = now, ts
        delta = {k: now[k] - last[k] for k in self._DELTA_KEYS} if last is not None and elapsed > 0 else None

        def ratio(name: str, top: str, bottom: str) -> float | None:
            """A window mean; carried forward while the denominator did not move and the server is busy."""
            if delta is None:
                return None
            if delta[bottom] > 0:
                self._carried[name] = delta[top] / delta[bottom]
            elif g.running == 0:
                self._carried[name] = None
            return self._carried.get(name)

        spec = server.engine.window > 1
        tpot = ratio("tpot_s", "itl_sum", "itl_count")
        per_verify = ratio("tokens_per_verify", "generation_tokens", "spec_verify_calls") if spec else None
        if not spec:
            accept: float | None = 1.0  # plain decoding emits one token per request per step
        elif g.spec_accept_length > 0 and g.running:
            accept = g.spec_accept_length
        else:
            accept = per_verify  # the gauge keeps its last value while idle: it describes the past
        if delta is None:
            output: float | None = g.gen_throughput  # first sample after a (re)start: the server's own
        elif delta["generation_tokens"] > 0 or g.running == 0:
            output = delta["generation_tokens"] / elapsed
        else:
            output = self._carried.get("output_tok_s")
        self._carried["output_tok_s"] = output
        hit_rate = ratio("cache_hit_rate", "cached_tokens", "prompt_tokens")
        self._last_signals = Signals(
            accept_length=accept,
            tokens_per_verify=per_verify,
            spec_accept_rate=g.spec_accept_rate if spec and g.running else None,
            tpot_s=tpot,
            step_latency_s=accept * tpot if accept is not None and tpot is not None else None,
            output_tok_s=output,
            per_request_tok_s=1 / tpot if tpot else None,
            running=float(g.running),
            queued=float(g.queued),
            max_running=float(layout.max_running),
            state_pool_usage=g.mamba_usage,
            kv_usage=g.full_token_usage,
            token_usage=g.token_usage,
            avg_context_tokens=g.decode_sum_seq_lens / g.running if g.running else None,
            cache_hit_rate=g.cache_hit_rate if hit_rate is None else hit_rate,
            retractions_per_s=delta["retracted"] / elapsed if delta is not None else None,
            ttft_s=ratio("ttft_s", "ttft_sum", "ttft_count"),
            queue_time_s=ratio("queue_time_s", "queue_sum", "queue_count"),
        )
        return self._last_signals


def _failure(server: SimServer, now_s: float) -> str | None:
    if now_s < server.booting_until:
        return "booting"
    fault = server.fault
    if fault == "slow" and server.fault_delay_s <= SCRAPE_TIMEOUT_S:
        return None
    return fault


class Sampler:
    """One simulated server sampled as the collector would scrape it: ``sample(t)`` for increasing ``t``
    (scenario seconds) gives (up, error, signals) and records down/up events at unix ``start + t``."""

    def __init__(self, server: SimServer, start_ts: float, recipes: dict[str, Recipe]) -> None:
        self.server, self.start_ts, self.recipes = server, start_ts, recipes
        self.name, self.deployment = server.spec.name, server.spec.deployment
        self.events: list[Event] = []
        self._deriver = _Deriver()
        self._was_up, self._restarts = True, 0
        self.recipe_id = server.recipe.recipe_id  # hashing the flags is not free: once per recipe
        recipes[self.recipe_id] = server.recipe
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
            recipe = server.recipe
            self.recipe_id = recipe.recipe_id
            self.recipes[self.recipe_id] = recipe
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
        return True, None, self._deriver.derive(server, ts)

    def server_events(self, duration_s: float) -> list[Event]:
        """Restarts and recipe changes of the server within [0, duration_s], at unix timestamps."""
        return [
            Event(self.start_ts + e.ts, e.target, e.kind, e.detail)
            for e in self.server.events
            if e.kind in ("restart", "recipe_change") and 0 <= e.ts <= duration_s
        ]


_UNKNOWN = Signals()


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
) -> tuple[list[TargetSnapshot], list[Event], dict[str, Recipe]]:
    """Snapshots every ``step_s`` for ``duration_s`` ending at ``end_ts`` (default now), in time order per
    server; events (restart, recipe_change, down, up) with unix timestamps; every recipe seen, by
    recipe_id."""
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
        sampler = Sampler(sim_server(spec, index, seed, loaded, WINDOW_SAMPLES * step_s), start, recipes)
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
