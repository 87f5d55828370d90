"""Pure chart builders of the analysis pages: accept length against context and batch, the ratio split,
state pool vs KV, and recipe comparisons with noise bands. DataFrame in, chart out
(see ``views.time_charts``).
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

from analysis.fraction import FractionRatio, Log2Fit
from views.chart_style import (
    BINDING_COLORS,
    K_TOKENS_LABEL,
    NUMBER_FORMAT,
    POOL_COLORS,
    TopChart,
    thin,
    top_chart,
)


# -- context and batch -------------------------------------------------------------------------------------
def recipe_color(recipes: Sequence[str], legend: bool = True) -> alt.Color:
    """One colour per recipe, stable within a chart (sorted domain, tableau10)."""
    return alt.Color(
        "recipe:N",
        title="recipe",
        scale=alt.Scale(domain=sorted(set(recipes)), scheme="tableau10"),
        legend=alt.Legend(orient="top") if legend else None,
    )


def accept_scatter(
    points: pd.DataFrame,
    bins: pd.DataFrame,
    fits: pd.DataFrame,
    *,
    x: str,
    x_title: str,
    tokens_axis: bool = False,
) -> TopChart:
    """Accept length against ``x`` (log₂ axis) per recipe: faint samples, bin means ± spread, fitted line."""
    axis = alt.Axis(labelExpr=K_TOKENS_LABEL) if tokens_axis else alt.Axis(format="~g")
    x_enc = alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(type="log", base=2), axis=axis)
    y_title = "accept length (tokens / step)"
    color = recipe_color(list(points["recipe"]))
    raw = (
        alt.Chart(thin(points[["recipe", x, "accept_length"]].dropna()))
        .mark_circle(size=14, opacity=0.25)
        .encode(x=x_enc, y=alt.Y("accept_length:Q", title=y_title, scale=alt.Scale(zero=False)), color=color)
    )
    spread = (
        alt.Chart(bins[["recipe", x, "y_low", "y_high"]])
        .mark_rule(strokeWidth=2)
        .encode(x=x_enc, y="y_low:Q", y2="y_high:Q", color=color)
    )
    means = (
        alt.Chart(bins[["recipe", x, "accept_length", "samples"]])
        .mark_point(size=80, filled=True, shape="diamond")
        .encode(
            x=x_enc,
            y="accept_length:Q",
            color=color,
            tooltip=[
                alt.Tooltip("recipe:N"),
                alt.Tooltip(f"{x}:Q", title=x_title, format=",.0f"),
                alt.Tooltip("accept_length:Q", title="mean accept length", format=".3f"),
                alt.Tooltip("samples:Q"),
            ],
        )
    )
    layers: list[alt.Chart] = [raw, spread, means]
    if not fits.empty:
        layers.append(
            alt.Chart(fits[["recipe", x, "accept_length"]])
            .mark_line(strokeDash=[6, 3], strokeWidth=2)
            .encode(x=x_enc, y="accept_length:Q", color=color)
        )
    return top_chart(alt.layer(*layers).properties(height=300))


def fit_curve(fit: Log2Fit, recipe: str, x: str) -> pd.DataFrame:
    """Points along a fitted line for drawing: 40 log-spaced x values over the observed range."""
    xs = np.geomspace(fit.x_min, fit.x_max, 40)
    return pd.DataFrame({"recipe": recipe, x: xs, "accept_length": fit.predict(xs)})


def ratio_split_chart(ratio: FractionRatio) -> TopChart:
    """The split as bars from 1× on a log scale: step factor × accept factor = predicted, beside measured."""
    terms = [
        "step latency (denominator)",
        "accept length (numerator)",
        "predicted = step × accept",
        "measured",
    ]
    data = pd.DataFrame(
        {
            "term": terms,
            "factor": [ratio.step_factor, ratio.accept_factor, ratio.predicted, ratio.measured],
            "one": 1.0,
            "kind": ["factor", "factor", "product", "measured"],
        }
    )
    low = min(1.0, float(data["factor"].min())) / 1.15
    high = max(1.0, float(data["factor"].max())) * 1.25
    base = alt.Chart(data).encode(
        y=alt.Y("term:N", sort=terms, title=None, axis=alt.Axis(labelLimit=260)),
    )
    bars = base.mark_bar(height=18).encode(
        x=alt.X(
            "factor:Q",
            title="factor (×, log scale; bars start at 1×)",
            scale=alt.Scale(type="log", domain=[low, high], nice=False),
            axis=alt.Axis(format="~g"),
        ),
        x2="one:Q",
        color=alt.Color(
            "kind:N",
            scale=alt.Scale(
                domain=["factor", "product", "measured"], range=["#4c78a8", "#9ecae9", "#f58518"]
            ),
            legend=None,
        ),
        tooltip=[alt.Tooltip("term:N"), alt.Tooltip("factor:Q", format=".3f")],
    )
    labels = base.mark_text(align="left", dx=4).encode(
        x="factor:Q", text=alt.Text("factor:Q", format=".2f"), color=alt.value("#333")
    )
    one = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(color="#888").encode(x="x:Q")
    return top_chart(alt.layer(bars, labels, one).properties(height=170))


# -- capacity ----------------------------------------------------------------------------------------------
def _binding_color() -> alt.Color:
    return alt.Color(
        "binding:N",
        title="binds",
        scale=alt.Scale(domain=list(BINDING_COLORS), range=list(BINDING_COLORS.values())),
        legend=alt.Legend(orient="top"),
    )


def pools_scatter(capacity: pd.DataFrame, state_binds_at: float, kv_binds_at: float) -> TopChart:
    """Each server as a point: KV usage (x) against state-pool usage (y); above the diagonal, state binds.
    Dotted rules: where each pool binds (its alert's ``fire_at``)."""
    data = capacity[["server", "recipe", "kv_usage", "state_pool_usage", "binding", "queued"]].dropna(
        subset=["kv_usage", "state_pool_usage"]
    )
    axis = alt.Scale(domain=[0, 1])
    points = (
        alt.Chart(data)
        .mark_circle(size=90, opacity=0.85)
        .encode(
            x=alt.X("kv_usage:Q", title="KV cache usage (%)", scale=axis, axis=alt.Axis(format="%")),
            y=alt.Y(
                "state_pool_usage:Q", title="state pool usage (%)", scale=axis, axis=alt.Axis(format="%")
            ),
            color=_binding_color(),
            tooltip=[
                alt.Tooltip("server:N"),
                alt.Tooltip("recipe:N"),
                alt.Tooltip("binding:N", title="binds"),
                alt.Tooltip("state_pool_usage:Q", title="state pool", format=".0%"),
                alt.Tooltip("kv_usage:Q", title="KV", format=".0%"),
                alt.Tooltip("queued:Q", title="queued", format=".0f"),
            ],
        )
    )
    diagonal = (
        alt.Chart(pd.DataFrame({"x": [0.0, 1.0], "y": [0.0, 1.0]}))
        .mark_line(color="#aaa", strokeDash=[4, 4])
        .encode(x="x:Q", y="y:Q")
    )
    state_limit, kv_limit = pd.DataFrame({"v": [state_binds_at]}), pd.DataFrame({"v": [kv_binds_at]})
    h_rule = alt.Chart(state_limit).mark_rule(color="#e45756", strokeDash=[2, 2]).encode(y="v:Q")
    v_rule = alt.Chart(kv_limit).mark_rule(color="#4c78a8", strokeDash=[2, 2]).encode(x="v:Q")
    return top_chart(alt.layer(diagonal, h_rule, v_rule, points).properties(height=320))


def pools_bars(capacity: pd.DataFrame) -> TopChart:
    """State pool beside KV per server (grouped horizontal bars)."""
    long = capacity[["server", "state_pool_usage", "kv_usage"]].melt(
        "server", var_name="pool", value_name="usage"
    )
    long["pool"] = long["pool"].map({"state_pool_usage": "state pool (SSM)", "kv_usage": "KV cache"})
    order = list(capacity["server"])
    return top_chart(
        alt.Chart(long.dropna())
        .mark_bar()
        .encode(
            y=alt.Y("server:N", sort=order, title=None, axis=alt.Axis(labelLimit=200)),
            yOffset=alt.YOffset("pool:N", sort=list(POOL_COLORS)),
            x=alt.X(
                "usage:Q", title="pool usage (%)", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")
            ),
            color=alt.Color(
                "pool:N",
                title=None,
                scale=alt.Scale(domain=list(POOL_COLORS), range=list(POOL_COLORS.values())),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[alt.Tooltip("server:N"), alt.Tooltip("pool:N"), alt.Tooltip("usage:Q", format=".0%")],
        )
        .properties(height=alt.Step(16))
    )


# -- recipes -----------------------------------------------------------------------------------------------
def recipe_bars(summary: pd.DataFrame, value: str, title: str, value_format: str) -> TopChart:
    """One bar per recipe with its noise band (``low``..``high``) as an error bar."""
    base = alt.Chart(summary[["recipe", value, "low", "high", "samples"]])
    bars = base.mark_bar(opacity=0.85).encode(
        x=alt.X("recipe:N", title=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(f"{value}:Q", title=title, axis=alt.Axis(format=NUMBER_FORMAT)),
        color=recipe_color(list(summary["recipe"]), legend=False),
        tooltip=[
            alt.Tooltip("recipe:N"),
            alt.Tooltip(f"{value}:Q", title=title, format=value_format),
            alt.Tooltip("low:Q", title="noise band low", format=value_format),
            alt.Tooltip("high:Q", title="noise band high", format=value_format),
            alt.Tooltip("samples:Q"),
        ],
    )
    band = base.mark_errorbar(ticks=True, color="#333").encode(
        x="recipe:N", y=alt.Y("low:Q", title=title), y2="high:Q"
    )
    return top_chart(alt.layer(bars, band).properties(height=220))


def recipe_curve(cells: pd.DataFrame, value: str, title: str, order: Sequence[str]) -> TopChart:
    """``value`` per concurrency bin for each recipe, with its noise band (``low``..``high``) shaded."""
    base = alt.Chart(cells[["recipe", "concurrency", value, "low", "high", "samples"]])
    x = alt.X(
        "concurrency:O", title="running requests (matched bin)", sort=list(order), axis=alt.Axis(labelAngle=0)
    )
    color = recipe_color(list(cells["recipe"]))
    band = base.mark_area(opacity=0.18).encode(x=x, y=alt.Y("low:Q", title=title), y2="high:Q", color=color)
    line = base.mark_line(point=True).encode(
        x=x,
        y=alt.Y(f"{value}:Q", title=title),
        color=color,
        tooltip=[
            alt.Tooltip("recipe:N"),
            alt.Tooltip("concurrency:O"),
            alt.Tooltip(f"{value}:Q", title=title, format=".3~f"),
            alt.Tooltip("samples:Q"),
        ],
    )
    return top_chart(alt.layer(band, line).properties(height=240))


DOMINATED_COLOR = "#c7c7c7"
USER_LANE_TITLE = "output tok/s per request (the user's lane)"
FLEET_LANE_TITLE = "output tok/s per GPU (the fleet's lane)"


def pareto_chart(marked: pd.DataFrame, offline: pd.DataFrame, order: Sequence[str]) -> TopChart:
    """The recipes' Pareto: per-request tok/s (x) against tok/s per GPU (y). Each recipe a thin curve across
    its concurrency bins (``order``), a dot per bin labelled with it — grey where another recipe dominates it
    beyond noise (``analysis.pareto.mark_frontier``) — the frontier a dark dashed line, and offline runs
    (``analysis.offline_live.offline_points``) as hollow rings labelled "32 offline"."""
    recipes = sorted({*marked["recipe"], *offline["recipe"]})
    # The legend's symbols at full strength (the curves' layer is faint).
    color = alt.Color(
        "recipe:N",
        title="recipe",
        scale=alt.Scale(domain=recipes, scheme="tableau10"),
        legend=alt.Legend(orient="top", symbolOpacity=1.0),
    )
    x = alt.X("user_tok_s:Q", title=USER_LANE_TITLE, scale=alt.Scale(zero=False, nice=True))
    y = alt.Y(
        "gpu_tok_s:Q",
        title=FLEET_LANE_TITLE,
        scale=alt.Scale(zero=False),
        axis=alt.Axis(format=NUMBER_FORMAT),
    )
    rank = {label: index for index, label in enumerate(order)}
    live = marked[
        ["recipe", "concurrency", "user_tok_s", "gpu_tok_s", "running", "samples", "frontier", "dominated"]
    ].assign(
        rank=marked["concurrency"].map(rank),
        status=marked["dominated"].map({True: "dominated", False: "not dominated"}),
    )
    tooltip = [
        alt.Tooltip("recipe:N"),
        alt.Tooltip("concurrency:N", title="running (bin)"),
        alt.Tooltip("user_tok_s:Q", title="tok/s per request", format=",.1f"),
        alt.Tooltip("gpu_tok_s:Q", title="tok/s per GPU", format=",.0f"),
    ]
    curves = (
        alt.Chart(live)
        .mark_line(strokeWidth=1.5, opacity=0.45)
        .encode(x=x, y=y, color=color, order=alt.Order("rank:Q"), detail="recipe:N")
    )
    frontier = (
        alt.Chart(live[live["frontier"]].sort_values("user_tok_s"))
        .mark_line(color="#333", strokeDash=[6, 4], strokeWidth=2)
        .encode(x=x, y=y, order=alt.Order("user_tok_s:Q"))
    )
    dots = (
        alt.Chart(live)
        .mark_circle(size=110, opacity=0.95)
        .encode(
            x=x,
            y=y,
            color=alt.condition(alt.datum.dominated, alt.value(DOMINATED_COLOR), color),
            tooltip=[
                *tooltip,
                alt.Tooltip("running:Q", title="mean running", format=".1f"),
                alt.Tooltip("samples:Q"),
                alt.Tooltip("status:N", title="noise floor"),
            ],
        )
    )
    labels = (
        alt.Chart(live)
        .mark_text(align="left", dx=7, dy=-7, fontSize=11, color="#555")
        .encode(x=x, y=y, text="concurrency:N")
    )
    layers: list[alt.Chart] = [curves, frontier, dots, labels]
    if not offline.empty:
        base = alt.Chart(offline[["recipe", "concurrency", "label", "user_tok_s", "gpu_tok_s"]])
        layers.append(
            base.mark_point(shape="circle", filled=False, size=150, strokeWidth=2).encode(
                x=x, y=y, color=color, tooltip=[*tooltip, alt.Tooltip("label:N", title="offline run")]
            )
        )
        layers.append(
            base.mark_text(align="left", dx=8, dy=9, fontSize=10, fontStyle="italic", color="#777").encode(
                x=x, y=y, text="label:N"
            )
        )
    return top_chart(alt.layer(*layers).properties(height=360))


# -- scaling -------------------------------------------------------------------------------------------------
def scaling_chart(curve: pd.DataFrame, value: str, title: str, knee_running: float | None) -> TopChart:
    """One scaling measure against running requests: a dot per concurrency level, the knee a dashed rule."""
    line = (
        alt.Chart(curve)
        .mark_line(point=True, color="#4c78a8")
        .encode(
            x=alt.X("running:Q", title="running requests"),
            y=alt.Y(
                f"{value}:Q", title=title, axis=alt.Axis(format=NUMBER_FORMAT), scale=alt.Scale(zero=True)
            ),
            tooltip=[
                alt.Tooltip("running:Q", title="running", format=".0f"),
                alt.Tooltip(f"{value}:Q", title=title, format=",.1f"),
                alt.Tooltip("ttft_s:Q", title="TTFT (s)", format=".3f"),
                alt.Tooltip("tpot_s:Q", title="TPOT (s)", format=".4f"),
                alt.Tooltip("samples:Q"),
            ],
        )
        .properties(height=220)
    )
    if knee_running is None:
        return top_chart(line)
    rule = (
        alt.Chart(pd.DataFrame({"running": [knee_running], "label": ["knee"]}))
        .mark_rule(strokeDash=[5, 4], color="#e45756")
        .encode(x="running:Q", tooltip=[alt.Tooltip("label:N"), alt.Tooltip("running:Q", format=".0f")])
    )
    return top_chart(alt.layer(line, rule))
