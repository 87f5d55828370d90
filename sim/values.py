"""Map a simulated server's published state onto SGLang 0.5.23's families (what ``sim.families`` renders).

Live series come from the engine; constants (memory, startup times, context length) from the server args; HTTP
series from the requests the simulated server actually answered.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from sim import mechanism as mech
from sim.families import FamilyValues, HistogramValue, MetricValues, Value
from sim.ledger import Histogram
from sim.server_engine import NEW_TOKEN_RATIO, ServerEngine

STREAMS = ("true", "false")
ROUTING_BOUNDS = ("0", "1", "2", "3", "5", "7", "10", "20", "50", "100", "200", "+Inf")
SCHEDULER_STAGES = (
    "other",
    "recv_requests",
    "process_input_requests",
    "get_next_batch_to_run",
    "process_queue",
    "run_batch",
    "process_batch_result",
    "sanity_check_cache",
    "idle",
)
GRAPH_MEMORY_GB = {"decode": 2.114, "target_verify": 0.913, "draft_decode": 0.402, "draft_extend": 0.317}
CUDA_GRAPH_CAPTURE_S = {"decode": 38.4, "target_verify": 11.2, "draft_decode": 6.1}
STARTUP_S = {"load_weight": 141.2, "kv_cache_allocation": 3.9, "scheduler_e2e": 186.6, "tokenizer_e2e": 194.0}
HttpCounts = Mapping[tuple[str, ...], float]
STRUCTURED_OUTPUT_SHARE = 0.02  # of finished requests: structured outputs (JSON schema)
ABORTED_SHARE = 0.003  # clients that hung up early


def _streamed_histogram(engine: ServerEngine, key: str, share: float) -> HistogramValue:
    """The lifetime histogram plus the chunks of the pending window already streamed (per chunk in SGLang)."""
    published = engine.published.histograms[key]
    extra = engine.streaming_observations(share, key)
    if not extra:
        return _histogram(published)
    copy = Histogram(published.bounds, list(published.counts), published.sum, published.count)
    for value, weight, total in extra:
        copy.observe(value, weight, total)
    return _histogram(copy)


def _histogram(histogram: Histogram) -> HistogramValue:
    # Bucket counts are whole observations (OpenMetrics requires integers); tokens arrive fractionally per
    # window.
    return HistogramValue(list(map(math.floor, itertools.accumulate(histogram.counts))), histogram.sum)


def _by_stream(engine: ServerEngine, key: str) -> dict[tuple[str, ...], Value]:
    return {(s,): float(math.floor(engine.published.count(f"{key}:{s}"))) for s in STREAMS}


def _histograms_by_stream(engine: ServerEngine, key: str) -> dict[tuple[str, ...], HistogramValue]:
    return {(s,): _histogram(engine.published.histograms[f"{key}:{s}"]) for s in STREAMS}


def signal_families(engine: ServerEngine, streamed_share: float = 0.0) -> dict[str, FamilyValues]:
    """The families the collector's signals read (``collectors.signals``), as /metrics renders them: part of
    every body (``metric_values``), and all history sampling needs to derive signals without one."""
    p, g, layout = engine.published, engine.published.gauges, engine.layout

    def count(key: str) -> float:
        return float(math.floor(p.count(key)))  # token and request counters are whole numbers

    return {
        "num_running_reqs": g.running,
        "num_queue_reqs": g.queued,
        "gen_throughput": g.gen_throughput,
        "token_usage": g.token_usage,
        "full_token_usage": g.full_token_usage,
        "mamba_usage": g.mamba_usage,
        "mamba_used_tokens": g.mamba_used,
        "mamba_available_tokens": g.mamba_available,
        "mamba_evictable_tokens": g.mamba_evictable,
        "num_used_tokens": g.kv_used,
        "kv_used_tokens": g.kv_used,
        "max_total_num_tokens": layout.kv_tokens,
        "decode_sum_seq_lens": g.decode_sum_seq_lens,
        "spec_accept_length": g.spec_accept_length,
        "spec_accept_rate": g.spec_accept_rate,
        "spec_verify_calls": count("spec_verify_calls"),
        "prompt_tokens": _by_stream(engine, "prompt_tokens"),
        "generation_tokens": _by_stream(engine, "generation_tokens"),
        "cached_tokens": {("device",): count("cached_tokens")},
        "time_to_first_token_seconds": _histograms_by_stream(engine, "ttft"),
        "inter_token_latency_seconds": _streamed_histogram(engine, "itl", streamed_share),
        "queue_time_seconds": _histogram(p.histograms["queue"]),
        "num_retracted_requests": count("retracted_requests"),
        "realtime_tokens": {
            ("prefill_compute",): count("prefill_compute_tokens"),
            ("prefill_cache",): count("prefill_cache_tokens"),
            ("decode",): float(
                math.floor(p.count("decode_tokens") + engine.streaming(streamed_share, "decode_tokens"))
            ),
        },
    }


def metric_values(
    engine: ServerEngine,
    args: Mapping[str, Any],
    *,
    http_requests: HttpCounts,
    http_responses: HttpCounts,
    in_flight_http: HttpCounts,
    streamed_share: float = 0.0,
) -> MetricValues:
    """Every family's value for one render of /metrics; ``streamed_share`` is how much of the window being
    decoded has streamed out (``ServerEngine.streamed_share``), for the per-batch and per-chunk families."""
    p, g, layout = engine.published, engine.published.gauges, engine.layout

    def count(key: str) -> float:
        return float(math.floor(p.count(key)))  # token and request counters are whole numbers

    spec = engine.window > 1
    completed = sum(p.count(f"num_requests:{s}") for s in STREAMS)
    phases = GRAPH_MEMORY_GB if spec else {"decode": GRAPH_MEMORY_GB["decode"]}
    values: dict[str, Any] = {
        **signal_families(engine, streamed_share),
        "kv_available_tokens": g.kv_available,
        "kv_evictable_tokens": g.kv_evictable,
        "cache_hit_rate": g.cache_hit_rate,
        "spec_num_steps": float(args.get("speculative_num_steps") or 0),
        "spec_num_draft_tokens": float(args.get("speculative_num_draft_tokens") or 0),
        "spec_cap_length": g.spec_cap_length,
        "spec_block_accept_length": g.spec_block_accept_length,
        "num_requests": _by_stream(engine, "num_requests"),
        "num_aborted_requests": float(math.floor(completed * ABORTED_SHARE)),
        "request_time_per_output_token_seconds": _histograms_by_stream(engine, "tpot"),
        "e2e_request_latency_seconds": _histograms_by_stream(engine, "e2e"),
        "num_retracted_reqs": float(g.retracted),
        "num_retracted_input_tokens": count("retracted_input_tokens"),
        "num_retracted_output_tokens": count("retracted_output_tokens"),
        "prefill_effective_tokens": {
            ("input",): count("prefill_compute_tokens"),
            ("device_hit",): count("prefill_cache_tokens"),
            ("host_hit",): 0.0,
            ("storage_hit",): 0.0,
        },
        "context_len": float(args.get("context_length") or 0),
        "cuda_graph_passes": {
            ("decode_cuda_graph",): count("graph_decode_passes"),
            ("decode_none",): count("eager_decode_passes"),
            ("prefill_none",): count("prefill_passes"),
        },
        "dp_attention_pairs": {("scheduled",): 0.0, ("imbalance",): 0.0},
        "dp_attention_steps": {("active",): 0.0, ("idle",): 0.0},
        "dp_attention_tokens": {("scheduled",): 0.0, ("imbalance",): 0.0},
        "forward_execution_seconds": {
            ("decode",): count("decode_seconds"),
            ("extend",): count("prefill_seconds"),
            ("mixed",): 0.0,
        },
        "fwd_occupancy": math.nan,  # not computed without --enable-mfu-metrics (NaN, as in the golden body)
        "generation_tokens_histogram": _histogram(p.histograms["gen_len"]),
        "graph_memory_usage_gb": {(phase,): gb for phase, gb in phases.items()},
        "http_requests_active": dict(in_flight_http),
        "http_requests": dict(http_requests),
        "http_responses": dict(http_responses),
        "is_cuda_graph": g.is_cuda_graph,
        "kv_cache_memory_usage_gb": round(layout.kv_gb + layout.state_gb, 3),
        "new_token_ratio": NEW_TOKEN_RATIO * float(args.get("schedule_conservativeness") or 1.0),
        "num_pages": float(layout.kv_tokens // int(args.get("page_size") or 1)),
        "num_so_requests": float(math.floor(completed * STRUCTURED_OUTPUT_SHARE)),
        "page_size": float(args.get("page_size") or 1),
        "process_cpu_seconds": {("tokenizer",): count("tokenizer_cpu_seconds")},
        "prompt_tokens_histogram": _histogram(p.histograms["prompt_len"]),
        "routing_key_all_req_count": {pair: 0.0 for pair in itertools.pairwise(ROUTING_BOUNDS)},
        "routing_key_running_req_count": {pair: 0.0 for pair in itertools.pairwise(ROUTING_BOUNDS)},
        "scheduler_idle_seconds": count("scheduler_idle_seconds"),
        "scheduler_process_cpu_seconds": count("scheduler_cpu_seconds"),
        "scheduler_stage_seconds": {
            (stage, "none"): count("decode_seconds") + count("prefill_seconds")
            if stage == "run_batch"
            else count("scheduler_idle_seconds")
            if stage == "idle"
            else 0.0
            for stage in SCHEDULER_STAGES
        },
        "startup_available_gpu_memory_gb": round(mech.GPU_MEMORY_GB * 0.977, 2),
        "startup_cuda_graph_time_seconds": {
            (k,): v for k, v in CUDA_GRAPH_CAPTURE_S.items() if spec or k == "decode"
        },
        "startup_time_seconds": {(k,): v for k, v in STARTUP_S.items()},
        "uncached_prompt_tokens_histogram": _histogram(p.histograms["uncached_len"]),
        "utilization": g.utilization,
        "weight_memory_usage_gb": mech.WEIGHT_MEMORY_GB,
    }
    return values
