"""Fleet-wide column reads go a batch of targets (tiers) or a slice of the range (raw rows) at a time: the
result is the one read of everything gives, to the bit, whatever the batch size."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.model import Signals, TargetSnapshot
from collectors.sample_columns import SAMPLE_TEXTS, SampleColumns
from collectors.store import columns as store_columns
from collectors.store.sqlite_store import SqliteStore
from tests.history_frames import oracle_frame

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600
SIGNALS = ("accept_length", "running", "output_tok_s", "ttft_s")
TARGETS = ["c", "a", "e", "b", "d", "f", "g"]  # written out of name order
LATE = {"d": 0.5, "g": 0.8}  # rows only from this share of the history on
EARLY = {"b": 0.4}  # rows only until this share
ONCE = 1_000_000  # a batch as large as the fleet: one read of everything, as before batches


def _snap(i: int, target: str, k: int) -> TargetSnapshot:
    up = (i + k) % 23 != 0
    value = None if (i + k) % 17 == 0 else i + (k % 12) / 12 + k / 7
    signals = {name: None if value is None else value * (n + 1.5) for n, name in enumerate(SIGNALS)}
    recipe = None if (i + k) % 19 == 0 else f"r-{(k // 84 + i) % 3}"
    return TargetSnapshot(
        target, T0 + 5.0 * k, up, None if up else "refused", Signals(**signals), recipe, "", 0.004
    )


def _fill(store: SqliteStore, cycles: int) -> None:
    for k in range(cycles):
        share = k / cycles
        rows = [
            _snap(i, t, k)
            for i, t in enumerate(TARGETS)
            if LATE.get(t, 0.0) <= share and share <= EARLY.get(t, 1.0)
        ]
        if k % 50 == 7:
            rows.append(_snap(9, "a", k))  # a second row of one target at one time: ties keep write order
        store.append(rows)


def _read(
    store: SqliteStore, batch: int, start: float, end: float, points: int, texts: bool
) -> SampleColumns:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_columns, "BATCH_TARGETS", batch)
        return store.read_columns(start, end, SIGNALS, points, texts=SAMPLE_TEXTS if texts else ())


def _identical(got: SampleColumns, expected: SampleColumns) -> None:
    assert list(got.target) == list(expected.target)
    for name in ("code", "ts", "up", "weight"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), strict=True)
    assert got.values.keys() == expected.values.keys()
    for name, values in expected.values.items():
        assert got.values[name].tobytes() == values.tobytes(), name  # to the bit, NaN where NaN
    assert got.texts.keys() == expected.texts.keys()
    for name, texts in expected.texts.items():
        assert list(got.texts[name]) == list(texts), name


def _as_frame_read(store: SqliteStore, got: SampleColumns, start: float, end: float, points: int) -> None:
    frame = pd.DataFrame(
        {"target": got.target, "ts": got.ts, "up": got.up.astype(bool), **got.texts, **got.values}
    )
    full = oracle_frame(store, start, end, None, points)[["target", "ts", "up", *got.texts, *SIGNALS]]
    pd.testing.assert_frame_equal(frame, full.reset_index(drop=True), check_exact=True)
    names = sorted(set(full["target"]))
    assert list(got.code) == [names.index(t) for t in full["target"]]


@pytest.fixture(scope="module")
def raw_store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    store = SqliteStore(tmp_path_factory.mktemp("raw") / "h.sqlite")
    _fill(store, 12 * 30)  # 30 min of 5 s cycles
    return store


@pytest.fixture(scope="module")
def tier_store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    store = SqliteStore(tmp_path_factory.mktemp("tier") / "h.sqlite")
    _fill(store, 12 * 60 * 3)  # 3 h
    store.prune(
        0.0, raw_older_than_ts=T0 + 2.5 * 3600
    )  # raw rows gone before the last half hour: tiers serve
    return store


@pytest.mark.parametrize("batch", [1, 2, 3, 5])
@pytest.mark.parametrize("texts", [True, False])
@pytest.mark.parametrize(
    ("range_s", "points"),
    [
        (900.0, 40),  # regrouped
        (900.0, 2000),  # every row
        (1800.0, 7),
        (1790.0, 300),  # regrouped, buckets and slices off the 5 s grid
        (1200.0, 180),  # the late targets fit, the others do not: the first pieces are regrouped afterwards
    ],
)
def test_raw_reads_in_slices_equal_one_read(
    raw_store: SqliteStore, batch: int, texts: bool, range_s: float, points: int
) -> None:
    end = T0 + 5.0 * 12 * 30
    start = end - range_s
    got = _read(raw_store, batch, start, end, points, texts)
    assert len(got) > 0
    _identical(got, _read(raw_store, ONCE, start, end, points, texts))
    _as_frame_read(raw_store, got, start, end, points)


@pytest.mark.parametrize("batch", [1, 2, 3, 5])
@pytest.mark.parametrize("texts", [True, False])
@pytest.mark.parametrize(
    ("range_s", "points"),
    [
        (3 * 3600.0, 300),  # minute buckets, not regrouped
        (3 * 3600.0, 20),  # regrouped
        (2 * 3600.0, 120),
        (3 * 3600.0, 7),
        (1.2 * 3600.0, 40),  # only some targets in range for some batches
    ],
)
def test_tier_reads_in_batches_equal_one_read(
    tier_store: SqliteStore, batch: int, texts: bool, range_s: float, points: int
) -> None:
    end = T0 + 3 * 3600.0
    start = end - range_s
    got = _read(tier_store, batch, start, end, points, texts)
    assert len(got) > 0
    _identical(got, _read(tier_store, ONCE, start, end, points, texts))
    _as_frame_read(tier_store, got, start, end, points)


def test_a_tier_read_regroups_the_batches_before_the_first_with_too_many_rows(tmp_path: Path) -> None:
    """ "a" has few rows, "b" many: the decision to regroup comes with b's batch, and a's must follow it."""
    store = SqliteStore(tmp_path / "h.sqlite")
    for k in range(12 * 60 * 2):
        rows = [_snap(1, "b", k)]
        if k % 60 == 0:
            rows.append(_snap(0, "a", k))
        store.append(rows)
    store.prune(0.0, raw_older_than_ts=T0 + 2 * 3600)
    end = T0 + 2 * 3600.0
    got = _read(store, 1, end - 7200.0, end, 30, True)
    _identical(got, _read(store, ONCE, end - 7200.0, end, 30, True))
    _as_frame_read(store, got, end - 7200.0, end, 30)
    assert int((got.target == "b").sum()) <= 31


@pytest.mark.parametrize("batch", [1, 3, ONCE])
def test_an_empty_range_reads_empty_columns(
    raw_store: SqliteStore, tier_store: SqliteStore, batch: int
) -> None:
    for store, start in ((raw_store, T0 + 86_400.0), (tier_store, T0 - 86_400.0 * 3)):
        got = _read(store, batch, start, start + 900.0, 300, True)
        assert len(got) == 0
        assert set(got.texts) == set(SAMPLE_TEXTS)
        assert all(len(texts) == 0 for texts in got.texts.values())
        assert set(got.values) == set(SIGNALS)
    assert len(_read(raw_store, batch, T0 - 600.0, T0 - 60.0, 40, False)) == 0  # before the first row


def test_a_read_leaves_no_transaction_open(raw_store: SqliteStore) -> None:
    _read(raw_store, 2, T0, T0 + 900.0, 40, True)
    assert not raw_store._connect().in_transaction


def _plans(store: SqliteStore, start: float, end: float, points: int) -> list[tuple[str, str]]:
    """Each SELECT a read ran (bound values spliced in by SQLite) and its query plan."""
    statements: list[str] = []
    connection = store._connect()
    connection.set_trace_callback(statements.append)
    try:
        _read(store, 2, start, end, points, True)
    finally:
        connection.set_trace_callback(None)
    probe = sqlite3.connect(store.path)
    try:
        return [
            (sql, " | ".join(str(row[3]) for row in probe.execute(f"EXPLAIN QUERY PLAN {sql}")))
            for sql in statements
            if "ts_sum" in sql or "rowid" in sql
        ]
    finally:
        probe.close()


def test_tier_batches_walk_the_primary_key_and_raw_slices_the_ts_index(
    raw_store: SqliteStore, tier_store: SqliteStore
) -> None:
    tier = _plans(tier_store, T0 + 3600.0, T0 + 3 * 3600.0, 120)
    assert len(tier) == 4  # 7 targets, 2 at a time
    for _, plan in tier:
        assert "USING PRIMARY KEY (target=? AND bucket_ts>? AND bucket_ts<?)" in plan
        assert "_bucket" not in plan
    end = T0 + 5.0 * 12 * 30
    raw = _plans(raw_store, end - 900.0, end, 40)
    assert len(raw) == 4  # a quarter of the range each
    for _, plan in raw:
        assert "USING INDEX samples_ts (ts>? AND ts<?)" in plan


def test_batches_that_outgrow_the_columns_sized_for_them_still_fit() -> None:
    """Tier pieces go into columns sized for a row per bucket; should a tier ever hold more, they grow."""
    rows = SampleColumns(
        np.array(["a", "a", "b"], dtype=object),
        np.array([0, 0, 1]),
        np.array([1.0, 2.0, 1.5]),
        np.ones(3),
        np.array([1.0, 2.0, 3.0]),
        {"running": np.array([4.0, np.nan, 6.0])},
        {"recipe_id": np.array(["r", None, "s"], dtype=object)},
    )
    parts = store_columns._Parts(["running"], ["recipe_id"], 0.0, 1.0, 10, rows=1)
    parts.add(rows)
    parts.add(replace(rows, target=np.array(["c", "c", "d"], dtype=object)))
    got = parts.result()
    assert list(got.target) == ["a", "a", "b", "c", "c", "d"]
    assert list(got.code) == [0, 0, 1, 2, 2, 3]
    np.testing.assert_array_equal(got.ts, [1.0, 2.0, 1.5] * 2)
    np.testing.assert_array_equal(got.values["running"], [4.0, np.nan, 6.0] * 2)
    assert list(got.texts["recipe_id"]) == ["r", None, "s"] * 2
