"""``collectors.store.integrity``: what counts as a torn store, the time bound of the check, the names a moved
file gets, and connections leaving a moved file (real files, real SQLite)."""

from __future__ import annotations

import logging
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest

from collectors.errors import StoreError
from collectors.model import TargetSnapshot
from collectors.store.integrity import check_store, is_corruption, quarantine, stamp_store_id
from collectors.store.sqlite_store import SqliteStore

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def a_store(path: Path, rows: int = 200) -> None:
    stamp_store_id(str(path))
    store = SqliteStore(path)
    try:
        store.append([TargetSnapshot(target=f"t{i % 7}", ts=NOW + i, up=True) for i in range(rows)])
    finally:
        store.close()


def test_a_sound_store_a_missing_one_and_an_empty_one_are_fine(tmp_path: Path) -> None:
    a_store(tmp_path / "ok.sqlite")
    assert check_store(str(tmp_path / "ok.sqlite")) is None
    assert check_store(str(tmp_path / "missing.sqlite")) is None
    (tmp_path / "empty.sqlite").write_bytes(b"")
    assert check_store(str(tmp_path / "empty.sqlite")) is None


def test_a_wal_without_its_database_is_a_problem(tmp_path: Path) -> None:
    """A new store at the path would replay it into itself."""
    (tmp_path / "h.sqlite-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)
    problem = check_store(str(tmp_path / "h.sqlite"))
    assert problem is not None
    assert "without its database" in problem


def test_the_check_gives_up_within_its_budget_and_counts_as_fine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "big.sqlite"
    a_store(path, rows=5000)
    caplog.set_level(logging.WARNING)
    assert check_store(str(path), timeout_s=0.0) is None
    assert "did not finish within 0 s" in caplog.text
    # mid-run, a write already said the file is damaged: an unfinished check does not clear it
    assert check_store(str(path), timeout_s=0.0, unfinished="the write's word") == "the write's word"


def test_sqlite_damage_is_corruption_and_other_failures_are_not() -> None:
    assert not is_corruption(StoreError("history store: read failed"))
    wrapped = StoreError("history store: write failed")
    wrapped.__cause__ = sqlite3.DatabaseError("database disk image is malformed")
    assert is_corruption(wrapped)
    assert is_corruption(sqlite3.DatabaseError("file is not a database"))
    assert not is_corruption(sqlite3.OperationalError("database is locked"))
    assert not is_corruption(sqlite3.OperationalError("database or disk is full"))


def test_quarantine_keeps_every_file_under_a_name_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    names = []
    for _ in range(2):  # twice in the same second: the second gets a counter
        a_store(path)
        Path(f"{path}-wal").write_bytes(b"wal")
        names.append(quarantine(str(path), NOW))
    assert [Path(n).name for n in names] == [
        "history.sqlite.corrupt-20270115T080000Z",
        "history.sqlite.corrupt-20270115T080000Z-1",
    ]
    for name in names:
        assert Path(name).exists()
        assert Path(f"{name}-wal").read_bytes() == b"wal"  # the WAL under the matching name
    assert not path.exists()
    assert not Path(f"{path}-wal").exists()  # a new store at the path starts without the old WAL


def test_a_connection_left_on_a_moved_file_reopens_on_the_new_store(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    a_store(path)
    store = SqliteStore(path)
    try:
        assert store.count_samples() == 200
        moved = quarantine(str(path), NOW)
        SqliteStore(path).close()  # the new store's tables
        assert store.count_samples() == 0  # this process's open connection now reads the new file
        store.append([TargetSnapshot(target="t", ts=NOW, up=True)])
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1
    with closing(sqlite3.connect(moved)) as db:
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 200  # untouched


def test_the_budget_cuts_the_b_tree_walk_itself(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Most of quick_check is one SQLite step (the b-tree walk): the budget must interrupt it, not wait."""
    path = tmp_path / "large.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE t (b BLOB)")
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) "
            "INSERT INTO t SELECT randomblob(100) FROM n"
        )
        db.commit()
    started = time.monotonic()
    assert check_store(str(path)) is None  # sound, checked whole
    whole_s = time.monotonic() - started
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    assert check_store(str(path), timeout_s=whole_s / 10) is None
    assert time.monotonic() - started < whole_s / 2
    assert "did not finish" in caplog.text
