"""``python -m sim history``: a store filled with a simulated past, every tier as the collector writes it."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import yaml

import sim.fill as fill_module
from collectors.model import SIGNAL_NAMES, Signals, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from sim.fill import Segment, demo_history, fill_store, write_history
from tests.history_frames import read_frame
from tests.loopback import run_module

END = 1_760_000_000.0


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("sim", "history", *args, timeout_s=120)


def _config(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"store": {"path": str(tmp_path / "h.sqlite"), "raw_retention_h": 1}, **sections})
    )
    return path


def test_the_command_fills_every_tier_and_refuses_a_store_that_has_history(tmp_path: Path) -> None:
    config = _config(tmp_path, sim={"scenario": "demo", "servers": 3})
    done = _run("--config", str(config), "--hours", "3")
    assert done.returncode == 0, done.stderr
    assert "3 simulated servers" in done.stdout
    store = SqliteStore(tmp_path / "h.sqlite")
    raw = store._connect().execute("SELECT MIN(ts), MAX(ts), COUNT(*) FROM samples").fetchone()
    assert raw[1] - raw[0] == pytest.approx(3600 - 5, abs=60)  # raw rows only within raw retention
    assert raw[2] == pytest.approx(3 * 720, abs=3 * 12)
    newest = raw[1]
    three_hours = read_frame(store, newest - 3 * 3600, newest, max_points=150)  # the 1 min tier
    assert three_hours["ts"].min() < newest - 3 * 3600 + 120
    assert three_hours["target"].nunique() == 3
    assert three_hours["accept_length"].notna().mean() > 0.8
    assert [s.ts for s in store.latest()] == [newest] * 3
    store.close()

    again = _run("--config", str(config), "--hours", "3")
    assert again.returncode == 1
    assert "already holds samples" in again.stderr
    assert "Traceback" not in again.stderr


def test_a_config_without_a_simulated_fleet_is_refused_in_words(tmp_path: Path) -> None:
    done = _run("--config", str(_config(tmp_path)), "--hours", "1")
    assert done.returncode == 2
    assert "no `sim:` section" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "h.sqlite").exists()


def test_the_raw_hours_roll_up_exactly_as_the_collectors_appends_would(tmp_path: Path) -> None:
    fill_store(tmp_path / "filled.sqlite", servers=2, hours=1, raw_hours=1, end_ts=END)
    filled = SqliteStore(tmp_path / "filled.sqlite")
    rows = filled._connect().execute("SELECT * FROM samples ORDER BY ts").fetchall()
    replayed = SqliteStore(tmp_path / "replayed.sqlite")
    by_ts: dict[float, list[TargetSnapshot]] = {}
    for row in rows:  # one append per cycle, as the collector writes
        signals = Signals(**dict(zip(SIGNAL_NAMES, row[7:], strict=True)))
        by_ts.setdefault(row[0], []).append(
            TargetSnapshot(row[1], row[0], bool(row[2]), row[3], signals, row[4], row[5], row[6])
        )
    for cycle in by_ts.values():
        replayed.append(cycle)
    for table in ("rollup_60", "rollup_900", "rollup_3600"):
        query = f"SELECT * FROM {table} ORDER BY target, bucket_ts"  # noqa: S608 - a constant table name
        ours = filled._connect().execute(query).fetchall()
        assert ours
        assert [_rounded(r) for r in ours] == [
            _rounded(r) for r in replayed._connect().execute(query).fetchall()
        ]
    filled.close()
    replayed.close()


def _rounded(row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def _tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(path)
    try:
        names = [
            r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
        return {n: sorted(db.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}  # noqa: S608
    finally:
        db.close()


def test_the_bulk_load_writes_exactly_what_merging_upserts_write(tmp_path: Path) -> None:
    # The exclusive load INSERTs new buckets and defers indexes; beside a live collector every row is
    # upserted. Same segments, same content to the last bit (2 h: raw and minute-sampled hours, chunks
    # straddling 5 min, 15 min and 1 h buckets).
    fill_store(tmp_path / "bulk.sqlite", servers=3, hours=2, raw_hours=1, end_ts=END + 17.0)
    segment = Segment(math.floor((END + 17.0 - 7200) / 60) * 60, 7200.0, 0, 3600.0)
    write_history(
        tmp_path / "upserted.sqlite", [segment], scenario="demo", servers=3, step_s=5.0, exclusive=False
    )
    bulk, upserted = _tables(tmp_path / "bulk.sqlite"), _tables(tmp_path / "upserted.sqlite")
    assert bulk.keys() == upserted.keys()
    for table, rows in bulk.items():
        assert rows == upserted[table], table
    indexes = "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name"
    found = [
        sqlite3.connect(tmp_path / p).execute(indexes).fetchall() for p in ("bulk.sqlite", "upserted.sqlite")
    ]
    assert found[0] == found[1]  # every index rebuilt after the load
    assert len(found[0]) >= 7


def test_the_demo_writes_its_past_newest_hour_first_beside_the_live_collector(tmp_path: Path) -> None:
    path = tmp_path / "demo.sqlite"
    live = SqliteStore(path)
    live.append(
        [TargetSnapshot("k3-east-0", END + 30.0, True, None, Signals(running=7.0), "r", "east", 0.004)]
    )
    stop = threading.Event()
    hours_seen: list[float] = []

    def progress(done_s: float, total_s: float) -> None:
        hours_seen.append(done_s)
        if done_s >= 3600.0:  # the first segment written: stop before the second
            stop.set()

    report = demo_history(path, servers=None, hours=3, end_ts=END, stop=stop, progress=progress)
    assert report.raw_rows == 11 * 720  # one hour of the eleven demo servers, then stopped
    first, newest = live._connect().execute("SELECT MIN(ts), MAX(ts) FROM samples").fetchone()
    assert first == pytest.approx(END - 3600 + 5)  # the newest hour came first
    assert newest == END + 30.0
    latest = {s.target: s for s in live.latest()}
    assert latest["k3-east-0"].ts == END + 30.0  # the live row stays the latest ...
    assert latest["k3-east-0"].signals.running == 7.0
    assert {s.ts for t, s in latest.items() if t != "k3-east-0"} == {END}  # ... the others end at END
    assert live.read_events(END - 3600, END)  # the hour's events came with it
    live.close()


@pytest.fixture
def plain_main(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spawned child re-runs the parent's ``__main__``; in this process an earlier AppTest may have left
    Streamlit's temporary script there; ``python -m sim history`` (the child's one caller) has its own."""
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))


@pytest.mark.usefixtures("plain_main")
def test_sampling_in_a_child_process_writes_the_same_store(tmp_path: Path) -> None:
    # The command simulates in a child process while the parent writes: the parts cross as arrays.
    for name, child in (("here.sqlite", False), ("child.sqlite", True)):
        fill_store(
            tmp_path / name,
            servers=2,
            hours=1,
            raw_hours=0.5,
            end_ts=END,
            sample_in_process=child,
            gpu_hour_usd=2.5,  # the price crosses to the child too
        )
    here, there = _tables(tmp_path / "here.sqlite"), _tables(tmp_path / "child.sqlite")
    assert here == there
    assert len(here["samples"]) == 2 * 360
    db = sqlite3.connect(tmp_path / "child.sqlite")
    try:
        (priced,) = db.execute("SELECT count(usd_per_million_tokens) FROM samples").fetchone()
    finally:
        db.close()
    assert priced > 360  # most samples of two busy servers are priced


@pytest.mark.usefixtures("plain_main")
def test_a_failing_simulating_child_is_an_error_not_a_hang() -> None:
    parts = fill_module._sampled_in_child("no-such-scenario", 1, [Segment(END, 60.0, 0, 0.0)], 5.0)
    with pytest.raises(RuntimeError, match="simulating history failed"):
        list(parts)
