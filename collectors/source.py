"""Where snapshots and history come from: the ``Source`` protocol the runner drives, the factory that picks
one from config, and the history backend a config implies (``open_history``): the wiring joining the sources.

``direct`` scrapes each SGLang server (``collectors.direct``). A second source (the fleet's Prometheus) plugs
in by implementing ``Source`` and adding a branch to ``make_source``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from collectors.history import HistoryStore, StoredSloCounts
from collectors.model import Event, Recipe, SourceHealth, TargetSnapshot
from config import Config, ConfigError, Target


class Source(Protocol):
    """Produces one snapshot per target per cycle, plus the recipe in force and source-specific events."""

    def collect(self, now: float) -> list[TargetSnapshot]:
        """One cycle: a snapshot per target (never raises for a bad target; ``up=False`` with an error)."""
        ...

    def recipe(self, target: str) -> Recipe | None: ...

    def health(self) -> SourceHealth:
        """How the last ``collect`` went for the source as a whole (a blind source: every target unknown)."""
        ...

    def drain_events(self) -> list[Event]:
        """Events found while collecting (e.g. ``restart``), each returned once."""
        ...

    def update_targets(self, targets: Sequence[Target]) -> None: ...

    def close(self) -> None: ...


def make_source(
    config: Config,
    targets: Sequence[Target],
    *,
    clock: Callable[[], float] = time.time,
) -> Source:
    """The source ``config.source`` names."""
    if config.source == "direct":
        from collectors.direct.direct_source import DirectSource
        from collectors.signals import config_params
        from collectors.slo import build_slos, slis

        return DirectSource(
            config.scrape,
            targets,
            clock=clock,
            slis=slis(build_slos(config)),
            params=config_params(config.cost.gpu_hour_usd),
        )
    if config.source == "prometheus":
        from collectors.prometheus.promql_source import PrometheusSource

        return PrometheusSource(config, targets, clock=clock)
    raise ConfigError("<config>", "source", "'direct' or 'prometheus'", config.source)


@dataclass(frozen=True, slots=True)
class History:
    """A config's history backend. ``source``: what ``store`` reads through (the fleet's Prometheus), for a
    collector over this store to be handed (one source per process), None when a collector makes its own.
    ``slo_counts(source)`` opens the SLO counts the reports read, read-only (``source`` names where the SLOs
    are configured, for error messages)."""

    store: HistoryStore
    source: Source | None
    slo_counts: Callable[[str], StoredSloCounts]

    def close(self) -> None:
        self.store.close()  # and the source it reads through


def open_history(config: Config) -> History:
    """The history ``config.source`` implies: the fleet's Prometheus for ``prometheus``, else the SQLite file
    at ``store.path``."""
    if config.source == "prometheus":
        # Here, not at the top: the Prometheus client brings requests with it; a SQLite viewer never needs it.
        from collectors.prometheus.promql_history import PrometheusHistory
        from collectors.prometheus.promql_source import PrometheusSource
        from collectors.prometheus.slo_counts import prometheus_slo_counts

        source = PrometheusSource(config)
        prometheus = PrometheusHistory(config, source=source)

        def slo_counts(named: str) -> StoredSloCounts:
            counts = prometheus_slo_counts(config, source, named)
            prometheus.forget_with(counts.drop_caches)  # a reader's drop_caches forgets the counts too
            return counts

        return History(prometheus, source, slo_counts)

    from collectors.store.slo_counts import SloCountStore
    from collectors.store.sqlite_store import SqliteStore

    # A reader never writes the SLO tables (the collecting process's ledger does).
    return History(
        SqliteStore(config.store.path), None, lambda _named: SloCountStore(config.store.path, create=False)
    )
