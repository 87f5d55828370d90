"""SGLang 0.5.23's /metrics families: names, types, HELP texts, label names, buckets (data only).

Read from the golden body of a hybrid-SSM TP=2 server (``tests/sim`` compares the two); ``sim.families``
renders them.
Names carry no ``sglang:`` prefix, and counters no ``_total`` (prometheus_client adds it).
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["gauge", "counter", "histogram"]
Scope = Literal["S", "T", "N"]  # scheduler label set, tokenizer label set, no base labels
GAUGE: Kind = "gauge"
COUNTER: Kind = "counter"
HISTOGRAM: Kind = "histogram"
S: Scope = "S"
T: Scope = "T"
N: Scope = "N"

SCHEDULER_LABELS = ("engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank")
TOKENIZER_LABELS = ("engine_type", "model_name")

TTFT_BUCKETS_S = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS_S = (
    *(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1),
    *(0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8),
)
E2E_BUCKETS_S = (
    *(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
    *(600, 1200, 1800, 2400),
)
QUEUE_BUCKETS_S = (
    *(0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100),
    *(200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000),
)
SYNC_WAIT_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
IMBALANCE_BUCKETS = (1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60)
TOKEN_BUCKETS = (
    *(100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500, 15000),
    *(17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000, 300000, 400000),
    *(600000, 800000, 1e6, 1.1e6),
)

# name, kind, scope[, per-family labels[, buckets[, emitted by every TP rank]]] — in the golden body's order.
TABLE: tuple[tuple[object, ...], ...] = (
    ("num_running_reqs", GAUGE, S),
    ("num_queue_reqs", GAUGE, S),
    ("gen_throughput", GAUGE, S),
    ("token_usage", GAUGE, S),
    ("full_token_usage", GAUGE, S),
    ("mamba_usage", GAUGE, S),
    ("mamba_used_tokens", GAUGE, S),
    ("mamba_available_tokens", GAUGE, S),
    ("mamba_evictable_tokens", GAUGE, S),
    ("num_used_tokens", GAUGE, S),
    ("kv_used_tokens", GAUGE, S),
    ("kv_available_tokens", GAUGE, S),
    ("kv_evictable_tokens", GAUGE, S),
    ("max_total_num_tokens", GAUGE, S, (), (), True),
    ("decode_sum_seq_lens", GAUGE, S),
    ("cache_hit_rate", GAUGE, S),
    ("spec_accept_length", GAUGE, S),
    ("spec_accept_rate", GAUGE, S),
    ("spec_num_steps", GAUGE, S),
    ("spec_num_draft_tokens", GAUGE, S),
    ("spec_cap_length", GAUGE, S),
    ("spec_block_accept_length", GAUGE, S),
    ("spec_verify_calls", COUNTER, T),
    ("prompt_tokens", COUNTER, T, ("is_streaming",)),
    ("generation_tokens", COUNTER, T, ("is_streaming",)),
    ("cached_tokens", COUNTER, T, ("cache_source",)),
    ("num_requests", COUNTER, T, ("is_streaming",)),
    ("num_aborted_requests", COUNTER, T),
    ("time_to_first_token_seconds", HISTOGRAM, T, ("is_streaming",), TTFT_BUCKETS_S),
    ("inter_token_latency_seconds", HISTOGRAM, T, (), ITL_BUCKETS_S),
    ("request_time_per_output_token_seconds", HISTOGRAM, T, ("is_streaming",), ITL_BUCKETS_S),
    ("e2e_request_latency_seconds", HISTOGRAM, T, ("is_streaming",), E2E_BUCKETS_S),
    ("queue_time_seconds", HISTOGRAM, S, (), QUEUE_BUCKETS_S),
    ("num_retracted_reqs", GAUGE, S, ("pid",)),
    ("num_retracted_requests", COUNTER, S),
    ("num_retracted_input_tokens", COUNTER, S),
    ("num_retracted_output_tokens", COUNTER, S),
    ("realtime_tokens", COUNTER, S, ("mode",)),
    ("prefill_effective_tokens", COUNTER, S, ("mode",), (), True),
    ("context_len", GAUGE, S, (), (), True),
    ("cuda_graph_passes", COUNTER, S, ("mode",)),
    ("dp_attention_pairs", COUNTER, S, ("kind",), (), True),
    ("dp_attention_steps", COUNTER, S, ("rank_state",), (), True),
    ("dp_attention_sync_wait_seconds", HISTOGRAM, S, (), SYNC_WAIT_BUCKETS_S, True),
    ("dp_attention_token_imbalance_ratio", HISTOGRAM, S, (), IMBALANCE_BUCKETS, True),
    ("dp_attention_tokens", COUNTER, S, ("kind",), (), True),
    ("forward_execution_seconds", COUNTER, S, ("category",)),
    ("fwd_occupancy", GAUGE, S),
    ("generation_tokens_histogram", HISTOGRAM, T, (), TOKEN_BUCKETS),
    ("graph_memory_usage_gb", GAUGE, S, ("phase",), (), True),
    ("http_requests_active", GAUGE, N, ("endpoint", "method")),
    ("http_requests", COUNTER, N, ("endpoint", "method")),
    ("http_responses", COUNTER, N, ("endpoint", "method", "status_code")),
    ("is_cuda_graph", GAUGE, S),
    ("kv_cache_memory_usage_gb", GAUGE, S, (), (), True),
    ("new_token_ratio", GAUGE, S),
    ("num_decode_deferred_kv_release_reqs", GAUGE, S),
    ("num_decode_host_receive_queue_reqs", GAUGE, S),
    ("num_decode_prealloc_queue_reqs", GAUGE, S),
    ("num_decode_transfer_queue_reqs", GAUGE, S),
    ("num_grammar_queue_reqs", GAUGE, S),
    ("num_pages", GAUGE, S, (), (), True),
    ("num_paused_reqs", GAUGE, S, ("pid",)),
    ("num_prefill_bootstrap_queue_reqs", GAUGE, S),
    ("num_prefill_inflight_queue_reqs", GAUGE, S),
    ("num_so_requests", COUNTER, T),
    ("num_unique_running_routing_keys", GAUGE, S),
    ("page_size", GAUGE, S, (), (), True),
    ("pending_prealloc_token_usage", GAUGE, S),
    ("prealloc_full_token_usage", GAUGE, S),
    ("prealloc_swa_token_usage", GAUGE, S),
    ("process_cpu_seconds", COUNTER, N, ("component",)),
    ("prompt_tokens_histogram", HISTOGRAM, T, (), TOKEN_BUCKETS),
    ("routing_key_all_req_count", GAUGE, S, ("gt", "le")),
    ("routing_key_running_req_count", GAUGE, S, ("gt", "le")),
    ("routing_keys_active", GAUGE, N),
    ("scheduler_idle_seconds", COUNTER, S, (), (), True),
    ("scheduler_process_cpu_seconds", COUNTER, S, (), (), True),
    ("scheduler_stage_seconds", COUNTER, S, ("category", "forward_overlap"), (), True),
    ("startup_available_gpu_memory_gb", GAUGE, S, (), (), True),
    ("startup_cuda_graph_time_seconds", GAUGE, T, ("phase",)),
    ("startup_time_seconds", GAUGE, T, ("phase",)),
    ("swa_available_tokens", GAUGE, S),
    ("swa_evictable_tokens", GAUGE, S),
    ("swa_token_usage", GAUGE, S),
    ("swa_used_tokens", GAUGE, S),
    ("uncached_prompt_tokens_histogram", HISTOGRAM, T, (), TOKEN_BUCKETS),
    ("utilization", GAUGE, S),
    ("weight_memory_usage_gb", GAUGE, S, (), (), True),
)

HELP: dict[str, str] = {
    "num_running_reqs": "The number of running requests.",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "gen_throughput": "The generation throughput (token/s).",
    "token_usage": "The token usage.",
    "full_token_usage": "The token usage for full attention layers.",
    "mamba_usage": "The token usage for Mamba layers.",
    "mamba_used_tokens": "Number of actively used state slots in the mamba SSM pool.",
    "mamba_available_tokens": "Number of free state slots in the mamba SSM pool (hybrid-SSM only).",
    "mamba_evictable_tokens": "Number of evictable (radix-cached) state slots in the mamba SSM pool.",
    "num_used_tokens": "The number of used tokens.",
    "kv_used_tokens": "Number of actively used token slots in the KV cache pool.",
    "kv_available_tokens": "Number of free token slots in the KV cache pool.",
    "kv_evictable_tokens": "Number of evictable (radix-cached) token slots in the KV cache pool.",
    "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
    "decode_sum_seq_lens": "The sum of all sequence lengths in decode.",
    "cache_hit_rate": "The prefix cache hit rate.",
    "spec_accept_length": (
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."
    ),
    "spec_accept_rate": "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
    "spec_num_steps": "Currently active speculative_num_steps.",
    "spec_num_draft_tokens": (
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1)."
    ),
    "spec_cap_length": (
        "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no "
        "cap is scheduled)."
    ),
    "spec_block_accept_length": (
        "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only "
        "in DSpark cap-accept mode)."
    ),
    "spec_verify_calls": "Number of speculative decoding verification calls.",
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "cached_tokens": "Number of cached prompt tokens by source (device/host/storage).",
    "num_requests": "Number of requests processed.",
    "num_aborted_requests": "Number of requests aborted.",
    "time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "request_time_per_output_token_seconds": (
        "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1)."
    ),
    "e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
    "queue_time_seconds": "Histogram of queueing time in seconds.",
    "num_retracted_reqs": "The number of retracted requests.",
    "num_retracted_requests": "Total number of retracted requests.",
    "num_retracted_input_tokens": "Total number of retracted input tokens.",
    "num_retracted_output_tokens": "Total number of retracted output tokens.",
    "realtime_tokens": (
        "Total number of tokens processed (updated on each log interval). mode: prefill_compute, "
        "prefill_cache, decode."
    ),
    "prefill_effective_tokens": (
        "Effective prefill tokens with retracted-request re-counts excluded, updated on each log "
        "interval. mode: device_hit, host_hit, storage_hit, input. Windowed prefix cache hit rate = "
        "rate(sum of *_hit) / rate(sum of all modes); per-tier rate uses a single *_hit mode in the "
        "numerator."
    ),
    "context_len": "Maximum context length.",
    "cuda_graph_passes": "Total number of forward passes categorized by CUDA graph.",
    "dp_attention_pairs": (
        "Causal (query, key) pairs attended by MLP-sync steps on this DP rank, pricing every layer as "
        "full attention: a decode row reads its sequence, a prefill chunk its prefix plus the pairs "
        "within the chunk. kind=scheduled: this rank; kind=imbalance: the busiest rank's excess over this"
        " rank. The context-length counterpart of sglang:dp_attention_tokens_total; like it, "
        "speculative-decode steps count one query per row. Sliding-window layers execute fewer pairs than"
        " counted, so on hybrid-SWA models long rows are overstated."
    ),
    "dp_attention_steps": (
        "MLP-sync steps on this DP rank. rank_state=idle: this rank had no tokens and only ran to keep "
        "the DP collectives in lockstep."
    ),
    "dp_attention_sync_wait_seconds": (
        "Wall time of this DP rank's scheduler MLP-sync all-gather per step. On the gloo path (the "
        "default with overlap scheduling) this is waiting for the slowest rank; on the device-group paths"
        " it also includes the gather's stream sync."
    ),
    "dp_attention_token_imbalance_ratio": (
        "Per MLP-sync step, max tokens over mean tokens across the DP ranks (1.0 = balanced, num_dp_ranks"
        " = one busy rank). Reported once per engine, by the scheduler of DP rank 0."
    ),
    "dp_attention_tokens": (
        "Tokens of MLP-sync steps on this DP rank. kind=scheduled: tokens this rank ran; kind=imbalance: "
        "tokens the busiest rank ran beyond this rank, i.e. capacity lost to DP imbalance on this rank. "
        "On speculative-decode steps the unit is batch rows (requests)."
    ),
    "forward_execution_seconds": (
        "Total time that GPU is busy executing model forward passes. Refer to ForwardMode for category "
        "labels."
    ),
    "fwd_occupancy": "Forward pass GPU occupancy percentage.",
    "generation_tokens_histogram": "Histogram of generation token length.",
    "graph_memory_usage_gb": "Memory used by captured device graphs in GB.",
    "http_requests_active": "Number of currently active HTTP requests",
    "http_requests": "Total number of HTTP requests by endpoint and method",
    "http_responses": "Total number of HTTP responses by endpoint and status code",
    "is_cuda_graph": "Whether the batch is using CUDA graph.",
    "kv_cache_memory_usage_gb": "Memory used by the KV cache pools in GB.",
    "new_token_ratio": "The new token ratio.",
    "num_decode_deferred_kv_release_reqs": (
        "The number of failed decode requests whose KV allocations are held pending transfer drain "
        "acknowledgement or timeout."
    ),
    "num_decode_host_receive_queue_reqs": (
        "Requests in the decode transfer queue receiving into host memory or waiting for device admission."
    ),
    "num_decode_prealloc_queue_reqs": "The number of requests in the decode prealloc queue.",
    "num_decode_transfer_queue_reqs": "The number of requests in the decode transfer queue.",
    "num_grammar_queue_reqs": "The number of requests in the grammar waiting queue.",
    "num_pages": "Number of KV cache pages.",
    "num_paused_reqs": "The number of paused requests by async weight sync.",
    "num_prefill_bootstrap_queue_reqs": "The number of requests in the prefill bootstrap queue.",
    "num_prefill_inflight_queue_reqs": "The number of requests in the prefill inflight queue.",
    "num_so_requests": "Number of structured output requests processed.",
    "num_unique_running_routing_keys": "Number of unique routing keys in running batch.",
    "page_size": "KV cache page size in tokens.",
    "pending_prealloc_token_usage": "The token usage for pending preallocated tokens (not preallocated yet).",
    "prealloc_full_token_usage": (
        "Share of the full-attention KV pool held by decode requests whose KV transfer is pending "
        "(preallocated, not yet running); same capacity basis as sglang:full_token_usage."
    ),
    "prealloc_swa_token_usage": (
        "Share of the SWA KV pool held by decode requests whose KV transfer is pending; same capacity "
        "basis as sglang:swa_token_usage."
    ),
    "process_cpu_seconds": "Total CPU time consumed by this process (user + system)",
    "prompt_tokens_histogram": "Histogram of prompt token length.",
    "routing_key_all_req_count": (
        "Distribution of routing keys by running+waiting request count (gt < count <= le)."
    ),
    "routing_key_running_req_count": (
        "Distribution of routing keys by running request count (gt < count <= le)."
    ),
    "routing_keys_active": "Number of unique routing keys with active requests",
    "scheduler_idle_seconds": "Total wall time while the scheduler has no runnable or queued work.",
    "scheduler_process_cpu_seconds": "Total CPU time consumed by the scheduler process across all threads.",
    "scheduler_stage_seconds": (
        "Total scheduler-loop wall time exclusively attributed to each stage. forward_overlap (full, "
        "partial, none): full=both endpoints active, partial=one, none=no observed overlap (including "
        "unavailable timing). Not exact overlapped/exposed seconds."
    ),
    "startup_available_gpu_memory_gb": "Available GPU memory in GB at startup.",
    "startup_cuda_graph_time_seconds": "CUDA graph capture duration by phase in seconds.",
    "startup_time_seconds": "Engine startup duration by phase in seconds.",
    "swa_available_tokens": "Number of free token slots in the SWA pool (hybrid-SWA only).",
    "swa_evictable_tokens": "Number of evictable (radix-cached) token slots in the SWA pool.",
    "swa_token_usage": "The token usage for SWA layers.",
    "swa_used_tokens": "Number of actively used token slots in the SWA pool.",
    "uncached_prompt_tokens_histogram": "Histogram of uncached (compute) prompt token length.",
    "utilization": "The utilization.",
    "weight_memory_usage_gb": "Memory used by model weights in GB.",
}
