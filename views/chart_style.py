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
    "near": "#eeca3b",
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


# The one time-axis rule of every chart: a 24-hour clock (never 12-hour without AM/PM), and the date in place
# of the time at midnight ticks, so a range that spans days says which day. Times are the viewer's local time.
TIME_LABEL = (
    "hours(datum.value) == 0 && minutes(datum.value) == 0"
    " ? timeFormat(datum.value, '%d %b') : timeFormat(datum.value, '%H:%M')"
)
TIME_TOOLTIP_FORMAT = "%Y-%m-%d %H:%M:%S"


def time_axis() -> alt.Axis:
    # tickCount keeps ticks at whole minutes or coarser, so no two labels read the same HH:MM.
    return alt.Axis(labelExpr=TIME_LABEL, labelOverlap=True, grid=False, tickCount=6)


def time_x(domain: tuple[pd.Timestamp, pd.Timestamp] | None = None) -> alt.X:
    scale = alt.Scale(domain=[domain[0].isoformat(), domain[1].isoformat()]) if domain else alt.Undefined
    return alt.X("time:T", title=None, axis=time_axis(), scale=scale)


# A stretch between two samples longer than this many typical spacings is a gap (collector stopped, server
# down, a restart booting), drawn as a break in the line, never bridged.
GAP_FACTOR = 3.0


def with_gaps(frame: pd.DataFrame, by: str | None = None, factor: float = GAP_FACTOR) -> pd.DataFrame:
    """``frame`` sorted by ``time``, with an empty row (NaN values) inside every gap, so a line breaks there.

    The typical spacing is the median step between a series' samples (the store buckets reads, so this is
    the bucket or the scrape interval); Vega-Lite breaks path marks at null values. ``by``: the series column.
    """
    if frame.empty:
        return frame
    if by is None:
        return _gaps(frame, {}, factor)
    parts = [_gaps(group, {by: name}, factor) for name, group in frame.groupby(by, sort=False)]
    return pd.concat(parts, ignore_index=True)


def _gaps(series: pd.DataFrame, keep: dict[str, object], factor: float) -> pd.DataFrame:
    ordered = series.sort_values("time")
    steps = ordered["time"].diff()
    typical = steps.median()
    if len(ordered) < 3 or not isinstance(typical, pd.Timedelta) or typical <= pd.Timedelta(0):
        return ordered
    starts = ordered["time"][steps > typical * factor]
    if starts.empty:
        return ordered
    breaks = pd.DataFrame({"time": starts.to_numpy() - typical, **keep})  # just before the sample after a gap
    return pd.concat([ordered, breaks], ignore_index=True).sort_values("time", kind="stable")


def sparse(frame: pd.DataFrame) -> bool:
    """Few points (a series' first minutes): draw each sample as a dot too, or a lone sample draws nothing."""
    return len(frame) < 30
