"""Measuring a simulated server the way a benchmark or a collector would: gauges per window, counter
deltas."""

from __future__ import annotations

import socket
import statistics
from contextlib import closing
from dataclasses import dataclass, fields
from typing import Any

from sim.recipes import resolve_server_args
from sim.server_engine import ServerEngine
from sim.workload import Load, Workload

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@dataclass(frozen=True)
class Measurement:
    """One steady-state run: window gauges averaged, counters as deltas over the measured span."""

    windows: list[dict[str, float]]
    duration_s: float
    deltas: dict[str, float]

    def mean(self, gauge: str) -> float:
        return statistics.fmean(w[gauge] for w in self.windows)

    def cv(self, gauge: str) -> float:
        values = [w[gauge] for w in self.windows]
        return statistics.pstdev(values) / statistics.fmean(values)

    @property
    def accept_length(self) -> float:
        """Tokens per verify step over the run (what the seed's benchmark reports)."""
        return self.deltas["generation_tokens"] / self.deltas["spec_verify_calls"]

    @property
    def tpot_s(self) -> float:
        return self.deltas["itl_sum"] / self.deltas["itl_count"]

    @property
    def step_latency_s(self) -> float:
        return self.accept_length * self.tpot_s

    @property
    def output_tok_s(self) -> float:
        return self.deltas["decode_tokens"] / self.duration_s

    @property
    def total_tok_s(self) -> float:
        return (self.deltas["generation_tokens"] + self.deltas["prompt_tokens"]) / self.duration_s

    @property
    def ttft_s(self) -> float:
        return self.deltas["ttft_sum"] / self.deltas["ttft_count"]

    @property
    def hit_rate(self) -> float:
        return self.deltas["cached_tokens"] / self.deltas["prompt_tokens"]


def _totals(engine: ServerEngine) -> dict[str, float]:
    p = engine.published
    h = p.histograms
    both = ("true", "false")
    return {
        "generation_tokens": sum(p.count(f"generation_tokens:{s}") for s in both),
        "prompt_tokens": sum(p.count(f"prompt_tokens:{s}") for s in both),
        "num_requests": sum(p.count(f"num_requests:{s}") for s in both),
        "cached_tokens": p.count("cached_tokens"),
        "spec_verify_calls": p.count("spec_verify_calls"),
        "decode_tokens": p.count("decode_tokens"),
        "itl_sum": h["itl"].sum,
        "itl_count": h["itl"].count,
        "ttft_sum": h["ttft:true"].sum + h["ttft:false"].sum,
        "ttft_count": h["ttft:true"].count + h["ttft:false"].count,
        "queue_sum": h["queue"].sum,
        "queue_count": h["queue"].count,
        "retracted_requests": p.count("retracted_requests"),
    }


def measure(
    recipe: dict[str, Any],
    workload: Workload,
    load: Load,
    *,
    duration_s: float = 3600.0,
    warmup_s: float = 900.0,
    seed: int = 0,
    tick_s: float = 1.0,
) -> Measurement:
    """Run one engine to steady state, then record every published window for ``duration_s``."""
    engine = ServerEngine(resolve_server_args(recipe), workload, load, seed=seed)
    engine.advance_to(warmup_s)
    before, start = _totals(engine), engine.published.at_s
    windows: list[dict[str, float]] = []
    seen, t = engine.published.at_s, warmup_s
    while t < warmup_s + duration_s:
        t += tick_s
        engine.advance_to(t)
        if engine.published.at_s != seen:
            seen = engine.published.at_s
            gauges = engine.published.gauges
            windows.append({f.name: float(getattr(gauges, f.name)) for f in fields(gauges)})
    after = _totals(engine)
    return Measurement(windows, engine.published.at_s - start, {k: after[k] - before[k] for k in after})


def free_port_range(count: int) -> int:
    """A base port such that base … base+count−1 are all free right now."""
    for _ in range(50):
        with closing(socket.socket()) as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count >= 65000:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found")
