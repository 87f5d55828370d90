"""Filling a version-2 store's new tables from a version-1 store's raw rows, in place, on first open.

Runs inside the opener's write transaction: a reader (WAL) keeps reading the old tables meanwhile, and a
crash leaves the store at version 1, to be migrated again on the next open.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence

from collectors.store.tiers import Batch

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
