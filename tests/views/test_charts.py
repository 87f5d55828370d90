"""Chart builders are pure: build each from a DataFrame, read what the browser gets from ``to_dict()``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.fraction import FractionRatio, FractionSummary
from views import analysis_charts, chart_style, time_charts
from views.page_context import MAX_POINTS_PER_SERIES


def series(n: int, **columns: Any) -> pd.DataFrame:
    ts = 1_800_000_000 + 5.0 * np.arange(n)
    return pd.DataFrame({"time": pd.to_datetime(ts, unit="s", utc=True), **columns})


def layers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec.get("layer", [spec])


def rows(spec: dict[str, Any], layer: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec["datasets"][layer["data"]["name"]])


def test_line_chart_has_units_and_never_sends_more_than_the_cap() -> None:
    n = 5000
    frame = series(n, accept_length=np.linspace(2.0, 3.0, n))
    spec = time_charts.line_chart(frame, "accept_length", "accept length (tokens / step)").to_dict()
    assert spec["encoding"]["y"]["title"] == "accept length (tokens / step)"
    sent = rows(spec, spec)
    assert len(sent) <= MAX_POINTS_PER_SERIES
    assert sent[0]["accept_length"] == pytest.approx(2.0)  # thinning keeps the first point


def test_events_become_rules_with_a_tooltip() -> None:
    frame = series(10, step_latency_ms=np.full(10, 255.3))
    events = pd.DataFrame(
        {
            "time": pd.to_datetime([1_800_000_020.0], unit="s", utc=True),
            "kind": ["recipe_change"],
            "detail": ["r-a → r-b"],
            "target": ["k3"],
        }
    )
    spec = time_charts.line_chart(
        frame, "step_latency_ms", "step latency (ms / step)", events=events
    ).to_dict()
    line, rules = layers(spec)
    assert line["mark"]["type"] == "line"
    assert rules["mark"]["type"] == "rule"
    assert rules["encoding"]["color"]["scale"]["domain"] == ["recipe_change"]
    assert rules["encoding"]["color"]["scale"]["range"] == [time_charts.EVENT_COLORS["recipe_change"]]
    assert rows(spec, rules)[0]["detail"] == "r-a → r-b"
    assert spec["resolve"]["scale"]["color"] == "independent"


def test_pool_chart_is_a_percent_axis_from_zero_to_one() -> None:
    frame = series(20, state_pool_usage=np.full(20, 0.98), kv_usage=np.full(20, 0.29))
    spec = time_charts.multi_line_chart(
        frame,
        {"state_pool_usage": "state pool (SSM)", "kv_usage": "KV cache"},
        "pool usage (%)",
        y_format="%",
        colors=chart_style.POOL_COLORS,
        y_domain=(0.0, 1.0),
    ).to_dict()
    y = spec["encoding"]["y"]
    assert y["axis"]["format"] == "%"
    assert y["scale"]["domain"] == [0.0, 1.0]
    sent = rows(spec, spec)
    assert {r["series"] for r in sent} == {"state pool (SSM)", "KV cache"}
    assert len(sent) == 40


def test_accept_scatter_uses_a_log2_context_axis_in_k_tokens() -> None:
    points = pd.DataFrame(
        {"recipe": ["r"] * 3, "avg_context_tokens": [1536.0, 24576, 98304], "accept_length": [2.5, 1.9, 1.4]}
    )
    bins = points.assign(y_low=points["accept_length"] - 0.1, y_high=points["accept_length"] + 0.1, samples=5)
    spec = analysis_charts.accept_scatter(
        points,
        bins,
        pd.DataFrame(),
        x="avg_context_tokens",
        x_title="average context (tokens, log₂)",
        tokens_axis=True,
    ).to_dict()
    x = spec["layer"][0]["encoding"]["x"]
    assert x["scale"] == {"type": "log", "base": 2}
    assert "'K'" in x["axis"]["labelExpr"]
    assert x["title"] == "average context (tokens, log₂)"


def test_ratio_split_chart_draws_the_four_factors_from_one() -> None:
    a = FractionSummary("1K", 2.514, 0.0228, 110.26, 10, 1)
    b = FractionSummary("64K", 1.440, 0.0796, 110.26 / 6.35, 10, 1)
    ratio = FractionRatio(a, b)
    spec = analysis_charts.ratio_split_chart(ratio).to_dict()
    bars = spec["layer"][0]
    factors = {r["term"]: r["factor"] for r in rows(spec, bars)}
    assert factors["measured"] == pytest.approx(6.35)
    assert factors["predicted = step × accept"] == pytest.approx(ratio.step_factor * ratio.accept_factor)
    assert bars["encoding"]["x"]["scale"]["type"] == "log"
    assert bars["encoding"]["x2"]["field"] == "one"  # bars start at 1×: a factor below 1 points left


def test_pools_scatter_colours_what_binds() -> None:
    capacity = pd.DataFrame(
        {
            "server": ["a", "b"],
            "recipe": ["r", "r"],
            "kv_usage": [0.29, 0.95],
            "state_pool_usage": [0.98, 0.40],
            "binding": ["state pool", "KV cache"],
            "queued": [7.0, 0.0],
        }
    )
    spec = analysis_charts.pools_scatter(capacity, 0.95, 0.9).to_dict()
    points = spec["layer"][-1]
    state_rule, kv_rule = spec["layer"][1], spec["layer"][2]  # each pool's own level, on its own axis
    assert rows(spec, state_rule) == [{"v": 0.95}]
    assert state_rule["encoding"]["y"]["field"] == "v"
    assert rows(spec, kv_rule) == [{"v": 0.9}]
    assert kv_rule["encoding"]["x"]["field"] == "v"
    scale = points["encoding"]["color"]["scale"]
    assert (
        dict(zip(scale["domain"], scale["range"], strict=True))["state pool"]
        == chart_style.BINDING_COLORS["state pool"]
    )
    assert points["encoding"]["x"]["scale"]["domain"] == [0, 1]
    assert len(rows(spec, points)) == 2


def test_recipe_bars_carry_the_noise_band() -> None:
    summary = pd.DataFrame(
        {
            "recipe": ["a", "b"],
            "tok_s": [10.0, 5.85],
            "low": [9.0, 5.265],
            "high": [11.0, 6.435],
            "samples": [9, 9],
        }
    )
    spec = analysis_charts.recipe_bars(summary, "tok_s", "tok/s per request", ".2f").to_dict()
    bars, band = spec["layer"]
    assert band["mark"]["type"] == "errorbar"
    assert band["encoding"]["y2"]["field"] == "high"
    assert bars["encoding"]["y"]["title"] == "tok/s per request"


def test_pareto_greys_the_dominated_draws_the_frontier_and_rings_the_offline_runs() -> None:
    marked = pd.DataFrame(
        {
            "recipe": ["a", "a", "b", "b"],
            "concurrency": ["1", "17–32", "1", "17–32"],
            "user_tok_s": [150.0, 40.0, 120.0, 55.0],
            "gpu_tok_s": [75.0, 640.0, 60.0, 880.0],
            "running": [1.0, 32.0, 1.0, 32.0],
            "samples": [12, 12, 12, 12],
            "frontier": [True, False, False, True],
            "dominated": [False, True, True, False],
            "dominated_by": ["", "b at 17–32", "a at 1", ""],
        }
    )
    offline = pd.DataFrame(
        {
            "recipe": ["c"],
            "concurrency": ["17–32"],
            "label": ["32 offline"],
            "user_tok_s": [58.0],
            "gpu_tok_s": [747.0],
            "context_bin": ["1K–2K"],
        }
    )
    spec = analysis_charts.pareto_chart(marked, offline, ["1", "17–32"]).to_dict()
    curves, frontier, dots, labels, rings, ring_labels = spec["layer"]
    assert dots["encoding"]["x"]["title"] == analysis_charts.USER_LANE_TITLE
    assert dots["encoding"]["y"]["title"] == analysis_charts.FLEET_LANE_TITLE
    # Grey where dominated, the recipe's colour elsewhere; every recipe (offline-only ones too) in the legend.
    assert dots["encoding"]["color"]["condition"]["value"] == analysis_charts.DOMINATED_COLOR
    assert dots["encoding"]["color"]["field"] == "recipe"
    assert dots["encoding"]["color"]["scale"]["domain"] == ["a", "b", "c"]
    # The frontier joins only its points, by the user's lane; the curves go across concurrency.
    assert [(r["recipe"], r["concurrency"]) for r in rows(spec, frontier)] == [("b", "17–32"), ("a", "1")]
    assert curves["encoding"]["order"]["field"] == "rank"
    assert labels["encoding"]["text"]["field"] == "concurrency"
    # Offline runs: hollow rings, labelled.
    assert rings["mark"]["filled"] is False
    assert [r["label"] for r in rows(spec, ring_labels)] == ["32 offline"]


def test_alert_timeline_spans_the_whole_window() -> None:
    transitions = pd.DataFrame(
        {
            "time": pd.to_datetime([1_800_000_100.0], unit="s", utc=True),
            "rule": ["StatePoolSaturated"],
            "target": ["a"],
            "kind": ["firing"],
            "summary": ["98%"],
        }
    )
    start = pd.Timestamp(1_800_000_000, unit="s", tz="UTC")
    end = pd.Timestamp(1_800_003_600, unit="s", tz="UTC")
    spec = time_charts.alert_timeline(transitions, start, end).to_dict()
    assert spec["encoding"]["x"]["scale"]["domain"] == [start.isoformat(), end.isoformat()]
    assert spec["encoding"]["color"]["scale"]["domain"] == list(time_charts.KIND_COLORS)


def test_thin_per_series() -> None:
    frame = pd.DataFrame({"series": ["a"] * 4000 + ["b"] * 10, "v": range(4010)})
    thinned = chart_style.thin(frame, 1000, by="series")
    counts = thinned.groupby("series").size()
    assert counts["a"] <= 1000
    assert counts["b"] == 10


def test_a_stretch_without_samples_breaks_the_line_and_axes_use_a_24_hour_clock() -> None:
    from views.chart_style import TIME_LABEL, with_gaps

    times = pd.to_datetime([0, 5, 10, 15, 500, 505, 510], unit="s", utc=True)  # 8 minutes missing
    frame = pd.DataFrame({"time": times, "accept_length": [2.5, 2.4, 2.6, 2.5, 2.2, 2.3, 2.2]})
    gapped = with_gaps(frame)
    assert len(gapped) == len(frame) + 1
    empty = gapped[gapped["accept_length"].isna()]
    assert list(empty["time"]) == [pd.Timestamp(495, unit="s", tz="UTC")]  # inside the gap, not bridged
    spec = time_charts.line_chart(frame, "accept_length", "accept length").to_dict()
    assert spec["mark"].get("interpolate") in (None, "linear")  # samples joined as they are
    assert spec["encoding"]["x"]["axis"]["labelExpr"] == TIME_LABEL
    assert "%H:%M" in TIME_LABEL
    assert "%I" not in TIME_LABEL  # 12-hour clock
    assert "%p" not in TIME_LABEL
    values = next(iter(spec["datasets"].values()))
    assert sum(1 for v in values if v["accept_length"] is None) == 1


def test_an_empty_chart_says_why_in_words() -> None:
    from views.blocks import why_no_values

    base = {"time": pd.to_datetime([0, 5, 10], unit="s", utc=True), "up": True, "running": 8.0}
    measured = pd.DataFrame({**base, "ttft_s": [0.5, 0.6, 0.5]})
    assert why_no_values(measured, ["ttft_s"], "TTFT") is None
    unmeasured = pd.DataFrame({**base, "ttft_s": [None, None, None]})
    assert "not measured by this server's SGLang" in str(why_no_values(unmeasured, ["ttft_s"], "TTFT"))
    idle = unmeasured.assign(running=0.0)
    assert "idle" in str(why_no_values(idle, ["ttft_s"], "TTFT"))
    down = unmeasured.assign(up=False)
    assert "down for the whole range" in str(why_no_values(down, ["ttft_s"], "TTFT"))
    first = unmeasured.head(1)
    assert "only one has arrived" in str(why_no_values(first, ["ttft_s"], "TTFT"))
    assert "No samples" in str(why_no_values(unmeasured.head(0), ["ttft_s"], "TTFT"))
