"""AcceptLengthRegression: after a recipe change, accept length or throughput sits below the previous
recipe's.

Compares the new recipe's recent window with the previous recipe's last samples (frozen at the change), like
for like: accept length only at comparable context, throughput only at comparable load, each beyond the noise
band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from alerts.model import Condition, Evaluation
from alerts.promql import Exported, PromQL
from alerts.rules.base import Rule, no_data, percent, setting
from alerts.rules.threshold import Bound, ThresholdSettings
from alerts.window import TargetHistory
from analysis.words import tokens
from collectors.model import Recipe


@dataclass(frozen=True, kw_only=True)
class RegressionSettings(ThresholdSettings):
    bounds = (Bound("accept length or throughput fall", "noise_band", "recover_band"),)  # the settings check

    for_s: float = setting(300.0, "Seconds the regression must persist before it fires.", ge=0)
    keep_firing_for_s: float = setting(
        300.0, "Seconds it keeps firing after the regression was last seen.", ge=0
    )
    window_s: float = setting(600.0, "Seconds of the new recipe compared (its most recent window).", gt=0)
    baseline_window_s: float = setting(1800.0, "Seconds of the previous recipe kept as the baseline.", gt=0)
    lookback_s: float = setting(
        21600.0, "Seconds after a recipe change during which the rule compares.", gt=0
    )
    settle_s: float = setting(
        120.0, "Seconds after the change ignored (warm-up, CUDA graphs, cache refill).", ge=0
    )
    noise_band: float = setting(0.10, "Fall (0–1) of accept length or throughput needed to fire.", gt=0, lt=1)
    recover_band: float = setting(0.05, "Fall (0–1) below which a firing alert recovers.", ge=0, lt=1)
    min_samples: int = setting(12, "Busy samples needed on each side before the rule judges.", ge=2)
    min_running: float = setting(1.0, "Traffic floor: samples with fewer running requests are ignored.", ge=0)
    load_tolerance: float = setting(
        0.5, "Throughput is compared only when mean running requests differ by at most this fraction.", ge=0
    )
    context_tolerance: float = setting(
        0.5, "Accept length is compared only when mean context differs by at most this fraction.", ge=0
    )


def _comparable(now: float | None, before: float | None, tolerance: float) -> bool:
    if now is None or before is None or before <= 0:
        return now is None and before is None  # unknown on both sides: nothing says the workload moved
    return abs(now / before - 1.0) <= tolerance


def _fall(now: float | None, before: float | None) -> float | None:
    return None if now is None or before is None or before <= 0 else 1.0 - now / before


def recipe_diff(old: Recipe | None, new: Recipe | None) -> str:
    if old is None or new is None:
        return "flags unknown"
    return ", ".join(new.changes_from(old)) or "no flag differs"


class AcceptLengthRegression(Rule[RegressionSettings]):
    name = "AcceptLengthRegression"
    settings_class = RegressionSettings
    not_exported = (
        "it judges throughput at comparable load against the previous recipe's own window, frozen at the "
        "recipe change. Prometheus sees neither the recipe nor when it changed, and PromQL cannot pair a "
        "baseline's throughput with the load it was measured at, so an exported copy would judge something "
        "else (an accept-length fall that the engine clears when throughput held up)"
    )

    @property
    def horizon_s(self) -> float:
        return 0.0  # it reads the columns only

    @property
    def long_horizon_s(self) -> float:
        return max(self.settings.window_s, self.settings.baseline_window_s)

    @property
    def baseline_s(self) -> float:
        return self.settings.baseline_window_s

    @property
    def lookback_s(self) -> float:
        return max(self.long_horizon_s, self.settings.lookback_s)  # a restart must find changes this old

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        s = self.settings
        previous = history.previous
        if previous is None or history.recipe_id is None or now - previous.changed_at > s.lookback_s:
            return []
        start = max(now - s.window_s, previous.changed_at + s.settle_s)
        current = history.samples_since(start).busy(s.min_running, history.recipe_id)
        baseline = previous.samples.busy(s.min_running)
        if len(current) < s.min_samples or len(baseline) < s.min_samples:
            return [
                no_data(
                    f"{len(current)} new and {len(baseline)} baseline busy samples (need {s.min_samples})"
                )
            ]
        means = {
            name: (current.mean(name), baseline.mean(name))
            for name in ("accept_length", "output_tok_s", "running", "avg_context_tokens")
        }
        accept_fall = (
            _fall(*means["accept_length"])
            if _comparable(*means["avg_context_tokens"], s.context_tolerance)
            else None
        )
        throughput_fall = (
            _fall(*means["output_tok_s"]) if _comparable(*means["running"], s.load_tolerance) else None
        )
        # Throughput is the fraction that ships: a recipe trading accept length for a cheaper step (the
        # seed's block size 3: accept length −15%, throughput ×1.68) is no regression. Accept length decides
        # alone only when throughput cannot be compared (the load moved).
        worst = throughput_fall if throughput_fall is not None else accept_fall
        if worst is None:
            return [Evaluation(Condition.CLEAR, None, "", "workload moved too much to compare the recipes")]
        if worst > s.noise_band:
            condition = Condition.BREACH
        elif worst > s.recover_band:
            condition = Condition.HOLD
        else:
            condition = Condition.CLEAR
        changed = recipe_diff(recipes.get(previous.recipe_id), recipes.get(history.recipe_id))
        parts = []
        for label, name, unit, fall in (
            ("accept length", "accept_length", "", accept_fall),
            ("throughput", "output_tok_s", " tok/s", throughput_fall),
        ):
            new, old = means[name]
            if fall is not None and new is not None and old is not None:
                parts.append(f"{label} {old:.2f} → {new:.2f}{unit} ({-fall:+.0%})")
        context_now, context_before = means["avg_context_tokens"]
        running_now, running_before = means["running"]
        load = ""
        if running_now is not None and running_before is not None:
            load = f" at {running_before:.0f} → {running_now:.0f} running"
        if context_now is not None and context_before is not None:
            load += f", context {tokens(context_before)} → {tokens(context_now)}"
        return [
            Evaluation(
                condition,
                worst,
                summary=f"{history.target} regressed after recipe {previous.recipe_id} → {history.recipe_id}",
                description=(
                    f"Since the recipe changed ({changed}): {'; '.join(parts)}{load}. The noise band is "
                    f"{percent(s.noise_band)}; compare the recipes on the Recipes page before rolling "
                    "further."
                ),
                details=(("previous_recipe_id", previous.recipe_id),),
            )
        ]

    def describe(self) -> str:
        s = self.settings
        return (
            f"Fires when, within {s.lookback_s / 3600:g} h of a recipe change, throughput (at comparable "
            f"load) stays more than {percent(s.noise_band)} below the previous recipe's for {s.for_s:g} s, "
            "or accept length (at comparable context) does when the load moved too much to compare."
        )

    def export(self, q: PromQL) -> Exported | None:
        return None  # see not_exported
