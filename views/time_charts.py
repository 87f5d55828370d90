"""Pure chart builders: DataFrame in, ``alt.Chart`` out; units on every axis, ≤ MAX_POINTS_PER_SERIES each.

Nothing here reads data or calls streamlit, so tests build a chart and inspect ``chart.to_dict()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from views.chart_style import (
    HEIGHT,
    NUMBER_FORMAT,
    TIME_TOOLTIP_FORMAT,
    TopChart,
    sparse,
    thin,
    time_x,
    top_chart,
    with_gaps,
)

EVENT_COLORS: dict[str, str] = {
    "restart": "#d62728",
    "recipe_change": "#9467bd",
    "alert": "#ff7f0e",
    "down": "#7f7f7f",
    "up": "#2ca02c",
    "config": "#1f77b4",
}


def events_layer(events: pd.DataFrame) -> alt.Chart:
    """Vertical dashed rules for restarts, recipe changes, up/down and alert transitions, with a tooltip."""
    kinds = [k for k in EVENT_COLORS if k in set(events["kind"])] or list(EVENT_COLORS)
    rules: alt.Chart = (
        alt.Chart(events[["time", "kind", "detail", "target"]])
        .mark_rule(strokeDash=[4, 3], strokeWidth=1.5)
        .encode(
            x="time:T",
            color=alt.Color(
                "kind:N",
                title="event",
                scale=alt.Scale(domain=kinds, range=[EVENT_COLORS[k] for k in kinds]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                alt.Tooltip("time:T", title="time", format=TIME_TOOLTIP_FORMAT),
                alt.Tooltip("kind:N"),
                alt.Tooltip("detail:N"),
            ],
        )
    )
    return rules


def _with_events(chart: alt.Chart, events: pd.DataFrame | None) -> TopChart:
    if events is None or events.empty:
        return top_chart(chart)
    return top_chart(alt.layer(chart, events_layer(events)).resolve_scale(color="independent"))


def line_chart(
    frame: pd.DataFrame,
    y: str,
    y_title: str,
    *,
    events: pd.DataFrame | None = None,
    y_format: str | None = None,
    zero: bool = True,
    color: str = "#4c78a8",
    tooltip_format: str = ".3~f",
) -> TopChart:
    """One series over time (``time`` column) with optional event markers."""
    data = thin(frame[["time", y]].dropna())
    chart = (
        alt.Chart(with_gaps(data))
        .mark_line(color=color, strokeWidth=1.8, point=sparse(data))
        .encode(
            x=time_x(),
            y=alt.Y(
                f"{y}:Q",
                title=y_title,
                scale=alt.Scale(zero=zero),
                axis=alt.Axis(format=y_format or NUMBER_FORMAT),
            ),
            tooltip=[
                alt.Tooltip("time:T", title="time", format=TIME_TOOLTIP_FORMAT),
                alt.Tooltip(f"{y}:Q", title=y_title, format=y_format or tooltip_format),
            ],
        )
        .properties(height=HEIGHT)
    )
    return _with_events(chart, events)


def multi_line_chart(
    frame: pd.DataFrame,
    series: dict[str, str],
    y_title: str,
    *,
    events: pd.DataFrame | None = None,
    y_format: str | None = None,
    colors: dict[str, str] | None = None,
    dashed: Sequence[str] = (),
    y_domain: tuple[float, float] | None = None,
) -> TopChart:
    """Several columns (``series``: column → legend name) over time on one axis, e.g. state pool vs KV."""
    long = frame[["time", *series]].melt("time", var_name="series", value_name="value").dropna()
    long["series"] = long["series"].map(series)
    long = thin(long, by="series")
    sparse_points = sparse(long)
    long = with_gaps(long, by="series")
    names = list(series.values())
    palette = colors or {}
    scale = alt.Scale(domain=names, range=[palette.get(n, c) for n, c in zip(names, _PALETTE, strict=False)])
    chart = (
        alt.Chart(long)
        .mark_line(strokeWidth=1.8, point=sparse_points)
        .encode(
            x=time_x(),
            y=alt.Y(
                "value:Q",
                title=y_title,
                axis=alt.Axis(format=y_format or NUMBER_FORMAT),
                scale=alt.Scale(domain=list(y_domain)) if y_domain else alt.Scale(zero=True),
            ),
            color=alt.Color("series:N", title=None, scale=scale, legend=alt.Legend(orient="top")),
            strokeDash=alt.condition(
                alt.FieldOneOfPredicate(field="series", oneOf=list(dashed) or ["__none__"]),
                alt.value([5, 4]),
                alt.value([1, 0]),
            ),
            tooltip=[
                alt.Tooltip("time:T", title="time", format=TIME_TOOLTIP_FORMAT),
                alt.Tooltip("series:N"),
                alt.Tooltip("value:Q", title=y_title, format=y_format or ".3~f"),
            ],
        )
        .properties(height=HEIGHT)
    )
    return _with_events(chart, events)


_PALETTE = ["#4c78a8", "#e45756", "#54a24b", "#f58518", "#b279a2", "#72b7b2", "#eeca3b", "#9d755d"]


def fleet_output_chart(series: pd.DataFrame) -> TopChart:
    """Fleet-total output tokens per second over time."""
    data = thin(series[["time", "output_tok_s", "servers_up"]].dropna(subset=["output_tok_s"]))
    return top_chart(
        alt.Chart(with_gaps(data))
        .mark_area(line={"color": "#4c78a8"}, color="#4c78a8", opacity=0.25, point=sparse(data))
        .encode(
            x=time_x(),
            y=alt.Y("output_tok_s:Q", title="fleet output (tok/s)", axis=alt.Axis(format="~s")),
            tooltip=[
                alt.Tooltip("time:T", format=TIME_TOOLTIP_FORMAT),
                alt.Tooltip("output_tok_s:Q", title="output tok/s", format=",.0f"),
                alt.Tooltip("servers_up:Q", title="servers up"),
            ],
        )
        .properties(height=HEIGHT)
    )


# -- alerts ------------------------------------------------------------------------------------------------
KIND_COLORS = {"pending": "#f2cf5b", "firing": "#e45756", "resolved": "#54a24b", "cleared": "#9d9d9d"}


def alert_timeline(transitions: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> TopChart:
    """Every alert transition as a tick on its rule's row, coloured by what happened, over the window."""
    data = thin(transitions[["time", "rule", "target", "kind", "summary"]].dropna(subset=["time"]))
    kinds = list(KIND_COLORS)
    return top_chart(
        alt.Chart(data)
        .mark_tick(thickness=3, size=22)
        .encode(
            x=time_x((start, end)),
            y=alt.Y("rule:N", title=None, axis=alt.Axis(labelLimit=220)),
            color=alt.Color(
                "kind:N",
                title=None,
                scale=alt.Scale(domain=kinds, range=[KIND_COLORS[k] for k in kinds]),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                alt.Tooltip("time:T", format=TIME_TOOLTIP_FORMAT),
                alt.Tooltip("rule:N"),
                alt.Tooltip("target:N"),
                alt.Tooltip("kind:N", title="became"),
                alt.Tooltip("summary:N"),
            ],
        )
        .properties(height=alt.Step(34))
    )


# -- SLOs ----------------------------------------------------------------------------------------------------
def budget_burn_down_chart(frame: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> TopChart:
    """The error budget left over the SLO's period (``budget_left``, a fraction) with the empty-budget line:
    below it the budget is overspent."""
    data = thin(frame[["time", "budget_left"]].dropna())
    line = (
        alt.Chart(with_gaps(data))
        .mark_line(color="#4c78a8", strokeWidth=1.8, point=sparse(data))
        .encode(
            x=time_x((start, end)),
            y=alt.Y("budget_left:Q", title="error budget left", axis=alt.Axis(format="~%")),
            tooltip=[
                alt.Tooltip("time:T", title="time", format=TIME_TOOLTIP_FORMAT),
                alt.Tooltip("budget_left:Q", title="budget left", format=".1%"),
            ],
        )
    )
    empty = alt.Chart(pd.DataFrame({"budget_left": [0.0]})).mark_rule(color="#e45756", strokeDash=[5, 4])
    return top_chart(alt.layer(line, empty.encode(y="budget_left:Q")).properties(height=HEIGHT))
