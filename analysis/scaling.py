"""Capacity from history: the scaling curve per recipe (throughput, per-request rate, TTFT and TPOT at each
concurrency) and the knee found from the data (how soon each pool binds is ``analysis.saturation``).

Pure pandas. Throughput is the fraction, sample by sample: running × accept length ÷ step latency (accepted
tokens per step ÷ step latency), so a bursty completion counter does not bend the curve. It is *modelled*
(``modelled_output_tok_s``), not the counter-measured ``output_tok_s`` signal the other pages show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.fraction import MIN_SAMPLES
from analysis.sample_bins import concurrency_bin_order

# Elasticity of a step = ln(throughput ratio) ÷ ln(concurrency ratio): 1 is linear scaling, 0 buys nothing.
# The knee is the level where it falls the most (the curve bends hardest), provided the step past it buys
# little (below KNEE_ELASTICITY: doubling the requests buys < 41% more) and the fall is clear (≥ MIN_BEND).
# The seed: 16 → 32 runs at 0.59, 32 → 48 at 0.27, so its knee is 32.
KNEE_ELASTICITY = 0.5
MIN_BEND = 0.15
MIN_LEVELS = 3  # a curve needs this many concurrency levels with MIN_SAMPLES each to show a bend

# The curve's columns, in order. Throughput is running × accept ÷ step (modelled, see the module doc).
CURVE_COLUMNS: tuple[str, ...] = (
    "concurrency",
    "running",
    "modelled_output_tok_s",
    "per_request_tok_s",
    "ttft_s",
    "tpot_s",
    "samples",
)


def scaling_curve(usable: pd.DataFrame) -> pd.DataFrame:
    """Per concurrency bin of ``usable`` (prepared samples of one recipe at one context bin): the median
    running requests, throughput, per-request rate, TTFT and TPOT, and the sample count; bins with fewer than
    MIN_SAMPLES samples are left out. Sorted by concurrency.

    Medians, throughput too: a bin mixes its level with the ramps into and out of it, and throughput rises
    with running, so the median throughput is the throughput at the median running (a point on the curve),
    where a mean is pulled off it by the ramps. Means made the knee of a borderline curve (the demo's: 0.50
    into 16, 0.41 out of it) move with where the level changes fell in the range."""
    columns = list(CURVE_COLUMNS)
    rows = usable.dropna(subset=["concurrency", "accept_length", "step_latency_s", "running"])
    rows = rows[rows["step_latency_s"] > 0]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    per_request = rows["accept_length"] / rows["step_latency_s"]
    rows = rows.assign(_per_request=per_request, _output=per_request * rows["running"])
    grouped = rows.groupby("concurrency")
    curve = pd.DataFrame(
        {
            "running": grouped["running"].median(),
            "modelled_output_tok_s": grouped["_output"].median(),
            "per_request_tok_s": grouped["_per_request"].median(),
            "ttft_s": grouped["ttft_s"].median(),
            "tpot_s": grouped["tpot_s"].median(),
            "samples": grouped.size(),
        }
    ).reset_index()
    curve = curve[curve["samples"] >= MIN_SAMPLES]
    order = concurrency_bin_order(list(curve["concurrency"]))
    return curve.set_index("concurrency").loc[order].reset_index()[columns]


@dataclass(frozen=True, slots=True)
class Knee:
    """Where the curve bends: the concurrency before the first step that buys too little throughput."""

    running: float  # median running requests at the knee
    modelled_output_tok_s: float  # one server's throughput there (what a replica serves at the knee)
    index: int  # its row in the curve
    elasticity_before: float | None  # of the step into the knee (None: the knee is the first level)
    elasticity_after: float  # of the step out of it


def elasticities(curve: pd.DataFrame) -> list[float]:
    """ln(throughput ratio) ÷ ln(concurrency ratio) of each step between consecutive levels of the curve."""
    out = []
    for (_, a), (_, b) in zip(curve.iterrows(), curve.iloc[1:].iterrows(), strict=False):
        if (
            a["running"] > 0
            and b["running"] > a["running"]
            and a["modelled_output_tok_s"] > 0
            and b["modelled_output_tok_s"] > 0
        ):
            gain = b["modelled_output_tok_s"] / a["modelled_output_tok_s"]
            out.append(math.log(gain) / math.log(b["running"] / a["running"]))
        else:
            out.append(math.nan)
    return out


def find_knee(curve: pd.DataFrame) -> Knee | None:
    """The level where the elasticity falls the most, if the fall is clear and the step past it buys little;
    None if the curve is too short or has no clear bend (still scaling, or flat throughout)."""
    if len(curve) < MIN_LEVELS:
        return None
    steps = elasticities(curve)
    best: Knee | None = None
    best_fall = MIN_BEND
    for i in range(1, len(steps)):
        before, after = steps[i - 1], steps[i]
        if math.isnan(before) or math.isnan(after) or after >= KNEE_ELASTICITY:
            continue
        if before - after >= best_fall:
            best_fall = before - after
            at = curve.iloc[i]
            best = Knee(float(at["running"]), float(at["modelled_output_tok_s"]), i, before, after)
    return best


def _ms(seconds: object) -> str:
    value = float(seconds) if isinstance(seconds, int | float) else math.nan
    return "—" if math.isnan(value) else f"{value * 1000:,.0f} ms"


def _step(curve: pd.DataFrame, i: int) -> str:
    a, b = curve.iloc[i], curve.iloc[i + 1]
    gain = b["modelled_output_tok_s"] / a["modelled_output_tok_s"] - 1.0
    return (
        f"{a['running']:.0f} → {b['running']:.0f} running buys {gain:+.1%} throughput "
        f"(TTFT {_ms(a['ttft_s'])} → {_ms(b['ttft_s'])}, TPOT {_ms(a['tpot_s'])} → {_ms(b['tpot_s'])})"
    )


def knee_verdict(curve: pd.DataFrame, knee: Knee | None) -> str:
    """The curve's story in words: the step into the knee, the step past it, and where to stop."""
    if len(curve) < MIN_LEVELS:
        return (
            f"Only {len(curve)} concurrency level(s) with {MIN_SAMPLES}+ samples here: a knee needs "
            f"{MIN_LEVELS}. Pick a longer range, or run this recipe at more concurrencies."
        )
    top = curve.iloc[-1]
    if knee is None:
        return (
            f"No clear knee up to {top['running']:.0f} running: the gain per step never falls sharply to "
            f"below concurrency^{KNEE_ELASTICITY:g}. Measure higher concurrencies to find where it bends."
        )
    parts = []
    if knee.index > 0:
        parts.append(_step(curve, knee.index - 1) + ";")
    parts.append(_step(curve, knee.index) + ".")
    at = f"{knee.running:.0f}"
    past = f"{curve.iloc[knee.index + 1]['running']:.0f}"
    parts.append(
        f"**The knee is at {at}**: stop at {at} if latency matters; go to {past} only when aggregate "
        "throughput is all that is sold."
    )
    return " ".join(parts)
