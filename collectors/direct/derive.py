"""Pure derivation: previous counter state + this scrape's samples + elapsed time → ``Signals``.

No I/O and no clock: the caller passes timestamps. Safe across counter resets: if any counter went down the
server restarted, and every rate of that cycle is None (unknown) rather than negative or a spike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from collectors.direct.exposition import SIGNAL_SAMPLES
from collectors.model import Recipe, Signals

CUMULATIVE_SAMPLES: tuple[str, ...] = tuple(
    name for name, kind in SIGNAL_SAMPLES.items() if kind == "cumulative"
)

GEN_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"


@dataclass(frozen=True, slots=True)
class CounterState:
    """What the next derivation needs from this one: the cumulative samples and when they were read."""

    ts: float
    values: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Derivation:
    signals: Signals
    state: CounterState
    reset: tuple[str, ...] = ()  # cumulative samples that went down since the previous scrape: a restart


def detect_reset(values: Mapping[str, float], previous: CounterState | None) -> tuple[str, ...]:
    """Cumulative samples lower now than at the previous scrape (any one means the server restarted)."""
    if previous is None:
        return ()
    return tuple(
        name
        for name in CUMULATIVE_SAMPLES
        if name in values and name in previous.values and values[name] < previous.values[name]
    )


def is_restart(values: Mapping[str, float], previous: CounterState, fell: Sequence[str]) -> bool:
    """A restart starts every counter again: none keeps counting. Some falling while another still rises
    is a counter reset (a proxy alternating replicas, a worker's counter): no restart, and no reason to
    read /server_info again."""
    rose = any(
        values[n] > previous.values[n] for n in CUMULATIVE_SAMPLES if n in values and n in previous.values
    )
    return bool(fell) and not rose


def spec_enabled(recipe: Recipe | None) -> bool | None:
    """True/False when the recipe says whether speculative decoding is on; None when there is no recipe."""
    if recipe is None:
        return None
    algorithm = recipe.get("speculative_algorithm")
    return algorithm not in (None, "", "NONE", "none", False)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return _finite(numerator / denominator)


def derive_signals(
    values: Mapping[str, float],
    ts: float,
    previous: CounterState | None,
    recipe: Recipe | None = None,
) -> Derivation:
    """Derive one cycle's signals for one target.

    ``values`` are the kept samples (``Exposition.values``), ``ts`` when they were read (unix s), ``previous``
    the state returned by the last derivation for this target (None on the first scrape or after a target
    change).
    """
    reset = detect_reset(values, previous)
    state = CounterState(ts=ts, values={name: values[name] for name in CUMULATIVE_SAMPLES if name in values})
    elapsed_s = ts - previous.ts if previous is not None else 0.0
    windowed = previous is not None and not reset and elapsed_s > 0

    def delta(name: str) -> float | None:
        if not windowed or previous is None or name not in values or name not in previous.values:
            return None
        return values[name] - previous.values[name]

    def window_mean(family: str) -> float | None:
        return _ratio(delta(f"{family}_sum"), delta(f"{family}_count"))

    def rate(name: str) -> float | None:
        change = delta(name)
        return _finite(change / elapsed_s) if change is not None else None

    gauge = values.get
    running = gauge("sglang:num_running_reqs")
    spec_on = spec_enabled(recipe)

    tokens_per_verify = _ratio(delta(GEN_TOKENS), delta(VERIFY_CALLS))
    accept_gauge = gauge("sglang:spec_accept_length")
    # The gauge is the decode-log window's mean; it keeps its last value while the server idles, so with
    # nothing running it describes the past, not now.
    accept_rate: float | None = None
    if spec_on is False:
        accept_length: float | None = 1.0  # plain decoding emits exactly one token per request per step
    elif accept_gauge is not None and accept_gauge > 0 and running != 0:
        accept_length = accept_gauge
        accept_rate = gauge("sglang:spec_accept_rate")
    else:
        accept_length = tokens_per_verify  # gauge absent (older SGLang), 0, or stale while idle

    tpot_s = window_mean("sglang:inter_token_latency_seconds")
    step_latency_s = accept_length * tpot_s if accept_length is not None and tpot_s is not None else None
    per_request_tok_s = 1.0 / tpot_s if tpot_s is not None and tpot_s > 0 else None

    output_tok_s = rate(GEN_TOKENS)
    if output_tok_s is None:
        # First scrape, restart or a version without the counter: the server's own decode-window throughput,
        # which cannot spike across a restart.
        output_tok_s = gauge("sglang:gen_throughput")

    # KV usage: never token_usage, which on hybrid models (SGLang ≥ 0.5.10) is the max over pools, usually
    # Mamba.
    kv_usage = gauge("sglang:full_token_usage")
    if kv_usage is None:
        capacity = gauge("sglang:max_total_num_tokens")
        kv_usage = _ratio(gauge("sglang:kv_used_tokens"), capacity)
        if kv_usage is None:
            kv_usage = _ratio(gauge("sglang:num_used_tokens"), capacity)  # never includes the Mamba pool

    # Prompt-token hit rate over the window (both counters move at request completion); the gauge is the hit
    # rate of the last logged prefill batch only, so it is the fallback when the window saw no finished
    # prompts.
    cache_hit_rate = _ratio(delta("sglang:cached_tokens_total"), delta("sglang:prompt_tokens_total"))
    if cache_hit_rate is None:
        cache_hit_rate = gauge("sglang:cache_hit_rate")

    avg_context_tokens = _ratio(gauge("sglang:decode_sum_seq_lens"), running)
    max_running = recipe.max_running if recipe is not None else None

    signals = Signals(
        accept_length=_finite(accept_length),
        tokens_per_verify=tokens_per_verify,
        spec_accept_rate=accept_rate,
        tpot_s=tpot_s,
        step_latency_s=_finite(step_latency_s),
        output_tok_s=output_tok_s,
        per_request_tok_s=_finite(per_request_tok_s),
        running=running,
        queued=gauge("sglang:num_queue_reqs"),
        max_running=float(max_running) if max_running is not None else None,
        state_pool_usage=gauge("sglang:mamba_usage"),
        kv_usage=kv_usage,
        token_usage=gauge("sglang:token_usage"),
        avg_context_tokens=avg_context_tokens,
        cache_hit_rate=cache_hit_rate,
        retractions_per_s=rate("sglang:num_retracted_requests_total"),
        ttft_s=window_mean("sglang:time_to_first_token_seconds"),
        queue_time_s=window_mean("sglang:queue_time_seconds"),
    )
    return Derivation(signals=signals, state=state, reset=reset)
