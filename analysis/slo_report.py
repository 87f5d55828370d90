"""Where each SLO stands, computed once for every reader (the SLO page, the Fleet status, ``specwatch slo``
and the ``ErrorBudgetBurn`` rule): budget over the period, burn rates per window, the burn conditions, the
worst servers, the goodput bounds, and which half of the fraction burned the budget
(``analysis.slo_attribution``).

Counts come from a ``SloCounts`` (the ledger in the collecting process, the SLO tables elsewhere); the
attribution reads the burning servers' signals from the history store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.slo_attribution import Attribution, attribute
from analysis.slo_budget import (
    REPORT_WINDOWS_S,
    BurnCheck,
    attainment,
    budget_remaining,
    burn_checks,
    burn_rate,
    scope_members,
    slo_scopes,
    window_counts,
)
from collectors.history import HistoryReader
from collectors.slo import EventCounts, Scope, Slo
from collectors.slo_ledger import SloCounts

GOODPUT_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class SloStatus:
    slo: Slo
    scope: Scope
    period: EventCounts  # events over the SLO's period (as much of it as the store holds)
    covered_s: float  # how much of the period the counts cover
    burn_rates: dict[str, float | None]  # REPORT_WINDOWS_S key → burn rate (None: no events)
    checks: tuple[BurnCheck, ...] = ()
    attribution: Attribution | None = None
    worst_targets: tuple[tuple[str, EventCounts], ...] = ()  # most bad events in the last hour

    @property
    def attainment(self) -> float | None:
        return attainment(self.period)

    @property
    def budget_remaining(self) -> float | None:
        return budget_remaining(self.period, self.slo.objective)

    @property
    def burning(self) -> tuple[str, ...]:
        """The severities whose conditions hold now (page before ticket)."""
        found = [c.severity for c in self.checks if c.holds(self.slo.min_events)]
        return tuple(s for s in ("page", "ticket") if s in found)

    @property
    def fastest_burn(self) -> tuple[str, float] | None:
        known = [(w, r) for w, r in self.burn_rates.items() if r is not None]
        return max(known, key=lambda item: item[1]) if known else None


def slo_status(
    counts: SloCounts,
    slo: Slo,
    scope: Scope,
    now: float,
    *,
    history: HistoryReader | None = None,
    deployments: Mapping[str, str] | None = None,
    worst: int = 5,
) -> SloStatus:
    """One SLO in one scope; ``history`` adds the attribution (the burning servers' signals).
    ``deployments`` (target → deployment; default: the history's latest rows) narrows per-server counts
    to a deployment scope."""
    if deployments is None:
        deployments = target_deployments(history) if history is not None else {}
    period = counts.counts(slo.name, scope.key, now - slo.window_s, now + 1.0)
    first = counts.first_minute(slo.name, scope.key)
    covered = 0.0 if first is None else min(slo.window_s, max(now - first, 0.0))
    rates = {
        name: burn_rate(window_counts(counts, slo, scope, seconds, now), slo.objective)
        for name, seconds in REPORT_WINDOWS_S.items()
    }
    checks = burn_checks(counts, slo, scope, now)
    ranked = _worst_targets(counts, slo, scope, now, worst, deployments) if worst else ()
    attribution = (
        attribute(counts, slo, scope, now, history=history, deployments=deployments)
        if history is not None
        else None
    )
    return SloStatus(slo, scope, period, covered, rates, checks, attribution, ranked)


def slo_statuses(
    counts: SloCounts, slos: Sequence[Slo], now: float, *, history: HistoryReader | None = None
) -> list[SloStatus]:
    """Every SLO in every scope it has events in (the whole fleet first)."""
    deployments = target_deployments(history) if history is not None else {}
    return [
        slo_status(counts, slo, scope, now, history=history, deployments=deployments)
        for slo in slos
        for scope in slo_scopes(counts, slo, now)
    ]


def target_deployments(history: HistoryReader) -> dict[str, str]:
    """Each target's deployment as of its latest row."""
    return {s.target: s.deployment for s in history.latest()}


def _worst_targets(
    counts: SloCounts,
    slo: Slo,
    scope: Scope,
    now: float,
    limit: int,
    deployments: Mapping[str, str],
) -> tuple[tuple[str, EventCounts], ...]:
    """The servers of the scope with the most bad events in the last hour."""
    members = scope_members(counts, slo, scope, now - 3600.0, now + 1.0, deployments)
    ranked = sorted(
        ((t, c) for t, c in members.items() if c.bad > 0), key=lambda item: (-item[1].bad, item[0])
    )
    return tuple(ranked[:limit])


# -- goodput -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Goodput:
    """Requests per second that met every latency SLO of a scope, as bounds: histograms are per signal, so
    which requests failed two SLOs at once is not known (lower: total − Σ bad; upper: min over SLOs of good).
    """

    scope: Scope
    lower_rps: float | None
    upper_rps: float | None
    slos: tuple[str, ...]
    window_s: float = GOODPUT_WINDOW_S


def goodput(counts: SloCounts, slos: Sequence[Slo], now: float) -> list[Goodput]:
    """Per scope (SLO match and deployment), over the last five minutes — or as much of them as the store
    holds: a scope counted for 45 s served its requests in 45 s, not in five minutes."""
    by_scope: dict[str, list[EventCounts]] = {}
    names: dict[str, list[str]] = {}
    firsts: dict[str, list[int]] = {}
    for slo in slos:
        if slo.sli.kind == "availability":
            continue
        for scope in slo_scopes(counts, slo, now):
            window = window_counts(counts, slo, scope, GOODPUT_WINDOW_S, now)
            by_scope.setdefault(scope.key, []).append(window)
            names.setdefault(scope.key, []).append(slo.name)
            first = counts.first_minute(slo.name, scope.key)
            if first is not None:
                firsts.setdefault(scope.key, []).append(first)
    out: list[Goodput] = []
    for key, windows in by_scope.items():
        total = max(w.total for w in windows)
        stored_s = now - min(firsts[key]) if key in firsts else GOODPUT_WINDOW_S
        window_s = min(GOODPUT_WINDOW_S, max(stored_s, 1.0))
        if total <= 0:
            out.append(Goodput(Scope.from_key(key), None, None, tuple(names[key]), window_s))
            continue
        lower = max(total - sum(w.bad for w in windows), 0.0) / window_s
        upper = min(w.good for w in windows) / window_s
        out.append(Goodput(Scope.from_key(key), lower, upper, tuple(names[key]), window_s))
    return sorted(out, key=lambda g: (g.scope.key != "", g.scope.key))


@dataclass(frozen=True, slots=True)
class ProbeGoodput:
    """The active probes' own goodput in a scope: of the probe requests answered in the window, how many
    met every latency SLO of the scope (per request, so no bounds are needed; probes sweep fixed context
    lengths, so this is the served-from-1K-to-64K view, not the traffic's)."""

    scope: Scope
    met: int
    sent: int
    window_s: float


_PROBE_COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def probe_goodput(
    slos: Sequence[Slo],
    probes: pd.DataFrame,
    deployments: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]] | None = None,
    *,
    window_s: float = 3600.0,
) -> list[ProbeGoodput]:
    """Per scope of the latency SLOs, from the probe rows of the last ``window_s`` (``ProbeStore.read``);
    ``labels``: each target's configured labels (default: its deployment only)."""
    answered = probes[probes["error"].isna()] if "error" in probes else probes
    if answered.empty:
        return []
    rows: dict[str, list[bool]] = {}
    for record in answered.to_dict("records"):
        target = str(record["target"])
        target_labels = dict((labels or {}).get(target, {}))
        if deployments.get(target):
            target_labels.setdefault("deployment", deployments[target])
        met_by_scope: dict[str, bool] = {}
        for slo in slos:
            column = _PROBE_COLUMNS.get(slo.sli.kind)
            if column is None or slo.sli.threshold_s is None:
                continue
            value = record.get(column)
            if value is None or pd.isna(value):
                continue
            for scope in slo.scopes(target_labels):
                ok = float(value) <= slo.sli.threshold_s
                met_by_scope[scope.key] = met_by_scope.get(scope.key, True) and ok
        for key, ok in met_by_scope.items():
            rows.setdefault(key, []).append(ok)
    return [
        ProbeGoodput(Scope.from_key(key), sum(found), len(found), window_s)
        for key, found in sorted(rows.items(), key=lambda item: (item[0] != "", item[0]))
    ]
