"""The Server page's charts are drawn once per window, not once per interval (the samples they draw are read
per window, so a redraw between two window steps is the same picture and most of a rerun's CPU), and at once
when the server has a new alert transition to mark."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd
import pytest

from config import load_config
from tests.views import seed_fleet as fx
from tests.views.conftest import SeedCase
from views import blocks, data
from views.page_context import MAX_POINTS_PER_SERIES, PageContext
from views.pages import server


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many charts pictures were drawn (each call of the page's chart section)."""
    calls: list[int] = []
    charts = server._charts

    def counting(history: pd.DataFrame, markers: pd.DataFrame) -> None:
        calls.append(len(markers))
        charts(history, markers)

    monkeypatch.setattr(server, "_charts", counting)
    data.clear_all_caches()
    yield calls
    data.clear_all_caches()


def test_charts_are_drawn_once_per_window_and_again_for_a_new_alert_transition(
    seed_case: SeedCase, drawn: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(str(seed_case.config_path))
    reads = data.StoreReader(config)
    now = [0.0]
    ctx = PageContext(config, reads, "24h", clock=lambda: now[0])
    step_s = max(config.scrape.interval_s, 24 * 3600.0 / MAX_POINTS_PER_SERIES)  # 57.6 s at 24 h
    assert step_s > 2 * config.scrape.interval_s
    start = math.floor(seed_case.fleet.now_ts / step_s) * step_s + 1.0  # just past a window step
    target = fx.FIRING[1]

    now[0] = start
    server._live(ctx, target)
    marks = drawn[-1]
    assert len(drawn) == 1
    assert marks >= 1  # the seed's firing alert is marked on its charts

    now[0] = start + config.scrape.interval_s  # the next interval, the same window: replayed
    server._live(ctx, target)
    assert len(drawn) == 1

    load = blocks.load_fleet_table

    def with_a_new_transition(
        c: PageContext, now_ts: float, only: str | None = None
    ) -> tuple[pd.DataFrame, data.AlertBoard | None]:
        table, board = load(c, now_ts, only)
        assert board is not None
        extra = board.transitions[board.transitions["target"] == target].tail(1)
        extra = extra.assign(time=extra["time"] + pd.Timedelta(seconds=1), kind="resolved")
        return table, data.AlertBoard(board.active, pd.concat([board.transitions, extra], ignore_index=True))

    monkeypatch.setattr(blocks, "load_fleet_table", with_a_new_transition)
    now[0] = start + 2 * config.scrape.interval_s  # still the same window, one more transition: redrawn
    server._live(ctx, target)
    assert drawn == [marks, marks + 1]

    monkeypatch.setattr(blocks, "load_fleet_table", load)
    now[0] = start + step_s  # the next window: redrawn
    server._live(ctx, target)
    assert len(drawn) == 3
