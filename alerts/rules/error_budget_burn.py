"""ErrorBudgetBurn: an SLO's error budget burns too fast in one scope (the SRE workbook's multi-window,
multi-burn-rate alert), with which half of the fraction burned it.

Evaluated once per evaluation per (SLO, scope) from the SLO counts (``collectors.slo_ledger``), never per
target. One instance per (SLO, scope, severity): ``page`` and ``ticket`` each have their conditions (both
windows' burn rates above the factor, at least ``min_events`` in the long window). The labels name the
severity's first configured condition, so an instance keeps one fingerprint however its conditions take
turns; the annotations say which condition holds and how fast each window burns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alerts.model import Condition, Evaluation, to_pairs
from alerts.promql import Exported, PromQL, duration
from alerts.rules.base import Rule, RuleSettings, setting
from alerts.window import TargetHistory
from analysis.slo_attribution import Attribution, attribute
from analysis.slo_budget import BurnCheck, budget_remaining, burn_checks
from collectors.history import HistoryReader
from collectors.model import Recipe
from collectors.prometheus import slo_rules
from collectors.prometheus.slo_rules import window_name
from collectors.slo import Scope, Slo
from collectors.slo_ledger import SloCounts

SEVERITY_KEYS = ("page", "ticket")
ATTRIBUTION_EVERY_S = 60.0  # the attribution reads history: at most once a minute per burning instance


@dataclass(frozen=True, kw_only=True)
class ErrorBudgetBurnSettings(RuleSettings):
    severity: str = setting(
        "page",
        "Not used: the severity label is page_severity or ticket_severity, by the condition that holds.",
        choices=("page",),
    )
    for_s: float = setting(
        0.0, "Seconds a burn condition must hold before it fires (the short window already smooths).", ge=0
    )
    page_severity: str = setting("page", "The severity label of the page conditions' alerts.")
    ticket_severity: str = setting("ticket", "The severity label of the ticket conditions' alerts.")
    recover_below: float = setting(
        1.0,
        "Once firing, stays active while both windows of a condition burn above this fraction of its factor "
        "(1: recovers as soon as the short window drops below the factor, as the workbook).",
        gt=0,
        le=1,
    )

    def problems(self) -> list[tuple[str, str, object]]:
        if self.page_severity == self.ticket_severity:
            return [("ticket_severity", f"a label other than page_severity ({self.page_severity})", "same")]
        return []


class ErrorBudgetBurn(Rule[ErrorBudgetBurnSettings]):
    name = "ErrorBudgetBurn"
    settings_class = ErrorBudgetBurnSettings
    watches_slos = True

    def __init__(self, settings: ErrorBudgetBurnSettings) -> None:
        super().__init__(settings)
        self._attributions: dict[tuple[str, str, str], tuple[float, Attribution]] = {}

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        return []  # never per target: see evaluate_scope

    def severity_label(self, key: str) -> str:
        return self.settings.page_severity if key == "page" else self.settings.ticket_severity

    def evaluate_scope(
        self,
        slo: Slo,
        scope: Scope,
        counts: SloCounts,
        now: float,
        history: HistoryReader | None,
    ) -> Sequence[Evaluation]:
        """One verdict per severity with conditions: BREACH while one holds, HOLD above the recovery
        fraction, CLEAR when none does (or below the traffic floor), NO_DATA without events."""
        checks = burn_checks(counts, slo, scope, now)
        period = counts.counts(slo.name, scope.key, now - slo.window_s, now + 1.0)
        out: list[Evaluation] = []
        for key in SEVERITY_KEYS:
            mine = [c for c in checks if c.severity == key]
            if mine:
                out.append(
                    self._verdict(
                        slo, scope, key, mine, budget_remaining(period, slo.objective), counts, now, history
                    )
                )
        return out

    def _verdict(
        self,
        slo: Slo,
        scope: Scope,
        key: str,
        checks: Sequence[BurnCheck],
        budget_left: float | None,
        counts: SloCounts,
        now: float,
        history: HistoryReader | None,
    ) -> Evaluation:
        first = checks[0].window
        labels = to_pairs(
            {
                "severity": self.severity_label(key),
                "long_window": window_name(first.long_s),
                "short_window": window_name(first.short_s),
            }
        )
        if all(c.long_rate is None or c.short_rate is None for c in checks):
            # No events in the windows: no traffic is not a perfect score (suspended, never resolved).
            return Evaluation(Condition.NO_DATA, None, labels=labels)
        holding = [c for c in checks if c.holds(slo.min_events)]
        recovering = [c for c in checks if _holds_at(c, slo.min_events, self.settings.recover_below)]
        if not holding and not recovering:
            return Evaluation(Condition.CLEAR, _fastest(checks), labels=labels)
        shown = max(holding or recovering, key=lambda c: c.long_rate or 0.0)
        attribution = self._attribution(slo, scope, key, counts, now, history, fresh=bool(holding))
        condition = Condition.BREACH if holding else Condition.HOLD
        return self._explain(slo, scope, key, shown, checks, budget_left, attribution, condition, labels)

    def _attribution(
        self,
        slo: Slo,
        scope: Scope,
        key: str,
        counts: SloCounts,
        now: float,
        history: HistoryReader | None,
        *,
        fresh: bool,
    ) -> Attribution | None:
        """Which half burned: computed only while a condition holds (it reads history), once a minute."""
        cache_key = (slo.name, scope.key, key)
        cached = self._attributions.get(cache_key)
        if not fresh or history is None:
            return cached[1] if cached is not None else None
        if cached is not None and now - cached[0] < ATTRIBUTION_EVERY_S:
            return cached[1]
        try:
            found = attribute(counts, slo, scope, now, history=history)
        except Exception as exc:  # a store that cannot answer must not stop the alert
            found = Attribution(None, f"attribution unavailable: {exc}")
        self._attributions[cache_key] = (now, found)
        return found

    def _explain(
        self,
        slo: Slo,
        scope: Scope,
        key: str,
        shown: BurnCheck,
        checks: Sequence[BurnCheck],
        budget_left: float | None,
        attribution: Attribution | None,
        condition: Condition,
        labels: tuple[tuple[str, str], ...],
    ) -> Evaluation:
        window = shown.window
        long_rate, short_rate = shown.long_rate or 0.0, shown.short_rate or 0.0
        long_name, short_name = window_name(window.long_s), window_name(window.short_s)
        period = window_name(slo.window_s)
        left = f"{budget_left:.0%}" if budget_left is not None else "unknown"
        # At a burn rate r the whole period's budget lasts period ÷ r.
        lasts = _span(slo.window_s / long_rate) if long_rate > 0 else "forever"
        why = ""
        if attribution is not None:
            why = f" Why: {attribution.sentence or attribution.reason}."
        description = (
            f"{slo.sli.words.capitalize()}: objective {slo.objective:.4g} over {period}. The error budget "
            f"burns {long_rate:.1f}× over the last {long_name} and {short_rate:.1f}× over the last "
            f"{short_name} ({key} condition: both above {window.factor:.3g}×, {shown.long_events:.0f} events "
            f"in {long_name}); at this rate the {period} budget lasts {lasts}. {left} of the budget is "
            f"left.{why}"
        )
        details: dict[str, str] = {
            "condition": f"{long_name}/{short_name} > {window.factor:.3g}×",
            "burn_rate_long": f"{long_rate:.4g}",
            "burn_rate_short": f"{short_rate:.4g}",
            "factor": f"{window.factor:.4g}",
            "long_events": f"{shown.long_events:.0f}",
            "budget_remaining": f"{budget_left:.4g}" if budget_left is not None else "",
            "slo": slo.name,
            "sli": slo.sli.key,
            "scope": scope.words,
        }
        for other in checks:
            name = f"{window_name(other.window.long_s)}/{window_name(other.window.short_s)}"
            details[f"burn_rate_{name}"] = " / ".join(
                f"{rate:.3g}" if rate is not None else "-" for rate in (other.long_rate, other.short_rate)
            )
        if attribution is not None:
            details["attribution_reason"] = attribution.reason
            for share_name, share in (attribution.shares or {}).items():
                details[f"attribution_{share_name}"] = f"{share:.3f}"
        return Evaluation(
            condition,
            long_rate,
            summary=(
                f"{slo.name} ({scope.words}): error budget burning {long_rate:.1f}× over {long_name} "
                f"({left} left)"
            ),
            description=description,
            labels=labels,
            details=to_pairs({k: v for k, v in details.items() if v}),
        )

    def describe(self) -> str:
        return (
            "Fires per SLO and scope when both windows of a page or ticket condition burn the error budget "
            "faster than its factor (the SRE workbook's 14.4× over 1 h and 5 m, 6× over 6 h and 30 m, "
            "1× over 3 d and 6 h, scaled to the SLO's period) with at least the SLO's min_events in the long "
            f"window; recovers below {self.settings.recover_below:g} of the factor; no events is no data, "
            "not OK."
        )

    def export(self, q: PromQL) -> Exported | None:
        return None  # per SLO, not per catalogue signal: see export_slo

    def export_slo(self, slo: Slo) -> list[dict[str, Any]]:
        """The alerting rules of one SLO, one per severity with conditions: the engine's conditions on the
        recorded ``slo:`` series (``collectors.prometheus.slo_rules``), the same labels."""
        out: list[dict[str, Any]] = []
        s = self.settings
        for key, windows in (("page", slo.page), ("ticket", slo.ticket)):
            if not windows:
                continue
            severity = self.severity_label(key)
            expr = slo_rules.burn_expr(slo, windows)
            if s.recover_below < 1:
                joined = ", ".join(slo_rules.scope_labels(slo))
                hold = slo_rules.burn_expr(slo, windows, s.recover_below)
                active = f'ALERTS{{alertname="{self.name}", slo="{slo.name}", severity="{severity}"}}'
                expr = f"(\n{expr}\n)\nor\n(\n{hold}\n  and on ({joined}) {active}\n)"
            first = windows[0]
            rule: dict[str, Any] = {
                "alert": self.name,
                "expr": expr,
                "for": duration(s.for_s) if s.for_s > 0 else "0s",
            }
            if s.keep_firing_for_s > 0:
                rule["keep_firing_for"] = duration(s.keep_firing_for_s)
            rule["labels"] = {
                "slo": slo.name,
                "severity": severity,
                "long_window": window_name(first.long_s),
                "short_window": window_name(first.short_s),
            }
            conditions = ", ".join(
                f"{w.factor:.3g}× over {window_name(w.long_s)} and {window_name(w.short_s)}" for w in windows
            )
            rule["annotations"] = {
                "summary": f'{slo.name}: error budget burning {{{{ $value | printf "%.1f" }}}}× ({key})',
                "description": (
                    f"{slo.sli.words.capitalize()}: objective {slo.objective:.4g} over "
                    f"{window_name(slo.window_s)}. The long window burns the budget {{{{ $value | printf "
                    f'"%.1f" }}}}× ({key} conditions: {conditions}; at least {slo.min_events:g} events '
                    "in the long window)."
                ),
            }
            out.append(rule)
        return out


def _holds_at(check: BurnCheck, min_events: float, fraction: float) -> bool:
    """The condition with its factor scaled by ``fraction`` (the recovery threshold)."""
    threshold = check.window.factor * fraction
    return (
        check.long_rate is not None
        and check.short_rate is not None
        and check.long_events >= min_events
        and check.long_rate > threshold
        and check.short_rate > threshold
    )


def _span(seconds: float) -> str:
    """How long a budget lasts, as people say it: 45 min, 11 h, 2.1 d."""
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h" if seconds < 2 * 86400 else f"{seconds / 86400:.1f} d"


def _fastest(checks: Sequence[BurnCheck]) -> float | None:
    rates = [c.long_rate for c in checks if c.long_rate is not None]
    return max(rates) if rates else None
