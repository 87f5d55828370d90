"""Embedded history in SQLite (WAL): one implementation of the history contract (``collectors/history.py``).

Raw rows are one per target per cycle (wide: one column per signal), kept for hours. Rollup tiers (1 min,
15 min, 1 h: count, mean, min, max, last per signal; ``tiers.py``) are written beside them as samples arrive
and kept for days, and a read picks the coarsest tier that still fills its pixel width: a 24 h Fleet chart
reads ~100 rows per target instead of bucketing 17,280. ``latest_samples`` holds each target's last-written
row, so "the fleet now" is one small table, not a scan.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from collectors.errors import StoreError
from collectors.fleet_chart import FleetChartTotals
from collectors.model import SIGNAL_NAMES, Event, Recipe, TargetSnapshot
from collectors.sample_columns import (
    SAMPLE_COLUMNS,
    SampleColumns,
    check_columns,
    empty_columns,
    most_rows_per_target,
    regroup,
    snapshots_of,
)
from collectors.store.columns import RawTail, read_fleet, read_latest, read_raw, read_tier
from collectors.store.connections import ThreadConnections
from collectors.store.migrate import add_signal_columns, backfill
from collectors.store.tiers import (
    MINUTE_TIER,
    TIERS,
    Batch,
    pick_tier,
    schema_sql,
    tier_rows,
    upsert_sql,
)
from collectors.store.where import ts_and_targets

# 2: rollup tiers and latest_samples (filled from a version-1 store's rows on open); 3: the GPU and cost
# signals' columns (added to a version-2 store's tables in place: ``migrate.add_signal_columns``).
SCHEMA_VERSION = 3

_SIGNAL_COLUMNS = ", ".join(f"{name} REAL" for name in SIGNAL_NAMES)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    ts REAL NOT NULL, target TEXT NOT NULL, up INTEGER NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '', scrape_duration_s REAL, {_SIGNAL_COLUMNS}
);
CREATE INDEX IF NOT EXISTS samples_target_ts ON samples (target, ts);
CREATE INDEX IF NOT EXISTS samples_ts ON samples (ts);
CREATE TABLE IF NOT EXISTS events (ts REAL NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT);
CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
CREATE TABLE IF NOT EXISTS recipes (
    recipe_id TEXT PRIMARY KEY, flags TEXT NOT NULL, first_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS latest_samples (
    ts REAL NOT NULL, target TEXT PRIMARY KEY, up INTEGER NOT NULL, error TEXT, recipe_id TEXT,
    deployment TEXT NOT NULL DEFAULT '', scrape_duration_s REAL, {_SIGNAL_COLUMNS}
);
CREATE INDEX IF NOT EXISTS latest_samples_ts ON latest_samples (ts);
{"".join(schema_sql(tier) for tier in TIERS)}
"""

INSERT_RAW = (
    f"INSERT INTO samples ({', '.join(SAMPLE_COLUMNS)}) VALUES ({', '.join('?' for _ in SAMPLE_COLUMNS)})"
)
# Each target's last-written row (upserts run in write order, so the last one written wins).
UPSERT_LATEST = (
    f"INSERT INTO latest_samples ({', '.join(SAMPLE_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in SAMPLE_COLUMNS)}) ON CONFLICT (target) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in SAMPLE_COLUMNS if c != "target")
)
# History written beside a live collector (the demo's past): a row replaces a target's latest only if newer.
UPSERT_LATEST_IF_NEWER = UPSERT_LATEST + " WHERE excluded.ts >= latest_samples.ts"
_UPSERTS = {tier.table: upsert_sql(tier) for tier in TIERS}


def sample_row(s: TargetSnapshot) -> tuple[object, ...]:
    """One snapshot as a row of ``samples`` / ``latest_samples`` (``SAMPLE_COLUMNS`` order)."""
    return (
        s.ts,
        s.target,
        int(s.up),
        s.error,
        s.recipe_id,
        s.deployment,
        s.scrape_duration_s,
        *(getattr(s.signals, name) for name in SIGNAL_NAMES),
    )


class SqliteStore:
    """Embedded history in one SQLite file (WAL): no server to run, safe against SIGKILL between cycles.

    One connection per thread: the collector thread writes, Streamlit's script threads read concurrently.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = str(path)
        self._connections = ThreadConnections(self.path, busy_timeout_s=busy_timeout_s, what="history store")
        self._migrate()
        # Raw windows of fleet-wide ``live`` reads, kept between calls (one per set of columns read).
        self._tails: dict[tuple[tuple[str, ...], tuple[str, ...]], RawTail] = {}
        self._tails_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        return self._connections.get()

    def _migrate(self) -> None:
        connection = self._connect()
        try:
            row = self._schema_version(connection)
            if row == SCHEMA_VERSION:
                return  # the common case, and a read-only viewer's: no write transaction at all
            connection.execute("BEGIN IMMEDIATE")  # one migrator at a time, even across processes
            try:
                found = self._schema_version(connection)  # another process may have migrated meanwhile
                if found is not None and found > SCHEMA_VERSION:
                    raise StoreError(
                        f"history store {self.path} has schema {found}, newer than this specwatch "
                        f"({SCHEMA_VERSION}); upgrade specwatch or point store.path elsewhere"
                    )
                if found != SCHEMA_VERSION:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            connection.execute(statement)
                    if found is not None:  # an older store: its tables gain the new signals' columns
                        add_signal_columns(connection)
                    if found is not None and found < 2:  # a version-1 store: the tiers from its raw rows
                        backfill(connection, SAMPLE_COLUMNS, self._write_rollups)
                    connection.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"cannot initialise history store {self.path}: {exc}") from exc

    @staticmethod
    def _schema_version(connection: sqlite3.Connection) -> int | None:
        has_meta = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if has_meta is None:
            return None
        row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return None if row is None else int(row[0])

    def _write(self, sql: str, rows: Iterable[Sequence[object]]) -> None:
        try:
            connection = self._connect()
            with connection:
                connection.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: write failed: {exc}") from exc

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        return self._connections.query(sql, params)

    # -- writes ----------------------------------------------------------------------------------------------
    def append(self, snapshots: Sequence[TargetSnapshot], *, backfill: bool = False) -> None:
        """Raw rows, every rollup tier and each target's latest row, in one transaction (one per cycle).

        ``backfill``: the rows are history written beside a live collector (the demo fills its past newest
        hour first), so a row replaces a target's latest only when it is newer.
        """
        if not snapshots:
            return
        rows = [sample_row(s) for s in snapshots]
        try:
            connection = self._connect()
            with connection:
                connection.executemany(INSERT_RAW, rows)
                connection.executemany(UPSERT_LATEST_IF_NEWER if backfill else UPSERT_LATEST, rows)
                self._write_rollups(connection, Batch.of(snapshots))
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: write failed: {exc}") from exc

    def rebuild_indexes(self) -> None:
        """Every index of the schema that is missing (one sort per index)."""
        connection = self._connect()
        try:
            with connection:
                for statement in _SCHEMA.split(";"):
                    if "CREATE INDEX" in statement:
                        connection.execute(statement)
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: cannot build indexes: {exc}") from exc

    @staticmethod
    def _write_rollups(connection: sqlite3.Connection, batch: Batch) -> None:
        for tier, rows in tier_rows(batch):
            connection.executemany(_UPSERTS[tier.table], rows)

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

    def prune(
        self,
        older_than_ts: float,
        *,
        raw_older_than_ts: float | None = None,
        minute_older_than_ts: float | None = None,
    ) -> int:
        """Drop everything older than ``older_than_ts``, and raw rows and the 1 min tier older than their own
        (later) cut-offs if given. Returns how many raw rows went."""
        raw_cut = max(older_than_ts, raw_older_than_ts if raw_older_than_ts is not None else older_than_ts)
        cuts = {tier.table: older_than_ts for tier in TIERS}
        if minute_older_than_ts is not None:
            cuts[MINUTE_TIER.table] = max(older_than_ts, minute_older_than_ts)
        try:
            connection = self._connect()
            with connection:
                removed = connection.execute("DELETE FROM samples WHERE ts < ?", (raw_cut,)).rowcount
                connection.execute("DELETE FROM events WHERE ts < ?", (older_than_ts,))
                connection.execute("DELETE FROM latest_samples WHERE ts < ?", (older_than_ts,))
                for table, cut in cuts.items():
                    connection.execute(f"DELETE FROM {table} WHERE bucket_ts < ?", (cut,))
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
        """The newest snapshot of each target (seen after ``since_ts``, if given), ordered by target."""
        return snapshots_of(self.latest_columns(since_ts))

    def latest_columns(self, since_ts: float | None = None) -> SampleColumns:
        """``latest`` as columns (every sample column), without building snapshots: the dashboard turns
        1,000 of them into one frame every interval.

        Newest means last written, not largest ``ts``: after the wall clock steps back, rows stamped in the
        "future" must not hide what was scraped since (``latest_samples`` keeps the last row written).
        """
        try:
            return read_latest(self._connect(), since_ts)
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: read failed: {exc}") from exc

    def read_columns(
        self,
        start_ts: float,
        end_ts: float,
        values: Sequence[str],
        max_points: int = 2000,
        targets: Sequence[str] | None = None,
        *,
        texts: Sequence[str] = (),
        live: bool = False,
    ) -> SampleColumns:
        """Samples in [start_ts, end_ts] of ``values`` and ``texts`` (``columns.py``), at most ``max_points``
        per target: raw rows, or means per bucket from the coarsest rollup tier that still gives at least half
        of ``max_points`` (``pick_tier``), regrouped into ``max_points`` buckets beyond that.

        ``live``: the caller reads this fleet-wide window again as it slides (the Fleet chart, every
        interval), so its raw rows are kept in memory between calls and only rows written since are read
        (``RawTail``). Other fleet-wide reads go a batch of targets (raw rows: a slice of the range) at a
        time, each regrouped before the next is read (``read_fleet``): the same result to the bit, without
        holding every row of the range at once."""
        check_columns(values, texts)
        if targets is not None and not targets:
            return empty_columns(values, texts)
        try:
            connection = self._connect()
            tier = pick_tier(end_ts - start_ts, max_points, self._oldest(), start_ts)
            if targets is not None:
                if tier is not None:
                    found = read_tier(connection, tier, start_ts, end_ts, values, targets, texts)
                else:
                    found = read_raw(connection, start_ts, end_ts, values, targets, texts)
            elif tier is None and live:
                found = self._tail(values, texts).read(connection, start_ts, end_ts)  # regrouped below
            else:  # every target, a batch at a time, each regrouped as it comes (``read_fleet``)
                return read_fleet(connection, tier, start_ts, end_ts, values, max_points, texts)
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: read failed: {exc}") from exc
        if most_rows_per_target(found) > max_points:
            found = regroup(found, start_ts, max((end_ts - start_ts) / max(max_points, 1), 1e-9))
        return found

    def _tail(self, values: Sequence[str], texts: Sequence[str]) -> RawTail:
        with self._tails_lock:
            key = (tuple(values), tuple(texts))
            found = self._tails.get(key)
            if found is None:
                found = self._tails[key] = RawTail(values, texts)
            return found

    def live_window(self, values: Sequence[str], texts: Sequence[str] = ()) -> RawTail:
        """The raw window kept for ``live`` reads of these columns (its counters say how it was read)."""
        return self._tail(values, texts)

    def fleet_chart_totals(
        self, start_ts: float, end_ts: float, max_points: int, *, live: bool = False
    ) -> FleetChartTotals | None:
        """None: the rows are local, so the pages read the columns (with the live raw window) and sum them."""
        del start_ts, end_ts, max_points, live
        return None

    def drop_caches(self) -> None:
        """Forget the raw windows kept for ``live`` reads: the next one reads its window in full."""
        with self._tails_lock:
            self._tails.clear()

    def _oldest(self) -> dict[float, float | None]:
        """The oldest timestamp of the raw rows (key 0) and of each tier: MIN over an index, a few pages."""
        found: dict[float, float | None] = {}
        sources = [(0.0, "samples", "ts"), *((t.seconds, t.table, "bucket_ts") for t in TIERS)]
        for seconds, table, column in sources:
            value = self._query(f"SELECT MIN({column}) FROM {table}")[0][0]
            found[seconds] = None if value is None else float(str(value))
        return found

    def read_events(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None
    ) -> list[Event]:
        if targets is not None and not targets:
            return []
        where, params = ts_and_targets(start_ts, end_ts, targets)
        rows = self._query(f"SELECT ts, target, kind, detail FROM events WHERE {where} ORDER BY ts", params)
        # kind is one of EventKind by construction: only Event objects are ever written.
        return [
            Event(float(str(ts)), str(t), kind, str(d or ""))  # type: ignore[arg-type]
            for ts, t, kind, d in rows
        ]

    def count_samples(self) -> int:
        """Raw rows plus the samples the 1 min tier holds beyond them (0 means nothing was ever collected)."""
        raw = int(str(self._query("SELECT COUNT(*) FROM samples")[0][0]))
        if raw:
            return raw
        return int(str(self._query(f"SELECT COALESCE(SUM(n), 0) FROM {MINUTE_TIER.table}")[0][0]))

    def close(self) -> None:
        self._connections.close_all()
