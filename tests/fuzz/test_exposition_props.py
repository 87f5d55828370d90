"""Hypothesis properties of the exposition reader and the derivation behind every rate specwatch shows.

Whatever a server sends, ``parse_exposition`` returns or raises ``BadExposition`` (the documented error, a
sentence a user reads), never anything else; ``sglang:`` and ``sglang_`` spellings read the same; and counters
that only go up never give a negative rate through ``derive_signals``, whatever the timestamps do.
"""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.derive import CounterState, derive_signals
from collectors.direct.metrics_reader import SIGNAL_SAMPLES, parse_exposition
from collectors.errors import BadExposition
from collectors.model import Recipe

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GAUGES = [name for name, kind in SIGNAL_SAMPLES.items() if kind == "gauge"]
CUMULATIVE = [name for name, kind in SIGNAL_SAMPLES.items() if kind == "cumulative"]
CONTENT_TYPES = [
    None,
    "",
    "text/plain; version=0.0.4; charset=utf-8",
    "application/openmetrics-text; version=1.0.0; charset=utf-8",
    "application/octet-stream",
    "text/html",
    "application/json",
]
# Every signal that is a rate or a ratio of counter deltas: none may ever be negative.
RATE_SIGNALS = (
    "tokens_per_verify",
    "tpot_s",
    "step_latency_s",
    "output_tok_s",
    "per_request_tok_s",
    "cache_hit_rate",
    "retractions_per_s",
    "ttft_s",
    "queue_time_s",
    "accept_length",
)
SPEC_RECIPE = Recipe.from_flags({"speculative_algorithm": "DSPARK", "max_running_requests": 48})


def parse_or_documented_error(body: str | bytes, content_type: str | None) -> None:
    try:
        exposition = parse_exposition(body, content_type=content_type)
    except BadExposition as exc:
        message = str(exc)
        assert message
        assert "\n" not in message  # one line in words, shown as the target's error
        assert len(message) < 400
        return
    assert all(math.isfinite(v) for v in exposition.values.values())  # NaN/Inf become unknown, never kept
    for name, value in exposition.values.items():
        if SIGNAL_SAMPLES[name] == "cumulative":
            assert value >= 0


# -- arbitrary input -----------------------------------------------------------------------------------------
@FUZZ
@given(body=st.binary(max_size=2048), content_type=st.sampled_from(CONTENT_TYPES))
def test_any_bytes_parse_or_raise_bad_exposition(body: bytes, content_type: str | None) -> None:
    parse_or_documented_error(body, content_type)


label_name = st.sampled_from(
    ["tp_rank", "priority", "pid", "is_streaming", "le", "model_name", "x"]
) | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
label_value = st.sampled_from(["0", "1", "", "true", "+Inf"]) | st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=8
)
value_token = st.sampled_from(["0", "1", "-1", "NaN", "+Inf", "-Inf", "1e308", "3.5", "abc", ""]) | st.floats(
    allow_nan=True, allow_infinity=True
).map(repr)
metric_name = st.sampled_from(
    list(SIGNAL_SAMPLES) + [n.replace("sglang:", "sglang_") for n in SIGNAL_SAMPLES]
) | st.sampled_from(["sglang:other_metric", "process_cpu_seconds_total", "9bad", "a b", "sglang:", ""])


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    name = draw(metric_name)
    labels = draw(st.dictionaries(label_name, label_value, max_size=4))
    block = ""
    if labels or draw(st.booleans()):
        pairs = [f'{k}="{v}"' if draw(st.booleans()) else f'{k}="{_escape(v)}"' for k, v in labels.items()]
        block = "{" + ",".join(pairs) + draw(st.sampled_from(["", ","])) + "}"
        if draw(st.integers(0, 9)) == 0:
            block = block[: draw(st.integers(0, len(block)))]  # a cut-off label block
    timestamp = draw(st.sampled_from(["", " 1700000000000"]))
    return f"{name}{block}{draw(st.sampled_from([' ', chr(9), '  ', '']))}{draw(value_token)}{timestamp}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


junk_line = st.sampled_from(
    ["# HELP sglang:x help", "# TYPE sglang:x gauge", "# EOF", "", "   ", "<html>", "{}", "\x00", "# comment"]
) | st.text(max_size=30).map(lambda s: s.replace("\n", " "))


@FUZZ
@given(
    lines=st.lists(sample_line() | junk_line, max_size=25),
    trailing_newline=st.booleans(),
    content_type=st.sampled_from(CONTENT_TYPES),
)
def test_exposition_like_text_parses_or_raises_bad_exposition(
    lines: list[str], trailing_newline: bool, content_type: str | None
) -> None:
    body = "\n".join(lines) + ("\n" if trailing_newline else "")
    parse_or_documented_error(body, content_type)
    parse_or_documented_error(body.encode("utf-8"), content_type)


# -- both spellings ------------------------------------------------------------------------------------------
@st.composite
def valid_body(draw: st.DrawFn) -> str:
    """A well-formed text body with sglang: names (tp ranks, priorities, pids, extra labels, NaN)."""
    out = [
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
    ]
    for name in draw(st.lists(st.sampled_from(list(SIGNAL_SAMPLES)), min_size=1, max_size=12)):
        for _ in range(draw(st.integers(1, 3))):
            labels = {"model_name": "kimi-k3", "tp_rank": draw(st.sampled_from(["0", "0", "1"]))}
            if draw(st.booleans()):
                labels["is_streaming"] = draw(st.sampled_from(["true", "false"]))
            if draw(st.integers(0, 4)) == 0:
                labels["priority"] = draw(st.sampled_from(["", "1"]))
            if draw(st.integers(0, 4)) == 0:
                labels["pid"] = str(draw(st.integers(1, 99999)))
            value = draw(
                st.floats(min_value=0, max_value=1e12, allow_nan=False)
                | st.sampled_from([math.nan, math.inf])
            )
            block = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out.append(f"{name}{{{block}}} {value!r}")
    out.append("process_cpu_seconds_total 12.5")
    return "\n".join(out) + "\n"


def underscore_spelling(body: str) -> str:
    """What prometheus_client's OpenMetrics renderer does to sample lines: sglang: → sglang_ (TYPE lines keep
    the colon)."""
    return re.sub(r"^sglang:", "sglang_", body, flags=re.MULTILINE)


@FUZZ
@given(body=valid_body())
def test_both_spellings_read_the_same_values(body: str) -> None:
    colon = parse_exposition(body)
    underscore = parse_exposition(underscore_spelling(body))
    assert underscore.values == colon.values
    assert underscore.sample_lines == colon.sample_lines
    assert len(underscore.notes) == len(colon.notes)


# -- monotone counters never give a negative rate -----------------------------------------------------------
@st.composite
def monotone_scrapes(draw: st.DrawFn) -> tuple[list[str], list[float]]:
    """2–8 bodies whose counters never decrease (split over is_streaming, as SGLang does), with timestamps
    that may repeat, jump forward or go backwards (a clock step)."""
    scrapes = draw(st.integers(2, 8))
    totals = {name: [draw(st.floats(0, 1e9)), draw(st.floats(0, 1e9))] for name in CUMULATIVE}
    bodies: list[str] = []
    for _ in range(scrapes):
        lines = []
        for name in GAUGES:
            if draw(st.integers(0, 5)):
                lines.append(f'{name}{{tp_rank="0"}} {draw(st.floats(0, 1e6))!r}')
        for name, parts in totals.items():
            for index, streaming in enumerate(("true", "false")):
                parts[index] += draw(st.sampled_from([0.0, 0.0, 1.0]) | st.floats(0, 1e7))
                lines.append(f'{name}{{tp_rank="0",is_streaming="{streaming}"}} {parts[index]!r}')
        bodies.append("\n".join(lines) + "\n")
    start = draw(st.floats(1.6e9, 1.9e9))
    steps = draw(
        st.lists(
            st.sampled_from([0.0, 5.0, -3600.0, 86400.0]) | st.floats(-1e4, 1e5),
            min_size=scrapes,
            max_size=scrapes,
        )
    )
    times, now = [], start
    for step in steps:
        now += step
        times.append(now)
    return bodies, times


@FUZZ
@given(data=monotone_scrapes(), spec_on=st.booleans())
def test_monotone_counters_never_give_a_negative_rate(
    data: tuple[list[str], list[float]], spec_on: bool
) -> None:
    bodies, times = data
    recipe = SPEC_RECIPE if spec_on else Recipe.from_flags({"speculative_algorithm": None})
    state: CounterState | None = None
    for body, ts in zip(bodies, times, strict=True):
        exposition = parse_exposition(body)
        previous_ts = state.ts if state is not None else None
        derivation = derive_signals(exposition.values, ts, state, recipe)
        assert derivation.reset == ()  # counters that only go up never look like a restart
        for name in RATE_SIGNALS:
            value = getattr(derivation.signals, name)
            assert value is None or (math.isfinite(value) and value >= 0), (name, value)
        if previous_ts is not None and ts <= previous_ts:
            # time did not advance (a clock step back): no window, so no counter rate at all
            assert derivation.signals.retractions_per_s is None
            assert derivation.signals.tokens_per_verify is None
        state = derivation.state


@FUZZ
@given(data=monotone_scrapes(), drop_at=st.integers(1, 7), factor=st.floats(0.0, 0.999))
def test_a_counter_reset_is_unknown_never_negative(
    data: tuple[list[str], list[float]], drop_at: int, factor: float
) -> None:
    """A restart (every counter falls) leaves that cycle's rates unknown; the next cycle measures again."""
    bodies, times = data
    drop_at = min(drop_at, len(bodies) - 1)
    state: CounterState | None = None
    for index, (body, ts) in enumerate(zip(bodies, times, strict=True)):
        values = dict(parse_exposition(body).values)
        if index >= drop_at:
            values = {k: v * factor if k in CUMULATIVE else v for k, v in values.items()}
        derivation = derive_signals(values, ts, state, SPEC_RECIPE)
        for name in RATE_SIGNALS:
            value = getattr(derivation.signals, name)
            assert value is None or value >= 0, (name, value)
        if index == drop_at and derivation.reset:
            assert derivation.signals.retractions_per_s is None
            assert derivation.signals.tpot_s is None
        state = derivation.state
