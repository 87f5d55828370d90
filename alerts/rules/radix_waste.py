"""RadixCacheWaste: the radix cache is on, almost nothing hits it, and the state pool is under pressure.

With the radix cache on, the hybrid model reserves several state buffers per request so cached prefixes can
fork; on traffic without shared prefixes that buys nothing (the seed: runnable batch 570 → 114 slots, −14%
throughput).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alerts.model import Condition, Evaluation
from alerts.promql import JOIN, Exported, PromQL, number
from alerts.rules.base import no_data, percent, recipe_of, setting
from alerts.rules.threshold import Bound, ThresholdRule, ThresholdSettings
from alerts.window import TargetHistory
from collectors.model import Recipe


@dataclass(frozen=True, kw_only=True)
class RadixWasteSettings(ThresholdSettings):
    bounds = (
        Bound("cache_hit_rate", "max_hit_rate", "recover_hit_rate", falling=True),
        Bound("state_pool_usage", "state_pool_at", "recover_state_pool_below"),
    )

    severity: str = setting("info", "The severity label sent with the alert.")
    for_s: float = setting(300.0, "Seconds the waste must persist before it fires.", ge=0)
    keep_firing_for_s: float = setting(120.0, "Seconds it keeps firing after the waste was last seen.", ge=0)
    window_s: float = setting(300.0, "Seconds over which hit rate and state-pool usage are averaged.", gt=0)
    max_hit_rate: float = setting(
        0.10, "Prefix-cache hit rate (0–1) below which the cache counts as unused.", ge=0, le=1
    )
    recover_hit_rate: float = setting(
        0.15, "Hit rate (0–1) at or above which a firing alert recovers.", ge=0, le=1
    )
    state_pool_at: float = setting(0.80, "State-pool usage (0–1) that counts as pressure.", gt=0, le=1)
    recover_state_pool_below: float = setting(
        0.70, "State-pool usage (0–1) below which it recovers.", gt=0, le=1
    )
    min_running: float = setting(1.0, "Traffic floor: an idle server does not fire.", ge=0)


class RadixCacheWaste(ThresholdRule[RadixWasteSettings]):
    name = "RadixCacheWaste"
    settings_class = RadixWasteSettings

    @property
    def horizon_s(self) -> float:
        return 0.0  # its 5 minutes are read from the columns (alerts.window)

    @property
    def long_horizon_s(self) -> float:
        return self.settings.window_s

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        s = self.settings
        recipe = recipe_of(history, recipes)
        disabled = recipe.get("disable_radix_cache") if recipe is not None else None
        if not isinstance(disabled, bool):
            return [no_data("recipe unknown: cannot tell whether the radix cache is on")]
        if disabled:
            return [Evaluation(Condition.CLEAR, None, "", "radix cache off")]
        window = history.up_window(now - s.window_s)
        running = float(window.signal("running")[-1]) if len(window) else math.nan
        if running < s.min_running:  # NaN (unknown) is not idle
            return [Evaluation(Condition.CLEAR, None, "", "idle: below the traffic floor")]
        means = self.means(window)
        hit, pool = means["cache_hit_rate"], means["state_pool_usage"]
        if hit is None or pool is None:
            return [no_data("cache hit rate or state-pool usage unknown")]
        condition = self.condition(means)
        return [
            Evaluation(
                condition,
                hit,
                summary=f"Radix cache on {history.target} hits {percent(hit)}; state pool at {percent(pool)}",
                description=(
                    f"The radix cache is on but only {percent(hit)} of prompt tokens hit it, while the state "
                    f"pool is at {percent(pool)}. With the radix cache on, the hybrid model reserves several "
                    "state buffers per request so cached prefixes can fork; without shared prefixes that "
                    "costs batch capacity for nothing. Consider --disable-radix-cache, unless prefixes do "
                    "repeat (then it is a big win)."
                ),
            )
        ]

    def describe(self) -> str:
        s = self.settings
        return (
            f"Fires when the radix cache is on, its hit rate stays under {percent(s.max_hit_rate)} and the "
            f"state pool is at or above {percent(s.state_pool_at)} for {s.for_s:g} s: the cache reserves "
            "state slots for prefixes that never repeat."
        )

    def export(self, q: PromQL) -> Exported:
        s = self.settings
        # Prometheus sees no recipe: radix-cached (evictable) slots exist only with the radix cache on, so
        # they stand in for disable_radix_cache. The traffic floor reads the latest running count, as the
        # engine reads its window's last snapshot.
        context = (
            f"\n  and on ({JOIN}) {q.raw_gauge('kv_evictable_tokens')} > 0\n  and on ({JOIN}) "
            f"{q.signal('running')} >= {number(s.min_running)}"
        )
        return self.exported(
            q,
            summary="Radix cache on {{ $labels.instance }} hits {{ $value | humanizePercentage }} under "
            "state-pool pressure",
            description=(
                "The radix cache is on (evictable slots exist) but its hit rate is {{ $value | "
                "humanizePercentage }} while the state pool is under pressure: it reserves state "
                "buffers for prefixes that never repeat. Consider --disable-radix-cache."
            ),
            also=context,
        )
