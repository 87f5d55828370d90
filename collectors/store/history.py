"""History storage: a small interface and its embedded SQLite (WAL) implementation.

Rows are one per target per cycle (wide: one column per signal), so a target's history is one indexed range
scan
and long ranges are downsampled in SQL (average per time bucket) before they reach pandas or a browser.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

import pandas as pd

from collectors.errors import StoreError
from collectors.model import SIGNAL_NAMES, Event, Recipe, Signals, TargetSnapshot
from collectors.store.connections import ThreadConnections

SCHEMA_VERSION = 1

_SAMPLE_COLUMNS: tuple[str, ...] = (
    "ts",
    "target",
    "up",
    "error",
    "recipe_id",
    "deployment",
    "scrape_duration_s",
    *SIGNAL_NAMES,
)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    ts REAL NOT NULL, target TEXT NOT NULL, up INTEGER NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '', scrape_duration_s REAL,
    {", ".join(f"{name} REAL" for name in SIGNAL_NAMES)}
);
CREATE INDEX IF NOT EXISTS samples_target_ts ON samples (target, ts);
CREATE INDEX IF NOT EXISTS samples_ts ON samples (ts);
CREATE TABLE IF NOT EXISTS events (ts REAL NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT);
CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
CREATE TABLE IF NOT EXISTS recipes (
    recipe_id TEXT PRIMARY KEY, flags TEXT NOT NULL, first_seen REAL NOT NULL
);
"""


class HistoryStore(Protocol):
    """What the collector writes and the views and alerts read. Another backend implements the same."""

    def append(self, snapshots: Sequence[TargetSnapshot]) -> None: ...
    def add_events(self, events: Sequence[Event]) -> None: ...
    def put_recipe(self, recipe: Recipe, ts: float) -> None: ...
    def recipes(self) -> dict[str, Recipe]: ...
    def latest(self, since_ts: float | None = None) -> list[TargetSnapshot]: ...
    def read_samples(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None, max_points: int = 2000
    ) -> pd.DataFrame: ...
    def read_events(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None
    ) -> list[Event]: ...
    def prune(self, older_than_ts: float) -> int: ...
    def count_samples(self) -> int: ...
    def close(self) -> None: ...


def _placeholders(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


class SqliteStore:
    """Embedded history in one SQLite file (WAL): no server to run, safe against SIGKILL between cycles.

    One connection per thread: the collector thread writes, Streamlit's script threads read concurrently.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = str(path)
        self._connections = ThreadConnections(self.path, busy_timeout_s=busy_timeout_s, what="history store")
        self._migrate()

    def _connect(self) -> sqlite3.Connection:
        return self._connections.get()

    def _migrate(self) -> None:
        connection = self._connect()
        try:
            with connection:
                connection.executescript(_SCHEMA)
                row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is None:
                    connection.execute(
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                    )
                elif int(row[0]) > SCHEMA_VERSION:
                    raise StoreError(
                        f"history store {self.path} has schema {row[0]}, newer than this specwatch "
                        f"({SCHEMA_VERSION}); upgrade specwatch or point store.path elsewhere"
                    )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot initialise history store {self.path}: {exc}") from exc

    def _write(self, sql: str, rows: Iterable[Sequence[object]]) -> None:
        try:
            connection = self._connect()
            with connection:
                connection.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: write failed: {exc}") from exc

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        try:
            return self._connect().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: read failed: {exc}") from exc

    # -- writes ----------------------------------------------------------------------------------------------
    def append(self, snapshots: Sequence[TargetSnapshot]) -> None:
        sql = f"INSERT INTO samples ({', '.join(_SAMPLE_COLUMNS)}) VALUES ({_placeholders(_SAMPLE_COLUMNS)})"
        self._write(
            sql,
            (
                (
                    s.ts,
                    s.target,
                    int(s.up),
                    s.error,
                    s.recipe_id,
                    s.deployment,
                    s.scrape_duration_s,
                    *(getattr(s.signals, name) for name in SIGNAL_NAMES),
                )
                for s in snapshots
            ),
        )

    def add_events(self, events: Sequence[Event]) -> None:
        self._write(
            "INSERT INTO events (ts, target, kind, detail) VALUES (?, ?, ?, ?)",
            ((e.ts, e.target, e.kind, e.detail) for e in events),
        )

    def put_recipe(self, recipe: Recipe, ts: float) -> None:
        self._write(
            "INSERT OR IGNORE INTO recipes (recipe_id, flags, first_seen) VALUES (?, ?, ?)",
            [(recipe.recipe_id, json.dumps(recipe.as_dict()), ts)],
        )

    def prune(self, older_than_ts: float) -> int:
        try:
            connection = self._connect()
            with connection:
                removed = connection.execute("DELETE FROM samples WHERE ts < ?", (older_than_ts,)).rowcount
                connection.execute("DELETE FROM events WHERE ts < ?", (older_than_ts,))
            return int(removed)
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: prune failed: {exc}") from exc

    # -- reads -----------------------------------------------------------------------------------------------
    def recipes(self) -> dict[str, Recipe]:
        result: dict[str, Recipe] = {}
        for recipe_id, flags in self._query("SELECT recipe_id, flags FROM recipes"):
            recipe = Recipe.from_flags(json.loads(str(flags)))
            result[str(recipe_id)] = recipe
        return result

    def latest(self, since_ts: float | None = None) -> list[TargetSnapshot]:
        """The newest snapshot of each target (seen after ``since_ts``, if given), ordered by target.

        Newest means last written (rowid), not largest ``ts``: after the wall clock steps back, rows stamped
        in the "future" must not hide what was scraped since. Snapshots are written in scrape order.
        """
        where = "WHERE ts >= ?" if since_ts is not None else ""
        params: tuple[object, ...] = (since_ts,) if since_ts is not None else ()
        rows = self._query(
            f"SELECT {', '.join(_SAMPLE_COLUMNS)} FROM samples WHERE rowid IN "
            f"(SELECT MAX(rowid) FROM samples {where} GROUP BY target) "
            "ORDER BY target",
            params,
        )
        return [_snapshot_from_row(row) for row in rows]

    def read_samples(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None, max_points: int = 2000
    ) -> pd.DataFrame:
        """Samples in [start_ts, end_ts], at most ``max_points`` per target (bucket means beyond that).

        Columns: ts (unix s), target, up, error, recipe_id, deployment, scrape_duration_s, then SIGNAL_NAMES.
        """
        where = ["ts >= ?", "ts <= ?"]
        params: list[object] = [start_ts, end_ts]
        if targets is not None:
            if not targets:
                return _empty_frame()
            where.append(f"target IN ({_placeholders(targets)})")
            params.extend(targets)
        clause = " AND ".join(where)
        counts = self._query(f"SELECT COUNT(*), COUNT(DISTINCT target) FROM samples WHERE {clause}", params)
        total, distinct = (int(str(v)) for v in counts[0])
        if total == 0:
            return _empty_frame()
        if total <= max_points * max(distinct, 1):
            rows = self._query(
                f"SELECT {', '.join(_SAMPLE_COLUMNS)} FROM samples WHERE {clause} ORDER BY target, ts", params
            )
        else:
            bucket_s = max((end_ts - start_ts) / max_points, 1e-9)
            aggregates = [
                "AVG(ts)",
                "target",
                "MIN(up)",
                "MAX(error)",
                "MAX(recipe_id)",
                "MAX(deployment)",
                "AVG(scrape_duration_s)",
                *(f"AVG({name})" for name in SIGNAL_NAMES),
            ]
            rows = self._query(
                f"SELECT {', '.join(aggregates)} FROM samples WHERE {clause} "
                f"GROUP BY target, CAST((ts - ?) / ? AS INTEGER) ORDER BY target, 1",
                [*params, start_ts, bucket_s],
            )
        frame = pd.DataFrame.from_records(rows, columns=list(_SAMPLE_COLUMNS))
        frame["up"] = frame["up"].astype(bool)
        for name in ("scrape_duration_s", *SIGNAL_NAMES):
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        return frame

    def read_events(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None
    ) -> list[Event]:
        where = "ts >= ? AND ts <= ?"
        params: list[object] = [start_ts, end_ts]
        if targets is not None:
            if not targets:
                return []
            where += f" AND target IN ({_placeholders(targets)})"
            params.extend(targets)
        rows = self._query(f"SELECT ts, target, kind, detail FROM events WHERE {where} ORDER BY ts", params)
        # kind is one of EventKind by construction: only Event objects are ever written.
        return [
            Event(float(str(ts)), str(t), kind, str(d or ""))  # type: ignore[arg-type]
            for ts, t, kind, d in rows
        ]

    def count_samples(self) -> int:
        return int(str(self._query("SELECT COUNT(*) FROM samples")[0][0]))

    def close(self) -> None:
        self._connections.close_all()


def _empty_frame() -> pd.DataFrame:
    frame = pd.DataFrame({name: pd.Series(dtype="float64") for name in _SAMPLE_COLUMNS})
    frame["target"] = frame["target"].astype("object")
    return frame


def _optional_float(value: object) -> float | None:
    return None if value is None else float(str(value))


def _snapshot_from_row(row: Sequence[object]) -> TargetSnapshot:
    values = dict(zip(_SAMPLE_COLUMNS, row, strict=True))
    signals = Signals(**{name: _optional_float(values[name]) for name in SIGNAL_NAMES})
    return TargetSnapshot(
        target=str(values["target"]),
        ts=float(str(values["ts"])),
        up=bool(values["up"]),
        error=None if values["error"] is None else str(values["error"]),
        signals=signals,
        recipe_id=None if values["recipe_id"] is None else str(values["recipe_id"]),
        deployment=str(values["deployment"] or ""),
        scrape_duration_s=_optional_float(values["scrape_duration_s"]),
    )
