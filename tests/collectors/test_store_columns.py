"""Column reads of the history store (``read_columns``, ``live`` windows) equal the frame reads they replaced
(``tests/history_frames.oracle_frame``)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.frames import samples_frame
from analysis.sample_bins import ANALYSIS_SIGNALS
from analysis.saturation import SATURATION_SIGNALS
from collectors.model import Signals, TargetSnapshot
from collectors.sample_columns import SampleColumns, columns_of_snapshots
from collectors.store.sqlite_store import SqliteStore
from tests.history_frames import oracle_frame
from views.frames import latest_frame

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600
SIGNALS = ("output_tok_s", "accept_length", "step_latency_s")


def _snap(target: str, ts: float, value: float | None, *, up: bool = True) -> TargetSnapshot:
    return TargetSnapshot(
        target,
        ts,
        up,
        None if up else "connection refused",
        Signals(
            output_tok_s=None if value is None or not up else value * 10,
            accept_length=value if up else None,
            step_latency_s=0.02 + (value or 0) / 1000 if up else None,
        ),
        "r-1",
        "east",
        0.004,
    )


def _value(i: int, k: int) -> float | None:
    if (i + k) % 17 == 0:
        return None  # an unknown now and then
    return i + (k % 12) / 12


def _cycles(store: SqliteStore, first: int, last: int, targets: list[str], *, backfill: bool = False) -> None:
    for k in range(first, last):
        store.append([_snap(t, T0 + 5.0 * k, _value(i, k)) for i, t in enumerate(targets)], backfill=backfill)


def _as_frame(columns: SampleColumns) -> pd.DataFrame:
    return pd.DataFrame(
        {"target": columns.target, "ts": columns.ts, "up": columns.up.astype(bool), **columns.values}
    )


def _expected(
    store: SqliteStore, start: float, end: float, points: int, targets: list[str] | None = None
) -> pd.DataFrame:
    frame = oracle_frame(store, start, end, targets, points)
    return frame[["target", "ts", "up", *SIGNALS]].reset_index(drop=True)


def _same(columns: SampleColumns, expected: pd.DataFrame) -> None:
    got = _as_frame(columns)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-12)
    # codes number the targets in name order
    names = sorted(set(expected["target"]))
    assert list(columns.code) == [names.index(t) for t in expected["target"]]


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "h.sqlite")
    _cycles(s, 0, 12 * 30, ["b", "a", "c"])  # 30 min of 5 s cycles, three targets
    return s


@pytest.mark.parametrize(
    ("range_s", "points"),
    [(900.0, 150), (900.0, 2000), (1800.0, 20), (1800.0, 90), (600.0, 7)],
)
def test_read_columns_equals_the_frame_read(store: SqliteStore, range_s: float, points: int) -> None:
    end = T0 + 5.0 * 12 * 30
    start = end - range_s
    _same(store.read_columns(start, end, SIGNALS, points), _expected(store, start, end, points))
    _same(
        store.read_columns(start, end, SIGNALS, points, targets=["c", "a"]),
        _expected(store, start, end, points, ["c", "a"]),
    )


def test_read_columns_from_a_tier_equals_the_frame_read(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "h.sqlite")
    targets = [f"t{i:02d}" for i in range(7)]
    _cycles(s, 0, 12 * 60 * 3, targets)  # 3 h
    s.prune(0.0, raw_older_than_ts=T0 + 2.5 * 3600)  # raw rows gone before the last half hour: tiers serve
    for range_s, points in ((3 * 3600.0, 150), (3 * 3600.0, 20), (2 * 3600.0, 300)):
        end = T0 + 3 * 3600.0
        start = end - range_s
        got = s.read_columns(start, end, SIGNALS, points)
        assert len(got) > 0
        _same(got, _expected(s, start, end, points))


def test_unknown_signal_is_refused(store: SqliteStore) -> None:
    with pytest.raises(ValueError, match="not a stored sample column"):
        store.read_columns(T0, T0 + 60, ["output_tok_s; DROP TABLE samples"], 10)


def _tail_equals_full(store: SqliteStore, start: float, end: float, points: int) -> None:
    _same(store.read_columns(start, end, SIGNALS, points, live=True), _expected(store, start, end, points))


def test_a_tail_reads_only_new_rows_and_equals_a_full_read(store: SqliteStore) -> None:
    tail = store.live_window(SIGNALS)
    targets = ["b", "a", "c"]
    for k in range(12 * 30, 12 * 30 + 24):  # two minutes of cycles, the window sliding with them
        end = T0 + 5.0 * k + 5.0
        _tail_equals_full(store, end - 900.0, end, 150)
        _cycles(store, k, k + 1, targets)
    assert tail.full_reads == 1
    assert tail.tail_rows == 3 * 23  # each later read took one cycle's rows


def test_a_tail_follows_a_restart_a_new_target_and_late_rows(store: SqliteStore) -> None:
    tail = store.live_window(SIGNALS)
    end = T0 + 5.0 * 12 * 30
    _tail_equals_full(store, end - 900.0, end, 150)
    k = 12 * 30
    # a restart: the target is down for two cycles, then back with other values
    store.append([_snap("a", T0 + 5.0 * k, None, up=False), _snap("b", T0 + 5.0 * k, 1.0)])
    store.append([_snap("a", T0 + 5.0 * (k + 1), None, up=False), _snap("b", T0 + 5.0 * (k + 1), 1.0)])
    store.append([_snap("a", T0 + 5.0 * (k + 2), 9.0), _snap("b", T0 + 5.0 * (k + 2), 1.0)])
    _tail_equals_full(store, end - 890.0, end + 15.0, 150)
    # a new target, named to sort first, and another sorting between the known ones
    store.append([_snap("0-new", T0 + 5.0 * (k + 3), 3.0), _snap("ab", T0 + 5.0 * (k + 3), 4.0)])
    _tail_equals_full(store, end - 885.0, end + 20.0, 150)
    # rows written late, stamped inside the window (a backfill) and one older than it (ignored by both)
    store.append([_snap("c", T0 + 5.0 * (k - 30) + 2.5, 7.0), _snap("a", end - 2000.0, 1.0)], backfill=True)
    # and a row stamped with a time already held for that target (a tie: the full read keeps write order)
    store.append([_snap("b", T0 + 5.0 * (k + 3), 2.0)])
    _tail_equals_full(store, end - 880.0, end + 20.0, 150)
    _tail_equals_full(store, end - 880.0, end + 20.0, 2000)  # unregrouped: every row, in order
    assert tail.full_reads == 1


def test_a_tail_reloads_when_the_window_moves_back_or_the_store_is_replaced(
    store: SqliteStore, tmp_path: Path
) -> None:
    tail = store.live_window(SIGNALS)
    end = T0 + 5.0 * 12 * 30
    _tail_equals_full(store, end - 900.0, end, 150)
    _tail_equals_full(store, end - 1200.0, end, 150)  # back: reload
    assert tail.full_reads == 2
    # every row deleted and written again (rowids start over): the held newest row is gone
    db = sqlite3.connect(tmp_path / "h.sqlite")
    with db:
        db.execute("DELETE FROM samples")
    db.close()
    _cycles(store, 0, 12 * 30 + 1, ["a", "d"])
    _tail_equals_full(store, end - 1200.0, end + 5.0, 150)
    assert tail.full_reads == 3


def test_an_empty_window_then_rows(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "h.sqlite")
    got = s.read_columns(T0, T0 + 900.0, SIGNALS, 150, live=True)
    assert len(got) == 0
    _cycles(s, 0, 3, ["a"])
    _tail_equals_full(s, T0, T0 + 900.0, 150)
    assert not math.isnan(float(np.nanmax(s.read_columns(T0, T0 + 900, SIGNALS, 150, live=True).ts)))


def test_a_tail_after_a_gap_reads_only_what_came_after_it(store: SqliteStore) -> None:
    """The collector stopped for longer than the window (the store holds only older rows): the window is
    empty, and the next interval must read the new cycle, not every row ever written (at 1,000 servers that
    was a 1.4 GB, 20 s read)."""
    tail = store.live_window(SIGNALS)
    resumed = T0 + 5.0 * 12 * 30 + 3600.0  # an hour after the last row
    assert len(store.read_columns(resumed - 900.0, resumed, SIGNALS, 150, live=True)) == 0
    store.append([_snap(t, resumed + 5.0, 1.0) for t in ("a", "b", "c")])
    _tail_equals_full(store, resumed - 895.0, resumed + 5.0, 150)
    assert tail.full_reads == 1
    assert tail.tail_rows == 3  # the one new cycle, not the 1,080 rows before the gap


def test_latest_columns_make_the_same_frame_as_latest_snapshots(store: SqliteStore) -> None:
    k = 12 * 30
    store.append([_snap("a", T0 + 5.0 * k, None, up=False), _snap("d", T0 + 5.0 * k, 2.0)])
    store.append([TargetSnapshot("e", T0 + 5.0 * k, True, None, Signals(), None, "", None)])  # all unknown
    for since in (None, T0 + 5.0 * (k - 1), T0 + 5.0 * (k + 1)):
        expected = latest_frame(columns_of_snapshots(store.latest(since)))
        pd.testing.assert_frame_equal(latest_frame(store.latest_columns(since)), expected)
    frame = latest_frame(store.latest_columns(None)).set_index("target")
    assert list(frame.index) == ["a", "b", "c", "d", "e"]
    assert not frame.loc["a", "up"]
    assert frame.loc["a", "error"] == "connection refused"
    assert frame.loc["d", "accept_length"] == 2.0
    assert frame.loc["d", "recipe_id"] == "r-1"
    assert math.isnan(frame.loc["e", "accept_length"])
    assert frame.loc["e", "deployment"] == ""
    assert not frame["unknown"].any()  # the SQLite store always knows


# -- the analysis pages' reads: their signals and each row's recipe, as the frame they replace --------------
# What the Context, Capacity and Recipes pages read (their signals, then the trend's), defined where they are.
ANALYSIS = tuple(dict.fromkeys((*ANALYSIS_SIGNALS, *SATURATION_SIGNALS)))


def _analysis_snap(i: int, target: str, k: int) -> TargetSnapshot:
    value = _value(i, k)
    up = (i + k) % 23 != 0
    signals = {name: None if value is None else value * (n + 1) for n, name in enumerate(ANALYSIS)}
    # the recipe changes every 7 minutes, unknown now and then: a regrouped bucket keeps its newest row's
    recipe = None if (i + k) % 19 == 0 else f"r-{(k // 84 + i) % 3}"
    return TargetSnapshot(
        target, T0 + 5.0 * k, up, None if up else "refused", Signals(**signals), recipe, "east", 0.004
    )


def _analysis_cycles(store: SqliteStore, first: int, last: int, targets: list[str]) -> None:
    for k in range(first, last):
        store.append([_analysis_snap(i, t, k) for i, t in enumerate(targets)])


def _same_frame(store: SqliteStore, start: float, end: float, points: int) -> None:
    from analysis.sample_bins import prepare

    got = samples_frame(store.read_columns(start, end, ANALYSIS, points, texts=("recipe_id",)))
    full = oracle_frame(store, start, end, None, points)
    expected = full[["ts", "target", "up", "recipe_id", *ANALYSIS]]
    assert len(got) > 0
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    # and what the pages compute from it: the bins and recipe labels of every usable row
    pd.testing.assert_frame_equal(prepare(got), prepare(full)[list(prepare(got).columns)], check_exact=True)


@pytest.mark.parametrize(("range_s", "points"), [(900.0, 300), (1800.0, 120), (1800.0, 40), (600.0, 7)])
def test_analysis_reads_equal_the_full_frame_from_raw_rows(
    tmp_path: Path, range_s: float, points: int
) -> None:
    s = SqliteStore(tmp_path / "h.sqlite")
    _analysis_cycles(s, 0, 12 * 30, ["b", "a", "c"])
    end = T0 + 5.0 * 12 * 30
    _same_frame(s, end - range_s, end, points)


def test_analysis_reads_equal_the_full_frame_from_tiers(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "h.sqlite")
    _analysis_cycles(s, 0, 12 * 60 * 3, [f"t{i:02d}" for i in range(5)])  # 3 h
    s.prune(0.0, raw_older_than_ts=T0 + 2.5 * 3600)  # raw rows gone before the last half hour: tiers serve
    end = T0 + 3 * 3600.0
    for range_s, points in ((3 * 3600.0, 300), (3 * 3600.0, 20), (2 * 3600.0, 120), (3 * 3600.0, 7)):
        _same_frame(s, end - range_s, end, points)


def test_an_empty_analysis_read_is_an_empty_frame_with_its_columns(tmp_path: Path) -> None:
    from analysis.sample_bins import prepare

    s = SqliteStore(tmp_path / "h.sqlite")
    got = samples_frame(s.read_columns(T0, T0 + 900.0, ANALYSIS, 300, texts=("recipe_id",)))
    assert list(got.columns) == ["ts", "target", "up", "recipe_id", *ANALYSIS]
    assert got.empty
    assert prepare(got).empty


def test_a_tail_with_recipes_equals_the_full_frame_through_slides_new_targets_and_late_rows(
    tmp_path: Path,
) -> None:
    s = SqliteStore(tmp_path / "h.sqlite")
    targets = ["b", "a", "c"]
    _analysis_cycles(s, 0, 12 * 20, targets)
    tail = s.live_window(ANALYSIS, ("recipe_id",))

    def same(start: float, end: float, points: int) -> None:
        got = samples_frame(s.read_columns(start, end, ANALYSIS, points, texts=("recipe_id",), live=True))
        full = oracle_frame(s, start, end, None, points)[["ts", "target", "up", "recipe_id", *ANALYSIS]]
        pd.testing.assert_frame_equal(got, full.reset_index(drop=True), check_exact=True)

    for k in range(12 * 20, 12 * 20 + 15):  # the window slides, the recipe changes on the way
        end = T0 + 5.0 * k
        same(end - 900.0, end, 300)
        same(end - 900.0, end, 40)  # regrouped: a bucket keeps its newest row's recipe
        _analysis_cycles(s, k, k + 1, targets)
    k = 12 * 20 + 15
    s.append([_analysis_snap(3, "0-new", k), _analysis_snap(4, "ab", k)])  # new targets, sorting between
    s.append([_analysis_snap(0, "c", k - 40)])  # a late row inside the window
    end = T0 + 5.0 * k
    same(end - 900.0, end + 5.0, 300)
    same(end - 900.0, end + 5.0, 40)
    assert tail.full_reads == 1
