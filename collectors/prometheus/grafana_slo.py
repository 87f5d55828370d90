"""The SLO rows of the Grafana dashboard: per SLO, its budget left over the period, its burn rate per window
against the page and ticket factors, and its error ratio, all read from the recorded ``slo:`` series of
``collectors.prometheus.slo_rules`` (never raw SGLang series), one line per scope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from collectors.prometheus import slo_rules
from collectors.slo import Slo

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
BURN_WINDOWS_S = (300.0, 3600.0, 21600.0, 259200.0)  # the burn-rate panel's lines: 5m, 1h, 6h, 3d (Sloth's)
# Any name the SLO groups can record (``slo_rules.recorded_names`` for a given config is exact); used when the
# SLOs are not known (a dashboard checked without its config).
_SLOTH_GRAMMAR = re.compile(r"slo:(?:sli_error:ratio_rate|sli_total:increase)\d+(?:ms|[smhdw])")
_FIXED = {
    "slo:objective:ratio",
    "slo:error_budget:ratio",
    "slo:time_period:days",
    "slo:current_burn_rate:ratio",
    "slo:period_burn_rate:ratio",
    "slo:period_error_budget_remaining:ratio",
}


def is_recorded(name: str, slos: Sequence[Slo] | None) -> bool:
    """Whether the SLO groups record ``name`` (exactly for ``slos``; by Sloth's naming when None)."""
    if slos is not None:
        return name in slo_rules.recorded_names(slos)
    return name in _FIXED or _SLOTH_GRAMMAR.fullmatch(name) is not None


def _scoped(expr: str) -> str:
    """A ``scope`` label for the legend: the deployment, or "whole fleet" for the series without one."""
    fleet = f'label_replace({expr}, "scope", "whole fleet", "deployment", "")'
    return f'label_replace({fleet}, "scope", "$1", "deployment", "(.+)")'


def _target(ref: int, expr: str, legend: str) -> dict[str, Any]:
    return {
        "refId": chr(ord("A") + ref),
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "instant": False,
    }


def _panel(
    panel_id: int,
    title: str,
    description: str,
    unit: str,
    targets: list[dict[str, Any]],
    x: int,
    y: int,
    thresholds: Sequence[float] = (),
) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "custom": {"drawStyle": "line", "spanNulls": False}}
    if thresholds:
        steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
        steps += [
            {"color": c, "value": v} for c, v in zip(("orange", "red"), sorted(thresholds), strict=False)
        ]
        defaults["thresholds"] = {"mode": "absolute", "steps": steps}
        defaults["custom"]["thresholdsStyle"] = {"mode": "line+area"}
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": targets,
    }


def slo_rows(slos: Sequence[Slo], panel_id: int, y: int) -> tuple[list[dict[str, Any]], int, int]:
    """A row of three panels per SLO; returns (panels, next panel id, next y)."""
    panels: list[dict[str, Any]] = []
    for slo in slos:
        match = f'sloth_slo="{slo.name}"'
        period = slo_rules.window_name(slo.window_s)
        title = f"SLO {slo.name}: {slo.sli.words}, {slo.objective:.4g} over {period}"
        panels.append({"id": panel_id, "type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})  # fmt: skip
        panel_id, y = panel_id + 1, y + 1
        budget = _panel(
            panel_id,
            "Error budget left",
            f"Share of the {period} error budget not yet spent (below 0: overspent), per scope.",
            "percentunit",
            [
                _target(
                    0,
                    _scoped(
                        slo_rules.newest(
                            f"slo:period_error_budget_remaining:ratio{{{match}}}", slo, slo.window_s
                        )
                    ),
                    "{{scope}}",
                )
            ],
            0,
            y,
        )
        on = "on (sloth_id, sloth_service, sloth_slo) group_left"
        burn_windows = [
            (slo_rules.window_name(s), s)
            for s in BURN_WINDOWS_S
            if is_recorded(f"slo:sli_error:ratio_rate{slo_rules.window_name(s)}", [slo])
        ]
        burns = [
            _target(
                i,
                _scoped(
                    f"{slo_rules.newest(f'slo:sli_error:ratio_rate{w}{{{match}}}', slo, seconds)}\n/ {on} "
                    f"slo:error_budget:ratio{{{match}}}"
                ),
                f"{{{{scope}}}} {w}",
            )
            for i, (w, seconds) in enumerate(burn_windows)
        ]
        factors = sorted({round(c.factor, 3) for c in (*slo.ticket, *slo.page)})
        burn = _panel(
            panel_id + 1,
            "Burn rate",
            "Error ratio ÷ error budget per window (1: spends exactly the budget over the period). Lines: "
            + ", ".join(f"{f:g}×" for f in factors)
            + " (the ticket and page factors; an alert needs its long and short window above its factor).",
            "x",
            burns,
            8,
            y,
            thresholds=(factors[0], factors[-1]) if factors else (),
        )
        ratio = _panel(
            panel_id + 2,
            "Error ratio",
            f"Share of bad events ({slo.sli.words} is good) over 5 minutes and 1 hour; the budget is "
            f"{slo.budget:.4g}.",
            "percentunit",
            [
                _target(0, _scoped(f"slo:sli_error:ratio_rate5m{{{match}}}"), "{{scope}} 5m"),
                _target(1, _scoped(f"slo:sli_error:ratio_rate1h{{{match}}}"), "{{scope}} 1h"),
            ],
            16,
            y,
        )
        panels += [budget, burn, ratio]
        panel_id, y = panel_id + 3, y + 8
    return panels, panel_id, y
