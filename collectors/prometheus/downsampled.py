"""Recorded series at the Fleet chart's resolution for long ranges: each of the chart's signals averaged, and
``up`` at its minimum, over ``prometheus.downsample_s`` (5 min), recorded once per that interval.

On a 7-day range the chart's step is ~68 min: from the signals' own recordings (one sample per rule
evaluation, 15 s) each point reads ~270 samples of every target's series and of its ``up``, and Prometheus
evaluates that step by step for 1,000 targets (~0.5 s a selector on this box, four queries of two selectors
each). From these it reads ~14 samples a point. A point then averages the 5-minute averages recorded within
its step: the same samples, in windows that end at the rule's evaluations instead of on the grid (a point's
span can lie up to one resolution earlier than the grid's), so they serve only steps of ``STEPS_PER_SAMPLE``
resolutions or more, where that shift is under a quarter of a step.

The rules are rendered here (``rule_group``, with the signals' own group by ``export-recording-rules``) and
read by ``PrometheusHistory.fleet_chart_totals`` with ``prometheus.use_recording_rules``. Their first step
with a sample and any before it (rules loaded later than the samples began; a history's first step) are read
at full resolution: a recording's window there holds only part of the step.
"""

from __future__ import annotations

from typing import Any

from collectors.fleet_chart import FLEET_CHART_SIGNALS
from collectors.prometheus.queries import SignalQueries
from collectors.signals import format_duration

GROUP_NAME = "specwatch-signals-downsampled"
STEPS_PER_SAMPLE = 4  # a chart step must span at least this many resolutions to read the recordings
# The chart's signals and TPOT (a plain-decoding target's step latency is its TPOT).
SIGNALS: tuple[str, ...] = (*FLEET_CHART_SIGNALS, "tpot_s")


def _window(queries: SignalQueries) -> str:
    return format_duration(queries.downsample_s)


def up_record(queries: SignalQueries) -> str:
    """The recorded step minimum of each target's ``up``: 1 when every scrape of the window succeeded."""
    return f"instance_job:up:min{_window(queries)}"


def records(queries: SignalQueries) -> dict[str, str]:
    """signal → the name of its downsampled recording (its own recording's name, ``_avg5m`` appended)."""
    own = {r.signal: r.record for r in queries.recordings()}
    return {name: f"{own[name]}_avg{_window(queries)}" for name in SIGNALS if name in own}


def rule_group(queries: SignalQueries) -> dict[str, Any]:
    """The recording group, evaluated once per resolution: ``up``'s minimum and each signal's average over
    the window, from the signals' own recordings (exactly ``instance`` and ``job``)."""
    window = _window(queries)
    own = {r.signal: r.record for r in queries.recordings()}
    rules = [
        {
            "record": up_record(queries),
            "expr": f"min by (instance, job) (min_over_time({queries.selected('up')}[{window}]))",
        }
    ]
    rules += [
        {"record": record, "expr": f"avg_over_time({own[name]}[{window}])"}
        for name, record in records(queries).items()
    ]
    return {"name": GROUP_NAME, "interval": window, "rules": rules}


def serves(queries: SignalQueries, step_s: float) -> bool:
    """Whether a grid of this step reads the downsampled recordings (with use_recording_rules)."""
    return step_s >= STEPS_PER_SAMPLE * queries.downsample_s - 1e-9


def signal(queries: SignalQueries, name: str, step_s: float) -> str:
    """A signal's average over each step, from its downsampled recording (one series per target)."""
    selector = queries.recorded_series(records(queries)[name])
    return f"max by (instance, job) (avg_over_time({selector}[{format_duration(step_s)}]))"


def up(queries: SignalQueries, step_s: float) -> str:
    """Each target's ``up`` at its step minimum (1: up the whole step), from the downsampled recording."""
    selector = queries.recorded_series(up_record(queries))
    return f"min_over_time({selector}[{format_duration(step_s)}])"
