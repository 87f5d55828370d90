"""Threshold rules: fire when window means cross settings, recover only past other settings (hysteresis).

A rule states each pair once, as a ``Bound`` on its settings class: which signal, the setting it fires at, the
setting it recovers at, and the direction. From that one statement come the config check (a recovery level
on the right side of its firing level), the engine's condition (BREACH / HOLD / CLEAR) and the exported
rule's fire and hold PromQL — so the engine and Prometheus cannot judge by different comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from alerts.model import Condition
from alerts.promql import JOIN, Exported, PromQL, hysteresis, number
from alerts.rules.base import Rule, RuleSettings, mean_signal, setting
from alerts.window import Samples
from collectors.model import TargetSnapshot


@dataclass(frozen=True, slots=True)
class Bound:
    """One signal against one setting: breached at or above ``fire`` (below it when ``falling``), recovered
    below ``recover`` (at or above it when ``falling``); a bound without ``recover`` is a gate: needed to
    fire, never a reason to recover."""

    value: str  # the catalogue signal whose window mean is compared (or, for the settings check only, a name)
    fire: str  # setting key
    recover: str | None = None  # setting key
    falling: bool = False  # fires on a low value (a hit rate), not a high one

    def breached(self, value: float | None, settings: RuleSettings) -> bool:
        if value is None:
            return False  # unknown never fires
        limit = float(getattr(settings, self.fire))
        return value < limit if self.falling else value >= limit

    def recovered(self, value: float | None, settings: RuleSettings) -> bool:
        if self.recover is None:
            return False
        if value is None:
            return True  # unknown never holds an alert up
        limit = float(getattr(settings, self.recover))
        return value >= limit if self.falling else value < limit

    def problem(self, settings: RuleSettings) -> tuple[str, str, object] | None:
        """(key, what was expected, what was found) when the recovery level sits on the firing side."""
        if self.recover is None:
            return None
        fire, recover = getattr(settings, self.fire), getattr(settings, self.recover)
        if self.falling and recover < fire:
            return self.recover, f"a value >= {self.fire} ({fire:g})", recover
        if not self.falling and recover > fire:
            return self.recover, f"a value <= {self.fire} ({fire:g})", recover
        return None

    def fire_expr(self, series: str, settings: RuleSettings) -> str:
        limit = number(float(getattr(settings, self.fire)))
        return f"{series} {'<' if self.falling else '>='} {limit}"

    def hold_expr(self, series: str, settings: RuleSettings) -> str | None:
        """While this holds, the bound has not recovered (None for a gate)."""
        if self.recover is None:
            return None
        limit = number(float(getattr(settings, self.recover)))
        return f"{series} {'<' if self.falling else '>='} {limit}"


@dataclass(frozen=True, kw_only=True)
class ThresholdSettings(RuleSettings):
    """Settings whose fire/recover pairs are stated as ``bounds``; ``problems`` checks every pair."""

    bounds: ClassVar[tuple[Bound, ...]] = ()
    window_s: float = setting(60.0, "Seconds over which the signals are averaged.", gt=0)

    def problems(self) -> list[tuple[str, str, object]]:
        return [found for bound in self.bounds if (found := bound.problem(self)) is not None]


ThresholdSettingsT = TypeVar("ThresholdSettingsT", bound=ThresholdSettings)


class ThresholdRule(Rule[ThresholdSettingsT]):
    """A rule judging window means against its settings' bounds: BREACH when every bound is breached
    (any one with ``fires_on_any``), CLEAR when any bound has recovered (every one with ``fires_on_any``),
    else HOLD — the firing state holds between the two levels."""

    fires_on_any: ClassVar[bool] = False

    def means(self, window: Sequence[TargetSnapshot] | Samples) -> dict[str, float | None]:
        """The window mean of each bound's signal (None: no sample knows it), over whole snapshots or
        the columns (``alerts.window``)."""
        if isinstance(window, Samples):
            return {bound.value: window.mean(bound.value) for bound in self.settings.bounds}
        return {bound.value: mean_signal(window, bound.value) for bound in self.settings.bounds}

    def condition(self, means: Mapping[str, float | None]) -> Condition:
        s = self.settings
        breached = [b.breached(means[b.value], s) for b in s.bounds]
        recovered = [b.recovered(means[b.value], s) for b in s.bounds if b.recover is not None]
        combine, settle = (any, all) if self.fires_on_any else (all, any)
        if combine(breached):
            return Condition.BREACH
        return Condition.CLEAR if settle(recovered) else Condition.HOLD

    def exported_expr(self, q: PromQL, also: str = "") -> str:
        """The alert's PromQL: fire on the bounds, stay active until they recover; ``also`` (an ``and`` clause
        of context) is added to both."""
        s = self.settings
        series = {b.value: q.mean(b.value, s.window_s) for b in s.bounds}
        joiner = "\n  or " if self.fires_on_any else f"\n  and on ({JOIN}) "
        fire = joiner.join(b.fire_expr(series[b.value], s) for b in s.bounds)
        held = [h for b in s.bounds if (h := b.hold_expr(series[b.value], s)) is not None]
        return hysteresis(fire + also, joiner.join(held) + also, self.name)

    def exported(self, q: PromQL, *, summary: str, description: str, also: str = "") -> Exported:
        """The alert on ``exported_expr`` (no recording rules of its own: it reads the catalogue's)."""
        return Exported(self.alert(self.exported_expr(q, also), summary=summary, description=description))
