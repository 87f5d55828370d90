"""KVPoolSaturation: the full-attention KV cache is nearly full (read from full_token_usage, not token_usage).

On a hybrid model SGLang's ``token_usage`` is the max over pools, so it would report the state pool here; this
rule reads the KV pool alone, and stays quiet when only the state pool is full.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alerts.model import Evaluation
from alerts.promql import Exported, PromQL
from alerts.rules.base import mean_signal, no_data, percent, setting
from alerts.rules.threshold import Bound, ThresholdRule, ThresholdSettings
from alerts.window import TargetHistory
from collectors.model import Recipe


@dataclass(frozen=True, kw_only=True)
class KVPoolSettings(ThresholdSettings):
    bounds = (Bound("kv_usage", "fire_at", "recover_below"),)

    for_s: float = setting(60.0, "Seconds the KV cache must stay full before it fires.", ge=0)
    keep_firing_for_s: float = setting(60.0, "Seconds it keeps firing after KV last looked full.", ge=0)
    window_s: float = setting(30.0, "Seconds over which KV usage is averaged.", gt=0)
    fire_at: float = setting(0.95, "KV usage (0–1) at or above which it fires.", gt=0, le=1)
    recover_below: float = setting(0.90, "KV usage (0–1) below which a firing alert recovers.", gt=0, le=1)


class KVPoolSaturation(ThresholdRule[KVPoolSettings]):
    name = "KVPoolSaturation"
    settings_class = KVPoolSettings

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        window = self.window(history, now)
        means = self.means(window)
        kv = means["kv_usage"]
        if kv is None:
            return [no_data("KV usage unknown")]
        condition = self.condition(means)
        pool = mean_signal(window, "state_pool_usage")
        queued = mean_signal(window, "queued")
        beside = f"; state pool at {percent(pool)}" if pool is not None else ""
        queue_text = f" with {queued:.0f} queued" if queued is not None else ""
        return [
            Evaluation(
                condition,
                kv,
                summary=f"KV cache at {percent(kv)} on {history.target}{beside}",
                description=(
                    f"The full-attention KV cache is at {percent(kv)}{queue_text}{beside}. New requests wait "
                    "or get retracted until tokens free up; long contexts are the usual cause."
                ),
            )
        ]

    def describe(self) -> str:
        s = self.settings
        return (
            f"Fires when the KV cache (full-attention pool) stays at or above {percent(s.fire_at)} for "
            f"{s.for_s:g} s (averaged over {s.window_s:g} s) and recovers below {percent(s.recover_below)}."
        )

    def export(self, q: PromQL) -> Exported:
        return self.exported(
            q,
            summary="KV cache at {{ $value | humanizePercentage }} on {{ $labels.instance }}",
            description="The full-attention KV cache is at {{ $value | humanizePercentage }}.",
        )
