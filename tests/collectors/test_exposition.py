"""The fast /metrics reader against prometheus_client's parsers: same values out, SGLang's traps handled."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from collectors.derive import derive_signals
from collectors.direct.metrics_reader import SAMPLE_MATCH, SIGNAL_SAMPLES, parse_exposition
from collectors.errors import BadExposition
from tests.collectors.bodies import OPENMETRICS_ACCEPT, OPENMETRICS_UTF8_ACCEPT, TEXT_ACCEPT, Load, render


def reference_values(text: str, *, openmetrics: bool = False) -> dict[str, float]:
    """The same selection rules applied to prometheus_client's (slow, correct) parse of the body."""
    if openmetrics:
        # prometheus_client's own OpenMetrics parser rejects the sglang_* samples it renders under sglang:*
        # TYPE lines ("Clashing name"), so give it the colon spelling back, as a Prometheus relabel would.
        text = re.sub(r"^sglang_", "sglang:", text, flags=re.MULTILINE)
    families: Iterable[Any] = (
        openmetrics_families(text) if openmetrics else text_string_to_metric_families(text)
    )
    values: dict[str, float] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in families:
        for sample in family.samples:
            if not sample.name.startswith(("sglang:", "sglang_")):
                continue
            canonical = "sglang:" + sample.name[len("sglang:") :]
            kind = SIGNAL_SAMPLES.get(canonical)
            labels = dict(sample.labels)
            if kind is None or labels.get("tp_rank", "0") != "0":
                continue
            if kind == "gauge" and labels.get("priority", ""):
                continue  # scheduler gauges: the priority="" total; counters are summed over priorities
            if any(labels.get(label) != value for label, value in SAMPLE_MATCH.get(canonical, ())):
                continue
            labels.pop("pid", None)
            key = (canonical, tuple(sorted(labels.items())))
            if key in seen:
                continue
            seen.add(key)
            if kind == "gauge":
                values.setdefault(canonical, sample.value)
            else:
                values[canonical] = values.get(canonical, 0.0) + sample.value
    return values


def test_golden_body_gives_the_same_values_as_prometheus_client(golden_text: str) -> None:
    parsed = parse_exposition(golden_text.encode(), content_type="text/plain; version=0.0.4")
    assert parsed.values == pytest.approx(reference_values(golden_text), rel=1e-12)
    assert set(parsed.values) == set(SIGNAL_SAMPLES)  # a 0.5.23 server exposes every family the signals use
    assert parsed.dialect == "text"
    assert parsed.notes == ()  # fwd_occupancy is NaN in this body, but no signal reads it
    assert parsed.sample_lines == 560


def test_golden_values_follow_sglangs_rules(golden_text: str) -> None:
    values = parse_exposition(golden_text).values
    # is_streaming halves are summed ...
    assert values["sglang:generation_tokens_total"] == 493362.0 + 122241.0
    assert values["sglang:time_to_first_token_seconds_count"] == 961.0 + 239.0
    # ... tp_rank 1 is never added (its constants would double max_total_num_tokens) ...
    assert values["sglang:max_total_num_tokens"] == 1.562306e06
    # ... and the KV gauge differs from token_usage, the max over pools.
    assert values["sglang:full_token_usage"] == 0.2419
    assert values["sglang:token_usage"] == 0.73


@pytest.mark.parametrize(
    ("accept", "dialect"),
    [(TEXT_ACCEPT, "text"), (OPENMETRICS_ACCEPT, "openmetrics"), (OPENMETRICS_UTF8_ACCEPT, "openmetrics")],
)
def test_both_spellings_and_dialects_read_the_same(accept: str, dialect: str) -> None:
    text_body, _ = render(Load())
    body, content_type = render(Load(), accept)
    if accept == OPENMETRICS_ACCEPT:
        # prometheus_client ≥ 0.23 renames the samples under OpenMetrics negotiation: the colon pitfall.
        assert b"\nsglang_num_running_reqs{" in body
        assert b"\nsglang:num_running_reqs{" not in body
    parsed = parse_exposition(body, content_type=content_type)
    assert parsed.dialect == dialect
    assert parsed.values == parse_exposition(text_body).values
    assert parsed.values == pytest.approx(
        reference_values(body.decode(), openmetrics=dialect == "openmetrics"), rel=1e-12
    )


finite = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None, database=None)
@given(
    running=finite,
    accept_length=finite,
    generation=finite,
    itl_sum=finite,
    itl_count=st.integers(min_value=0, max_value=10**12).map(float),
    accept=st.sampled_from([TEXT_ACCEPT, OPENMETRICS_ACCEPT]),
)
def test_sim_like_bodies_match_prometheus_client(
    running: float, accept_length: float, generation: float, itl_sum: float, itl_count: float, accept: str
) -> None:
    load = Load(
        running=running,
        spec_accept_length=accept_length,
        generation_tokens=generation,
        itl_sum=itl_sum,
        itl_count=itl_count,
    )
    body, content_type = render(load, accept)
    parsed = parse_exposition(body, content_type=content_type)
    expected = reference_values(body.decode(), openmetrics=accept == OPENMETRICS_ACCEPT)
    assert parsed.values == pytest.approx(expected, rel=1e-12)
    assert parsed.values["sglang:num_running_reqs"] == running


def _sample(name: str, labels: str, value: str) -> str:
    return f"{name}{{{labels}}} {value}\n"


RANK0 = 'model_name="m",tp_rank="0"'
RANK1 = 'model_name="m",tp_rank="1"'


def test_only_tp_rank_0_is_live_even_when_another_rank_comes_first() -> None:
    body = (
        "# TYPE sglang:num_running_reqs gauge\n"
        + _sample("sglang:num_running_reqs", RANK1, "0.0")
        + _sample("sglang:num_running_reqs", RANK0, "41.0")
        + "# TYPE sglang:num_retracted_requests_total counter\n"
        + _sample("sglang:num_retracted_requests_total", RANK1, "7.0")
        + _sample("sglang:num_retracted_requests_total", RANK0, "3.0")
    )
    values = parse_exposition(body).values
    assert values["sglang:num_running_reqs"] == 41.0
    assert values["sglang:num_retracted_requests_total"] == 3.0  # never 10: ranks are not summed


def test_priority_scheduling_takes_the_unlabelled_priority() -> None:
    body = (
        _sample("sglang:num_queue_reqs", RANK0 + ',priority="1"', "30.0")
        + _sample("sglang:num_queue_reqs", RANK0 + ',priority=""', "7.0")
        + _sample("sglang:num_queue_reqs", RANK0 + ',priority="2"', "11.0")
    )
    assert parse_exposition(body).values["sglang:num_queue_reqs"] == 7.0


def test_pid_labels_are_ignored() -> None:
    body = _sample("sglang:spec_accept_length", RANK0 + ',pid="24500"', "2.5") + _sample(
        "sglang:spec_accept_length", RANK0 + ',pid="24611"', "9.0"
    )
    parsed = parse_exposition(body)
    assert parsed.values["sglang:spec_accept_length"] == 2.5
    assert parsed.notes == ()


def test_duplicate_series_keep_the_first_and_say_so() -> None:
    line = _sample("sglang:generation_tokens_total", 'is_streaming="true"', "100.0")
    body = line + _sample("sglang:generation_tokens_total", 'is_streaming="true"', "999.0") + line
    parsed = parse_exposition(body)
    assert parsed.values["sglang:generation_tokens_total"] == 100.0  # not summed with its duplicates
    assert len(parsed.notes) == 2
    assert "duplicate series" in parsed.notes[0]


def test_a_body_read_again_from_the_label_cache_reads_the_same(golden_text: str) -> None:
    # Every cycle re-reads the same label blocks: the second read (cached) must say exactly what the first
    # did, duplicates and pid-only differences included.
    line = _sample("sglang:generation_tokens_total", 'is_streaming="true"', "100.0")
    pid = _sample("sglang:spec_accept_length", RANK0 + ',pid="1"', "2.5")
    body = golden_text + line + line + pid + pid.replace('pid="1"', 'pid="2"')
    first, second = parse_exposition(body), parse_exposition(body)
    assert first == second
    assert any("duplicate series" in note for note in second.notes)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_nan_and_inf_in_a_used_family_are_unknown_with_a_note(value: str) -> None:
    body = (
        _sample("sglang:spec_accept_length", RANK0, value)
        + _sample("sglang:generation_tokens_total", 'is_streaming="true"', "5.0")
        + _sample("sglang:generation_tokens_total", 'is_streaming="false"', value)
        + _sample("sglang:num_running_reqs", RANK0, "3")
    )
    parsed = parse_exposition(body)
    assert "sglang:spec_accept_length" not in parsed.values
    assert "sglang:generation_tokens_total" not in parsed.values  # half a counter is no counter
    assert parsed.values["sglang:num_running_reqs"] == 3.0
    assert any("sglang:spec_accept_length is" in note for note in parsed.notes)


def test_label_escapes_and_odd_characters_match_prometheus_client() -> None:
    labels = 'model_name="a \\"quoted\\", {braced} \\\\ path\\nx",tp_rank="0"'
    body = "# TYPE sglang:num_running_reqs gauge\n" + _sample("sglang:num_running_reqs", labels, "12")
    assert parse_exposition(body).values == reference_values(body) == {"sglang:num_running_reqs": 12.0}


def test_openmetrics_extras_are_tolerated() -> None:
    body = (
        "# TYPE sglang:generation_tokens counter\n"
        'sglang_generation_tokens_total{is_streaming="true"} 10.0 1700000000.0 # {trace_id="x"} 1.0\n'
        'sglang_generation_tokens_created{is_streaming="true"} 1.7e9\n'
        "# EOF\n"
    )
    parsed = parse_exposition(body, content_type="application/openmetrics-text; version=1.0.0")
    assert parsed.values == {"sglang:generation_tokens_total": 10.0}


def _drop_families(text: str, families: Iterable[str]) -> str:
    pattern = re.compile(
        r"^(?:# (?:HELP|TYPE) )?sglang:(?:" + "|".join(families) + r")(?:_sum|_count|_bucket)?[{ ]"
    )
    return "".join(line for line in text.splitlines(keepends=True) if not pattern.match(line))


def test_an_older_version_lacks_families_and_they_stay_unknown(golden_text: str) -> None:
    # SGLang 0.5.9: no full_token_usage (0.5.10), kv_*_tokens (0.5.11), spec_verify_calls_total (0.5.13).
    body = _drop_families(golden_text, ["full_token_usage", "kv_used_tokens", "spec_verify_calls_total"])
    values = parse_exposition(body).values
    missing = {"sglang:full_token_usage", "sglang:kv_used_tokens", "sglang:spec_verify_calls_total"}
    assert missing.isdisjoint(values)
    assert values["sglang:num_used_tokens"] == 377904.0
    first = derive_signals(values, 0.0, None)
    decode = "sglang:realtime_tokens_total"  # the mode="decode" series: per batch, not at completion
    later = dict(values, **{decode: values[decode] + 500})
    signals = derive_signals(later, 5.0, first.state).signals
    assert signals.kv_usage == pytest.approx(377904.0 / 1562306.0)  # KV from token counts, not token_usage
    assert signals.tokens_per_verify is None  # no spec_verify_calls_total before 0.5.13: unknown, not 0
    assert signals.accept_length == 2.91
    assert signals.output_tok_s == pytest.approx(100.0)


BAD_BODIES = [
    (b"", "empty body"),
    (b"   \n\n", "empty body"),
    (b"<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n", "HTML"),
    (b'{"detail": "Not Found"}', "JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
    (b"sglang:num_running_reqs 1\n\x00\x00\n", "binary"),
    (b"\xff\xfe\xfd garbage", "binary"),
    (b"sglang:num_running_reqs 1\n!!! not a sample\n", "line 2 is not a Prometheus sample"),
    (b'sglang:num_running_reqs{tp_rank="0" 1\n', "malformed labels"),
    (b"sglang:num_running_reqs{tp_rank=0} 1\n", "malformed labels"),
    (b'sglang:num_running_reqs{tp_rank="0"} many\n', "not a number"),
    (b'sglang:num_running_reqs{tp_rank="0"}\n', "no value"),
    (b'sglang:num_running_reqs{tp_rank="0"} 41.0\nsglang:num_queue_re', "truncated"),
    (b'process_cpu_seconds_total 1.5\npython_info{version="3.11"} 1\n', "no sglang metrics"),
    (b"sglang:num_running_reqs 1\n# EOF\nsglang:num_queue_reqs 2\n", "after '# EOF'"),
]


@pytest.mark.parametrize(("body", "words"), BAD_BODIES)
def test_bad_bodies_raise_bad_exposition_in_words(body: bytes, words: str) -> None:
    with pytest.raises(BadExposition, match=re.escape(words)):
        parse_exposition(body)


def test_openmetrics_without_eof_is_truncated() -> None:
    body, content_type = render(Load(), OPENMETRICS_ACCEPT)
    cut = body[: body.rindex(b"# EOF")]
    with pytest.raises(BadExposition, match="no '# EOF'"):
        parse_exposition(cut, content_type=content_type)


def test_a_wrong_content_type_is_refused_even_for_a_valid_body() -> None:
    body, _ = render(Load())
    with pytest.raises(BadExposition, match="Content-Type 'application/json'"):
        parse_exposition(body, content_type="application/json")
    # Types a proxy may put on a plain body are accepted.
    assert parse_exposition(body, content_type="application/octet-stream").values


def test_a_body_full_of_duplicates_gets_a_bounded_list_of_notes() -> None:
    line = _sample("sglang:num_running_reqs", RANK0, "4")
    parsed = parse_exposition(line * 50)
    assert parsed.values == {"sglang:num_running_reqs": 4.0}
    assert len(parsed.notes) == 11
    assert parsed.notes[-1] == "and 39 more like these"
