"""The Fleet chart's numbers at each instant of a read's grid, summed across the fleet by the backend that
holds the samples (``HistoryReader.fleet_chart_totals``): what ``views.fleet_frames.fleet_series_of``
computes from every target's columns, for a backend that can sum them itself instead of sending every
target's series.

The definitions are ``FLEET_CHART_SIGNALS``: per instant, over the targets up at it (a target is up at an
instant when every scrape of the step succeeded), the sum of output tok/s and the medians of accept length
and step latency; and how many targets had a sample and how many were up.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.sample_columns import FloatArray

# signal → how the fleet's values at one instant make one: "sum" (over those known) or "median".
FLEET_CHART_SIGNALS: dict[str, str] = {
    "output_tok_s": "sum",
    "accept_length": "median",
    "step_latency_s": "median",
}


@dataclass(frozen=True, slots=True)
class FleetChartTotals:
    """Per grid instant (``ts``, ascending): targets with a sample, targets up, and each signal of
    ``FLEET_CHART_SIGNALS`` over the targets up (NaN where none had a value)."""

    ts: FloatArray
    servers: FloatArray
    servers_up: FloatArray
    values: dict[str, FloatArray]

    def __len__(self) -> int:
        return len(self.ts)
