"""The WHERE clauses the SQLite stores share: ``?`` placeholders and the time-and-targets filter."""

from __future__ import annotations

from collections.abc import Sequence


def placeholders(values: Sequence[object]) -> str:
    """One ``?`` per value, comma-separated (values are always bound, never spliced into the SQL)."""
    return ", ".join("?" for _ in values)


def ts_and_targets(start_ts: float, end_ts: float, targets: Sequence[str] | None) -> tuple[str, list[object]]:
    """The clause and parameters for rows with ``ts`` in [start_ts, end_ts] of ``targets`` (None: all)."""
    where = "ts >= ? AND ts <= ?"
    params: list[object] = [start_ts, end_ts]
    if targets is not None:
        where += f" AND target IN ({placeholders(targets)})"
        params.extend(targets)
    return where, params
