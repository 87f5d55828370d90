"""The PromQL text and the label → recipe rules, without an engine (the engine tests run the same text)."""

from __future__ import annotations

import pytest

from collectors.model import SIGNAL_NAMES
from collectors.prometheus.queries import (
    SignalQueries,
    default_rate_window_s,
    format_duration,
    parse_selector,
    rate_window_s,
    signal_queries,
)
from collectors.prometheus.recipe_labels import coerce_label, recipe_from_labels
from config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ('job="sglang"', 'job="sglang"'),
        ('{job="sglang"}', 'job="sglang"'),
        (' job = "sglang" , region=~"eu-.*", ', 'job = "sglang" , region=~"eu-.*"'),
        ('cluster!="canary",model_name!~"test.*"', 'cluster!="canary",model_name!~"test.*"'),
        ('team="a\\"b"', 'team="a\\"b"'),
    ],
)
def test_valid_selectors_are_kept_without_braces(text: str, expected: str) -> None:
    assert parse_selector(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "job=sglang",  # unquoted value
        "job='sglang'",  # single quotes are not PromQL label values
        'job=="sglang"',
        'job="sglang" region="eu"',  # missing comma
        'sglang_up{job="x"}',  # a metric name, not matchers
        '1job="x"',
        'job="unterminated',
        'job="a"} or vector(1) {x="y"',  # an attempt to smuggle PromQL in
    ],
)
def test_invalid_selectors_fail_at_start_naming_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match=r"prometheus\.selector") as caught:
        parse_selector(text, "fleet.yaml")
    assert "fleet.yaml" in str(caught.value)


def test_a_bad_selector_in_the_config_stops_the_source_before_any_query() -> None:
    config = parse_config(
        {"source": "prometheus", "prometheus": {"url": "http://p:9090", "selector": "job=x"}}
    )
    with pytest.raises(ConfigError, match="double quotes"):
        signal_queries(config)


@pytest.mark.parametrize(
    ("seconds", "text"), [(60, "1m"), (240, "4m"), (4, "4s"), (90, "90s"), (7.5, "7500ms"), (0.0001, "1ms")]
)
def test_durations_read_like_promql(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_the_rate_window_follows_the_scrape_interval_unless_set() -> None:
    assert default_rate_window_s(5) == 60  # never under a minute
    assert default_rate_window_s(30) == 120  # four scrapes
    base = {"source": "prometheus", "scrape": {"interval_s": 30, "timeout_s": 5}}
    assert rate_window_s(parse_config({**base, "prometheus": {"url": "http://p:9090"}})) == 120
    explicit = parse_config({**base, "prometheus": {"url": "http://p:9090", "rate_window_s": 45}})
    assert rate_window_s(explicit) == 45
    assert "[45s]" in signal_queries(explicit).signal("tpot_s")


def test_every_signal_has_a_query_except_the_recipe_one() -> None:
    queries = SignalQueries('job="sglang"', 60, params=(("gpu_hour_usd", 2.5),)).signals()
    assert set(queries) == set(SIGNAL_NAMES) - {"max_running"}
    for name, expr in queries.items():
        assert "by (instance, job)" in expr, name
        assert 'job="sglang"' in expr, name


def test_queries_match_both_spellings_and_the_reporting_rank() -> None:
    q = SignalQueries('job="sglang"', 60)
    running = q.signals()["running"]
    assert '{__name__=~"sglang[:_]num_running_reqs", tp_rank=~"0|", priority="", job="sglang"}' in running
    tpot = q.signal("tpot_s")
    # Range functions drop the name: each spelling is its own selector, joined with `or` (no label clash).
    # Tokenizer histograms and counters are split by request priority with no total: summed, not filtered.
    assert 'rate(sglang:inter_token_latency_seconds_sum{tp_rank=~"0|", job="sglang"}[1m])' in tpot
    assert 'rate(sglang_inter_token_latency_seconds_sum{tp_rank=~"0|", job="sglang"}[1m])' in tpot
    # KV usage never reads token_usage (the max over pools on hybrid models).
    assert "token_usage" not in q.signal("kv_usage").replace("full_token_usage", "")


def test_downsampled_queries_average_each_step() -> None:
    q = SignalQueries("", 60, gauge_window_s=300)
    assert "avg_over_time(sglang:num_running_reqs" in q.signals()["running"]
    assert "[5m]" in q.signal("tpot_s")  # the rate window widens to the step: no sample is skipped
    assert q.up().startswith("min by (instance, job) (min_over_time(up[5m]))")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("0.92", 0.92),
        ("true", True),
        ("False", False),
        ("DSPARK", "DSPARK"),
        ("", None),
        ("null", None),
    ],
)
def test_label_values_take_the_flag_types(text: str, value: object) -> None:
    assert coerce_label(text) == value
    assert type(coerce_label(text)) is type(value)


def test_a_recipe_needs_a_flag_label_besides_the_model() -> None:
    assert recipe_from_labels({"model_name": "kimi-k3", "instance": "a:1", "job": "sglang"}) is None
    recipe = recipe_from_labels(
        {
            "model_name": "kimi-k3",
            "sglang_version": "0.5.23",
            "speculative_dspark_block_size": "3",
            "tp_rank": "0",
        }
    )
    assert recipe is not None
    assert recipe.get("model") == "kimi-k3"
    assert recipe.get("version") == "0.5.23"
    assert recipe.get("speculative_dspark_block_size") == 3
    assert recipe.get("mem_fraction_static") is None  # not given: unknown
    same = recipe_from_labels(
        {"speculative_dspark_block_size": "3", "model_name": "kimi-k3", "version": "0.5.23"}
    )
    assert same is not None
    assert same.recipe_id == recipe.recipe_id  # label order and alias do not change the id
