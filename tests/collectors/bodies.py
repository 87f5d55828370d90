"""SGLang-shaped /metrics bodies rendered by a real prometheus_client registry (text 0.0.4 or OpenMetrics).

The layout copies SGLang 0.5.23: scheduler families carry ``tp_rank`` (rank 1 reports zeros and constants),
tokenizer counters are split by ``is_streaming``, histograms have buckets, ``_sum`` and ``_count``.
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
    ("kv_used_tokens", "kv_used_tokens"),
    ("num_used_tokens", "num_used_tokens"),
    ("max_total_num_tokens", "max_total_num_tokens"),
    ("decode_sum_seq_lens", "decode_sum_seq_lens"),
    ("cache_hit_rate", "cache_hit_rate"),
    ("spec_accept_length", "spec_accept_length"),
    ("spec_accept_rate", "spec_accept_rate"),
)
_CONSTANTS = {"max_total_num_tokens"}  # emitted by every rank with the same value


class _SGLangCollector:
    def __init__(self, load: Load) -> None:
        self.load = load

    def collect(self) -> Iterator[Metric]:
        load = self.load
        rank = {r: ["unified", MODEL, "0", "0", r] for r in ("0", "1")}
        for family, attr in _GAUGES:
            value = getattr(load, attr)
            if value is None:
                continue
            gauge = GaugeMetricFamily(f"sglang:{family}", family, labels=SCHED_LABELS)
            gauge.add_metric(rank["0"], value)
            gauge.add_metric(rank["1"], value if family in _CONSTANTS else 0.0)
            yield gauge
        for family, attr, split in (
            ("generation_tokens", "generation_tokens", True),
            ("prompt_tokens", "prompt_tokens", True),
            ("cached_tokens", "cached_tokens", False),
            ("spec_verify_calls", "verify_calls", False),
        ):
            value = getattr(load, attr)
            if value is None:
                continue
            if split:
                counter = CounterMetricFamily(
                    f"sglang:{family}", family, labels=[*TOKENIZER_LABELS, "is_streaming"]
                )
                streaming = math.floor(value * 0.8)
                counter.add_metric(["unified", MODEL, "true"], streaming)
                counter.add_metric(["unified", MODEL, "false"], value - streaming)
            else:
                counter = CounterMetricFamily(f"sglang:{family}", family, labels=TOKENIZER_LABELS)
                counter.add_metric(["unified", MODEL], value)
            yield counter
        if load.retracted is not None:
            counter = CounterMetricFamily("sglang:num_retracted_requests", "retractions", labels=SCHED_LABELS)
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
                f"sglang:{family}", family, labels=SCHED_LABELS if sched else TOKENIZER_LABELS
            )
            ranks = ("0", "1") if sched else ("",)
            for r in ranks:
                labels = rank[r] if sched else ["unified", MODEL]
                scale = 1.0 if r in ("0", "") else 0.0
                buckets = [
                    ("0.01", round(count * scale / 2)),
                    ("0.1", count * scale),
                    ("+Inf", count * scale),
                ]
                histogram.add_metric(labels, buckets, sum_value=total * scale)
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
