"""Probe results in their own table of the history file (same SQLite file, own connections, own schema).

One row per probe request (or skipped one). Readers get a DataFrame: the views draw curves from it, the alert
rule compares a recipe's longest-context probes with its own baseline, and the prober reads back what it spent
this hour so a restart does not reset the budget.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import fields

import pandas as pd

from collectors.errors import StoreError
from collectors.probe_result import ProbeResult
from collectors.store.connections import ThreadConnections
from collectors.store.where import ts_and_targets

COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ProbeResult))
_TEXT_COLUMNS = frozenset({"target", "recipe_id", "request_id", "error"})
_TYPES = {"ts": "REAL NOT NULL", "target": "TEXT NOT NULL", "context_tokens": "INTEGER NOT NULL"}
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS probes (
    {", ".join(f"{name} {_TYPES.get(name, 'TEXT' if name in _TEXT_COLUMNS else 'REAL')}" for name in COLUMNS)}
);
CREATE INDEX IF NOT EXISTS probes_target_ts ON probes (target, ts);
CREATE INDEX IF NOT EXISTS probes_ts ON probes (ts);
"""


class ProbeStore:
    """The ``probes`` table of ``path`` (the history file); safe to use from any thread."""

    def __init__(self, path: str, *, busy_timeout_s: float = 5.0, create: bool = True) -> None:
        self.path = path
        self._connections = ThreadConnections(path, busy_timeout_s=busy_timeout_s, what="probe store")
        if not create:
            return  # a reader (the dashboard): never writes; no table yet reads as no probes
        try:
            with self._connections.get() as connection:
                connection.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot initialise the probe table in {path}: {exc}") from exc

    def append(self, results: Sequence[ProbeResult]) -> None:
        # Column names come from ProbeResult's fields, never from input: no injection through them.
        sql = f"INSERT INTO probes ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
        rows = [tuple(getattr(r, name) for name in COLUMNS) for r in results]
        try:
            with self._connections.get() as connection:
                connection.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise StoreError(f"probe store {self.path}: write failed: {exc}") from exc

    def read(self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None) -> pd.DataFrame:
        """Probe rows in [start_ts, end_ts], oldest first (one column per ``ProbeResult`` field)."""
        where, params = ts_and_targets(start_ts, end_ts, targets)
        if not self._connections.has_table("probes"):
            return pd.DataFrame(columns=list(COLUMNS))
        rows = self._connections.query(
            f"SELECT {', '.join(COLUMNS)} FROM probes WHERE {where} ORDER BY ts", params
        )
        frame = pd.DataFrame(rows, columns=list(COLUMNS))
        for name in COLUMNS:
            if name not in _TEXT_COLUMNS:  # a column of only NULLs would otherwise be objects, not NaN
                frame[name] = pd.to_numeric(frame[name], errors="coerce").astype(float)
        return frame

    def spent_since(self, since_ts: float) -> list[tuple[str, float, int]]:
        """(target, ts, tokens) of every probe request sent since ``since_ts`` (a skip costs nothing)."""
        rows = self._connections.query(
            "SELECT target, ts, COALESCE(prompt_tokens, context_tokens) + COALESCE(completion_tokens, 0) "
            "FROM probes WHERE ts >= ? AND request_id != ''",  # a skipped sweep sent nothing
            [since_ts],
        )
        return [(str(target), float(ts), int(tokens)) for target, ts, tokens in rows]  # type: ignore[arg-type,call-overload]

    def last_sweep_ts(self) -> dict[str, float]:
        """When each target was last swept (sent or skipped)."""
        rows = self._connections.query("SELECT target, MAX(ts) FROM probes GROUP BY target", [])
        return {str(target): float(ts) for target, ts in rows}  # type: ignore[arg-type]

    def prune(self, older_than_ts: float) -> int:
        try:
            with self._connections.get() as connection:
                return connection.execute("DELETE FROM probes WHERE ts < ?", (older_than_ts,)).rowcount
        except sqlite3.Error as exc:
            raise StoreError(f"probe store {self.path}: prune failed: {exc}") from exc

    def close(self) -> None:
        self._connections.close_all()
