"""The seed's numbers, reproduced by the simulated mechanism (measured as the seed's benchmark measured
them)."""

from __future__ import annotations

import math
import statistics

import pytest

from sim import calibration as cal
from sim import mechanism as mech
from sim.recipes import resolve_server_args
from sim.workload import Load, Workload
from tests.sim.helpers import Measurement, measure

SHIPPED = {"speculative_dspark_block_size": 3}
DEFAULT_WINDOW = {"speculative_dspark_block_size": 7}
PLAIN = {"speculative_algorithm": None, "mem_fraction_static": 0.93}


def sweep(isl: int, *, osl: int = 1024, concurrency: int = 1, seed: int = 0, hours: float = 2) -> Measurement:
    return measure(
        SHIPPED, Workload(isl=isl, osl=osl), Load(concurrency=concurrency), seed=seed, duration_s=hours * 3600
    )


@pytest.mark.parametrize(
    ("isl", "seed_value"), [(1024, 2.514), (16384, 1.892), (32768, 1.741), (65536, 1.440)]
)
def test_accept_length_falls_with_context_as_the_seed_measured(isl: int, seed_value: float) -> None:
    runs = [sweep(isl, seed=seed).accept_length for seed in (1, 2)]
    assert statistics.fmean(runs) == pytest.approx(seed_value, rel=0.025)


def test_accept_length_only_jitters_with_batch() -> None:
    """Concurrency 1–48 at flat context: no trend, a spread of the seed's size (2.473–2.732), and far from
    what a context change does."""
    by_batch = {c: sweep(1024, concurrency=c, hours=1).accept_length for c in (1, 4, 16, 32, 48)}
    low, high = cal.BATCH_SWEEP_ACCEPT_RANGE
    assert all(0.97 * low <= value <= 1.025 * high for value in by_batch.values()), by_batch
    assert (max(by_batch.values()) - min(by_batch.values())) / min(by_batch.values()) <= 0.105
    assert abs(by_batch[48] - by_batch[1]) < 0.1 * by_batch[1]
    assert (
        min(by_batch.values()) > sweep(16384, hours=1).accept_length + 0.4
    )  # context moves it, batch does not
    # The pure function has no batch input at all; the window noise is all there is.
    assert mech.accept_length(1536, 4) == mech.accept_length(1536, 4)


def test_batch_one_accept_length_carries_eight_to_ten_percent_noise() -> None:
    alone, full = sweep(1024, hours=1), sweep(1024, concurrency=48, hours=1)
    assert 0.075 <= alone.cv("spec_accept_length") <= 0.11
    assert full.cv("spec_accept_length") < 0.03  # 48 requests average their content noise out


@pytest.mark.parametrize(
    ("isl", "concurrency", "seed_step_s"), [(1024, 1, 0.0228), (65536, 1, 0.0796), (1024, 48, 0.1019)]
)
def test_step_latency_grows_with_context_and_batch(isl: int, concurrency: int, seed_step_s: float) -> None:
    """Step latency = accept length × TPOT (TPOT from the ITL histogram, prefill stalls included)."""
    run = sweep(isl, concurrency=concurrency, hours=1)
    assert run.step_latency_s == pytest.approx(seed_step_s, rel=0.03)


def test_context_collapse_factorises_into_step_cost_and_draft_degradation() -> None:
    """1K → 64K at batch 1: 3.50× the step latency times 1.75× less accept length = 6.11× less throughput per
    step; end to end (prefill included) the seed measured 6.35×, the simulator — charging every 64K prefill in
    full — a little more."""
    short, long = sweep(1024), sweep(65536)
    step_ratio = long.step_latency_s / short.step_latency_s
    accept_ratio = short.accept_length / long.accept_length
    assert step_ratio == pytest.approx(3.50, rel=0.04)
    assert accept_ratio == pytest.approx(1.75, rel=0.04)
    per_step = (short.accept_length / short.step_latency_s) / (long.accept_length / long.step_latency_s)
    assert per_step == pytest.approx(6.11, rel=0.05)
    assert 6.11 <= short.output_tok_s / long.output_tok_s <= 7.2


def test_ttft_does_not_depend_on_output_length() -> None:
    ttfts = [
        measure(SHIPPED, Workload(isl=1024, osl=osl), Load(concurrency=1)).ttft_s for osl in (256, 1024, 4096)
    ]
    assert max(ttfts) / min(ttfts) < 1.02
    assert ttfts == pytest.approx([cal.TTFT_S_AT_1K] * 3, abs=0.002)  # the seed's band: 176–180 ms


def test_the_prefill_fit_reproduces_the_seed() -> None:
    """TTFT at 1K, the prefill rate's peak (ISL 8K–16K) and its rate at 64K, as the seed measured them."""

    def rate_tok_s(isl: int) -> float:
        chunks = mech.prefill_chunks(isl, 16384)
        return isl / (chunks * mech.PREFILL_CHUNK_OVERHEAD_S + mech.prefill_s(isl))

    assert 1024 / rate_tok_s(1024) == pytest.approx(cal.TTFT_S_AT_1K, rel=0.005)
    peak_tok_s, peak_isl = max((rate_tok_s(isl), isl) for isl in range(1024, 65537, 256))
    assert peak_tok_s == pytest.approx(cal.PREFILL_PEAK_TOK_S, rel=0.005)
    assert 8192 <= peak_isl <= 16384
    assert rate_tok_s(65536) == pytest.approx(cal.PREFILL_TOK_S_AT_64K, rel=0.005)


@pytest.fixture(scope="module")
def window_search() -> dict[int, Measurement]:
    """Concurrency 48, ISL 8192 / OSL 1024 (text), DSpark block size 3, 5 and 7 (the default)."""
    return {
        gamma: measure(
            {"speculative_dspark_block_size": gamma},
            Workload(isl=8192, osl=1024, content="text"),
            Load(concurrency=48),
            duration_s=3600,
        )
        for gamma in (3, 5, 7)
    }


@pytest.mark.parametrize(
    ("gamma", "length", "step_s"), [(3, 2.552, 0.2553), (5, 2.893, 0.5055), (7, 2.999, 0.5127)]
)
def test_verify_window_search(
    window_search: dict[int, Measurement], gamma: int, length: float, step_s: float
) -> None:
    run = window_search[gamma]
    assert run.accept_length == pytest.approx(length, rel=0.02)
    assert run.step_latency_s == pytest.approx(step_s, rel=0.03)


def test_narrow_window_wins_by_a_cheaper_step(window_search: dict[int, Measurement]) -> None:
    """γ = 3 gives up 15% of the numerator for a 2× cheaper denominator: 1.68× the default's throughput, while
    γ = 5 lands within a few percent of the default."""
    narrow, wide, default = window_search[3], window_search[5], window_search[7]
    assert narrow.output_tok_s / default.output_tok_s == pytest.approx(1.68, rel=0.04)
    assert abs(wide.output_tok_s / default.output_tok_s - 1) < 0.04
    assert narrow.accept_length < wide.accept_length < default.accept_length


def test_a_speculative_request_holds_gamma_plus_one_state_slots() -> None:
    assert mech.pool_layout(resolve_server_args(SHIPPED)).slots_per_request == 4
    assert mech.pool_layout(resolve_server_args(DEFAULT_WINDOW)).slots_per_request == 8
    assert mech.pool_layout(resolve_server_args(PLAIN)).slots_per_request == 1
    radix = mech.pool_layout(resolve_server_args({**PLAIN, "disable_radix_cache": False}))
    assert radix.slots_per_request == 5  # the radix cache reserves fork buffers per request


def test_state_pool_not_kv_caps_the_speculative_lane() -> None:
    """80 clients, ISL 8192 / OSL 1024, default window: 48 run with the state pool at 98% and KV near 29%; the
    other 32 queue and wait for their first token, while 40 clients see no queue at all."""
    saturated = measure(DEFAULT_WINDOW, Workload(isl=8192, osl=1024), Load(concurrency=80), duration_s=2400)
    below = measure(DEFAULT_WINDOW, Workload(isl=8192, osl=1024), Load(concurrency=40), duration_s=2400)
    assert saturated.mean("running") == pytest.approx(48, abs=0.5)
    assert saturated.mean("queued") == pytest.approx(32, abs=1)
    assert saturated.mean("mamba_usage") >= 0.97
    assert saturated.mean("full_token_usage") == pytest.approx(0.29, abs=0.02)
    assert saturated.mean("token_usage") == pytest.approx(
        0.98, abs=0.005
    )  # SGLang's max over pools shows state
    assert saturated.deltas["retracted_requests"] == 0  # queued, never retracted: the queue is the state pool
    assert below.mean("queued") == 0
    assert saturated.ttft_s > 5 * below.ttft_s
    assert saturated.deltas["queue_sum"] / saturated.deltas["queue_count"] > 30


def test_raising_the_cap_shrinks_the_token_budget() -> None:
    budgets = {
        cap: mech.pool_layout(resolve_server_args({**DEFAULT_WINDOW, "max_running_requests": cap}))
        for cap in (16, 48, 64, 96)
    }
    kv = [budgets[cap].kv_tokens for cap in (16, 48, 64, 96)]
    assert kv == sorted(kv, reverse=True)
    assert all(budgets[cap].max_running == cap for cap in budgets)


def test_lowering_the_cap_queues_requests() -> None:
    """The seed's 16-slot run: 34 requests waiting, first tokens after minutes."""
    run = measure(
        {**DEFAULT_WINDOW, "max_running_requests": 16}, Workload(isl=8192, osl=1024), Load(concurrency=50)
    )
    assert run.mean("running") == pytest.approx(16, abs=0.5)
    assert run.mean("queued") == pytest.approx(34, abs=1)
    assert run.ttft_s > 60


def test_radix_cache_costs_capacity_and_throughput_on_random_prefixes() -> None:
    off = mech.pool_layout(resolve_server_args(PLAIN))
    on = mech.pool_layout(resolve_server_args({**PLAIN, "disable_radix_cache": False}))
    assert (off.max_running, on.max_running) == (570, 114)
    random = Workload(isl=1024, osl=1024)
    off_run = measure(PLAIN, random, Load(concurrency=600), warmup_s=3000, duration_s=3600)
    on_run = measure({**PLAIN, "disable_radix_cache": False}, random, Load(concurrency=600), warmup_s=3000)
    assert off_run.mean("gen_throughput") == pytest.approx(875.08, rel=0.03)
    assert on_run.mean("gen_throughput") / off_run.mean("gen_throughput") == pytest.approx(
        748.61 / 875.08, abs=0.03
    )
    assert on_run.hit_rate == 0


def test_radix_cache_pays_off_on_shared_prefixes() -> None:
    """32 groups × 8 prompts behind a 4K system prompt: ~68% of prompt tokens hit, ~1.5× total tok/s."""
    shared = Workload(
        isl=5255,
        osl=160,
        shared_prefix_tokens=cal.SHARED_PREFIX_TOKENS,
        prompts_per_group=cal.SHARED_PREFIX_PROMPTS,
    )
    off = measure(PLAIN, shared, Load(concurrency=64), duration_s=1800)
    on = measure({**PLAIN, "disable_radix_cache": False}, shared, Load(concurrency=64), duration_s=1800)
    assert on.hit_rate == pytest.approx(cal.RADIX_SHARED_HIT_RATE, abs=0.01)
    assert off.hit_rate == 0
    off_tok_s, on_tok_s = cal.RADIX_SHARED_THROUGHPUT
    assert on.total_tok_s / off.total_tok_s == pytest.approx(on_tok_s / off_tok_s, rel=0.05)
    assert on.mean("cache_hit_rate") == pytest.approx(cal.RADIX_SHARED_HIT_RATE, abs=0.05)


def test_counters_are_consistent_with_the_gauges() -> None:
    run = measure(
        SHIPPED, Workload(isl=1024, osl=1024, osl_jitter=0.3), Load(concurrency=32), duration_s=3600
    )
    d = run.deltas
    # Completion-weighted tokens per verify ≈ the windowed accept-length gauge.
    assert run.accept_length == pytest.approx(run.mean("spec_accept_length"), rel=0.015)
    # Generated tokens (counted at completion) ≈ decode tokens (counted per window) ≈ gen_throughput × time.
    assert d["generation_tokens"] == pytest.approx(d["decode_tokens"], rel=0.02)
    assert run.output_tok_s == pytest.approx(run.mean("gen_throughput"), rel=0.03)
    # The ITL histogram counts output tokens after each request's first.
    assert d["itl_count"] == pytest.approx(d["generation_tokens"] - d["num_requests"], rel=0.02)
    # throughput = running × accepted tokens per step / step latency.
    predicted = run.mean("running") * run.accept_length / run.step_latency_s
    assert run.output_tok_s == pytest.approx(predicted, rel=0.03)
    assert d["prompt_tokens"] / d["num_requests"] == pytest.approx(1024, rel=0.03)


def test_accept_rate_follows_sglang_definition() -> None:
    """spec_accept_rate = accepted drafts / proposed drafts = (accept length − 1) / γ."""
    run = sweep(1024, concurrency=8, hours=0.5)
    for window in run.windows:
        assert window["spec_accept_rate"] == pytest.approx((window["spec_accept_length"] - 1) / 3, abs=1e-9)
    assert math.isclose(mech.accept_rate(1.0, 4), 0.0)
    assert math.isclose(mech.accept_rate(4.0, 4), 1.0)
