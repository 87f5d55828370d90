"""SLO event counts in their own tables of the history file (same SQLite file, own connections).

``slo_minutes``: good and total events per SLO, scope and minute, kept for the SLO's period (28 days of one
SLO and scope are 40,320 small rows): burn rates over any window and the budget over the period are sums of
a primary-key range. ``slo_target_buckets``: the same per target and 5 minutes, kept a day, for "which
servers burned most" (the ledger adds to them once a minute). Both are written by adding a cycle's
increments (``INSERT … ON CONFLICT DO UPDATE``), so a bucket filled by many cycles, a restart or two
processes ends as the sum of what each counted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collectors.errors import StoreError
from collectors.slo import EventCounts
from collectors.store.connections import ThreadConnections

MINUTE_S = 60
TARGET_BUCKET_S = 300
TARGET_RETENTION_S = 86400.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS slo_minutes (
    slo TEXT NOT NULL, scope TEXT NOT NULL, minute_ts INTEGER NOT NULL,
    good REAL NOT NULL, total REAL NOT NULL,
    PRIMARY KEY (slo, scope, minute_ts)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS slo_target_buckets (
    slo TEXT NOT NULL, target TEXT NOT NULL, bucket_ts INTEGER NOT NULL,
    good REAL NOT NULL, total REAL NOT NULL,
    PRIMARY KEY (slo, target, bucket_ts)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS slo_target_buckets_ts ON slo_target_buckets (bucket_ts);
"""
_ADD_MINUTES = (
    "INSERT INTO slo_minutes (slo, scope, minute_ts, good, total) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (slo, scope, minute_ts) DO UPDATE SET good = good + excluded.good, "
    "total = total + excluded.total"
)
_ADD_TARGETS = (
    "INSERT INTO slo_target_buckets (slo, target, bucket_ts, good, total) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (slo, target, bucket_ts) DO UPDATE SET good = good + excluded.good, "
    "total = total + excluded.total"
)


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """One SLO's events in one scope and minute (``minute_ts``: the minute's start, unix s)."""

    slo: str
    scope: str
    minute_ts: int
    good: float
    total: float


@dataclass(frozen=True, slots=True)
class TargetRow:
    slo: str
    target: str
    bucket_ts: int
    good: float
    total: float


class SloCountStore:
    """The SLO tables of ``path`` (the history file); safe to use from any thread.

    ``create=False`` (a dashboard beside a collector) never writes: a file without the tables reads as no
    events.
    """

    def __init__(self, path: str, *, busy_timeout_s: float = 5.0, create: bool = True) -> None:
        self.path = path
        self._connections = ThreadConnections(path, busy_timeout_s=busy_timeout_s, what="SLO store")
        if not create:
            return
        try:
            with self._connections.get() as connection:
                connection.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot initialise the SLO tables in {path}: {exc}") from exc

    # -- writes ----------------------------------------------------------------------------------------------
    def add(self, minutes: Sequence[MinuteRow], targets: Sequence[TargetRow] = ()) -> None:
        """Add increments (one transaction): each row's counts are added to its bucket's."""
        if not minutes and not targets:
            return
        try:
            connection = self._connections.get()
            with connection:
                connection.executemany(
                    _ADD_MINUTES, [(r.slo, r.scope, r.minute_ts, r.good, r.total) for r in minutes]
                )
                connection.executemany(
                    _ADD_TARGETS, [(r.slo, r.target, r.bucket_ts, r.good, r.total) for r in targets]
                )
        except sqlite3.Error as exc:
            raise StoreError(f"SLO store {self.path}: write failed: {exc}") from exc

    def prune(self, periods_s: dict[str, float], now: float) -> None:
        """Drop minutes older than each SLO's period (SLOs no longer configured: older than the longest)
        and target buckets older than a day."""
        longest = max(periods_s.values(), default=0.0)
        try:
            connection = self._connections.get()
            with connection:
                for slo, period_s in periods_s.items():
                    connection.execute(
                        "DELETE FROM slo_minutes WHERE slo = ? AND minute_ts < ?", (slo, now - period_s)
                    )
                names = list(periods_s)
                connection.execute(
                    f"DELETE FROM slo_minutes WHERE slo NOT IN ({', '.join('?' for _ in names)}) "
                    "AND minute_ts < ?",
                    (*names, now - longest),
                )
                connection.execute(
                    "DELETE FROM slo_target_buckets WHERE bucket_ts < ?", (now - TARGET_RETENTION_S,)
                )
        except sqlite3.Error as exc:
            raise StoreError(f"SLO store {self.path}: prune failed: {exc}") from exc

    # -- reads -----------------------------------------------------------------------------------------------
    def minutes(self, slo: str, scope: str, start_ts: float, end_ts: float) -> list[tuple[int, float, float]]:
        """(minute_ts, good, total) of the minutes starting in [start_ts, end_ts), oldest first."""
        return [
            (int(m), float(g), float(t))
            for m, g, t in self._query(
                "SELECT minute_ts, good, total FROM slo_minutes WHERE slo = ? AND scope = ? "
                "AND minute_ts >= ? AND minute_ts < ? ORDER BY minute_ts",
                (slo, scope, start_ts, end_ts),
            )
        ]

    def counts(self, slo: str, scope: str, start_ts: float, end_ts: float) -> EventCounts:
        """Events of the minutes starting in [start_ts, end_ts)."""
        rows = self._query(
            "SELECT COALESCE(SUM(good), 0), COALESCE(SUM(total), 0) FROM slo_minutes "
            "WHERE slo = ? AND scope = ? AND minute_ts >= ? AND minute_ts < ?",
            (slo, scope, start_ts, end_ts),
        )
        good, total = rows[0] if rows else (0.0, 0.0)
        return EventCounts(float(good), float(total))

    def first_minute(self, slo: str, scope: str) -> int | None:
        """The oldest stored minute of this SLO and scope (how much of its period the store covers)."""
        rows = self._query("SELECT MIN(minute_ts) FROM slo_minutes WHERE slo = ? AND scope = ?", (slo, scope))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def scopes(self, slo: str, since_ts: float) -> list[str]:
        """The scope keys with events of this SLO since ``since_ts``."""
        return [
            str(row[0])
            for row in self._query(
                "SELECT DISTINCT scope FROM slo_minutes WHERE slo = ? AND minute_ts >= ?", (slo, since_ts)
            )
        ]

    def by_target(self, slo: str, start_ts: float, end_ts: float) -> dict[str, EventCounts]:
        """Each target's events in the 5-minute buckets starting in [start_ts, end_ts)."""
        return {
            str(target): EventCounts(float(good), float(total))
            for target, good, total in self._query(
                "SELECT target, SUM(good), SUM(total) FROM slo_target_buckets WHERE slo = ? "
                "AND bucket_ts >= ? AND bucket_ts < ? GROUP BY target",
                (slo, start_ts, end_ts),
            )
        }

    def _query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        try:
            return list(self._connections.get().execute(sql, params).fetchall())
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a reader before the collector created the tables: no events yet
            raise StoreError(f"SLO store {self.path}: read failed: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SLO store {self.path}: read failed: {exc}") from exc

    def close(self) -> None:
        self._connections.close_all()
