"""SGLang-shaped /metrics bodies rendered by a real prometheus_client registry (text 0.0.4 or OpenMetrics).

The layout copies SGLang 0.5.23: scheduler families carry ``tp_rank`` (rank 1 reports zeros and constants),
tokenizer counters are split by ``is_streaming``, histograms have buckets, ``_sum`` and ``_count``. With
``priorities`` set (``--enable-priority-scheduling``), scheduler gauges carry their total under
``priority=""`` plus one breakdown per priority, and tokenizer counters and histograms exist only per
priority (no total).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

MODEL = "moonshotai/Kimi-K3"
SCHED_LABELS = ["engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"]
TOKENIZER_LABELS = ["engine_type", "model_name"]
TEXT_ACCEPT = "text/plain;version=0.0.4"
OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0"
OPENMETRICS_UTF8_ACCEPT = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8"


@dataclass
class Load:
    """What one fake SGLang server reports. ``None`` leaves the family out (an older SGLang)."""

    running: float | None = 41.0
    queued: float | None = 7.0
    gen_throughput: float | None = 3127.55
    token_usage: float | None = 0.73
    full_token_usage: float | None = 0.2419
    mamba_usage: float | None = 0.7314
    mamba_used_tokens: float | None = 144.0
    mamba_available_tokens: float | None = 31.0
    mamba_evictable_tokens: float | None = 22.0
    kv_used_tokens: float | None = 377904.0
    num_used_tokens: float | None = 377904.0
    max_total_num_tokens: float | None = 1562306.0
    decode_sum_seq_lens: float | None = 377904.0
    cache_hit_rate: float | None = 0.4187
    spec_accept_length: float | None = 2.91
    spec_accept_rate: float | None = 0.6367
    generation_tokens: float | None = 615603.0
    prompt_tokens: float | None = 3455083.0
    cached_tokens: float | None = 924120.0
    verify_calls: float | None = 218682.0
    retracted: float | None = 3.0
    itl_sum: float | None = 5837.5
    itl_count: float | None = 614403.0
    ttft_sum: float | None = 344.4
    ttft_count: float | None = 1200.0
    queue_sum: float | None = 83.1
    queue_count: float | None = 1200.0
    realtime_decode: float | None = 3412998.0  # realtime_tokens_total{mode="decode"}, per batch (0.5.7+)
    priorities: tuple[str, ...] = ()  # --enable-priority-scheduling: the request priorities seen

    def advanced(self, **deltas: float) -> Load:
        """A copy with some fields increased (counters moving forward)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, delta in deltas.items():
            values[name] = values[name] + delta
        return Load(**values)


_GAUGES = (
    ("num_running_reqs", "running"),
    ("num_queue_reqs", "queued"),
    ("gen_throughput", "gen_throughput"),
    ("token_usage", "token_usage"),
    ("full_token_usage", "full_token_usage"),
    ("mamba_usage", "mamba_usage"),
    ("mamba_used_tokens", "mamba_used_tokens"),
    ("mamba_available_tokens", "mamba_available_tokens"),
    ("mamba_evictable_tokens", "mamba_evictable_tokens"),
    ("kv_used_tokens", "kv_used_tokens"),
    ("num_used_tokens", "num_used_tokens"),
    ("max_total_num_tokens", "max_total_num_tokens"),
    ("decode_sum_seq_lens", "decode_sum_seq_lens"),
    ("cache_hit_rate", "cache_hit_rate"),
    ("spec_accept_length", "spec_accept_length"),
    ("spec_accept_rate", "spec_accept_rate"),
)
_CONSTANTS = {"max_total_num_tokens"}  # emitted by every rank with the same value
_BROKEN_DOWN = {"num_running_reqs", "num_queue_reqs"}  # per-priority breakdowns under priority scheduling


def _shares(value: float, priorities: tuple[str, ...]) -> list[tuple[str, float]]:
    """``value`` split over the priorities (uneven, whole numbers where it is one), summing to ``value``."""
    if not priorities:
        return [("", value)]
    weights = [index + 1 for index in range(len(priorities))]
    parts = [math.floor(value * w / sum(weights)) for w in weights[:-1]]
    return [*zip(priorities, parts, strict=False), (priorities[-1], value - sum(parts))]


class _SGLangCollector:
    def __init__(self, load: Load) -> None:
        self.load = load

    def collect(self) -> Iterator[Metric]:
        load = self.load
        prio = bool(load.priorities)
        sched_labels = [*SCHED_LABELS, "priority"] if prio else SCHED_LABELS
        tok_labels = [*TOKENIZER_LABELS, "priority"] if prio else TOKENIZER_LABELS
        rank = {r: ["unified", MODEL, "0", "0", r] + ([""] if prio else []) for r in ("0", "1")}
        for family, attr in _GAUGES:
            value = getattr(load, attr)
            if value is None:
                continue
            gauge = GaugeMetricFamily(f"sglang:{family}", family, labels=sched_labels)
            gauge.add_metric(rank["0"], value)
            gauge.add_metric(rank["1"], value if family in _CONSTANTS else 0.0)
            if prio and family in _BROKEN_DOWN:
                for priority, share in _shares(value, load.priorities):
                    gauge.add_metric([*rank["0"][:-1], priority], share)
            yield gauge
        if load.realtime_decode is not None:
            counter = CounterMetricFamily(
                "sglang:realtime_tokens", "realtime tokens", labels=[*sched_labels, "mode"]
            )
            for mode, value in (
                ("prefill_compute", 1431877.0),
                ("prefill_cache", 1036402.0),
                ("decode", load.realtime_decode),
            ):
                counter.add_metric([*rank["0"], mode], value)
                counter.add_metric([*rank["1"], mode], 0.0)
            yield counter
        for family, attr, split in (
            ("generation_tokens", "generation_tokens", True),
            ("prompt_tokens", "prompt_tokens", True),
            ("cached_tokens", "cached_tokens", False),
            ("spec_verify_calls", "verify_calls", False),
        ):
            value = getattr(load, attr)
            if value is None:
                continue
            labels = [*tok_labels, "is_streaming"] if split else tok_labels
            counter = CounterMetricFamily(f"sglang:{family}", family, labels=labels)
            for priority, share in _shares(value, load.priorities):
                base = ["unified", MODEL] + ([priority] if prio else [])
                if split:
                    streaming = math.floor(share * 0.8)
                    counter.add_metric([*base, "true"], streaming)
                    counter.add_metric([*base, "false"], share - streaming)
                else:
                    counter.add_metric(base, share)
            yield counter
        if load.retracted is not None:
            counter = CounterMetricFamily("sglang:num_retracted_requests", "retractions", labels=sched_labels)
            counter.add_metric(rank["0"], load.retracted)
            counter.add_metric(rank["1"], 0.0)
            yield counter
        for family, total, count, sched in (
            ("inter_token_latency_seconds", load.itl_sum, load.itl_count, False),
            ("time_to_first_token_seconds", load.ttft_sum, load.ttft_count, False),
            ("queue_time_seconds", load.queue_sum, load.queue_count, True),
        ):
            if total is None or count is None:
                continue
            histogram = HistogramMetricFamily(
                f"sglang:{family}", family, labels=sched_labels if sched else tok_labels
            )
            if sched:
                series = [(rank["0"], total, count), (rank["1"], 0.0, 0.0)]
            else:
                counts = dict(_shares(count, load.priorities))
                series = [
                    (
                        ["unified", MODEL] + ([p] if prio else []),
                        total * counts[p] / count if count else 0.0,
                        n,
                    )
                    for p, n in counts.items()
                ]
            for labels, sum_value, n in series:
                buckets = [("0.01", round(n / 2)), ("0.1", n), ("+Inf", n)]
                histogram.add_metric(labels, buckets, sum_value=sum_value)
            yield histogram


def render(load: Load, accept: str = TEXT_ACCEPT) -> tuple[bytes, str]:
    """The body and Content-Type a SGLang server with ``load`` answers to ``Accept: accept``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SGLangCollector(load))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


SERVER_INFO = {
    "model_path": "/models/kimi-k3",
    "served_model_name": MODEL,
    "version": "0.5.23",
    "tp_size": 8,
    "speculative_algorithm": "DSPARK",
    "speculative_dspark_block_size": 3,
    "speculative_num_draft_tokens": 4,
    "speculative_num_steps": 3,
    "mem_fraction_static": 0.93,
    "disable_radix_cache": True,
    "cuda_graph_max_bs_decode": 256,
    "max_running_requests": 48,
    "chunked_prefill_size": 16384,
    "mamba_ssm_dtype": "float32",
    "schedule_conservativeness": 1.0,
    "status": "ready",
    "internal_states": [{"last_gen_throughput": 3127.55, "avg_spec_accept_length": 2.55}],
}
