"""Offline benchmark runs (``sglang.bench_serving`` results) in their own table of the history file.

One row per run, keyed by a digest of the run's content: importing a file twice, or the same run from a
copied file, stores nothing new. ``OfflineRun`` is the typed read the Recipes page and the Pareto use to put
offline runs beside the live figures of the same recipe (``recipe_id``, read from the run's /server_info by
the collector's own parser) at matched concurrency (``max_concurrency``, or the measured ``concurrency``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields

import pandas as pd

from collectors.errors import StoreError
from collectors.model import Recipe
from collectors.store.connections import ThreadConnections


@dataclass(frozen=True, slots=True)
class OfflineRun:
    """One bench_serving run as stored. ``None`` is unknown (a field the client's version did not write)."""

    run_id: str  # digest of the run's JSON: the same run is the same row, whichever file it came from
    recipe_id: str | None  # from the run's server_info; None when the client could not read /server_info
    recipe_flags: str | None  # the recipe's flags as JSON (``Recipe.as_dict``)
    gpu_count: int | None  # tp_size × dp_size of the benchmarked server
    backend: str
    dataset_name: str
    tag: str | None
    max_concurrency: int | None  # the client's cap (--max-concurrency); None: not set
    request_rate_rps: float | None  # inf: all requests at once (the default); None: paced by a trace
    duration_s: float
    completed: int  # requests that succeeded
    output_tok_s: float  # output_throughput: output tokens per second over the run, all requests
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    concurrency: float | None  # mean requests in flight, as the client measured it
    accept_length: float | None  # the server's lifetime avg_spec_accept_length after the run
    total_input_tokens: int | None
    total_output_tokens: int | None
    request_goodput_rps: float | None  # with --goodput: requests per second meeting every SLO
    slo_attainment: float | None  # with --goodput: share of requests meeting every SLO
    goodput_slos_ms: str | None  # with --goodput: the SLOs as JSON ({"ttft": 500, ...})
    source_file: str  # where it was first imported from, and its line there
    source_line: int
    imported_ts: float

    @property
    def recipe(self) -> Recipe | None:
        return None if self.recipe_flags is None else Recipe.from_flags(json.loads(self.recipe_flags))

    @property
    def per_request_tok_s(self) -> float | None:
        """The user's lane: one request's output tokens per second while decoding (1 / TPOT)."""
        return 1000.0 / self.mean_tpot_ms if self.mean_tpot_ms > 0 else None

    @property
    def output_tok_s_per_gpu(self) -> float | None:
        """The fleet's lane: output tokens per second per GPU of the benchmarked server."""
        return self.output_tok_s / self.gpu_count if self.gpu_count else None

    @property
    def step_latency_ms(self) -> float | None:
        """accept length × TPOT: one verify step of the batch."""
        return self.accept_length * self.mean_tpot_ms if self.accept_length else None

    @property
    def mean_input_tokens(self) -> float | None:
        """Prompt tokens per request (the context the run was measured at)."""
        if self.total_input_tokens is None or not self.completed:
            return None
        return self.total_input_tokens / self.completed


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(OfflineRun))
_TYPES = {
    "run_id": "TEXT PRIMARY KEY",
    "backend": "TEXT NOT NULL",
    "dataset_name": "TEXT NOT NULL",
    "source_file": "TEXT NOT NULL",
    "source_line": "INTEGER NOT NULL",
    "imported_ts": "REAL NOT NULL",
}
_TEXT = frozenset({"recipe_id", "recipe_flags", "tag", "goodput_slos_ms"})
_INTEGER = frozenset(
    {"gpu_count", "max_concurrency", "completed", "total_input_tokens", "total_output_tokens"}
)


def _column_type(name: str) -> str:
    return _TYPES.get(name) or ("TEXT" if name in _TEXT else "INTEGER" if name in _INTEGER else "REAL")


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS offline_runs ({", ".join(f"{name} {_column_type(name)}" for name in COLUMNS)});
CREATE INDEX IF NOT EXISTS offline_runs_recipe ON offline_runs (recipe_id, max_concurrency);
"""


class OfflineRunStore:
    """The ``offline_runs`` table of ``path`` (the history file); safe to use from any thread."""

    def __init__(self, path: str, *, busy_timeout_s: float = 5.0, create: bool = True) -> None:
        self.path = path
        self._connections = ThreadConnections(path, busy_timeout_s=busy_timeout_s, what="offline-run store")
        if not create:
            return  # a reader (the dashboard) never writes; no table yet reads as no runs
        try:
            with self._connections.get() as connection:
                connection.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot initialise the offline-run table in {path}: {exc}") from exc

    def add(self, runs: Sequence[OfflineRun]) -> set[str]:
        """Store the runs not stored yet (one transaction); the ids of those newly stored."""
        # Column names come from OfflineRun's fields, never from input.
        sql = (
            f"INSERT OR IGNORE INTO offline_runs ({', '.join(COLUMNS)}) "
            f"VALUES ({', '.join('?' for _ in COLUMNS)})"
        )
        stored: set[str] = set()
        try:
            with self._connections.get() as connection:
                for run in runs:
                    row = tuple(getattr(run, name) for name in COLUMNS)
                    if connection.execute(sql, row).rowcount:
                        stored.add(run.run_id)
        except sqlite3.Error as exc:
            raise StoreError(f"offline-run store {self.path}: write failed: {exc}") from exc
        return stored

    def runs(self, recipe_ids: Iterable[str] | None = None) -> list[OfflineRun]:
        """Stored runs (of ``recipe_ids`` if given), by recipe, then concurrency, then import order."""
        if not self._connections.has_table("offline_runs"):
            return []
        sql = f"SELECT {', '.join(COLUMNS)} FROM offline_runs"
        params: list[object] = []
        if recipe_ids is not None:
            wanted = list(recipe_ids)
            sql += f" WHERE recipe_id IN ({', '.join('?' for _ in wanted)})"
            params.extend(wanted)
        sql += " ORDER BY recipe_id, max_concurrency, imported_ts, source_file, source_line"
        return [_run_of(row) for row in self._connections.query(sql, params)]

    def frame(self, recipe_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """``runs`` as a DataFrame (one column per field, plus the derived lanes), for charts."""
        runs = self.runs(recipe_ids)
        rows = [
            {
                **asdict(run),
                "per_request_tok_s": run.per_request_tok_s,
                "output_tok_s_per_gpu": run.output_tok_s_per_gpu,
                "step_latency_ms": run.step_latency_ms,
            }
            for run in runs
        ]
        extra = ["per_request_tok_s", "output_tok_s_per_gpu", "step_latency_ms"]
        return pd.DataFrame(rows, columns=[*COLUMNS, *extra])

    def close(self) -> None:
        self._connections.close_all()


def _run_of(row: Sequence[object]) -> OfflineRun:
    return OfflineRun(**dict(zip(COLUMNS, row, strict=True)))  # type: ignore[arg-type]
