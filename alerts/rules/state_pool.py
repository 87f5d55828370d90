"""StatePoolSaturation: the recurrent-state pool is full while requests queue, whatever the KV cache says.

On a hybrid SSM model a speculative request keeps several recurrent states alive, so the state pool binds
first (the seed: 98% of state slots at 48 running while KV sat at 29%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alerts.model import Evaluation
from alerts.promql import Exported, PromQL
from alerts.rules.base import mean_signal, no_data, percent, recipe_of, setting
from alerts.rules.threshold import Bound, ThresholdRule, ThresholdSettings
from alerts.window import TargetHistory
from collectors.model import Recipe


@dataclass(frozen=True, kw_only=True)
class StatePoolSettings(ThresholdSettings):
    bounds = (Bound("state_pool_usage", "fire_at", "recover_below"), Bound("queued", "min_queued"))

    severity: str = setting("critical", "The severity label sent with the alert.")
    for_s: float = setting(60.0, "Seconds the pool must stay saturated before it fires.", ge=0)
    keep_firing_for_s: float = setting(
        60.0, "Seconds it keeps firing after the pool last looked saturated.", ge=0
    )
    window_s: float = setting(
        30.0, "Seconds over which state-pool usage and queue length are averaged.", gt=0
    )
    fire_at: float = setting(0.95, "State-pool usage (0–1) at or above which it fires.", gt=0, le=1)
    recover_below: float = setting(
        0.90, "State-pool usage (0–1) below which a firing alert recovers.", gt=0, le=1
    )
    min_queued: float = setting(
        1.0, "Mean queued requests needed to fire (a full pool with no queue is fine).", gt=0
    )


class StatePoolSaturation(ThresholdRule[StatePoolSettings]):
    name = "StatePoolSaturation"
    settings_class = StatePoolSettings

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        window = self.window(history, now)
        means = self.means(window)
        pool, queued = means["state_pool_usage"], means["queued"]
        if pool is None or queued is None:
            return [no_data("state-pool usage or queue length unknown (not a hybrid SSM model?)")]
        condition = self.condition(means)
        kv = mean_signal(window, "kv_usage")
        running = mean_signal(window, "running")
        recipe = recipe_of(history, recipes)
        cap = recipe.max_running if recipe is not None else None
        kv_text = f"KV cache at {percent(kv)}" if kv is not None else "KV cache usage unknown"
        running_text = f"{running:.0f} running" if running is not None else "running unknown"
        if cap is not None:
            running_text += f" (max-running-requests {cap})"
        return [
            Evaluation(
                condition,
                pool,
                summary=f"State pool at {percent(pool)} on {history.target}, {queued:.0f} queued; {kv_text}",
                description=(
                    f"State pool at {percent(pool)} of slots with {queued:.0f} requests queued and "
                    f"{running_text}, while the {kv_text}: this server is short of recurrent-state slots, "
                    "not cache. Each speculative request keeps several states alive, so raising "
                    "--max-running-requests trades token budget for slots and makes it worse; a narrower "
                    "verify window needs fewer states per request, or add capacity."
                ),
            )
        ]

    def describe(self) -> str:
        s = self.settings
        return (
            f"Fires when the state pool stays at or above {percent(s.fire_at)} with requests queued for "
            f"{s.for_s:g} s (averaged over {s.window_s:g} s) and recovers below {percent(s.recover_below)}; "
            "KV usage is shown beside it, because raising --max-running-requests trades token budget for "
            "slots."
        )

    def export(self, q: PromQL) -> Exported:
        kv = (
            f"{{{{ with printf \"{q.signal('kv_usage')}{{instance='%s'}}\" $labels.instance | query }}}}"
            "{{ . | first | value | humanizePercentage }}{{ else }}unknown{{ end }}"
        )
        return self.exported(
            q,
            summary=f"State pool at {{{{ $value | humanizePercentage }}}} on {{{{ $labels.instance }}}}; "
            f"KV {kv}",
            description=(
                "State pool at {{ $value | humanizePercentage }} of slots with requests queued "
                f"while the KV cache is at {kv}: short of recurrent-state slots, not cache. Raising "
                "--max-running-requests trades token budget for slots and makes it worse."
            ),
        )
