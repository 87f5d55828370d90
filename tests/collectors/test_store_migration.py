"""A store written before the GPU and cost signals existed (schema 2) opens in place: every row kept, the new
columns added, old rows unknown for them, new rows written and read beside the old ones."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from collectors.model import Signals, TargetSnapshot
from collectors.store.sqlite_store import SCHEMA_VERSION, SqliteStore
from tests.history_frames import read_frame

# The signals of schema 2, as its tables spelled them (before issue 20).
SCHEMA_2_SIGNALS = (
    "accept_length", "tokens_per_verify", "spec_accept_rate", "tpot_s", "step_latency_s", "output_tok_s",
    "per_request_tok_s", "running", "queued", "max_running", "state_pool_usage", "kv_usage", "token_usage",
    "avg_context_tokens", "cache_hit_rate", "retractions_per_s", "ttft_s", "queue_time_s",
)  # fmt: skip
_RAW_COLUMNS = ", ".join(f"{name} REAL" for name in SCHEMA_2_SIGNALS)
_TIER_COLUMNS = ", ".join(
    f"{n}_sum REAL NOT NULL, {n}_n INTEGER NOT NULL, {n}_min REAL, {n}_max REAL, {n}_last REAL"
    for n in SCHEMA_2_SIGNALS
)
# Schema 2 as that collector wrote it, spelled out on purpose (`duplicates` pairs it with tiers.py and with
# version 1 in test_store_tiers.py): an old file's layout is frozen, whatever the store writes today.
SCHEMA_2 = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '2');
CREATE TABLE samples (
    ts REAL NOT NULL, target TEXT NOT NULL, up INTEGER NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '', scrape_duration_s REAL, {_RAW_COLUMNS}
);
CREATE INDEX samples_target_ts ON samples (target, ts);
CREATE INDEX samples_ts ON samples (ts);
CREATE TABLE events (ts REAL NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT);
CREATE INDEX events_ts ON events (ts);
CREATE TABLE recipes (recipe_id TEXT PRIMARY KEY, flags TEXT NOT NULL, first_seen REAL NOT NULL);
CREATE TABLE latest_samples (
    ts REAL NOT NULL, target TEXT PRIMARY KEY, up INTEGER NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '', scrape_duration_s REAL, {_RAW_COLUMNS}
);
""" + "".join(  # noqa: S608 - schema text from the names above, no input
    f"""
CREATE TABLE rollup_{seconds} (
    target TEXT NOT NULL, bucket_ts REAL NOT NULL, n INTEGER NOT NULL, up_n INTEGER NOT NULL,
    ts_sum REAL NOT NULL, last_ts REAL NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '',
    scrape_duration_s_sum REAL NOT NULL, scrape_duration_s_n INTEGER NOT NULL, {_TIER_COLUMNS},
    PRIMARY KEY (target, bucket_ts)
) WITHOUT ROWID;
CREATE INDEX rollup_{seconds}_bucket ON rollup_{seconds} (bucket_ts);
"""
    for seconds in (60, 300, 900, 3600)
)
T0 = 1_700_000_000.0  # a whole hour


def write_schema_2_store(path: Path) -> None:
    """Two targets, an hour of 5 s rows each with output 1000 tok/s (raw, latest and every tier), as the
    collector of schema 2 wrote them."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_2)
    marks = ", ".join("?" * (7 + len(SCHEMA_2_SIGNALS)))
    output = SCHEMA_2_SIGNALS.index("output_tok_s")
    for target in ("a", "b"):
        rows = []
        for k in range(720):
            values: list[float | None] = [None] * len(SCHEMA_2_SIGNALS)
            values[output] = 1000.0
            rows.append((T0 + 5.0 * k, target, 1, None, "r-1", "east", 0.004, *values))
        db.executemany(f"INSERT INTO samples VALUES ({marks})", rows)  # noqa: S608 - placeholders only
        db.execute(f"INSERT INTO latest_samples VALUES ({marks})", rows[-1])  # noqa: S608
        for seconds in (60, 300, 900, 3600):
            per_bucket = int(seconds // 5)
            for start in range(0, 720, per_bucket):
                bucket = rows[start : start + per_bucket]
                n = len(bucket)
                stats: list[float | int | None] = []
                for index in range(len(SCHEMA_2_SIGNALS)):
                    known = [float(r[7 + index]) for r in bucket if r[7 + index] is not None]  # type: ignore[arg-type]
                    stats += [sum(known), len(known), min(known, default=None), max(known, default=None)]
                    stats.append(known[-1] if known else None)
                head = (target, T0 + seconds * (start // per_bucket), n, n, sum(float(r[0]) for r in bucket))  # type: ignore[arg-type]
                row = (*head, float(bucket[-1][0]), None, "r-1", "east", 0.004 * n, n, *stats)  # type: ignore[arg-type]
                db.execute(
                    f"INSERT INTO rollup_{seconds} VALUES ({', '.join('?' * len(row))})",  # noqa: S608
                    row,
                )
    db.commit()
    db.close()


def test_a_schema_2_store_gains_the_gpu_columns_in_place(tmp_path: Path) -> None:
    path = tmp_path / "before-issue-20.sqlite"
    write_schema_2_store(path)
    size_before = path.stat().st_size

    store = SqliteStore(path)
    version = store._connect().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),) == ("3",)
    assert store.count_samples() == 1440  # nothing lost
    latest = store.latest()
    assert [(s.target, s.signals.output_tok_s) for s in latest] == [("a", 1000.0), ("b", 1000.0)]
    assert all(s.signals.tokens_per_joule is None and s.signals.gpu_count is None for s in latest)
    hour = read_frame(store, T0, T0 + 3600, max_points=60)  # the 1 min tier
    assert len(hour[hour["target"] == "a"]) == 60
    assert set(hour["output_tok_s"]) == {1000.0}
    assert hour["tokens_per_joule"].isna().all()  # old buckets: no sample of the new signal, unknown
    assert path.stat().st_size < size_before * 1.05  # columns added, no table rewritten

    # The next hour, written by this collector: GPU figures known, read beside the old ones.
    gpu = Signals(output_tok_s=1200.0, gpu_count=2.0, gpu_power_w=2400.0, tokens_per_joule=0.5,
                  output_tok_s_per_gpu=600.0, usd_per_million_tokens=1.16)  # fmt: skip
    store.append(
        [TargetSnapshot("a", T0 + 3600 + 5.0 * k, True, signals=gpu, deployment="east") for k in range(720)]
    )
    two_hours = read_frame(store, T0, T0 + 7200, ["a"], 120)
    old, new = two_hours[two_hours["ts"] < T0 + 3600], two_hours[two_hours["ts"] >= T0 + 3600]
    assert len(old) == len(new) == 60
    assert old["tokens_per_joule"].isna().all()
    assert set(old["output_tok_s"]) == {1000.0}
    assert new["tokens_per_joule"].tolist() == pytest.approx([0.5] * 60)
    assert new["output_tok_s_per_gpu"].tolist() == pytest.approx([600.0] * 60)
    columns = store.read_columns(T0, T0 + 7200, ["output_tok_s_per_gpu"], 120, targets=["a"])
    assert int((columns.values["output_tok_s_per_gpu"] == 600.0).sum()) == 60
    assert store.latest()[0].signals.usd_per_million_tokens == 1.16
    store.close()

    again = SqliteStore(path)  # reopened: nothing to migrate, nothing lost
    assert again.count_samples() == 2160
    again.close()
