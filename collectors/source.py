"""Where snapshots come from: the ``Source`` protocol the runner drives, and the factory that picks one from
config.

``direct`` scrapes each SGLang server (``collectors.direct``). A second source (the fleet's Prometheus) plugs
in by implementing ``Source`` and adding a branch to ``make_source``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

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
