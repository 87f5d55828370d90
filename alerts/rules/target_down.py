"""TargetDown: a target has not answered its scrapes for ``for_s``; its other alerts wait, suspended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alerts.model import Condition, Evaluation
from alerts.promql import Exported, PromQL
from alerts.rules.base import Rule, RuleSettings, setting
from alerts.window import TargetHistory
from collectors.model import Recipe


@dataclass(frozen=True, kw_only=True)
class TargetDownSettings(RuleSettings):
    severity: str = setting("critical", "The severity label sent with the alert.")
    for_s: float = setting(30.0, "Seconds without a successful scrape before it fires.", ge=0)


class TargetDown(Rule[TargetDownSettings]):
    name = "TargetDown"
    settings_class = TargetDownSettings
    applies_when_down = True

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        latest = history.latest
        if latest is None:
            return []
        if latest.up:
            return [Evaluation(Condition.CLEAR, 0.0)]
        since = history.down_since()
        down_since = latest.ts if since is None else since
        down_s = max(0.0, now - down_since)
        error = latest.error or "no answer"
        return [
            Evaluation(
                Condition.BREACH,
                down_s,
                summary=f"{history.target} is down",
                description=(
                    f"No successful scrape of {history.target} for {down_s:.0f} s (last error: {error}). Its "
                    "other alerts are suspended, neither resolved nor fired, until it answers again."
                ),
            )
        ]

    def describe(self) -> str:
        return (
            f"Fires when a target has not answered a scrape for {self.for_s:g} s; while it is down its other "
            "alerts are suspended rather than resolved."
        )

    def export(self, q: PromQL) -> Exported:
        return Exported(
            self.alert(
                f"{q.up()} == 0",
                summary="{{ $labels.instance }} is down",
                description=f"Prometheus has not scraped {{{{ $labels.instance }}}} for {self.for_s:g} s.",
            )
        )
