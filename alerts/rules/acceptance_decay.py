"""AcceptanceDecayWithContext: accept length falls beyond the noise band as average context grows.

A mechanism, not noise: the seed measured a 74.6% spread across input length 128→64K but only 10.5% jitter
across batch sizes. So the rule needs all three: context really grew (flat context never fires, whatever the
jitter), the fitted fall exceeds the noise band, and accept length is significantly negatively associated with
log(context).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from alerts.model import Condition, Evaluation
from alerts.promql import JOIN, Exported, PromQL, hysteresis, number, show
from alerts.rules.base import Rule, no_data, percent, setting
from alerts.rules.probe_evidence import ProbeEvidence, probe_decay
from alerts.rules.threshold import Bound, ThresholdSettings
from alerts.window import Samples, TargetHistory
from analysis.stats import LineFit, fit_line, quantile
from analysis.words import tokens
from collectors.model import Recipe, TargetSnapshot, loss_shares

LOW_PHI, HIGH_PHI = 0.1, 0.9  # the "ends" of the context range: robust to a few outlying cycles


@dataclass(frozen=True, kw_only=True)
class AcceptanceDecaySettings(ThresholdSettings):
    bounds = (Bound("fitted accept-length fall", "noise_band", "recover_band"),)  # the settings check

    severity: str = setting("critical", "The severity label sent with the alert.")
    for_s: float = setting(120.0, "Seconds the decay must persist before it fires.", ge=0)
    keep_firing_for_s: float = setting(300.0, "Seconds it keeps firing after the decay was last seen.", ge=0)
    window_s: float = setting(
        1800.0, "Seconds of history the fit looks at (long prompts drift over tens of minutes).", gt=0
    )
    noise_band: float = setting(
        0.10, "Fitted fall of accept length (low- to high-context end, 0–1) needed to fire.", gt=0, lt=1
    )
    recover_band: float = setting(0.05, "Fitted fall (0–1) below which a firing alert recovers.", ge=0, lt=1)
    significance: float = setting(
        0.01,
        "Largest one-sided p-value accepted for the negative accept-length/log(context) association.",
        gt=0,
        lt=0.5,
    )
    # One doubling: the seed's mechanism loses ~7% of accept length per doubling of context (2.514 at 1K →
    # 1.440 at 64K), so a fall beyond the 10% band over less than a doubling is noise, and so is the sawtooth
    # of a single request's own context growing from its prompt to prompt + output.
    min_context_ratio: float = setting(
        2.0, "Context growth (high end / low end) needed; flatter context never fires.", gt=1
    )

    min_samples: int = setting(12, "Busy samples needed in the window before the rule judges.", ge=4)
    min_running: float = setting(1.0, "Traffic floor: samples with fewer running requests are ignored.", ge=0)
    use_probes: bool = setting(
        True, "Also judge on probe evidence (probes.enabled): the longest-context probes vs their baseline."
    )
    probe_baseline_s: float = setting(
        86400.0, "Seconds of earlier probes forming a recipe's baseline at its longest context.", gt=0
    )
    probe_min_baseline: int = setting(3, "Baseline probes needed before probe evidence counts.", ge=1)
    probe_min_recent: int = setting(
        2, "Probes of the server within window_s needed to judge on probes.", ge=1
    )


@dataclass(frozen=True, slots=True)
class DecayFit:
    """The evidence, in the words of the annotation."""

    fit: LineFit
    context_low: float  # tokens, at the 10th percentile of log(context)
    context_high: float  # tokens, at the 90th percentile
    accept_low: float  # fitted accept length at the low-context end
    accept_high: float
    rows: tuple[tuple[float, float, float | None], ...] = field(
        repr=False, default=()
    )  # (log ctx, accept, step)

    @property
    def step_ratio(self) -> float | None:
        """Fitted step latency at the high-context end over the low end (None without step latencies)."""
        steps = [(x, math.log(step)) for x, _, step in self.rows if step is not None and step > 0]
        step_fit = fit_line([x for x, _ in steps], [y for _, y in steps]) if len(steps) >= 3 else None
        if step_fit is None:
            return None
        return math.exp(step_fit.slope * (math.log(self.context_high) - math.log(self.context_low)))

    @property
    def decline(self) -> float:
        return 1.0 - self.accept_high / self.accept_low if self.accept_low > 0 else 0.0

    @property
    def context_ratio(self) -> float:
        return self.context_high / self.context_low


Row = tuple[float, float, float | None]  # (log context, accept length, step latency s)


def decay_rows(samples: Samples, min_running: float = 0.0) -> list[Row]:
    """The busy samples (at least ``min_running`` running) that know accept length and context, as fit
    rows."""
    busy = samples.busy(min_running)
    context, accept = busy.signal("avg_context_tokens"), busy.signal("accept_length")
    keep = (context > 0) & ~np.isnan(accept)
    step = busy.signal("step_latency_s")[keep]
    steps = step.astype(object)
    steps[np.isnan(step)] = None  # unknown, as a fit row says it
    return list(zip(np.log(context[keep]).tolist(), accept[keep].tolist(), steps.tolist(), strict=True))


def fit_decay(snapshots: Sequence[TargetSnapshot], min_context_ratio: float = 1.0) -> DecayFit | None:
    """Fit accept length on log(context) over the busy ``snapshots`` (one target's, in time order); see
    ``fit_rows``."""
    history = TargetHistory("fit", horizon_s=0.0, long_horizon_s=math.inf)
    for snapshot in snapshots:
        history.add(snapshot)
    return fit_rows(decay_rows(history.samples_since(-math.inf)), min_context_ratio)


def fit_rows(rows: Sequence[Row], min_context_ratio: float = 1.0) -> DecayFit | None:
    """None when context grew less than ``min_context_ratio`` (no fit is needed to know flat context cannot
    show a context effect) or does not vary at all."""
    if len(rows) < 3:
        return None
    xs = [x for x, _, _ in rows]
    x_low, x_high = quantile(xs, LOW_PHI), quantile(xs, HIGH_PHI)
    if math.exp(x_high - x_low) < min_context_ratio:
        return None
    fit = fit_line(xs, [y for _, y, _ in rows])
    if fit is None:
        return None
    return DecayFit(
        fit, math.exp(x_low), math.exp(x_high), fit.predict(x_low), fit.predict(x_high), tuple(rows)
    )


class AcceptanceDecayWithContext(Rule[AcceptanceDecaySettings]):
    name = "AcceptanceDecayWithContext"
    settings_class = AcceptanceDecaySettings

    def __init__(self, settings: AcceptanceDecaySettings) -> None:
        super().__init__(settings)
        self.probes: ProbeEvidence | None = None  # set by the service when probes are enabled

    @property
    def horizon_s(self) -> float:
        return 0.0  # it reads the columns only (and the latest snapshot)

    @property
    def long_horizon_s(self) -> float:
        return self.settings.window_s

    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        latest = history.latest
        if latest is None or not latest.up:
            return []
        return [self._with_probes(self._passive(history, now), history.target, latest.recipe_id, now)]

    def _passive(self, history: TargetHistory, now: float) -> Evaluation:
        """The verdict from the traffic's own context (the fit over the window)."""
        s = self.settings
        latest = history.latest
        assert latest is not None
        if latest.signals.running is not None and latest.signals.running < s.min_running:
            return Evaluation(Condition.CLEAR, None, "", "idle: below the traffic floor")
        rows = decay_rows(history.samples_since(now - s.window_s), s.min_running)

        if len(rows) < s.min_samples:
            return no_data(f"{len(rows)} busy samples with accept length and context (need {s.min_samples})")
        decay = fit_rows(rows, s.min_context_ratio)

        if decay is None:
            return Evaluation(Condition.CLEAR, 0.0, "", "context did not grow enough in the window")
        # Significance is needed to start an alert, not to keep one: once firing, it holds while the fitted
        # fall stays above recover_band with context still growing, so one noisy window cannot resolve it.
        significant = decay.fit.slope < 0 and decay.fit.p_negative < s.significance
        if significant and decay.decline > s.noise_band:
            condition = Condition.BREACH
        elif decay.fit.slope < 0 and decay.decline > s.recover_band:
            condition = Condition.HOLD
        else:
            condition = Condition.CLEAR
        return self._verdict(condition, decay, history.target)

    def _with_probes(self, passive: Evaluation, target: str, recipe_id: str | None, now: float) -> Evaluation:
        """Add the probe evidence: it can fire on its own (traffic may never reach long context)."""
        s = self.settings
        if self.probes is None or not s.use_probes or recipe_id is None:
            return passive
        decay = probe_decay(
            self.probes.rows(now),
            recipe_id=recipe_id,
            target=target,
            now=now,
            recent_s=s.window_s,
            baseline_s=s.probe_baseline_s,
            min_baseline=s.probe_min_baseline,
            min_recent=s.probe_min_recent,
        )
        if decay is None:
            return passive
        if decay.decline > s.noise_band:
            condition = Condition.BREACH
        elif decay.decline > s.recover_band:
            condition = Condition.HOLD
        else:
            condition = Condition.CLEAR
        sentence = decay.sentence()
        details = (
            *passive.details,
            ("probe_accept_length", f"{decay.recent:.3f}"),
            ("probe_baseline_accept_length", f"{decay.baseline:.3f}"),
            ("probe_context_tokens", str(decay.context_tokens)),
        )
        if passive.condition in (Condition.BREACH, Condition.HOLD):
            stronger = (
                Condition.BREACH if Condition.BREACH in (passive.condition, condition) else passive.condition
            )
            return Evaluation(
                stronger, passive.value, passive.summary, f"{passive.description} {sentence}", details=details
            )
        if condition is Condition.CLEAR:
            return passive  # the passive verdict (clear, idle or no data) stands
        return Evaluation(
            condition,
            decay.decline,
            summary=f"Accept length on {target} at {tokens(decay.context_tokens)} tokens of context falls "
            f"{percent(decay.decline)} below its baseline, measured by probes",
            description=sentence,
            details=details,
        )

    def _verdict(self, condition: Condition, decay: DecayFit, target: str) -> Evaluation:
        fit = decay.fit
        low, high = tokens(decay.context_low), tokens(decay.context_high)
        text = (
            f"Accept length {decay.accept_low:.2f} at {low} tokens of context → {decay.accept_high:.2f} at "
            f"{high} (−{percent(decay.decline)}; r = {fit.r:.2f}, one-sided p = {fit.p_negative:.1g}, "
            f"{fit.n} samples over {self.settings.window_s:g} s)."
        )

        details = {
            "accept_length_low": f"{decay.accept_low:.3f}",
            "accept_length_high": f"{decay.accept_high:.3f}",
            "context_low_tokens": f"{decay.context_low:.0f}",
            "context_high_tokens": f"{decay.context_high:.0f}",
        }
        accept_ratio = decay.accept_low / decay.accept_high if decay.accept_high > 0 else math.inf
        step_ratio = decay.step_ratio
        split = loss_shares(step_ratio, accept_ratio) if step_ratio is not None else None
        if split is not None and step_ratio is not None:
            total = step_ratio * accept_ratio
            text += (
                f" Per-request throughput fell {total:.2f}× = step latency {step_ratio:.2f}× × accept length "
                f"{accept_ratio:.2f}×: {percent(split[0])} of the loss is step cost (attention over longer "
                f"context), {percent(split[1])} is the draft getting worse."
            )
            details |= {"step_cost_share": f"{split[0]:.3f}", "draft_share": f"{split[1]:.3f}"}
        return Evaluation(
            condition,
            decay.decline,
            summary=f"Accept length on {target} falls {percent(decay.decline)} as context grows {low}→{high}",
            description=text,
            details=tuple(sorted(details.items())),
        )

    def describe(self) -> str:
        s = self.settings
        return (
            f"Fires when, over {s.window_s:g} s, accept length falls more than {percent(s.noise_band)} from "
            f"the low- to the high-context end while average context grows at least {s.min_context_ratio:g}× "
            f"and the negative association with log(context) is significant (p < {s.significance:g}); it "
            "never fires on flat context, whatever batch size does. With probes enabled it also fires when a "
            "server's probes at the recipe's longest probed context accept that much less than the recipe's "
            f"own probes there over the previous {s.probe_baseline_s:g} s (measured by probes)."
        )

    def export(self, q: PromQL) -> Exported:
        s = self.settings
        w = q.window(s.window_s)
        p = "specwatch:accept_decay"
        a, lc, step = f"{p}_accept_length", f"{p}_log_context", f"{p}_log_step_latency"

        def cov(y: str) -> str:
            product = f"avg_over_time({y}_x_log_context[{w}])"
            return f"({product} - avg_over_time({y}[{w}]) * avg_over_time({lc}[{w}]))"

        z = NormalDist().inv_cdf(1 - s.significance)
        c1, c2 = z**3 + z, 5 * z**5 + 16 * z**3 + 3 * z  # Cornish–Fisher terms of the critical t
        df = f"({p}_samples - 2)"
        floor = number(s.min_running)
        mean_a, mean_lc = f"avg_over_time({a}[{w}])", f"avg_over_time({lc}[{w}])"
        var_lc = f"stddev_over_time({lc}[{w}]) ^ 2"

        recordings = tuple(
            {"record": record, "expr": expr}
            for record, expr in (
                # The engine's busy samples: accept length where at least min_running requests run.
                (a, f"{q.signal('accept_length')}\nand on ({JOIN}) {q.signal('running')} >= {floor}"),
                (lc, f"ln({q.signal('avg_context_tokens')} > 0) and on ({JOIN}) {a}"),
                (step, f"ln({q.signal('step_latency_s')} > 0) and on ({JOIN}) {a}"),
                (f"{a}_x_log_context", f"{a} * {lc}"),
                (f"{step}_x_log_context", f"{step} * {lc}"),
                (f"{p}_samples", f"count_over_time({lc}[{w}])"),
                (f"{p}_r", f"{cov(a)}\n/ (stddev_over_time({a}[{w}]) * stddev_over_time({lc}[{w}]))"),
                (f"{p}_slope", f"{cov(a)}\n/ stddev_over_time({lc}[{w}]) ^ 2"),
                (f"{p}_log_context_low", f"quantile_over_time({LOW_PHI}, {lc}[{w}])"),
                (f"{p}_log_context_high", f"quantile_over_time({HIGH_PHI}, {lc}[{w}])"),
                (f"{p}_accept_low", f"{mean_a} + {p}_slope * ({p}_log_context_low - {mean_lc})"),
                (f"{p}_accept_high", f"{mean_a} + {p}_slope * ({p}_log_context_high - {mean_lc})"),
                (f"{p}_decline", f"1 - {p}_accept_high / {p}_accept_low"),
                (f"{p}_context_ratio", f"exp({p}_log_context_high - {p}_log_context_low)"),
                (f"{p}_context_low_tokens", f"exp({p}_log_context_low)"),
                (f"{p}_context_high_tokens", f"exp({p}_log_context_high)"),
                (f"{p}_t", f"{p}_r * sqrt({df} / (1 - {p}_r ^ 2))"),
                # Cornish–Fisher critical t for p < significance with n−2 degrees of freedom, per series.
                (f"{p}_t_critical", f"{z:.6f} + {c1:.6f} / (4 * {df}) + {c2:.6f} / (96 * {df} ^ 2)"),
                (
                    f"{p}_step_ratio",
                    f"exp({cov(step)}\n/ {var_lc} * ({p}_log_context_high - {p}_log_context_low))",
                ),
                (
                    f"{p}_step_cost_share",
                    f"ln({p}_step_ratio) / (ln({p}_step_ratio) + ln({p}_accept_low / {p}_accept_high))",
                ),
            )
        )
        grows = f"{p}_context_ratio >= {number(s.min_context_ratio)}\n  and {p}_samples >= {s.min_samples}"
        significant = f"\n  and {p}_t < -{p}_t_critical"
        falling = f"\n  and {p}_slope < 0"

        two, whole, share = 'printf "%.2f"', 'printf "%.0f"', "humanizePercentage"
        description = (
            f"Accept length {show(p + '_accept_low', two)} at {show(p + '_context_low_tokens', whole)} "
            f"tokens of context → {show(p + '_accept_high', two)} at "
            f"{show(p + '_context_high_tokens', whole)}; step-cost share of the loss "
            f"{show(p + '_step_cost_share', share)}, the rest is the draft."
        )
        return Exported(
            self.alert(
                hysteresis(
                    f"{p}_decline > {number(s.noise_band)}\n  and {grows}{significant}",
                    f"{p}_decline > {number(s.recover_band)}\n  and {grows}{falling}",
                    self.name,
                ),
                summary="Accept length on {{ $labels.instance }} falls {{ $value | humanizePercentage }} as "
                "context grows",
                description=description,
            ),
            recordings,
        )
