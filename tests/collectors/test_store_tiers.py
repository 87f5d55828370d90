"""The history store's rollup tiers: what they hold, which one a read uses, retention, and migration."""

from __future__ import annotations

import dataclasses
import math
import pickle
import sqlite3
from pathlib import Path

import pytest

from collectors.model import SIGNAL_NAMES, Signals, TargetSnapshot
from collectors.store.sqlite_store import SCHEMA_VERSION, SqliteStore
from collectors.store.tiers import TIERS, Batch, partial_rows, tier_rows
from tests.history_frames import read_frame

DAY_S = 86_400.0
T0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600  # on an hour: every tier's buckets line up with the data


def _snap(target: str, ts: float, accept: float | None, up: bool = True) -> TargetSnapshot:
    return TargetSnapshot(
        target,
        ts,
        up,
        None if up else "connection refused",
        Signals(accept_length=accept, tpot_s=0.01 if accept is not None else None),
        "r-1",
        "east",
        0.004 if up else None,
    )


def _day(store: SqliteStore, targets: int = 2, hours: float = 24.0) -> None:
    """``hours`` of 5 s cycles: accept length of target i at cycle k is i + (k mod 12) / 12."""
    cycles = int(hours * 3600 / 5)
    for start in range(0, cycles, 720):  # an hour per append, as a catching-up collector might
        store.append(
            [
                _snap(f"t{i}", T0 + k * 5.0, i + (k % 12) / 12)
                for k in range(start, min(start + 720, cycles))
                for i in range(targets)
            ]
        )


def test_minute_rollup_holds_count_mean_min_max_last_across_batches(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "h.sqlite")
    values = [2.0, None, 3.5, 1.0, None, 4.0, 2.5, 3.0, None, 1.5, 2.0, 3.25]  # one minute at 5 s
    snaps = [_snap("a", T0 + 5.0 * k, v, up=v is not None or k != 4) for k, v in enumerate(values)]
    store.append(snaps[:5])  # the bucket is written by three cycles' batches and must merge
    store.append(snaps[5:9])
    store.append(snaps[9:])
    row = (
        store._connect()
        .execute(
            "SELECT n, up_n, accept_length_sum, accept_length_n, accept_length_min, accept_length_max, "
            "accept_length_last, error FROM rollup_60 WHERE target = 'a'"
        )
        .fetchall()
    )
    known = [v for v in values if v is not None]
    assert row == [(12, 11, pytest.approx(sum(known)), len(known), 1.0, 4.0, 3.25, "connection refused")]
    # The Fleet chart's 15 min read: one row, the mean of the known values (None is unknown, not 0).
    frame = read_frame(store, T0, T0 + 900, max_points=1)
    assert frame["accept_length"].tolist() == pytest.approx([sum(known) / len(known)])
    assert not frame["up"].iloc[0]  # a down sample inside the bucket shows
    store.close()


def test_long_ranges_read_a_tier_with_the_same_means_as_the_raw_rows(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "h.sqlite")
    _day(store)
    end = T0 + DAY_S - 5
    from_tier = read_frame(store, T0, end, max_points=150)  # 24 h on the Fleet chart: the 15 min tier
    per_target = from_tier.groupby("target").size()
    assert per_target.tolist() == [96, 96]  # ≥ half the pixels asked, not 17,280 rows
    # Every 15 min bucket holds whole 1 min cycles of k mod 12: its mean is i + 5.5/12 for target i.
    for i in (0, 1):
        means = from_tier[from_tier["target"] == f"t{i}"]["accept_length"]
        assert means.tolist() == pytest.approx([i + 5.5 / 12] * 96)
    raw = read_frame(store, end - 895, end, ["t1"], max_points=1500)  # 15 min on the Server page: raw
    assert len(raw) == 180
    assert raw["accept_length"].tolist()[:12] == pytest.approx([1 + k / 12 for k in range(12)])
    store.close()


def test_raw_rows_go_after_hours_and_the_rollups_keep_the_day(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "h.sqlite")
    _day(store, targets=1)
    end = T0 + DAY_S
    removed = store.prune(
        end - 7 * DAY_S, raw_older_than_ts=end - 6 * 3600, minute_older_than_ts=end - 12 * 3600
    )
    assert removed == 18 * 720  # 18 of 24 hours of raw rows
    day = read_frame(store, T0, end, max_points=1500)  # the 1 min tier has only 12 h left: 5 min serves
    assert day["ts"].min() < T0 + 300
    assert len(day) == 288
    assert day["accept_length"].tolist() == pytest.approx([5.5 / 12] * 288)
    assert store.count_samples() == 6 * 720
    assert [s.target for s in store.latest(end - 60)] == ["t0"]
    store.close()


# Version 1 as it was written, frozen on purpose (schema 2's is in test_store_migration.py).
_VERSION_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE samples (
    ts REAL NOT NULL, target TEXT NOT NULL, up INTEGER NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '', scrape_duration_s REAL, {signals}
);
CREATE INDEX samples_target_ts ON samples (target, ts);
CREATE INDEX samples_ts ON samples (ts);
CREATE TABLE events (ts REAL NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT);
CREATE TABLE recipes (recipe_id TEXT PRIMARY KEY, flags TEXT NOT NULL, first_seen REAL NOT NULL);
"""


def test_a_version_1_store_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(_VERSION_1.format(signals=", ".join(f"{n} REAL" for n in SIGNAL_NAMES)))
    rows = [
        (T0 + 5.0 * k, target, 1, None, "r-1", "east", 0.004, *([None] * len(SIGNAL_NAMES)))
        for k in range(720)
        for target in ("a", "b")
    ]
    rows = [(*r[:7], (1.0 if r[1] == "a" else 2.0) + (r[0] - T0) / 3600, *r[8:]) for r in rows]
    marks = ", ".join("?" * (7 + len(SIGNAL_NAMES)))
    old.executemany(f"INSERT INTO samples VALUES ({marks})", rows)  # noqa: S608 - placeholders only
    old.commit()
    old.close()

    store = SqliteStore(path)
    version = store._connect().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    assert store.count_samples() == 1440  # nothing lost
    assert [(s.target, s.ts) for s in store.latest()] == [("a", T0 + 3595.0), ("b", T0 + 3595.0)]
    hour = read_frame(store, T0, T0 + 3600, max_points=40)  # 1 min tier, regrouped into 90 s buckets
    a = hour[hour["target"] == "a"]["accept_length"].tolist()
    assert 30 <= len(a) <= 40
    assert a[0] == pytest.approx(1.0 + 57.5 / 3600)  # mean of the first 24 samples' ts offsets
    store.close()
    again = SqliteStore(path)  # opening a migrated store again must not double the rollups
    reread = read_frame(again, T0, T0 + 3600, ["a"], max_points=40)["accept_length"].tolist()
    assert reread == pytest.approx(a)
    assert not math.isnan(a[-1])
    again.close()


def test_backfilled_history_never_hides_the_live_latest_row(tmp_path: Path) -> None:
    # The demo writes its past newest hour first while the live collector already writes "now".
    store = SqliteStore(str(tmp_path / "h.sqlite"))
    try:
        store.append([_snap("a", 10_000.0, 2.0)])  # the live collector
        store.append([_snap("a", 5_000.0, 1.5), _snap("b", 6_000.0, 1.2)], backfill=True)
        latest = {s.target: s.ts for s in store.latest()}
        assert latest == {"a": 10_000.0, "b": 6_000.0}
        store.append([_snap("a", 9_000.0, 1.9)])  # a live write is always the latest (clock stepped back)
        assert {s.target: s.ts for s in store.latest()}["a"] == 9_000.0
    finally:
        store.close()


def test_a_cycle_rebucketed_for_every_tier_equals_each_tier_aggregated(tmp_path: Path) -> None:
    """One sample per target (a collector cycle) takes the fast path; a target twice, the general one."""
    cycle = [
        TargetSnapshot(
            f"t{i}",
            T0 + 3599.5 + i * 0.01,  # across a bucket edge of every tier
            i % 5 != 0,
            "connection refused" if i % 5 == 0 else None,
            Signals(accept_length=None if i % 3 == 0 else 2.0 + i / 100, tpot_s=0.01),
            None if i % 7 == 0 else "r-1",
            "east",
            None if i % 4 == 0 else 0.004,
        )
        for i in range(120)
    ]
    for batch in (cycle, [*cycle, dataclasses.replace(cycle[0], ts=T0 + 3700.0)]):
        got = tier_rows(Batch.of(batch))
        expected = [(tier, partial_rows(Batch.of(batch), tier)) for tier in TIERS]
        assert pickle.dumps(got) == pickle.dumps(expected)  # NaN-for-NaN identical
