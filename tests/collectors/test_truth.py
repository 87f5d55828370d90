"""The truth fixes of the signal catalogue, each on the golden 0.5.23 body and on a live loopback server.

Decode throughput from the per-batch counter (never 0 while requests decode), counters summed over request
priorities, no last-prefill gauge in the cache hit rate, no 0 % state pool on a model without one, and rates
timed by a monotonic clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import pytest

from collectors.derive import derive_signals
from collectors.direct.direct_source import DirectSource
from collectors.direct.metrics_reader import parse_exposition
from collectors.model import Recipe, Signals, TargetSnapshot
from tests.collectors.bodies import Load
from tests.collectors.conftest import scrape_settings, target
from tests.collectors.decoding import Decoding, DecodingSGLang
from tests.collectors.servers import FakeSGLang

WINDOW_S = 2.0  # a collector cycle of the live tests (the 2 s window)
DSPARK = Recipe.from_flags({"speculative_algorithm": "DSPARK", "max_running_requests": 48})
DECODE_LINE = re.compile(
    r'^(sglang:realtime_tokens_total\{[^}]*mode="decode"[^}]*tp_rank="0"\}) (\S+)$', re.M
)


def _set(text: str, family: str, value: float, rank: str = "0") -> str:
    """``text`` with the tp_rank ``rank`` sample of the gauge ``family`` set to ``value``."""
    pattern = re.compile(rf'^(sglang:{family}\{{[^}}]*tp_rank="{rank}"\}}) \S+$', re.M)
    assert pattern.search(text), family
    return pattern.sub(lambda m: f"{m.group(1)} {value}", text)


def _advance_decode(text: str, tokens: float) -> str:
    match = DECODE_LINE.search(text)
    assert match is not None
    return DECODE_LINE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + tokens}", text)


def _window(before: str, after: str, elapsed_s: float = 2.0) -> Signals:
    first = derive_signals(parse_exposition(before).values, 100.0, None, DSPARK)
    return derive_signals(parse_exposition(after).values, 100.0 + elapsed_s, first.state, DSPARK).signals


# -- golden body ---------------------------------------------------------------------------------------------
def test_golden_decode_throughput_counts_batches_not_completions(golden_text: str) -> None:
    # 2 s in which the 41 running requests decoded 1 200 tokens and none finished: the completion counter
    # (generation_tokens_total) did not move, the per-batch counter did.
    signals = _window(golden_text, _advance_decode(golden_text, 1200.0))
    assert signals.output_tok_s == pytest.approx(600.0)


def test_golden_decode_throughput_is_never_zero_while_requests_run(golden_text: str) -> None:
    # Neither the decode counter nor the gauge moved (gauge reset after 30 s without a decode report) while
    # 41 requests run: unknown, not 0 tok/s.
    stalled = _set(golden_text, "gen_throughput", 0.0)
    assert _window(stalled, stalled).output_tok_s is None
    # Idle: zero is the truth.
    idle = _set(stalled, "num_running_reqs", 0.0)
    assert _window(idle, idle).output_tok_s == 0.0


def _split_by_priority(text: str) -> str:
    """The golden body as SGLang renders it under --enable-priority-scheduling: scheduler series gain
    priority="" (running/queued gain a breakdown), tokenizer series are split over priorities 0 and 3."""
    out: list[str] = []
    for line in text.splitlines():
        match = re.match(r"^(sglang:\w+)\{([^}]*)\} (\S+)$", line)
        if match is None:
            out.append(line)
            continue
        name, labels, value = match.group(1), match.group(2), float(match.group(3))
        if "tp_rank=" in labels:
            out.append(f'{name}{{{labels},priority=""}} {value}')
            if name in ("sglang:num_running_reqs", "sglang:num_queue_reqs") and 'tp_rank="0"' in labels:
                out.append(f'{name}{{{labels},priority="3"}} {value // 3}')
                out.append(f'{name}{{{labels},priority="0"}} {value - value // 3}')
        else:
            third = value // 3 if value.is_integer() else value / 3
            out.append(f'{name}{{{labels},priority="3"}} {third}')
            out.append(f'{name}{{{labels},priority="0"}} {value - third}')
    return "\n".join(out) + "\n"


def test_golden_counters_are_summed_over_priorities(golden_text: str) -> None:
    later = _advance_decode(golden_text, 1200.0)
    for name, step in (("generation_tokens_total", 2400.0), ("spec_verify_calls_total", 1000.0)):
        pattern = re.compile(rf"^(sglang:{name}\{{[^}}]*\}}) (\S+)$", re.M)
        later = pattern.sub(lambda m, step=step: f"{m.group(1)} {float(m.group(2)) + step}", later, count=1)
    plain = _window(golden_text, later)
    split = _window(_split_by_priority(golden_text), _split_by_priority(later))
    assert plain.tokens_per_verify == pytest.approx(2.4)
    assert split.as_dict() == pytest.approx(plain.as_dict())  # the split changes no signal
    first = parse_exposition(_split_by_priority(golden_text)).values
    assert first["sglang:num_running_reqs"] == 41.0  # the priority="" total, not a breakdown or their sum
    assert (
        first["sglang:generation_tokens_total"]
        == parse_exposition(golden_text).values["sglang:generation_tokens_total"]
    )


def test_golden_cache_hit_rate_is_unknown_when_no_prompt_finished(golden_text: str) -> None:
    # The gauge says 0.4187 (the last logged prefill batch); over this window no prompt finished.
    assert "sglang:cache_hit_rate" in golden_text
    assert _window(golden_text, golden_text).cache_hit_rate is None


def test_golden_state_pool_is_unknown_without_a_mamba_pool(golden_text: str) -> None:
    assert _window(golden_text, golden_text).state_pool_usage == 0.7314
    no_pool = golden_text
    for family in ("mamba_usage", "mamba_used_tokens", "mamba_available_tokens", "mamba_evictable_tokens"):
        no_pool = _set(no_pool, family, 0.0)  # what SGLang publishes on a model without SSM layers
    assert _window(no_pool, no_pool).state_pool_usage is None
    # An SSM model with an empty pool (slots exist, none used) is 0 %, not unknown.
    empty = _set(_set(no_pool, "mamba_available_tokens", 197.0), "mamba_usage", 0.0)
    assert _window(empty, empty).state_pool_usage == 0.0
    # Before 0.5.12 there are no slot counts: 0 cannot tell an idle pool from none, a positive value can.
    old = re.sub(r"^.*sglang:mamba_(used|available|evictable)_tokens.*\n", "", golden_text, flags=re.M)
    assert _window(old, old).state_pool_usage == 0.7314
    old_zero = _set(old, "mamba_usage", 0.0)
    assert _window(old_zero, old_zero).state_pool_usage is None


# -- live loopback servers -----------------------------------------------------------------------------------
@pytest.fixture
def direct() -> Iterator[Callable[..., DirectSource]]:
    sources: list[DirectSource] = []

    def start(url: str, **kwargs: object) -> DirectSource:
        source = DirectSource(scrape_settings(), [target("s1", url)], **kwargs)  # type: ignore[arg-type]
        sources.append(source)
        return source

    yield start
    for source in sources:
        source.close()


def _collect(source: DirectSource) -> TargetSnapshot:
    (snapshot,) = source.collect(time.time())
    assert snapshot.up, snapshot.error
    return snapshot


def test_live_decode_throughput_is_within_10_percent_of_the_truth_every_cycle(
    direct: Callable[..., DirectSource],
) -> None:
    decoding = Decoding()
    server = DecodingSGLang(decoding)
    try:
        source = direct(server.url)
        _collect(source)
        completion_rates: list[float] = []
        for _ in range(4):
            before = server.body(server.steps())
            time.sleep(WINDOW_S)
            snapshot = _collect(source)
            output = snapshot.signals.output_tok_s
            assert output is not None
            assert output == pytest.approx(decoding.decode_tok_s, rel=0.10)
            # The completion counter over the same window is what the old derivation showed.
            after = server.body(server.steps())
            gen = [
                float(m.group(1))
                for body in (before, after)
                for m in [re.search(r"^sglang:generation_tokens_total\{[^}]*\} (\S+)$", body, re.M)]
                if m is not None
            ]
            completion_rates.append((gen[1] - gen[0]) / WINDOW_S)
        # Outputs of 1.2-2.1 K tokens on 8 slots: completion-counted throughput is far off in some window.
        assert any(abs(rate / decoding.decode_tok_s - 1) > 0.3 for rate in completion_rates), completion_rates
        # The completion counters still give the completion-weighted figure, over the longer window.
        assert snapshot.signals.tokens_per_verify == pytest.approx(decoding.tokens_per_step)
    finally:
        server.stop()


def test_live_tokenizer_series_split_by_priority_are_summed(direct: Callable[..., DirectSource]) -> None:
    decoding = Decoding(priorities=True)
    server = DecodingSGLang(decoding)
    try:
        source = direct(server.url)
        _collect(source)
        time.sleep(WINDOW_S)  # long enough that scheduling jitter under load stays well inside 10 %
        signals = _collect(source).signals
        assert signals.running == decoding.slots  # the priority="" total
        # The inter-token-latency histogram exists only per priority: its window mean is one step's share.
        assert signals.tpot_s == pytest.approx(decoding.step_s / decoding.tokens_per_step, rel=0.02)
        assert signals.output_tok_s == pytest.approx(decoding.decode_tok_s, rel=0.10)
    finally:
        server.stop()


def test_live_cache_hit_and_state_pool_unknowns(
    sglang: Callable[..., FakeSGLang], direct: Callable[..., DirectSource]
) -> None:
    server = sglang(
        Load(mamba_usage=0.0, mamba_used_tokens=0.0, mamba_available_tokens=0.0, mamba_evictable_tokens=0.0)
    )
    source = direct(server.url)
    _collect(source)
    signals = _collect(source).signals
    assert signals.cache_hit_rate is None  # no prompt finished between the two scrapes; the gauge is 0.4187
    assert signals.state_pool_usage is None  # no Mamba pool: unknown, not 0 %
    server.load = server.load.advanced(prompt_tokens=1000, cached_tokens=250)
    assert _collect(source).signals.cache_hit_rate == pytest.approx(0.25)


def test_live_rates_use_the_monotonic_clock(
    sglang: Callable[..., FakeSGLang], direct: Callable[..., DirectSource]
) -> None:
    wall = [1_000_000.0]
    server = sglang(Load())
    source = direct(server.url, clock=lambda: wall[0])
    _collect(source)
    started = time.monotonic()
    time.sleep(0.5)
    wall[0] -= 3600.0  # the wall clock steps back an hour (NTP, a VM resumed) between two scrapes
    server.load = server.load.advanced(realtime_decode=3000.0)
    snapshot = _collect(source)
    elapsed_s = time.monotonic() - started
    assert snapshot.signals.output_tok_s is not None
    assert snapshot.signals.output_tok_s == pytest.approx(3000.0 / elapsed_s, rel=0.25)
    assert snapshot.ts == wall[0]  # snapshots still carry wall time for charts and history
