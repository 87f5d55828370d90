"""QueueBacklog: requests wait too long to start: the queue is long or time to first token is too high."""

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
class QueueBacklogSettings(ThresholdSettings):
    bounds = (
        Bound("queued", "max_queued", "recover_queued"),
        Bound("ttft_s", "max_ttft_s", "recover_ttft_s"),
    )

    for_s: float = setting(120.0, "Seconds the backlog must last before it fires.", ge=0)
    keep_firing_for_s: float = setting(
        60.0, "Seconds it keeps firing after the backlog last looked bad.", ge=0
    )
    window_s: float = setting(60.0, "Seconds over which queue length and TTFT are averaged.", gt=0)
    max_queued: float = setting(32.0, "Mean queued requests at or above which it fires.", gt=0)
    recover_queued: float = setting(16.0, "Mean queued requests below which it recovers.", ge=0)
    max_ttft_s: float = setting(30.0, "Mean time to first token (s) at or above which it fires.", gt=0)
    recover_ttft_s: float = setting(15.0, "Mean time to first token (s) below which it recovers.", ge=0)


class QueueBacklog(ThresholdRule[QueueBacklogSettings]):
    name = "QueueBacklog"
    settings_class = QueueBacklogSettings
    fires_on_any = True  # a long queue or a slow first token: either is a backlog

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        s = self.settings
        window = self.window(history, now)
        means = self.means(window)
        queued, ttft = means["queued"], means["ttft_s"]
        if queued is None and ttft is None:
            return [no_data("queue length and TTFT unknown")]
        condition = self.condition(means)  # an unknown one neither fires nor holds the alert up
        parts = []
        if queued is not None:
            parts.append(f"{queued:.0f} requests queued")
        if ttft is not None:
            parts.append(f"time to first token {ttft:.1f} s")
        pool = mean_signal(window, "state_pool_usage")
        cause = ""
        if pool is not None and pool >= 0.9:
            cause = f" The state pool is at {percent(pool)}: slots, not KV, are what requests wait for."
        return [
            Evaluation(
                condition,
                queued if queued is not None else ttft,
                summary=f"Backlog on {history.target}: {', '.join(parts)}",
                description=f"{', '.join(parts).capitalize()} (averaged over {s.window_s:g} s).{cause}",
            )
        ]

    def describe(self) -> str:
        s = self.settings
        return (
            f"Fires when at least {s.max_queued:g} requests are queued or time to first token reaches "
            f"{s.max_ttft_s:g} s for {s.for_s:g} s, and recovers below {s.recover_queued:g} queued and "
            f"{s.recover_ttft_s:g} s."
        )

    def export(self, q: PromQL) -> Exported:
        s = self.settings
        return self.exported(
            q,
            summary="Backlog on {{ $labels.instance }}: queue length or TTFT (s) at {{ $value }}",
            description=(
                f"At least {s.max_queued:g} requests queued or time to first token at or above "
                f"{s.max_ttft_s:g} s."
            ),
        )
