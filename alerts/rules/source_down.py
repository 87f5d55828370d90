"""SourceDown: the source the collector reads the fleet from (the fleet's Prometheus) cannot answer.

While it is blind every target is *unknown*, not down: the per-target rules hold their state (nothing
fires, resolves or starts pending) and this one alert pages instead, naming the URL and the error. The engine
evaluates it once per evaluation from the source's health, not per target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alerts.model import Condition, Evaluation
from alerts.promql import Exported, PromQL
from alerts.rules.base import Rule, RuleSettings, setting
from alerts.window import TargetHistory
from collectors.model import Recipe, SourceHealth


@dataclass(frozen=True, kw_only=True)
class SourceDownSettings(RuleSettings):
    severity: str = setting("critical", "The severity label sent with the alert.")
    for_s: float = setting(
        30.0,
        "Seconds the source must stay unable to answer before it fires (default: TargetDown's for_s).",
        ge=0,
    )


class SourceDown(Rule[SourceDownSettings]):
    name = "SourceDown"
    settings_class = SourceDownSettings
    watches_source = True
    not_exported = (
        "Prometheus cannot alert on its own absence. Page on its silence instead: an always-firing "
        "`vector(1)` Watchdog rule routed through Alertmanager to a dead man's switch service"
    )

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        return []  # never per target: see evaluate_source

    def evaluate_source(
        self, health: SourceHealth, blind_since: float | None, now: float
    ) -> Sequence[Evaluation]:
        """One verdict about the source: BREACH while it cannot answer, CLEAR once it does."""
        if health.answered:
            return [Evaluation(Condition.CLEAR, 0.0)]
        blind_s = max(0.0, now - (blind_since if blind_since is not None else now))
        where = health.url or f"the {health.source} source"
        return [
            Evaluation(
                Condition.BREACH,
                blind_s,
                summary=f"{health.source} source at {where} cannot answer",
                description=(
                    f"specwatch has not been able to read the fleet from {where} for {blind_s:.0f} s "
                    f"({health.error or 'no reason given'}). Every target is unknown, not down: their alerts "
                    "are held (neither fired nor resolved) until it answers again."
                ),
            )
        ]

    def describe(self) -> str:
        return (
            f"Fires when the fleet's Prometheus cannot answer for {self.for_s:g} s; meanwhile every target "
            "is unknown and its alerts are held rather than fired or resolved."
        )

    def export(self, q: PromQL) -> Exported | None:
        return None  # see not_exported
