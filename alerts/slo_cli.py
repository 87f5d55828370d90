"""``specwatch slo --config F [--json]``: where every SLO stands, read from the store the collector writes.

One line per SLO and scope (budget, burn rates, the ErrorBudgetBurn severities firing, which half of the
fraction burned it), then one line per scope with the goodput bounds. ``--json`` prints the same as JSON
lines; ``null`` is unknown (no events, nothing to compare with), never zero. With ``source: prometheus``
the counts come from the fleet's Prometheus (``collectors.prometheus.slo_counts``), the alert state and
probes from the local file where a daemon keeps them.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from alerts.cli import report_main
from alerts.scopes import alert_scope
from alerts.state_store import AlertStateStore
from analysis.slo_budget import REPORT_WINDOWS_S
from analysis.slo_report import (
    Goodput,
    ProbeGoodput,
    SloStatus,
    goodput,
    probe_goodput,
    slo_statuses,
    target_deployments,
)
from collectors.errors import StoreError
from collectors.slo import Scope, build_slos
from collectors.source import open_history
from collectors.store.probes import ProbeStore
from config import Config

BURN_RULE = "ErrorBudgetBurn"


def _number(value: float | None, digits: int = 6) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None


def status_record(status: SloStatus, firing: Sequence[str]) -> dict[str, Any]:
    """The JSON line of one SLO in one scope (the keys the README documents)."""
    attribution = status.attribution
    sli = status.slo.sli
    return {
        "slo": status.slo.name,
        "scope": status.scope.as_dict(),
        "sli": {"kind": sli.kind, "threshold_s": sli.threshold_s},
        "objective": status.slo.objective,
        "window_s": status.slo.window_s,
        "covered_s": _number(status.covered_s, 1),
        "good": status.period.good,
        "total": status.period.total,
        "attainment": _number(status.attainment),
        "error_budget_remaining": _number(status.budget_remaining),
        "burn_rate": {name: _number(status.burn_rates.get(name)) for name in REPORT_WINDOWS_S},
        "alerts": list(firing),
        "attribution": (
            {k: _number(v, 4) for k, v in attribution.shares.items()}
            if attribution is not None and attribution.shares is not None
            else None
        ),
        "attribution_reason": attribution.reason if attribution is not None else "no history store to read",
    }


def goodput_record(item: Goodput, probes: ProbeGoodput | None = None) -> dict[str, Any]:
    return {
        "scope": item.scope.as_dict(),
        "goodput_rps": {"lower": _number(item.lower_rps, 4), "upper": _number(item.upper_rps, 4)},
        "slos": list(item.slos),
        "window_s": item.window_s,
        # The active probes' own per-request goodput over the last hour (null without probes).
        "probe_goodput": {"met": probes.met, "sent": probes.sent} if probes is not None else None,
    }


def firing_severities(alerts: AlertStateStore | None) -> Callable[[SloStatus], list[str]]:
    """The ErrorBudgetBurn severities firing for an SLO and scope (the alert's labels name both)."""
    instances = []
    if alerts is not None:
        try:
            instances = [i for i in alerts.active() if i.rule == BURN_RULE and i.state.value == "firing"]
        except StoreError:
            instances = []

    def severities(status: SloStatus) -> list[str]:
        found = {
            i.label("severity")
            for i in instances
            if i.label("slo") == status.slo.name and alert_scope(i.labels_dict) == status.scope
        }
        return [s for s in ("page", "ticket") if s in found]

    return severities


def _text(status: SloStatus, firing: Sequence[str]) -> str:
    def pct(value: float | None, digits: int = 2) -> str:
        return "unknown" if value is None else f"{value * 100:.{digits}f}%"

    rates = " ".join(
        f"{name}={'-' if rate is None else f'{rate:.1f}x'}" for name, rate in status.burn_rates.items()
    )
    attribution = status.attribution
    why = attribution.sentence or f"attribution unknown: {attribution.reason}" if attribution else ""
    alert = f" FIRING {'+'.join(firing)}" if firing else ""
    return (
        f"{status.slo.name} [{status.scope.words}] {status.slo.sli.words}: attainment "
        f"{pct(status.attainment, 3)} of {status.slo.objective:.2%}, budget left "
        f"{pct(status.budget_remaining, 1)}; "
        f"burn {rates}{alert}" + (f"\n    {why}" if why else "")
    )


def run(config: Config, *, json_lines: bool, now: float | None = None, source: str = "config") -> int:
    slos = build_slos(config, source)
    if not slos:
        print(f"{source}: no slos: configured (see docs/slo.md)", file=sys.stderr)
        return 2
    path = config.store.path
    local = Path(path).exists()  # the alert state and probes live here with either source
    if config.source == "direct" and not local:
        print(f"{path}: no store yet (start the collector: specwatch alerts --config F)", file=sys.stderr)
        return 1
    now = time.time() if now is None else now
    with ExitStack() as stack:
        # With source: prometheus, the counts come from the fleet's own series (increase over each window)
        # and the attribution from its history; alert state and probes from the local file where a daemon
        # keeps them.
        backend = stack.enter_context(closing(open_history(config)))
        counts = stack.enter_context(closing(backend.slo_counts(source)))
        history = backend.store
        alerts = stack.enter_context(closing(AlertStateStore(path))) if local else None
        statuses = slo_statuses(counts, slos, now, history=history)
        severities = firing_severities(alerts)
        for status in statuses:
            firing = severities(status)
            print(json.dumps(status_record(status, firing)) if json_lines else _text(status, firing))
        by_scope: dict[Scope, ProbeGoodput] = {}
        if local:
            probes = stack.enter_context(closing(ProbeStore(path, create=False)))
            labels = {t.name: dict(t.labels) for t in config.targets}
            frame = probes.read(now - 3600.0, now)
            by_scope = {p.scope: p for p in probe_goodput(slos, frame, target_deployments(history), labels)}
        for item in goodput(counts, slos, now):
            record = goodput_record(item, by_scope.get(item.scope))
            if json_lines:
                print(json.dumps(record))
            else:
                bounds = record["goodput_rps"]
                shown = (
                    "unknown (no events in 5 min)"
                    if bounds["lower"] is None
                    else f"{bounds['lower']:.2f}–{bounds['upper']:.2f} req/s"
                )
                probed = record["probe_goodput"]
                probe_text = f"; probes {probed['met']} of {probed['sent']} met them" if probed else ""
                print(f"goodput [{item.scope.words}] {shown} met {', '.join(item.slos)}{probe_text}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return report_main(
        argv,
        run,
        prog="specwatch slo",
        description=__doc__,
        config_help="fleet configuration file with slos:",
    )
