"""The Fleet table, its totals and filters, fleet series, and the Context page's choice of sweep server."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from collectors.model import Signals, TargetSnapshot
from collectors.sample_columns import SampleColumns, columns_of_snapshots, target_codes
from views.fleet_frames import (
    FLEET_SERIES_SIGNALS,
    STATUS_DOWN,
    STATUS_NO_DATA,
    STATUS_STALE,
    STATUS_UP,
    filter_table,
    fleet_series,
    fleet_series_of,
    fleet_table,
    fleet_totals,
)
from views.frames import latest_frame

NOW = 1_800_000_000.0


def snap(target: str, age_s: float, up: bool = True, **signals: float) -> TargetSnapshot:
    return TargetSnapshot(
        target=target,
        ts=NOW - age_s,
        up=up,
        error=None if up else "connection refused",
        signals=Signals(**signals) if up else Signals(max_running=48.0),
        recipe_id="r-a" if target != "c" else "r-b",
        deployment="east" if target in ("a", "b") else "west",
    )


@pytest.fixture
def table() -> pd.DataFrame:
    latest = latest_frame(
        columns_of_snapshots(
            [
                snap(
                    "a",
                    2,
                    accept_length=2.999,
                    step_latency_s=0.5127,
                    running=48,
                    max_running=48,
                    queued=7,
                    output_tok_s=280.8,
                    state_pool_usage=0.98,
                    kv_usage=0.29,
                ),
                snap(
                    "b",
                    3,
                    accept_length=2.552,
                    step_latency_s=0.2553,
                    running=40,
                    max_running=48,
                    queued=0,
                    output_tok_s=400.0,
                    state_pool_usage=0.80,
                    kv_usage=0.20,
                ),
                snap("c", 4, up=False),
                snap("d", 600, accept_length=2.0, running=10, max_running=48, output_tok_s=99.0),
            ]
        )
    )
    return fleet_table(
        latest,
        now_ts=NOW,
        stale_after_s=15.0,
        configured={"a": "east", "e": "west"},
        firing={"a": ["StatePoolSaturated"], "e": ["TargetDown"]},
    )  # fmt: skip


def test_status_of_every_server_and_trouble_first(table: pd.DataFrame) -> None:
    status = dict(zip(table["server"], table["status"], strict=True))
    assert status == {
        "a": STATUS_UP,
        "b": STATUS_UP,
        "c": STATUS_DOWN,
        "d": STATUS_STALE,
        "e": STATUS_NO_DATA,
    }
    assert list(table["server"])[:3] == ["c", "d", "e"]  # down, stale, never seen before the healthy ones


def test_row_values_and_units(table: pd.DataFrame) -> None:
    a = table.set_index("server").loc["a"]
    assert a["step_latency_ms"] == pytest.approx(512.7)
    assert a["running_cap"] == "48 / 48"
    assert a["firing_alerts"] == 1
    assert a["alerts"] == "StatePoolSaturated"
    c = table.set_index("server").loc["c"]
    assert c["error"] == "connection refused"
    assert math.isnan(c["accept_length"])  # a down server shows no stale numbers
    assert c["running_cap"] == "– / 48"
    stale = table.set_index("server").loc["d"]
    assert math.isnan(stale["output_tok_s"])
    assert stale["last_seen_s"] == pytest.approx(600)
    assert table.set_index("server").loc["b"]["error"] == ""  # never "nan"


def test_totals_count_only_servers_up(table: pd.DataFrame) -> None:
    totals = fleet_totals(table)
    assert (totals.servers, totals.up, totals.down, totals.stale, totals.no_data) == (5, 2, 1, 1, 1)
    assert totals.output_tok_s == pytest.approx(280.8 + 400.0)
    assert totals.running == 88
    assert totals.cap == 96
    assert totals.queued == 7
    assert totals.accept_length_median == pytest.approx((2.999 + 2.552) / 2)
    assert totals.firing_alerts == 2


def test_filters_combine(table: pd.DataFrame) -> None:
    assert list(filter_table(table, statuses=[STATUS_DOWN])["server"]) == ["c"]
    assert set(filter_table(table, deployments=["east"])["server"]) == {"a", "b"}
    assert list(filter_table(table, deployments=["east"], recipes=["r-b"])["server"]) == []
    assert len(filter_table(table)) == len(table)


def test_empty_latest_gives_an_empty_table() -> None:
    table = fleet_table(latest_frame(columns_of_snapshots([])), now_ts=NOW, stale_after_s=15.0)
    assert table.empty
    assert fleet_totals(table).servers == 0


def test_fleet_series_sums_targets_per_bucket() -> None:
    samples = pd.DataFrame(
        {
            "ts": [0.0, 5.0, 0.0, 5.0, 12.0, 12.0],
            "target": ["a", "a", "b", "b", "a", "b"],
            "up": [True, True, True, True, True, False],
            "output_tok_s": [100.0, 200.0, 50.0, 50.0, 300.0, None],
            "accept_length": [2.0, 2.0, 3.0, 3.0, 2.0, None],
            "step_latency_s": [0.1, 0.1, 0.2, 0.2, 0.1, None],
        }
    )
    series = fleet_series(samples, start_ts=0.0, bucket_s=10.0)
    assert list(series["output_tok_s"]) == [150.0 + 50.0, 300.0]  # a averaged within its bucket, then summed
    assert list(series["servers_up"]) == [2, 1]
    assert list(series["servers_down"]) == [0, 1]
    assert series["step_latency_ms"].iloc[0] == pytest.approx(150.0)


def _random_samples(seed: int, targets: int, rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "ts": rng.uniform(0.0, 600.0, rows).round(1),
            "target": rng.choice([f"s{i:03d}" for i in range(targets)], rows),
            "up": rng.random(rows) > 0.2,
            "output_tok_s": rng.uniform(0.0, 5000.0, rows),
            "accept_length": rng.uniform(1.0, 4.0, rows),
            "step_latency_s": rng.uniform(0.01, 0.05, rows),
        }
    )
    for column in FLEET_SERIES_SIGNALS:  # unknowns, and a whole target unknown for one signal
        frame.loc[rng.random(rows) < 0.15, column] = np.nan
    frame.loc[frame["target"] == "s000", "output_tok_s"] = np.nan
    return frame.sort_values(["target", "ts"], kind="stable", ignore_index=True)  # as the store reads


def columns_of_frame(frame: pd.DataFrame, signals: tuple[str, ...]) -> SampleColumns:
    """A sample frame (sorted by target, then time) as the columns a read gives."""
    target = frame["target"].to_numpy(dtype=object)
    return SampleColumns(
        target,
        target_codes(target),
        frame["ts"].to_numpy(dtype=np.float64),
        frame["up"].to_numpy(dtype=np.float64),
        np.ones(len(frame), np.float64),
        {name: frame[name].to_numpy(dtype=np.float64) for name in signals},
    )


@pytest.mark.parametrize(
    ("seed", "targets", "rows", "bucket_s"), [(1, 5, 200, 10.0), (2, 40, 3000, 4.0), (3, 1, 50, 60.0)]
)
def test_fleet_series_from_columns_equals_the_frame_one(
    seed: int, targets: int, rows: int, bucket_s: float
) -> None:
    samples = _random_samples(seed, targets, rows)
    expected = fleet_series(samples, start_ts=0.0, bucket_s=bucket_s)
    got = fleet_series_of(columns_of_frame(samples, FLEET_SERIES_SIGNALS), start_ts=0.0, bucket_s=bucket_s)
    pd.testing.assert_frame_equal(got, expected.reset_index(drop=True), check_dtype=False, rtol=1e-12)


def test_fleet_series_from_columns_of_nothing_is_empty() -> None:
    empty = _random_samples(0, 1, 0)
    assert fleet_series_of(columns_of_frame(empty, FLEET_SERIES_SIGNALS), 0.0, 10.0).empty


def test_sweep_server_equals_the_per_target_loop() -> None:
    from analysis.sample_bins import prepare
    from views.pages.context import comparable_bins, sweep_server

    rng = np.random.default_rng(3)
    n = 6000
    history = pd.DataFrame(
        {
            "ts": np.arange(n, dtype=float),
            "target": rng.choice([f"s{i:02d}" for i in range(40)], n),
            "up": rng.random(n) > 0.05,
            "recipe_id": rng.choice(["a", "b", None], n),
            "accept_length": np.where(rng.random(n) > 0.1, rng.uniform(0, 4, n), np.nan),
            "step_latency_s": rng.uniform(-0.01, 0.05, n),
            "running": rng.uniform(0, 64, n),
            "avg_context_tokens": np.exp(rng.uniform(5, 12, n)),
        }
    )
    usable = prepare(history)
    for min_bins in (1, 3, 5, 9):
        per_target = {str(t): len(comparable_bins(g)) for t, g in usable.groupby("target")}
        spread = pd.Series(per_target, dtype="int64")
        expected = None if spread.empty or spread.max() < min_bins else str(spread.idxmax())
        assert sweep_server(usable, min_bins) == expected
    assert sweep_server(usable.iloc[:0]) is None
