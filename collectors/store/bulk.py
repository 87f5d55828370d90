"""Writing a stretch of history at once (``python -m sim history``, the demo's past): raw rows, every rollup
tier and each target's latest row, as ``SqliteStore.append`` would have left them.

Two ways, one result. ``exclusive``: the store was empty and nothing else writes it (the fill refuses a store
with samples), so this connection runs with ``synchronous=OFF`` and a large page cache, every secondary index
is dropped and built once at the end (a sort instead of millions of B-tree inserts), and a tier row whose
bucket cannot exist yet is a plain INSERT. Only rows of a bucket an earlier write may have touched (written
oldest first: a bucket straddling two writes) go through the merging upsert — exactly the partial rows and
merge order the per-write upserts produce, so the content is identical. Shared (``exclusive=False``): beside a
live collector (the demo's newest-first past), every tier row is upserted and a row replaces a target's
latest only when it is newer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from collectors.errors import StoreError
from collectors.model import TargetSnapshot
from collectors.store.sqlite_store import INSERT_RAW, UPSERT_LATEST_IF_NEWER, SqliteStore, sample_row
from collectors.store.tiers import ROLLUP_COLUMNS, TIERS, Batch, partial_rows, upsert_sql

Row = Sequence[object]

_INSERTS = {
    tier.table: f"INSERT INTO {tier.table} ({', '.join(ROLLUP_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(ROLLUP_COLUMNS))})"
    for tier in TIERS
}
_UPSERTS = {tier.table: upsert_sql(tier) for tier in TIERS}
_CACHE_KIB = 262_144  # 256 MiB of page cache while loading: the tiers' B-trees stay in memory


class HistoryLoader:
    """Bulk writes of history into the store at ``path``; ``close`` builds what was deferred."""

    def __init__(self, path: str | Path, *, exclusive: bool) -> None:
        self._store = SqliteStore(path)  # creates (or checks) the schema
        self.path, self.exclusive = self._store.path, exclusive
        self._newest_bucket: dict[str, float] = {}  # per tier table: the newest bucket written so far
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            if exclusive:
                # This connection only, while filling a store nobody reads yet: a crash leaves a store to
                # delete and fill again, never a live one damaged.
                self._db.execute("PRAGMA synchronous=OFF")
                self._db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
                with self._db:
                    names = self._db.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                    ).fetchall()
                    for (name,) in names:
                        self._db.execute(f'DROP INDEX IF EXISTS "{name}"')
            else:
                self._db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            self._store.close()
            raise StoreError(f"history store {self.path}: cannot open for loading: {exc}") from exc

    def __enter__(self) -> HistoryLoader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def store(self) -> SqliteStore:
        """The store itself, for events and recipes (its own connection)."""
        return self._store

    def write(
        self, raw_rows: Sequence[Row], batches: Sequence[Batch], latest: Sequence[TargetSnapshot] = ()
    ) -> None:
        """Raw rows (``SAMPLE_COLUMNS`` order), the tiers of each batch in turn and the targets' latest
        rows, in one transaction. Exclusive loads must come oldest first."""
        try:
            with self._db:
                if raw_rows:
                    self._db.executemany(INSERT_RAW, raw_rows)
                for batch in batches:
                    for tier in TIERS:
                        self._write_tier(tier.table, partial_rows(batch, tier))
                if latest:
                    self._db.executemany(UPSERT_LATEST_IF_NEWER, [sample_row(s) for s in latest])
        except sqlite3.Error as exc:
            raise StoreError(f"history store {self.path}: write failed: {exc}") from exc

    def _write_tier(self, table: str, rows: list[tuple[object, ...]]) -> None:
        if not rows:
            return
        if not self.exclusive:
            self._db.executemany(_UPSERTS[table], rows)
            return
        # Buckets after the newest written are new: plain INSERTs. Older ones may hold earlier partial rows.
        newest = self._newest_bucket.get(table, float("-inf"))
        fresh = [r for r in rows if float(r[1]) > newest]  # type: ignore[arg-type]
        touched = [r for r in rows if float(r[1]) <= newest]  # type: ignore[arg-type]
        if touched:
            self._db.executemany(_UPSERTS[table], touched)
        if fresh:
            self._db.executemany(_INSERTS[table], fresh)
            self._newest_bucket[table] = max(float(r[1]) for r in fresh)  # type: ignore[arg-type]

    def close(self) -> None:
        """Build the deferred indexes (also after a failed load: the store stays complete and readable)."""
        try:
            if self.exclusive:
                self._store.rebuild_indexes()
        finally:
            self._db.close()
            self._store.close()
