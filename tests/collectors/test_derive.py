"""Signal derivation: the accept/step fraction, windows from counter deltas, resets, traps, unknowns."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.derive import CUMULATIVE_SAMPLES, CounterState, derive_signals, detect_reset
from collectors.direct.metrics_reader import SIGNAL_SAMPLES, parse_exposition
from collectors.model import SIGNAL_NAMES, Recipe
from tests.collectors.bodies import SERVER_INFO, Load, render

DSPARK = Recipe.from_flags({"speculative_algorithm": "DSPARK", "max_running_requests": 48})
PLAIN = Recipe.from_flags({"speculative_algorithm": None, "max_running_requests": 570})


def values_of(load: Load) -> dict[str, float]:
    return dict(parse_exposition(render(load)[0]).values)


def test_first_scrape_of_the_golden_body(golden_text: str) -> None:
    values = parse_exposition(golden_text).values
    signals = derive_signals(values, ts=1000.0, previous=None, recipe=DSPARK).signals
    assert signals.accept_length == 2.91
    assert signals.spec_accept_rate == 0.6367
    assert signals.running == 41.0
    assert signals.queued == 7.0
    assert signals.max_running == 48.0
    assert signals.state_pool_usage == 0.7314
    # The token_usage trap: on a hybrid model it is the Mamba pool (0.73), not the KV cache (0.24).
    assert signals.kv_usage == 0.2419
    assert signals.token_usage == 0.73
    assert signals.avg_context_tokens == pytest.approx(377904.0 / 41.0)
    assert signals.output_tok_s == 3127.55  # no window yet: the server's own gen_throughput
    assert signals.cache_hit_rate is None  # no window yet; the last prefill batch's gauge is not mixed in
    # Everything that needs a window is unknown, never 0.
    for name in ("tpot_s", "step_latency_s", "per_request_tok_s", "tokens_per_verify", "retractions_per_s"):
        assert getattr(signals, name) is None, name


def test_a_window_gives_the_fraction() -> None:
    before = Load()
    # 5 s of decoding: 16 000 tokens in 6 400 verify steps, inter-token latency 0.1 s (the seed's block
    # size 3: accept 2.552, step ≈ 255 ms).
    after = before.advanced(
        generation_tokens=16000,
        realtime_decode=16000,
        verify_calls=6400,
        itl_sum=1600.0,
        itl_count=16000,
        prompt_tokens=40000,
        cached_tokens=10000,
        retracted=2,
        ttft_sum=12.0,
        ttft_count=8,
        queue_sum=3.0,
        queue_count=6,
    )
    after.spec_accept_length = 2.552
    first = derive_signals(values_of(before), 100.0, None, DSPARK)
    second = derive_signals(values_of(after), 105.0, first.state, DSPARK)
    signals = second.signals
    assert second.reset == ()
    assert signals.tpot_s == pytest.approx(0.1)
    assert signals.accept_length == 2.552
    assert signals.step_latency_s == pytest.approx(0.2552)
    assert signals.per_request_tok_s == pytest.approx(10.0)
    # accept_length / step_latency_s = 1 / tpot_s: the per-request side of the fraction.
    assert signals.accept_length / signals.step_latency_s == pytest.approx(signals.per_request_tok_s)
    assert signals.tokens_per_verify == pytest.approx(2.5)
    assert signals.output_tok_s == pytest.approx(3200.0)
    assert signals.cache_hit_rate == pytest.approx(0.25)
    assert signals.retractions_per_s == pytest.approx(0.4)
    assert signals.ttft_s == pytest.approx(1.5)
    assert signals.queue_time_s == pytest.approx(0.5)


def test_a_counter_reset_never_gives_a_negative_rate_or_a_spike() -> None:
    running = Load().advanced(
        generation_tokens=1e6, realtime_decode=1e6, itl_sum=1e4, itl_count=1e6, verify_calls=4e5
    )
    restarted = Load(
        generation_tokens=120.0, realtime_decode=120.0, prompt_tokens=900.0, cached_tokens=0.0,
        verify_calls=50.0, retracted=0.0,
        itl_sum=1.2, itl_count=120.0, ttft_sum=0.5, ttft_count=1.0, queue_sum=0.1, queue_count=1.0,
        gen_throughput=80.0,
    )  # fmt: skip
    first = derive_signals(values_of(running), 100.0, None, DSPARK)
    second = derive_signals(values_of(restarted), 105.0, first.state, DSPARK)
    assert "sglang:generation_tokens_total" in second.reset
    signals = second.signals
    for name in (
        "tpot_s",
        "step_latency_s",
        "tokens_per_verify",
        "retractions_per_s",
        "ttft_s",
        "queue_time_s",
    ):
        assert getattr(signals, name) is None, name
    assert signals.output_tok_s == 80.0  # the server's own window: no spike from a counter drop
    assert signals.cache_hit_rate is None

    # The cycle after the restart measures from the post-restart values.
    later = restarted.advanced(generation_tokens=500, realtime_decode=500, itl_sum=5.0, itl_count=500)
    third = derive_signals(values_of(later), 110.0, second.state, DSPARK)
    assert third.reset == ()
    assert third.signals.output_tok_s == pytest.approx(100.0)
    assert third.signals.tpot_s == pytest.approx(0.01)


def test_detect_reset_names_only_counters_that_went_down() -> None:
    previous = CounterState(
        ts=0.0, values={"sglang:generation_tokens_total": 10.0, "sglang:prompt_tokens_total": 5.0}
    )
    assert detect_reset(
        {"sglang:generation_tokens_total": 11.0, "sglang:prompt_tokens_total": 4.0}, previous
    ) == ("sglang:prompt_tokens_total",)
    assert detect_reset({"sglang:generation_tokens_total": 11.0}, previous) == ()
    assert detect_reset({"sglang:generation_tokens_total": 1.0}, None) == ()


def test_without_speculative_decoding_one_token_per_step() -> None:
    load = Load(spec_accept_length=0.0, spec_accept_rate=0.0, verify_calls=None)
    first = derive_signals(values_of(load), 0.0, None, PLAIN)
    second = derive_signals(values_of(load.advanced(itl_sum=40.0, itl_count=1000)), 5.0, first.state, PLAIN)
    assert second.signals.accept_length == 1.0
    assert second.signals.spec_accept_rate is None
    assert second.signals.step_latency_s == pytest.approx(0.04)
    assert second.signals.max_running == 570.0


def test_a_zero_accept_gauge_with_spec_on_falls_back_to_tokens_per_verify() -> None:
    load = Load(spec_accept_length=0.0)
    first = derive_signals(values_of(load), 0.0, None, DSPARK)
    assert first.signals.accept_length is None  # no window yet, and 0 is not an accept length
    later = load.advanced(generation_tokens=3000, verify_calls=1000)
    second = derive_signals(values_of(later), 5.0, first.state, DSPARK)
    assert second.signals.accept_length == pytest.approx(3.0)


def test_an_idle_server_has_no_current_accept_length() -> None:
    # SGLang keeps the last decode window's gauge while idle: it describes the past.
    idle = Load(running=0.0, spec_accept_length=2.91)
    signals = derive_signals(values_of(idle), 0.0, None, DSPARK).signals
    assert signals.accept_length is None
    assert signals.avg_context_tokens is None  # no decode batch: no mean context
    assert signals.running == 0.0


def test_kv_usage_falls_back_to_token_counts_never_to_token_usage() -> None:
    version_0_5_9 = Load(full_token_usage=None, kv_used_tokens=None, num_used_tokens=1562306.0 / 4)
    assert derive_signals(values_of(version_0_5_9), 0.0, None).signals.kv_usage == pytest.approx(
        0.25, rel=1e-6
    )
    version_0_5_5 = Load(full_token_usage=None, kv_used_tokens=None, max_total_num_tokens=None)
    signals = derive_signals(values_of(version_0_5_5), 0.0, None).signals
    assert signals.kv_usage is None
    assert signals.token_usage == 0.73


def test_missing_families_are_unknown_not_zero() -> None:
    signals = derive_signals({}, 0.0, None, None).signals
    assert all(value is None for value in signals.as_dict().values())
    later = derive_signals({}, 5.0, CounterState(0.0, {}), None).signals
    assert all(value is None for value in later.as_dict().values())


def test_max_running_comes_from_the_recipe() -> None:
    from collectors.server_info import recipe_from_server_info

    recipe = recipe_from_server_info(SERVER_INFO)
    assert derive_signals(values_of(Load()), 0.0, None, recipe).signals.max_running == 48.0
    assert derive_signals(values_of(Load()), 0.0, None, None).signals.max_running is None


counter = st.floats(min_value=0, max_value=1e15, allow_nan=False)
maybe_gauge = st.one_of(st.none(), st.floats(min_value=0, max_value=1e9, allow_nan=False))


@settings(max_examples=200, deadline=None, database=None)
@given(
    previous=st.dictionaries(st.sampled_from(CUMULATIVE_SAMPLES), counter),
    current=st.dictionaries(st.sampled_from(sorted(SIGNAL_SAMPLES)), counter),
    elapsed_s=st.floats(min_value=-5, max_value=600, allow_nan=False),
    recipe=st.sampled_from([None, DSPARK, PLAIN]),
)
def test_signals_are_finite_or_unknown_and_rates_never_negative(
    previous: dict[str, float], current: dict[str, float], elapsed_s: float, recipe: Recipe | None
) -> None:
    derivation = derive_signals(current, 1000.0 + elapsed_s, CounterState(1000.0, previous), recipe)
    for name in SIGNAL_NAMES:
        value = getattr(derivation.signals, name)
        assert value is None or math.isfinite(value), name
        if value is not None:
            assert value >= 0, name
    if derivation.reset:
        assert derivation.signals.tpot_s is None
        assert derivation.signals.retractions_per_s is None


def test_completion_counted_ratios_span_a_minute_of_scrapes() -> None:
    # Prompt/cached/generated tokens and verify calls move only when a request finishes: one request finished
    # in the first 5 s, none after. Its ratios stay known for a minute instead of flickering to unknown.
    load = Load()
    state = derive_signals(values_of(load), 0.0, None, DSPARK).state
    load = load.advanced(
        generation_tokens=1500, verify_calls=500, prompt_tokens=800, cached_tokens=200, realtime_decode=3000
    )
    seen: list[tuple[float | None, float | None]] = []
    for cycle in range(1, 16):
        derivation = derive_signals(values_of(load), 5.0 * cycle, state, DSPARK)
        state = derivation.state
        seen.append((derivation.signals.tokens_per_verify, derivation.signals.cache_hit_rate))
        load = load.advanced(realtime_decode=3000)
    assert seen[0] == pytest.approx((3.0, 0.25))
    assert all(pair == pytest.approx((3.0, 0.25)) for pair in seen[:12])  # within a minute of the finish
    assert seen[-1] == (None, None)  # a minute later no request finished in the window: unknown
    assert len(state.older) <= 13  # kept back to one full window, not forever
    # and the older states hold only what the long window reads (a 1,000-server fleet keeps 12 per server)
    assert all(
        set(earlier.values)
        <= {
            f"sglang:{n}"
            for n in (
                "generation_tokens_total",
                "spec_verify_calls_total",
                "cached_tokens_total",
                "prompt_tokens_total",
            )
        }
        for earlier in state.older[1:]
    )
