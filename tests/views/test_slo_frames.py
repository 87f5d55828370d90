"""The SLO page's pure pieces: the burn-down series, the words for periods and coverage, alert scopes, the
burn-down chart."""

from __future__ import annotations

import pandas as pd
import pytest

from alerts.scopes import alert_scope
from analysis.slo_report import Goodput, SloStatus
from collectors.slo import EventCounts, Scope, Sli, Slo
from views import slo_frames, time_charts

SLO = Slo("ttft-1s", Sli("ttft", 1.0), 0.99, 28 * 86400.0)


def test_burn_down_counts_from_the_period_start_and_keeps_the_last_minute() -> None:
    # 1,000 minutes of 100 events; from minute 500 on, 2 bad a minute (twice the budget's pace).
    minutes = [(60 * k, 100.0 - (2.0 if k >= 500 else 0.0), 100.0) for k in range(1000)]
    frame = slo_frames.burn_down_frame(minutes, SLO.objective, max_points=300)
    assert len(frame) <= 301
    assert frame["budget_left"].iloc[0] == pytest.approx(1.0)
    bad, total = 500 * 2.0, 1000 * 100.0
    assert frame["budget_left"].iloc[-1] == pytest.approx(1 - bad / total / 0.01)  # the tile's number
    assert frame["time"].iloc[-1] == pd.Timestamp(60 * 999, unit="s", tz="UTC")
    assert frame["budget_left"].is_monotonic_decreasing


def test_burn_down_skips_minutes_without_events_and_empty_is_empty() -> None:
    frame = slo_frames.burn_down_frame([(0, 0.0, 0.0), (60, 99.0, 100.0)], 0.99)
    assert list(frame["budget_left"]) == [pytest.approx(0.0)]  # 1 bad of 100 at 99 %: the budget, spent
    assert slo_frames.burn_down_frame([], 0.99).empty


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(28 * 86400.0, "28 d"), (14370.0, "4 h"), (5400.0, "1.5 h"), (1800.0, "30 min"), (45.0, "45 s")],
)
def test_duration_words(seconds: float, words: str) -> None:
    assert slo_frames.duration_words(seconds) == words


def test_coverage_says_how_much_of_the_period_is_stored() -> None:
    def status(covered_s: float) -> SloStatus:
        return SloStatus(SLO, Scope(), EventCounts(99.0, 100.0), covered_s, {})

    assert slo_frames.coverage_words(status(3 * 3600.0)) == "over the 3 h stored of 28 d"
    assert slo_frames.coverage_words(status(SLO.window_s)) == "over 28 d"


def test_an_alerts_scope_is_its_labels_but_the_rules_own() -> None:
    labels = {"alertname": "ErrorBudgetBurn", "slo": "ttft-1s", "severity": "page", "long_window": "1h"}
    assert alert_scope(labels).key == ""
    assert alert_scope({**labels, "deployment": "east", "target": ""}).key == "deployment=east"


def test_burn_down_chart_marks_the_empty_budget() -> None:
    frame = slo_frames.burn_down_frame([(60 * k, 99.5, 100.0) for k in range(10)], 0.99)
    start, end = pd.Timestamp(0, unit="s", tz="UTC"), pd.Timestamp(600, unit="s", tz="UTC")
    spec = time_charts.budget_burn_down_chart(frame, start, end).to_dict()
    line, rule = spec["layer"]
    assert line["mark"]["type"] == "line"
    assert line["encoding"]["y"]["axis"]["format"] == "~%"
    assert rule["mark"]["type"] == "rule"


def test_goodput_words_name_the_window_the_rates_are_over() -> None:
    found = Goodput(Scope(), 2.0, 8 / 3, ("ttft-1s",), 45.0)
    assert slo_frames.goodput_words(found) == (
        "Goodput, last 45 s: between 2.00 and 2.67 req/s met every latency SLO of this scope (ttft-1s)."
    )
