"""History benchmark: snapshots appended per second, and reading one target × 24 h at a 5 s interval.

Baselines (same run, same rows): raw ``sqlite3.executemany`` into an identical table for appends, and a raw
``SELECT`` of the same rows into Python tuples for reads; the store adds snapshot conversion, pandas and
downsampling on top.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from pathlib import Path

from bench.measure import best_s
from collectors.model import SIGNAL_NAMES, Signals, TargetSnapshot
from collectors.sample_columns import SAMPLE_TEXTS, SAMPLE_VALUES, SampleColumns
from collectors.store.sqlite_store import SqliteStore

INTERVAL_S = 5.0
DAY_S = 24 * 3600.0


def _snapshots(targets: int, ts: float) -> list[TargetSnapshot]:
    signals = Signals(**{name: 0.1 * (index + 1) for index, name in enumerate(SIGNAL_NAMES)})
    return [
        TargetSnapshot(
            target=f"k3-{i:03d}",
            ts=ts,
            up=True,
            signals=signals,
            recipe_id="r-0123abcd",
            scrape_duration_s=0.01,
        )
        for i in range(targets)
    ]


def _append_rate(store: SqliteStore, targets: int, cycles: int) -> float:
    started = time.perf_counter()
    for cycle in range(cycles):
        store.append(_snapshots(targets, 1_700_000_000.0 + cycle * INTERVAL_S))
    return targets * cycles / (time.perf_counter() - started)


def _raw_append_rate(path: Path, targets: int, cycles: int) -> float:
    columns = ["ts", "target", "up", "error", "recipe_id", "deployment", "scrape_duration_s", *SIGNAL_NAMES]
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"CREATE TABLE samples ({', '.join(columns)})")
    db.execute("CREATE INDEX samples_target_ts ON samples (target, ts)")
    values = [0.1 * (index + 1) for index in range(len(SIGNAL_NAMES))]
    sql = f"INSERT INTO samples VALUES ({', '.join('?' for _ in columns)})"  # noqa: S608 - fixed placeholders
    started = time.perf_counter()
    for cycle in range(cycles):
        ts = 1_700_000_000.0 + cycle * INTERVAL_S
        with db:
            db.executemany(
                sql, [(ts, f"k3-{i:03d}", 1, None, "r-0123abcd", "", 0.01, *values) for i in range(targets)]
            )
    rate = targets * cycles / (time.perf_counter() - started)
    db.close()
    return rate


def main() -> dict[str, object]:
    targets = int(os.environ.get("SPECWATCH_BENCH_HISTORY_TARGETS", "10"))
    day_cycles = int(DAY_S / INTERVAL_S)  # 17 280 rows per target
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "history.sqlite")
        rate = _append_rate(store, 500, 40)  # the fleet shape: 500 rows per call, one call per cycle
        raw_rate = _raw_append_rate(Path(tmp) / "raw.sqlite", 500, 40)
        store.close()

        # A day of history for a small fleet, then one target's day read back.
        store = SqliteStore(Path(tmp) / "day.sqlite")
        fill = _append_rate(store, targets, day_cycles)
        start, end = 1_700_000_000.0, 1_700_000_000.0 + DAY_S

        def read(points: int) -> SampleColumns:  # every column, as the Server page reads one target
            return store.read_columns(start, end, SAMPLE_VALUES, points, ["k3-000"], texts=SAMPLE_TEXTS)

        downsampled = read(2000)
        full = read(day_cycles)
        read_downsampled_s = best_s(lambda: read(2000))
        read_full_s = best_s(lambda: read(day_cycles))
        raw = sqlite3.connect(Path(tmp) / "day.sqlite")
        read_raw_s = best_s(
            lambda: raw.execute(
                "SELECT * FROM samples WHERE target = ? AND ts >= ? AND ts <= ? ORDER BY ts",
                ("k3-000", start, end),
            ).fetchall()
        )
        raw.close()
        store.close()
    return {
        "append_rows_per_s": round(rate),
        "append_values_per_s": round(rate * len(SIGNAL_NAMES)),
        "raw_sqlite_append_rows_per_s": round(raw_rate),
        "append_ratio_vs_raw_sqlite": round(rate / raw_rate, 2),
        "day_fill_rows_per_s": round(fill),
        "day_rows_per_target": day_cycles,
        "targets_in_store": targets,
        "read_1_target_24h_downsampled_ms": round(read_downsampled_s * 1e3, 1),
        "downsampled_points": len(downsampled),
        "read_1_target_24h_full_ms": round(read_full_s * 1e3, 1),
        "full_points": len(full),
        "raw_sqlite_select_24h_ms": round(read_raw_s * 1e3, 1),
        "full_read_ratio_vs_raw_select": round(read_full_s / read_raw_s, 2),
    }
