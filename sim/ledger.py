"""What a simulated server publishes: its gauges (refreshed per window) and its counters and histograms.

A window records increments in a ``WindowLedger``; the engine commits it when simulated time passes the
window's end, so readers only ever see whole windows — as with SGLang, whose gauges change once per decode-log
window.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate


@dataclass(slots=True)
class Gauges:
    """What the scheduler last logged (plus ``step_latency_s`` and ``decode_tokens``, for history)."""

    running: int = 0
    queued: int = 0
    gen_throughput: float = 0.0
    token_usage: float = 0.0
    full_token_usage: float = 0.0
    mamba_usage: float = 0.0
    mamba_used: int = 0
    mamba_available: int = 0
    mamba_evictable: int = 0
    kv_used: int = 0
    kv_available: int = 0
    kv_evictable: int = 0
    decode_sum_seq_lens: int = 0
    cache_hit_rate: float = 0.0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    spec_cap_length: float = 0.0
    spec_block_accept_length: float = 0.0
    retracted: int = 0
    utilization: float = 0.0
    is_cuda_graph: float = 0.0
    step_latency_s: float = 0.0  # accept length × TPOT of the window's batch (SGLang does not export it)
    decode_tokens: float = 0.0  # tokens generated in the window


@dataclass(slots=True)
class Histogram:
    """Non-cumulative bucket counts (the last is +Inf) and the sum of observed values."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    sum: float = 0.0
    count: float = 0.0  # observations in all buckets

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: float = 1.0, total: float | None = None) -> None:
        self.counts[bisect_left(self.bounds, value)] += weight  # bucket "le" = first bound ≥ value
        self.sum += value * weight if total is None else total
        self.count += weight

    def cumulative(self) -> list[float]:
        return list(accumulate(self.counts))  # left to right, as a running sum (in C: history reads it a lot)


@dataclass(slots=True)
class WindowLedger:
    """One window's end time, gauges, counter increments and histogram observations."""

    end_s: float
    gauges: Gauges = field(default_factory=Gauges)
    counts: dict[str, float] = field(default_factory=dict)
    observations: list[tuple[str, float, float, float]] = field(
        default_factory=list
    )  # key, value, weight, sum

    def bump(self, key: str, amount: float) -> None:
        self.counts[key] = self.counts.get(key, 0.0) + amount

    def observe(self, key: str, value: float, weight: float, total: float | None = None) -> None:
        if weight > 0:
            self.observations.append((key, value, weight, value * weight if total is None else total))


@dataclass(slots=True)
class Published:
    """Everything readers see: the last committed window's gauges and the lifetime counters/histograms."""

    gauges: Gauges
    at_s: float
    counts: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)

    def commit(self, window: WindowLedger) -> None:
        counts, histograms = self.counts, self.histograms
        for key, amount in window.counts.items():
            counts[key] = counts.get(key, 0.0) + amount
        for key, value, weight, total in window.observations:
            histograms[key].observe(value, weight, total)
        self.gauges = window.gauges
        self.at_s = window.end_s

    def count(self, key: str) -> float:
        return self.counts.get(key, 0.0)
