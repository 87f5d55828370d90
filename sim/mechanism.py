"""The mechanism: pure functions from recipe, workload and load to what a K3 + DSpark server does.

throughput = accepted tokens per step / step latency. Accept length falls with context and rises
(sub-linearly) with the verify window; step latency grows with context, batch and window; the recurrent-state
pool caps the batch. Every constant below is derived from ``sim.calibration`` (the seed's numbers); tests
check the seed's numbers.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from sim import calibration as cal

Content = Literal["random", "text"]
ServerArgs = Mapping[str, object]

# -- accept length -------------------------------------------------------------------------------------------
# Per-position acceptance decays along the block: the Markov head conditions position i on a token that was
# itself drafted, so an early error poisons every later position. α_i = α₀ · d^(i−1). d is the least-squares
# fit of the three window-search points (γ = 3, 5, 7 at ISL 8192); tests check all three within 1%.
POSITION_DECAY = 0.9569
MAX_FIRST_ACCEPTANCE = 0.97


def _chain_accept_length(first_acceptance: float, window: int) -> float:
    """Expected tokens per verify step: accepted drafts + 1 bonus, for a block of ``window - 1`` drafts."""
    total, survive = 1.0, 1.0
    for position in range(1, window):
        survive *= first_acceptance * POSITION_DECAY ** (position - 1)
        total += survive
    return total


def _invert_accept_length(target: float, window: int) -> float:
    low, high = 0.0, MAX_FIRST_ACCEPTANCE
    for _ in range(60):
        middle = (low + high) / 2
        if _chain_accept_length(middle, window) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def sweep_context_tokens(isl: float, osl: float = cal.SWEEP_OSL_TOKENS) -> float:
    """Mean decode context of a request: its prompt plus half its output."""
    return isl + osl / 2


def _interpolate(anchors: tuple[tuple[float, float], ...], context_tokens: float) -> float:
    x = math.log2(max(context_tokens, 1.0))
    if x <= anchors[0][0]:
        return anchors[0][1]  # flat below the first anchor: the 128 → 1K end of the sweep does not rise
    for (x0, y0), (x1, y1) in itertools.pairwise(anchors):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = anchors[-2], anchors[-1]
    return max(0.02, y1 + (y1 - y0) * (x - x1) / (x1 - x0))  # keep decaying past 64K


def _measured(first_acceptance: Callable[[float], float], isl: float, osl: float, window: int) -> float:
    """What a benchmark reports: output tokens / verify steps as context grows isl → isl + osl."""
    points = 32
    steps = sum(
        1 / _chain_accept_length(first_acceptance(isl + (i + 0.5) * osl / points), window)
        for i in range(points)
    )
    return points / steps


def _calibrate_alpha_anchors() -> tuple[tuple[float, float], ...]:
    """First-draft acceptance α₀ at the sweep's contexts, solved so the *measured* sweep is the seed's."""
    xs = [math.log2(sweep_context_tokens(isl)) for isl, _ in cal.ACCEPT_LENGTH_BY_ISL]
    alphas = [_invert_accept_length(length, 4) for _, length in cal.ACCEPT_LENGTH_BY_ISL]
    for _ in range(12):
        anchors = tuple(zip(xs, alphas, strict=True))
        for k, (isl, target) in enumerate(cal.ACCEPT_LENGTH_BY_ISL):
            got = _measured(functools.partial(_interpolate, anchors), isl, cal.SWEEP_OSL_TOKENS, 4)
            alphas[k] += _invert_accept_length(target, 4) - _invert_accept_length(got, 4)
    return tuple(zip(xs, alphas, strict=True))


_ALPHA_ANCHORS = _calibrate_alpha_anchors()


def _random_first_acceptance(context_tokens: float) -> float:
    return _interpolate(_ALPHA_ANCHORS, context_tokens)


# Real text is easier to draft than random token IDs (the seed calls its bsz=1 numbers "a conservative lower
# bound relative to real text"); the window search, run on text at ISL 8192, sets the factor.
def _text_factor() -> float:
    def text_acceptance(factor: float, context_tokens: float) -> float:
        return min(MAX_FIRST_ACCEPTANCE, _random_first_acceptance(context_tokens) * factor)

    factor = 1.0
    for _ in range(12):
        acceptance = functools.partial(text_acceptance, factor)
        got = _measured(acceptance, cal.WINDOW_SEARCH_ISL, cal.SWEEP_OSL_TOKENS, 4)
        factor *= _invert_accept_length(cal.WINDOW_SEARCH[3][0], 4) / _invert_accept_length(got, 4)
    return factor


_SEARCH_CONTEXT = sweep_context_tokens(cal.WINDOW_SEARCH_ISL)
CONTENT_FACTOR: dict[str, float] = {"random": 1.0, "text": _text_factor()}


def first_draft_acceptance(context_tokens: float, content: Content = "random") -> float:
    """Probability the first draft token is accepted, at this decode context."""
    return min(MAX_FIRST_ACCEPTANCE, _random_first_acceptance(context_tokens) * CONTENT_FACTOR[content])


def accept_length(context_tokens: float, window: int, content: Content = "random") -> float:
    """Noise-free tokens per verify step (accepted drafts + bonus): context and window, never batch."""
    if window <= 1:
        return 1.0
    return _chain_accept_length(first_draft_acceptance(context_tokens, content), window)


def accept_rate(length: float, window: int) -> float:
    """SGLang ≥ 0.5.12 spec_accept_rate: accepted drafts / proposed drafts (bonus excluded)."""
    return 0.0 if window <= 1 else max(0.0, min(1.0, (length - 1.0) / (window - 1)))


# -- prefill -------------------------------------------------------------------------------------------------
# t = overhead per chunk + linear + quadratic attention term; fitted to TTFT 178 ms at 1K, a 12,874 tok/s peak
# near 11K and 7,953 tok/s at 64K (concurrency 1, four 16K chunks). Chunks above 16K buy nothing (prefill is
# compute-saturated there); smaller chunks pay the overhead more often (the seed's 8192 chunk lost 6.8%).
PREFILL_CHUNK_OVERHEAD_S = 0.11923
PREFILL_S_PER_TOKEN = 5.6424e-5
PREFILL_S_PER_TOKEN_PAIR = 9.4700e-10
SATURATING_CHUNK_TOKENS = 16384


def prefill_s(uncached_tokens: float, cached_tokens: float = 0.0) -> float:
    """Compute time of one request's prefill, without the per-chunk overhead."""
    if uncached_tokens <= 0:
        return 0.0
    pairs = uncached_tokens * (uncached_tokens + 2 * cached_tokens)
    return PREFILL_S_PER_TOKEN * uncached_tokens + PREFILL_S_PER_TOKEN_PAIR * pairs


def prefill_chunks(total_uncached_tokens: float, chunked_prefill_size: object) -> int:
    size = (
        chunked_prefill_size if isinstance(chunked_prefill_size, int) and chunked_prefill_size > 0 else 16384
    )
    return max(1, math.ceil(total_uncached_tokens / min(size, SATURATING_CHUNK_TOKENS)))


DECODE_LOG_INTERVAL = 40  # verify steps per decode-log window (--decode-log-interval): gauges refresh then


def prefill_stall_s_per_step(
    running: float, isl: float, osl: float, accept_length: float, chunked_prefill_size: object = 16384
) -> float:
    """Steady state: time per verify step a decoding request waits while the others' replacements prefill.

    A prefill batch stalls the decode batch, and bench_serving's TPOT (hence the seed's "step latency = accept
    length × TPOT") includes those stalls; alone on the server (batch 1) there are none.
    """
    finishing = running * DECODE_LOG_INTERVAL * accept_length / osl  # per window, each replaced at once
    if running - max(finishing, 1.0) <= 0:
        return 0.0  # nobody left decoding while the replacements prefill
    chunks = prefill_chunks(finishing * isl, chunked_prefill_size)
    per_window = chunks * PREFILL_CHUNK_OVERHEAD_S + finishing * prefill_s(isl)
    return (running - max(finishing, 1.0)) / running * per_window / DECODE_LOG_INTERVAL


# -- step latency --------------------------------------------------------------------------------------------
# step = weights + per-sequence attention latency + batch × (per-request verify work + batched attention), the
# per-request part scaled by the verify window. The seed's step latencies are accept length × TPOT, i.e. they
# include prefill stalls; subtracting those, four block-size-3 measurements fix the four coefficients exactly.
def _pure_step(step_s: float, running: int, isl: float, accept_length: float) -> float:
    return step_s - prefill_stall_s_per_step(running, isl, cal.SWEEP_OSL_TOKENS, accept_length)


def _fit_step_model() -> tuple[float, float, float, float]:
    (isl_lo, step_lo), (isl_hi, step_hi) = cal.STEP_LATENCY_S_BY_ISL
    c_lo, c_hi = sweep_context_tokens(isl_lo), sweep_context_tokens(isl_hi)
    b = cal.WINDOW_SEARCH_CONCURRENCY
    at_48 = _pure_step(cal.STEP_LATENCY_S_AT_48, b, isl_lo, cal.ACCEPT_LENGTH_BY_ISL[0][1])
    search = _pure_step(cal.WINDOW_SEARCH[3][1], b, cal.WINDOW_SEARCH_ISL, cal.WINDOW_SEARCH[3][0])
    attn_sum = (step_hi - step_lo) / (c_hi - c_lo)  # a_seq + a_batch, from batch 1
    attn_b = (search - at_48) / (_SEARCH_CONTEXT - c_lo)  # a_seq + 48 a_batch
    a_batch = (attn_b - attn_sum) / (b - 1)
    a_seq = attn_sum - a_batch
    w_plus_x = step_lo - c_lo * attn_sum
    w_plus_bx = at_48 - c_lo * (a_seq + b * a_batch)
    per_request = (w_plus_bx - w_plus_x) / (b - 1)
    return w_plus_x - per_request, per_request, a_seq, a_batch


WEIGHT_STREAM_S, REQUEST_S, SEQ_ATTN_S_PER_TOKEN, BATCH_ATTN_S_PER_TOKEN = _fit_step_model()
_CALIBRATION_WINDOW = 4  # the block size 3 the sweeps ran at


def _per_request_part(gamma: int) -> float:
    length, step_s = cal.WINDOW_SEARCH[gamma]
    pure = _pure_step(step_s, cal.WINDOW_SEARCH_CONCURRENCY, cal.WINDOW_SEARCH_ISL, length)
    return pure - WEIGHT_STREAM_S - SEQ_ATTN_S_PER_TOKEN * _SEARCH_CONTEXT


# Verify cost per request by scheduled window, anchored at plain decoding (the non-speculative lane: 875.08
# out tok/s with 570 running), block size 3 (= 1) and 5; log-log interpolation between them. It grows faster
# than the window: rejected positions still advanced the recurrent state, serially.
def _lane_per_request_s(out_tok_s: float, running: int) -> float:
    """Per-request step cost of the non-speculative lane's benchmark, from its throughput."""
    isl, osl = cal.NON_SPEC_BENCH_ISL, cal.SWEEP_OSL_TOKENS
    context = sweep_context_tokens(isl, osl)
    per_request_prefill = prefill_s(isl) + PREFILL_CHUNK_OVERHEAD_S * isl / SATURATING_CHUNK_TOKENS
    step = (osl / out_tok_s - per_request_prefill) * running / osl
    return (step - WEIGHT_STREAM_S - SEQ_ATTN_S_PER_TOKEN * context) / running


def _plain_decode_cost() -> float:
    context = sweep_context_tokens(cal.NON_SPEC_BENCH_ISL)
    per_request = _lane_per_request_s(cal.RADIX_RANDOM_THROUGHPUT[0], cal.NON_SPEC_RUNNABLE)
    return per_request / (REQUEST_S + BATCH_ATTN_S_PER_TOKEN * context)


# With the radix cache on, a hybrid model also checkpoints recurrent state for future forks every step; on
# random-prefix traffic that, plus the lost capacity (570 → 114), is the seed's 14% loss.
RADIX_STEP_OVERHEAD = (
    _lane_per_request_s(cal.RADIX_RANDOM_THROUGHPUT[1], cal.RADIX_RUNNABLE)
    / _lane_per_request_s(cal.RADIX_RANDOM_THROUGHPUT[0], cal.NON_SPEC_RUNNABLE)
    - 1
)
_WINDOW_COST_ANCHORS = (
    (0.0, math.log(_plain_decode_cost())),
    (math.log(_CALIBRATION_WINDOW), 0.0),
    (math.log(6), math.log(_per_request_part(5) / _per_request_part(3))),
)


@functools.lru_cache(maxsize=256)
def window_cost(scheduled: float) -> float:
    """Per-request verify work relative to block size 3 (window 4)."""
    x = math.log(max(scheduled, 1.0))
    (x0, y0), (x1, y1), (x2, y2) = _WINDOW_COST_ANCHORS
    if x <= x1:
        return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return math.exp(y1 + (y2 - y1) * (x - x1) / (x2 - x1))


# DSpark's confidence scheduler trims the drafts it expects to lose once the block exceeds its SPS budget, so
# the default γ = 7 costs barely more than γ = 5 while keeping (nearly) the full block's accept length.
DSPARK_BUDGET_SLOTS = 6.0
_DEFAULT_SCHEDULED = math.exp(
    _WINDOW_COST_ANCHORS[1][0]
    + math.log(_per_request_part(7) / _per_request_part(3))
    * (_WINDOW_COST_ANCHORS[2][0] - _WINDOW_COST_ANCHORS[1][0])
    / _WINDOW_COST_ANCHORS[2][1]
)
DSPARK_OVER_BUDGET_SLOPE = (_DEFAULT_SCHEDULED - DSPARK_BUDGET_SLOTS) / (
    cal.DEFAULT_DSPARK_BLOCK_SIZE + 1 - DSPARK_BUDGET_SLOTS
)


def scheduled_window(window: int, algorithm: object) -> float:
    """Mean verify window actually run per step, incl. the bonus slot (sglang:spec_cap_length for DSpark)."""
    if algorithm != "DSPARK" or window <= DSPARK_BUDGET_SLOTS:
        return float(window)
    return DSPARK_BUDGET_SLOTS + DSPARK_OVER_BUDGET_SLOPE * (window - DSPARK_BUDGET_SLOTS)


def step_latency_s(
    running: float, mean_context_tokens: float, scheduled: float, *, radix: bool = False
) -> float:
    """Device time of one decode/verify step of the whole batch (prefill stalls not included)."""
    if running <= 0:
        return 0.0
    per_request = (REQUEST_S + BATCH_ATTN_S_PER_TOKEN * mean_context_tokens) * window_cost(scheduled)
    if radix:
        per_request *= 1 + RADIX_STEP_OVERHEAD
    return WEIGHT_STREAM_S + SEQ_ATTN_S_PER_TOKEN * mean_context_tokens + running * per_request


# -- pools ---------------------------------------------------------------------------------------------------
GPU_MEMORY_GB = 288.0  # one MI355X; the simulated server reports TP = 2 like the golden body
WEIGHT_MEMORY_GB = 187.5
STATE_SLOT_GB = 0.05
# ~2% of slots stay spare (padding requests of captured graphs): the cap fills the pool to 98%.
USABLE_STATE_FRACTION = cal.STATE_USAGE_AT_CAP
# With the radix cache on, extra state buffers per request so a cached prefix can fork: 570 → 114 runnable.
RADIX_FORK_SLOTS = cal.NON_SPEC_RUNNABLE // cal.RADIX_RUNNABLE - 1


def radix_cache_on(args: ServerArgs) -> bool:
    return not args.get("disable_radix_cache", True)


def slots_per_request(args: ServerArgs) -> int:
    """Recurrent-state slots one running request holds: γ + 1 when speculating (+ fork buffers with radix)."""
    return verify_window(args) + (RADIX_FORK_SLOTS if radix_cache_on(args) else 0)


def verify_window(args: ServerArgs) -> int:
    """γ + 1 (speculative_num_draft_tokens) for a speculative server, 1 for plain decoding."""
    if not args.get("speculative_algorithm"):
        return 1
    tokens = args.get("speculative_num_draft_tokens")
    return int(tokens) if isinstance(tokens, int) and tokens > 1 else 2


def _pool_memory_gb(mem_fraction_static: float) -> float:
    return GPU_MEMORY_GB * mem_fraction_static - WEIGHT_MEMORY_GB


# KV bytes per token, set by the seed's 29% KV at 48 running (default window, ISL 8192 / OSL 1024).
_SPEC_CAP_SLOTS = math.ceil(
    cal.SPEC_MAX_RUNNING * (cal.DEFAULT_DSPARK_BLOCK_SIZE + 1) / USABLE_STATE_FRACTION
)
KV_GB_PER_TOKEN = (_pool_memory_gb(cal.SHIPPED_MEM_FRACTION) - _SPEC_CAP_SLOTS * STATE_SLOT_GB) / (
    cal.SPEC_MAX_RUNNING * _SEARCH_CONTEXT / cal.KV_USAGE_AT_CAP
)
# Without an explicit cap (plain decoding) the state pool takes a fixed share of pool memory: 570 runnable.
NON_SPEC_STATE_SHARE = (
    math.ceil(cal.NON_SPEC_RUNNABLE / USABLE_STATE_FRACTION)
    * STATE_SLOT_GB
    / _pool_memory_gb(cal.NON_SPEC_MEM_FRACTION)
)


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """How the pool memory was carved at boot: state slots, the running cap they afford, and KV tokens."""

    state_slots: int
    slots_per_request: int
    max_running: int
    kv_tokens: int
    state_gb: float
    kv_gb: float


def pool_layout(args: ServerArgs) -> PoolLayout:
    """Carve state slots and KV tokens out of the pool memory the recipe's mem_fraction_static leaves."""
    fraction = args.get("mem_fraction_static")
    pool_gb = _pool_memory_gb(
        float(fraction) if isinstance(fraction, int | float) else cal.SHIPPED_MEM_FRACTION
    )
    per_request = slots_per_request(args)
    explicit = args.get("max_running_requests")
    if isinstance(explicit, int) and explicit > 0:
        # Reserving more request slots takes state memory from the same pool: the token budget shrinks.
        slots = math.ceil(explicit * per_request / USABLE_STATE_FRACTION)
        max_running = explicit
    else:
        slots = round(pool_gb * NON_SPEC_STATE_SHARE / STATE_SLOT_GB)
        max_running = int(slots * USABLE_STATE_FRACTION) // per_request
    state_gb = slots * STATE_SLOT_GB
    kv_gb = max(pool_gb - state_gb, 0.0)
    return PoolLayout(slots, per_request, max(max_running, 0), int(kv_gb / KV_GB_PER_TOKEN), state_gb, kv_gb)
