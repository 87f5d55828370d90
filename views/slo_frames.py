"""Pure shaping of SLO reports for the SLO page and the Fleet status: words, tables, the burn-down series.

No streamlit here: ``analysis.slo_report``'s records in, DataFrames and sentences out; tests call it
directly.
Unknown (no events) stays None and shows as an em dash, never as 100 % or 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from analysis.slo_budget import REPORT_WINDOWS_S, budget_remaining
from analysis.slo_report import Goodput, SloStatus
from collectors.slo import EventCounts, Scope, Slo
from views.formatting import DASH

BURN_DOWN_POINTS = 500  # a 28-day period is 40,320 minutes; the chart gets at most this many


def duration_words(seconds: float) -> str:
    """A period or window as people say it: 28 d, 6 h, 30 min, 45 s."""
    for unit_s, unit in ((86400.0, "d"), (3600.0, "h"), (60.0, "min")):
        if seconds >= unit_s:  # two digits: 3 h 59 min 30 s of a period is "4 h"
            return f"{seconds / unit_s:.2g} {unit}"
    return f"{seconds:.0f} s"


def window_name(seconds: float) -> str:
    """A burn window in the report's spelling (``1h``), else in words."""
    for name, window_s in REPORT_WINDOWS_S.items():
        if window_s == seconds:
            return name
    return duration_words(seconds).replace(" ", "")


def rate_words(rate: float | None) -> str:
    return DASH if rate is None else f"{rate:.2f}×"


def objective_words(slo: Slo) -> str:
    """99 %, 99.9 %, 99.95 %."""
    return f"{slo.objective * 100:.6g} %"


def coverage_words(status: SloStatus) -> str:
    """How much of the period the counts cover: "over 28 d", or "over the 3 h stored of 28 d"."""
    period = duration_words(status.slo.window_s)
    if status.covered_s >= status.slo.window_s - 60.0:
        return f"over {period}"
    return f"over the {duration_words(status.covered_s)} stored of {period}"


def fastest_words(status: SloStatus) -> str:
    fastest = status.fastest_burn
    return DASH if fastest is None else f"{fastest[1]:.2f}× ({fastest[0]})"


def attribution_words(status: SloStatus) -> str:
    """The attribution sentence, or why it is unknown (never a guess)."""
    found = status.attribution
    if status.burn_rates.get("1h") is None:
        return "unknown: no events in the last hour"
    if found is None:
        return "unknown: not computed (no history store to read the burning servers' signals from)"
    if found.shares is not None:
        return found.sentence
    return f"unknown: {found.reason}"


def goodput_words(found: Goodput | None) -> str:
    """The goodput bounds of a scope as a sentence (same words as ``sglang.bench_serving --goodput``)."""
    if found is None:
        return "No latency SLO covers this scope, so no goodput."
    window = duration_words(found.window_s)
    if found.lower_rps is None or found.upper_rps is None:
        return f"No requests in the last {window}, so no goodput."
    names = ", ".join(found.slos)
    if found.lower_rps == found.upper_rps:
        between = f"{found.lower_rps:.2f} req/s"
    else:
        between = f"between {found.lower_rps:.2f} and {found.upper_rps:.2f} req/s"
    return f"Goodput, last {window}: {between} met every latency SLO of this scope ({names})."


def goodput_of(goodputs: Iterable[Goodput], scope: Scope) -> Goodput | None:
    return next((g for g in goodputs if g.scope == scope), None)


WHOLE_FLEET = "whole fleet"


def scope_label(key: str) -> str:
    """A scope as the SLO page's selector and its ``?scope=`` link spell it: its key, or "whole fleet"."""
    return key or WHOLE_FLEET


def scope_key(label: str) -> str:
    return "" if label == WHOLE_FLEET else label


# -- tables --------------------------------------------------------------------------------------------------
OVERVIEW_COLUMNS = [
    *("slo", "scope", "sli", "attainment", "budget_left", "fastest_burn", "burning", "firing"),
    "scope_key",  # not shown: what a selected row opens
]


def overview_frame(
    statuses: Sequence[SloStatus], firing: Mapping[tuple[str, str], Sequence[str]] | None = None
) -> pd.DataFrame:
    """One row per SLO and scope: attainment and budget left (percent), the fastest burn, what burns now
    (conditions that hold) and what fires (the alert engine's ErrorBudgetBurn instances)."""
    fired = firing or {}
    # Rounded here as the tiles round (half to even): the grid's printf would show 93.125 as 93.13 beside a
    # tile reading 93.12 %.
    rows = [
        (
            s.slo.name,
            s.scope.words,
            s.slo.sli.key,
            None if s.attainment is None else round(s.attainment * 100.0, 2),
            None if s.budget_remaining is None else round(s.budget_remaining * 100.0, 1),
            fastest_words(s),
            ", ".join(s.burning),
            ", ".join(fired.get((s.slo.name, s.scope.key), ())),
            s.scope.key,
        )
        for s in statuses
    ]
    frame = pd.DataFrame(rows, columns=OVERVIEW_COLUMNS)
    for column in ("attainment", "budget_left"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def trouble_first(frame: pd.DataFrame) -> pd.DataFrame:
    """``overview_frame`` rows with what fires first, then what burns, then the least budget left (unknown
    last); otherwise in SLO order."""
    rank = pd.DataFrame(
        {
            "quiet": frame["firing"] == "",
            "cool": frame["burning"] == "",
            "budget": frame["budget_left"].fillna(float("inf")),
        }
    )
    order = rank.sort_values(["quiet", "cool", "budget"], kind="stable").index
    return frame.loc[order].reset_index(drop=True)


def burn_rate_frame(status: SloStatus) -> pd.DataFrame:
    """Per report window: the burn rate, and the page/ticket factors of the conditions that use the window."""
    marks: dict[float, list[str]] = {}
    for check in status.checks:
        for window_s in (check.window.long_s, check.window.short_s):
            marks.setdefault(window_s, []).append(f"{check.severity} > {check.window.factor:.3g}×")
    rows = [
        (name, status.burn_rates.get(name), ", ".join(marks.get(seconds, [])))
        for name, seconds in REPORT_WINDOWS_S.items()
    ]
    frame = pd.DataFrame(rows, columns=["window", "burn_rate", "alert_factor"])
    frame["burn_rate"] = pd.to_numeric(frame["burn_rate"], errors="coerce").astype("float64")
    return frame


def conditions_frame(status: SloStatus) -> pd.DataFrame:
    """Every burn condition: both windows' rates against its factor, the traffic floor, whether it holds."""
    rows = [
        (
            c.severity,
            window_name(c.window.long_s),
            window_name(c.window.short_s),
            c.window.factor,
            c.long_rate,
            c.short_rate,
            c.long_events,
            "yes" if c.holds(status.slo.min_events) else "no",
        )
        for c in status.checks
    ]
    frame = pd.DataFrame(
        rows,
        columns=["severity", "long", "short", "factor", "long_rate", "short_rate", "long_events", "holds"],
    )
    for column in ("factor", "long_rate", "short_rate", "long_events"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def worst_frame(worst: Sequence[tuple[str, EventCounts]]) -> pd.DataFrame:
    """The servers with the most bad events in the last hour: bad, total, and their own attainment (%)."""
    rows = [(t, c.bad, c.total, round(c.good / c.total * 100.0, 2) if c.total else None) for t, c in worst]
    frame = pd.DataFrame(rows, columns=["server", "bad", "total", "attainment"])
    for column in ("bad", "total", "attainment"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def burn_down_frame(
    minutes: Sequence[tuple[int, float, float]],
    objective: float,
    max_points: int = BURN_DOWN_POINTS,
) -> pd.DataFrame:
    """The error budget left over the period, minute by minute: events from the period's start up to each
    minute, as ``budget_remaining`` counts them (so the last point is the budget left now); columns time,
    budget_left (a fraction, negative when overspent), at most ``max_points`` rows (every k-th minute and
    always the last one)."""
    if not minutes:
        return pd.DataFrame({"time": pd.Series(dtype="datetime64[ns, UTC]"), "budget_left": []})
    frame = pd.DataFrame(minutes, columns=["minute_ts", "good", "total"])
    good, total = frame["good"].cumsum(), frame["total"].cumsum()
    left = [budget_remaining(EventCounts(g, t), objective) for g, t in zip(good, total, strict=True)]
    out = pd.DataFrame(
        {
            "time": pd.to_datetime(frame["minute_ts"], unit="s", utc=True),
            "budget_left": pd.to_numeric(pd.Series(left, dtype="object"), errors="coerce").astype("float64"),
        }
    ).dropna()
    if len(out) > max_points:
        step = -(-len(out) // max_points)
        keep = list(range(0, len(out), step))
        if keep[-1] != len(out) - 1:
            keep.append(len(out) - 1)
        out = out.iloc[keep]
    return out.reset_index(drop=True)
