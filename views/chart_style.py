"""What every chart shares: colours, number and token formats, the time axis rule, the point ceiling.

Pure Altair; ``views.time_charts`` (series over time) and ``views.analysis_charts`` (scatter, bars) build
on it.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from views.page_context import MAX_POINTS_PER_SERIES

POOL_COLORS = {"state pool (SSM)": "#e45756", "KV cache": "#4c78a8"}


BINDING_COLORS = {
    "state pool": "#e45756",
    "KV cache": "#4c78a8",
    "request cap": "#f58518",
    "admission": "#b279a2",
    "none": "#9d9d9d",
}


HEIGHT = 200


# Axis numbers: at most 4 significant digits, no trailing zeros (a flat 2.61 series must not read "2.610000").
NUMBER_FORMAT = ",.4~g"


# Context axes are labelled in K tokens (1K, 4K, 16K, 64K), as the seed's sweeps are.
K_TOKENS_LABEL = "datum.value >= 1024 ? format(datum.value / 1024, '~g') + 'K' : format(datum.value, '~g')"


# Every builder returns a single or a layered chart; st.altair_chart takes either.
TopChart = alt.Chart | alt.LayerChart


def top_chart(chart: object) -> TopChart:
    # Altair's fluent methods are typed loosely (Any / unions with FacetChart); narrow once, here.
    if not isinstance(chart, alt.Chart | alt.LayerChart):
        raise TypeError(f"expected an Altair chart or layer, got {type(chart).__name__}")
    return chart


def thin(frame: pd.DataFrame, max_points: int = MAX_POINTS_PER_SERIES, by: str | None = None) -> pd.DataFrame:
    """At most ``max_points`` rows per series (every k-th row): the store buckets already; this is a guard."""
    if by is None:
        step = -(-len(frame) // max_points) if len(frame) > max_points else 1
        return frame.iloc[::step]
    parts = [thin(group, max_points) for _, group in frame.groupby(by, sort=False)]
    return pd.concat(parts) if parts else frame


def time_x() -> alt.X:
    return alt.X("time:T", title=None, axis=alt.Axis(labelOverlap=True, grid=False))
