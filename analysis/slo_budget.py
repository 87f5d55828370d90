"""The error-budget arithmetic on an SLO's event counts, for every reader (the SLO page, the Fleet status,
``specwatch slo`` and the ``ErrorBudgetBurn`` rule): error ratio, attainment, burn rate, budget left, the
page/ticket burn conditions, and which scopes and servers an SLO has events in.

Counts come from a ``SloCounts`` (the ledger in the collecting process, the SLO tables elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from collectors.slo import BurnWindow, EventCounts, Scope, Slo
from collectors.slo_ledger import SloCounts

# The windows every report shows burn rates over (the CLI's ``burn_rate`` keys).
REPORT_WINDOWS_S: dict[str, float] = {
    "5m": 300.0,
    "30m": 1800.0,
    "1h": 3600.0,
    "6h": 21600.0,
    "1d": 86400.0,
    "3d": 259200.0,
}


# -- the arithmetic ------------------------------------------------------------------------------------------
def error_ratio(counts: EventCounts) -> float | None:
    """Bad ÷ total; None without events (no traffic is not a perfect score)."""
    return counts.bad / counts.total if counts.total > 0 else None


def attainment(counts: EventCounts) -> float | None:
    """Good ÷ total; None without events."""
    return counts.good / counts.total if counts.total > 0 else None


def burn_rate(counts: EventCounts, objective: float) -> float | None:
    """How fast the budget burns: error ratio ÷ (1 − objective); 1 spends exactly the budget per period."""
    ratio = error_ratio(counts)
    return ratio / (1.0 - objective) if ratio is not None else None


def budget_remaining(counts: EventCounts, objective: float) -> float | None:
    """Share of the period's error budget left: 1 − error ratio ÷ (1 − objective) (negative: overspent)."""
    rate = burn_rate(counts, objective)
    return 1.0 - rate if rate is not None else None


@dataclass(frozen=True, slots=True)
class BurnCheck:
    """One burn condition at ``now``: both windows' burn rates, and whether it holds."""

    severity: str  # page | ticket
    window: BurnWindow
    long_rate: float | None
    short_rate: float | None
    long_events: float

    def holds(self, min_events: float) -> bool:
        return (
            self.long_rate is not None
            and self.short_rate is not None
            and self.long_events >= min_events
            and self.long_rate > self.window.factor
            and self.short_rate > self.window.factor
        )


def window_counts(counts: SloCounts, slo: Slo, scope: Scope, window_s: float, now: float) -> EventCounts:
    """Events of the minutes that started within the last ``window_s`` (the current one included)."""
    return counts.counts(slo.name, scope.key, now - window_s, now + 1.0)


def burn_checks(counts: SloCounts, slo: Slo, scope: Scope, now: float) -> tuple[BurnCheck, ...]:
    """Every page and ticket condition of the SLO in one scope."""
    out: list[BurnCheck] = []
    for severity, windows in (("page", slo.page), ("ticket", slo.ticket)):
        for window in windows:
            long = window_counts(counts, slo, scope, window.long_s, now)
            short = window_counts(counts, slo, scope, window.short_s, now)
            out.append(
                BurnCheck(
                    severity,
                    window,
                    burn_rate(long, slo.objective),
                    burn_rate(short, slo.objective),
                    long.total,
                )
            )
    return tuple(out)


def slo_scopes(counts: SloCounts, slo: Slo, now: float) -> list[Scope]:
    """The scopes this SLO has events in over its period; the whole fleet always first."""
    keys = set(counts.scopes(slo.name, now - slo.window_s))
    whole = Scope(slo.match).key
    keys.add(whole)
    return [Scope.from_key(key) for key in sorted(keys, key=lambda k: (k != whole, k))]


def scope_members(
    counts: SloCounts, slo: Slo, scope: Scope, start: float, end: float, deployments: Mapping[str, str]
) -> dict[str, EventCounts]:
    """The per-target counts of the SLO restricted to the scope's deployment (other labels are not kept
    per target: a scope narrower than a deployment lists every target the SLO counted)."""
    per_target = counts.by_target(slo.name, start, end)
    deployment = scope.as_dict().get("deployment")
    if deployment is None or not deployments:
        return per_target
    return {t: c for t, c in per_target.items() if deployments.get(t, deployment) == deployment}
