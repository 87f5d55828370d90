"""Bringing an older store up to the current schema, in place, on first open.

- version 1 → 2: the rollup tiers and latest_samples, filled from the raw rows (``backfill``);
- version 2 → 3: a column per new signal (the GPU and cost signals of issue 20) in every table that holds
  signals (``add_signal_columns``): ``ALTER TABLE ADD COLUMN`` keeps every row; old rows read NULL (unknown)
  and old rollup buckets a count of 0 (unknown).

Runs inside the opener's write transaction: a reader (WAL) keeps reading the old tables meanwhile, and a
crash leaves the store at its old version, to be migrated again on the next open.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence

from collectors.model import SIGNAL_NAMES
from collectors.store.tiers import TIERS, Batch, signal_column_types

log = logging.getLogger(__name__)


def backfill(
    connection: sqlite3.Connection,
    columns: Sequence[str],
    write_rollups: Callable[[sqlite3.Connection, Batch], None],
) -> None:
    """Each target's last-written row into latest_samples, and every raw row into the rollup tiers."""
    started = time.monotonic()
    names = ", ".join(columns)
    connection.execute(
        f"INSERT OR REPLACE INTO latest_samples ({names}) "
        f"SELECT {names} FROM samples WHERE rowid IN (SELECT MAX(rowid) FROM samples GROUP BY target)"
    )
    targets = [str(row[0]) for row in connection.execute("SELECT DISTINCT target FROM samples")]
    rows_done = 0
    for target in targets:  # one target at a time: a week of 5 s rows is ~120 k rows, a few tens of MB
        rows = connection.execute(
            f"SELECT {names} FROM samples WHERE target = ? ORDER BY ts", (target,)
        ).fetchall()
        write_rollups(connection, Batch.of_rows(rows))
        rows_done += len(rows)
    if rows_done:
        log.info(
            "history store migrated to rollup tiers: %d rows of %d targets in %.1f s",
            rows_done,
            len(targets),
            time.monotonic() - started,
        )


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in connection.execute(f"PRAGMA table_info({table})")}


def add_signal_columns(connection: sqlite3.Connection) -> int:
    """Every signal column the schema declares but an existing table lacks, added in place; how many."""
    wanted: dict[str, list[tuple[str, str]]] = {
        table: [(name, "REAL") for name in SIGNAL_NAMES] for table in ("samples", "latest_samples")
    }
    for tier in TIERS:
        wanted[tier.table] = [pair for name in SIGNAL_NAMES for pair in signal_column_types(name)]
    added = 0
    for table, columns in wanted.items():
        present = _columns(connection, table)
        for column, kind in columns:
            if column not in present:  # names come from the catalogue, never from the store
                connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                added += 1
    if added:
        log.info("history store: %d signal columns added in place (new signals; old rows unknown)", added)
    return added
