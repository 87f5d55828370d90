"""``specwatch capacity --config F [--json]``: servers needed per deployment, now and at the next 24 hours'
peak, read from the store the collector writes — advice only, nothing is changed anywhere.

One line per deployment: the reason in words (``--json``: a JSON object per line with the keys the README
documents; ``null`` is unknown, never zero). The pool levels are the alert rules' as configured
(``alerts.rules.capacity_thresholds``), so "binds" here means what it means to the alerts and the Capacity
page; the numbers are the page's (``analysis.advice_inputs.capacity_advice``, for the same minute). With
``source: prometheus`` the history comes from the fleet's Prometheus.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from pathlib import Path

from alerts.cli import report_main
from alerts.rules import capacity_thresholds
from analysis.advice_inputs import capacity_advice, stale_after_s
from analysis.capacity_advice import DeploymentAdvice
from collectors.slo import build_slos
from collectors.source import open_history
from collectors.store.sqlite_store import SqliteStore
from config import Config


def configured_deployments(config: Config) -> dict[str, str]:
    """Configured target → its ``deployment`` label ("" without one)."""
    return {t.name: t.labels.get("deployment", "") for t in config.targets}


def advise(config: Config, *, now: float | None = None, source: str = "config") -> list[DeploymentAdvice]:
    """The advice of every deployment for the minute of ``now``; StoreError when the store cannot be read,
    ConfigError for bad rule settings or SLOs."""
    thresholds = capacity_thresholds(config.alerts.rules, source)
    slos = build_slos(config, source)
    now = time.time() if now is None else now
    with ExitStack() as stack:
        # The backend config.source names: the SQLite store, or the fleet's Prometheus (its SLO counts from
        # the fleet's own series).
        backend = stack.enter_context(closing(open_history(config)))
        history = backend.store
        counts = stack.enter_context(closing(backend.slo_counts(source))) if slos else None
        return capacity_advice(
            history,
            thresholds,
            now,
            stale_after_s=stale_after_s(config.scrape.interval_s),
            configured=configured_deployments(config),
            slo_counts=counts,
            slos=slos,
        )


def run(config: Config, *, json_lines: bool, now: float | None = None, source: str = "config") -> int:
    # Settings first: a bad rule level or SLO is a configuration error whatever the store holds.
    capacity_thresholds(config.alerts.rules, source)
    build_slos(config, source)
    path = config.store.path
    if config.source == "direct":
        if not Path(path).exists():
            print(f"{path}: no store yet (start the collector: specwatch alerts --config F)", file=sys.stderr)
            return 1
        with closing(SqliteStore(path)) as store:
            if store.count_samples() == 0:
                print(
                    f"{path}: the store holds no samples yet: nothing to advise on (is a collector writing "
                    "to it?)",
                    file=sys.stderr,
                )
                return 1
    found = advise(config, now=now, source=source)
    if not found:
        print(
            f"{path}: no target seen in the last 6 h and none configured: nothing to advise on",
            file=sys.stderr,
        )
        return 1
    for advice in found:
        print(json.dumps(advice.record()) if json_lines else advice.reason)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return report_main(
        argv,
        run,
        prog="specwatch capacity",
        description=__doc__,
        config_help="fleet configuration file (its store is read)",
    )
