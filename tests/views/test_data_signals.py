"""``data.fleet_signals``' frame: only the columns asked for, the same as the full read cut to them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.sample_bins import ANALYSIS_SIGNALS
from collectors.model import Signals, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from tests.history_frames import read_frame
from views import data
from views.page_context import TimeWindow

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600


@pytest.mark.parametrize("recipes", [True, False])
@pytest.mark.parametrize(("range_s", "points"), [(900.0, 300), (1800.0, 40)])
def test_fleet_signals_frame_is_the_full_read_cut_to_its_columns(
    tmp_path: Path, recipes: bool, range_s: float, points: int
) -> None:
    store = SqliteStore(tmp_path / "h.sqlite")
    for k in range(12 * 30):
        store.append(
            [
                TargetSnapshot(
                    name,
                    T0 + 5.0 * k,
                    (k + i) % 11 != 0,
                    None,
                    Signals(
                        **{
                            s: None if (k + i) % 7 == 0 else k * (i + 1) + n
                            for n, s in enumerate(ANALYSIS_SIGNALS)
                        }
                    ),
                    None if k % 13 == 0 else f"r-{(k // 60 + i) % 2}",
                    "east",
                    0.004,
                )
                for i, name in enumerate(["b", "a", "c"])
            ]
        )
    end = T0 + 5.0 * 12 * 30
    window = TimeWindow(end - range_s, end)
    got = data._signals_frame(store, window, points, ANALYSIS_SIGNALS, recipes)
    columns = ["ts", "target", "up", *(["recipe_id"] if recipes else []), *ANALYSIS_SIGNALS]
    full = read_frame(store, window.start_ts, window.end_ts, None, points)[columns]
    assert list(got.columns) == columns
    assert len(got) > 0
    pd.testing.assert_frame_equal(got, full, check_exact=True)


def test_an_analysis_read_holds_at_most_the_row_budget_and_every_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big fleet gets fewer points per server, not a frame that grows with the fleet (the dashboard's memory
    and cold time): every server is still in it, each with the same number of points."""
    import time

    from config.loader import parse_config
    from views import blocks
    from views.page_context import PageContext

    store = SqliteStore(tmp_path / "h.sqlite")
    servers = [f"s{i:02d}" for i in range(40)]
    now = time.time()  # ranges past 15 min are read in the background, up to the real now
    for k in range(12 * 60):  # the last hour at 5 s
        store.append(
            [
                TargetSnapshot(
                    name,
                    now - 3600.0 + 5.0 * k,
                    True,
                    None,
                    Signals(**{s: 1.0 + (k % 50) + i for s in ANALYSIS_SIGNALS}),
                    "r-1",
                    "east",
                    0.004,
                )
                for i, name in enumerate(servers)
            ]
        )
    config = parse_config({"scrape": {"interval_s": 5.0}, "store": {"path": str(tmp_path / "h.sqlite")}})
    reads = data.StoreReader(config)
    ctx = PageContext(config, reads, "1h", clock=lambda: now)
    assert blocks.analysis_points(1_000) == 100
    assert blocks.analysis_points(10_000) == blocks.ANALYSIS_MIN_POINTS
    assert blocks.analysis_points(3) == blocks.ANALYSIS_POINTS
    try:
        data.clear_all_caches()
        _, small_fleet = blocks.analysis_history(ctx)  # 40 × 300 points: within the budget
        monkeypatch.setattr(blocks, "ANALYSIS_ROWS", 40 * 100)
        data.clear_all_caches()
        _, bounded = blocks.analysis_history(ctx)
        data.clear_all_caches()
    finally:
        reads.close()
    assert small_fleet.groupby("target").size().max() > 200
    per_server = bounded.groupby("target").size()
    assert sorted(per_server.index) == servers
    assert len(bounded) <= 40 * 100
    # 100 points of 36 s each allow the 1 min tier: a row a minute per server (the window's edges cut one)
    assert len(set(per_server)) == 1
    assert 58 <= per_server.iloc[0] <= 61
    # the same hour, coarser: the fleet's mean accept length does not move
    assert bounded["accept_length"].mean() == pytest.approx(small_fleet["accept_length"].mean(), rel=0.02)
