"""The history contract: what the collector writes and the pages, alerts and CLI read, whoever holds it.

Two backends implement it: the embedded SQLite store (``store/sqlite_store.py``) and the fleet's Prometheus
(``prometheus/promql_history.py``; events, recipes and alert state stay in a small SQLite file beside it).
Every read answers in the model's types: ``SampleColumns`` (``sample_columns.py``) for samples,
``TargetSnapshot`` for the newest of each target, ``Event`` and ``Recipe``. A caller never asks which backend
it reads: ``collectors.source.open_history`` picks one from ``config.source``, once, and hands out the store,
the source it reads through (for a collector over it) and its SLO counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from collectors.fleet_chart import FleetChartTotals
from collectors.model import Event, Recipe, TargetSnapshot
from collectors.sample_columns import SampleColumns
from collectors.slo_ledger import SloCounts


class HistoryReader(Protocol):
    """What the pages, the alert engine's replay, the SLO attribution and the CLI read."""

    def latest(self, since_ts: float | None = None) -> list[TargetSnapshot]:
        """The newest snapshot of each target (seen at or after ``since_ts``), ordered by target."""
        ...

    def latest_columns(self, since_ts: float | None = None) -> SampleColumns:
        """``latest`` as columns, every sample column (a fleet table of 1,000 rows without 1,000 objects)."""
        ...

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
        """Samples in [start_ts, end_ts] of ``targets`` (None: every target), at most ``max_points`` per
        target (bucket means beyond that), with the ``values`` and ``texts`` asked for. ``live``: this read
        comes again every interval with the window slid forward; the backend may keep what it read."""
        ...

    def fleet_chart_totals(
        self, start_ts: float, end_ts: float, max_points: int, *, live: bool = False
    ) -> FleetChartTotals | None:
        """The Fleet chart's sums and medians across every target at each instant of the grid
        ``read_columns`` would use (``fleet_chart.py``), when this backend computes them itself; None when
        the caller should read the columns and sum them (the embedded store: its rows are local)."""
        ...

    def read_events(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None
    ) -> list[Event]: ...

    def recipes(self) -> dict[str, Recipe]:
        """Every recipe seen: recipe_id → recipe."""
        ...

    def count_samples(self) -> int:
        """How much history there is (0: nothing collected yet)."""
        ...

    def drop_caches(self) -> None:
        """Forget whatever is kept between reads, as a restarted process would."""
        ...

    def close(self) -> None: ...


class HistoryStore(HistoryReader, Protocol):
    """A reader the collector also writes to (cycle by cycle) and prunes."""

    def append(self, snapshots: Sequence[TargetSnapshot]) -> None: ...
    def add_events(self, events: Sequence[Event]) -> None: ...
    def put_recipe(self, recipe: Recipe, ts: float) -> None: ...
    def prune(
        self,
        older_than_ts: float,
        *,
        raw_older_than_ts: float | None = None,
        minute_older_than_ts: float | None = None,
    ) -> int: ...


class StoredSloCounts(SloCounts, Protocol):
    """SLO counts a reader opened and closes."""

    def close(self) -> None: ...
