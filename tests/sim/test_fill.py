"""``python -m sim history``: a store filled with a simulated past, every tier as the collector writes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collectors.model import SIGNAL_NAMES, Signals, TargetSnapshot
from collectors.store.history import SqliteStore
from sim.fill import fill_store

ROOT = Path(__file__).resolve().parents[2]
END = 1_760_000_000.0


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", "history", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


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
    three_hours = store.read_samples(newest - 3 * 3600, newest, max_points=150)  # the 1 min tier
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
