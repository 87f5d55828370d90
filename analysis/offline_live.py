"""Offline benchmark runs beside production: each ``sglang.bench_serving`` run (``specwatch import bench``)
against the live samples of the same recipe at the same concurrency bin and context bin, split along the
fraction.

The comparison is per request, where the fraction is exact: one request's output tok/s = accept length ÷ step
latency (offline: 1000 ÷ mean TPOT, and step latency = accept length × TPOT). So production ÷ offline splits
into the accept-length ratio (numerator) over the step-latency ratio (denominator): "offline 63.4 tok/s per
request at 32, production 52.0 (−18 %: accept length −11 %, step latency +8 %)".

Matched concurrency: the run's ``max_concurrency`` (else its measured concurrency) in the running-request bins
of ``sample_bins``. Matched context: the context a run decodes at on average — its mean prompt plus half its
mean output — in the context bins; unknown (any context) when the run does not say its token totals.

Pure pandas; the Recipes page shows it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.fraction import MIN_SAMPLES, NOISE_FRACTION
from analysis.sample_bins import concurrency_bin, context_bin
from collectors.derive import spec_enabled
from collectors.store.offline_runs import OfflineRun

# What the production side reads (``sample_bins.ANALYSIS_SIGNALS`` has them).
LIVE_SIGNALS: tuple[str, ...] = (
    "per_request_tok_s",
    "accept_length",
    "step_latency_s",
    "running",
    "output_tok_s",
)


def run_concurrency(run: OfflineRun) -> int | None:
    """The concurrency a run held: its cap (``--max-concurrency``), else the mean in flight it measured."""
    if run.max_concurrency is not None:
        return run.max_concurrency
    if run.concurrency is not None and run.concurrency >= 0.5:
        return round(run.concurrency)
    return None


def run_context_tokens(run: OfflineRun) -> float | None:
    """The context a run's requests decode at on average: the mean prompt plus half the mean output."""
    if run.mean_input_tokens is None or run.total_output_tokens is None or not run.completed:
        return None
    return run.mean_input_tokens + run.total_output_tokens / run.completed / 2.0


def _bin(label: pd.Series) -> str | None:
    value = label.iloc[0]
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def run_bins(run: OfflineRun) -> tuple[str | None, str | None]:
    """(concurrency bin, context bin) of a run; None where the run does not say."""
    concurrency = run_concurrency(run)
    tokens = run_context_tokens(run)
    running = _bin(concurrency_bin(pd.Series([float(concurrency)]))) if concurrency is not None else None
    context = _bin(context_bin(pd.Series([tokens]))) if tokens is not None else None
    return running, context


def offline_accept_length(run: OfflineRun) -> float | None:
    """The run's accept length; 1 when its recipe decodes without speculation (the catalogue's plain rule:
    one token per request per step), None when neither is known."""
    if run.accept_length is not None and run.accept_length > 0:
        return run.accept_length
    return 1.0 if spec_enabled(run.recipe) is False else None


@dataclass(frozen=True, slots=True)
class LiveCell:
    """Production's samples of one recipe at one concurrency (and context) bin."""

    per_request_tok_s: float  # mean of 1 / TPOT
    accept_length: float
    step_latency_s: float
    running: float
    output_tok_s: float  # per server sample
    samples: int


@dataclass(frozen=True, slots=True)
class OfflineVsLive:
    """One offline run beside production; ``live`` None (with ``reason``) when there is nothing to match."""

    run: OfflineRun
    concurrency_bin: str | None
    context_bin: str | None
    accept_length: float | None  # the run's (``offline_accept_length``)
    live: LiveCell | None
    reason: str | None  # why production is unknown

    @property
    def concurrency(self) -> int | None:
        return run_concurrency(self.run)

    @property
    def step_latency_s(self) -> float | None:
        """The run's verify step: accept length × mean TPOT."""
        if self.accept_length is None:
            return None
        return self.accept_length * self.run.mean_tpot_ms / 1000.0

    @property
    def change(self) -> float | None:
        """Production's per-request tok/s ÷ the run's, − 1."""
        offline = self.run.per_request_tok_s
        if self.live is None or offline is None:
            return None
        return self.live.per_request_tok_s / offline - 1.0

    @property
    def accept_change(self) -> float | None:
        if self.live is None or self.accept_length is None:
            return None
        return self.live.accept_length / self.accept_length - 1.0

    @property
    def step_change(self) -> float | None:
        step = self.step_latency_s
        if self.live is None or step is None or step <= 0:
            return None
        return self.live.step_latency_s / step - 1.0

    def within_noise(self, noise: float = NOISE_FRACTION) -> bool | None:
        """Whether production and the run differ by no more than the run-to-run floor (larger ÷ smaller)."""
        offline = self.run.per_request_tok_s
        if self.live is None or offline is None:
            return None
        high = max(self.live.per_request_tok_s, offline)
        low = min(self.live.per_request_tok_s, offline)
        return high / low - 1.0 <= noise

    def describe(self, noise: float = NOISE_FRACTION) -> str:
        """The sentence: "offline 63.4 tok/s per request at 32 (1,494 tok/s in all), production 52.0 (−18 %:
        accept length −11 %, step latency +8 %)", or production unknown with the reason."""
        run = self.run
        at = f" at {self.concurrency}" if self.concurrency is not None else ""
        offline = run.per_request_tok_s
        head = (
            f"offline {offline:,.1f} tok/s per request{at} ({run.output_tok_s:,.0f} tok/s in all)"
            if offline is not None
            else f"offline {run.output_tok_s:,.0f} tok/s{at} (no TPOT: per request unknown)"
        )
        if self.live is None or self.change is None:
            return f"{head}, production unknown: {self.reason or 'nothing to compare'}"
        noisy = ", within noise" if self.within_noise(noise) else ""
        accept, step = self.accept_change, self.step_change
        if accept is None or step is None:
            split = "; the split is unknown: the run recorded no accept length"
        else:
            split = f": accept length {percent(accept)}, step latency {percent(step)}"
        return f"{head}, production {self.live.per_request_tok_s:,.1f} ({percent(self.change)}{noisy}{split})"


def percent(change: float) -> str:
    """A change as the issue writes it: "−15 %", "+4 %", "±0 %" (a true minus sign)."""
    rounded = round(change * 100)
    if rounded == 0:
        return "±0 %"
    return f"{'+' if rounded > 0 else '−'}{abs(rounded)} %"


@dataclass(frozen=True, slots=True)
class LiveIndex:
    """Production's samples summarised once for every run: per (recipe, concurrency bin, context bin) and per
    (recipe, concurrency bin) over every context — ``LiveCell``s, and how many usable samples each holds
    (a cell below MIN_SAMPLES has a count but no figures)."""

    cells: dict[tuple[str, ...], LiveCell]
    counts: dict[tuple[str, ...], int]
    recipes: frozenset[str]


def _summaries(
    rows: pd.DataFrame, keys: list[str]
) -> tuple[dict[tuple[str, ...], LiveCell], dict[tuple[str, ...], int]]:
    """Per distinct ``keys``: the usable samples' count and, at ≥ MIN_SAMPLES, their ``LiveCell`` (sums by
    ``np.bincount`` over factorised keys: a pandas groupby-agg of seven columns cost ~10× more here)."""
    if rows.empty:
        return {}, {}
    combined = np.zeros(len(rows), dtype=np.int64)
    labels: list[list[str]] = []
    for key in keys:  # one factorize per column: a MultiIndex of Arrow strings iterates in Python
        part, found = pd.factorize(rows[key])
        combined = combined * len(found) + part
        labels.append([str(label) for label in found])
    codes, present = pd.factorize(combined)
    groups = len(present)
    uniques = [_decode(int(code), labels) for code in present]
    samples = np.bincount(codes, minlength=groups)

    def mean(column: str) -> np.ndarray:
        return np.bincount(codes, weights=rows[column].to_numpy(np.float64), minlength=groups) / samples

    means = {column: mean(column) for column in LIVE_SIGNALS}
    cells: dict[tuple[str, ...], LiveCell] = {}
    counts: dict[tuple[str, ...], int] = {}
    for i, name in enumerate(uniques):
        counts[name] = int(samples[i])
        if samples[i] >= MIN_SAMPLES:
            cells[name] = LiveCell(
                per_request_tok_s=float(means["per_request_tok_s"][i]),
                accept_length=float(means["accept_length"][i]),
                step_latency_s=float(means["step_latency_s"][i]),
                running=float(means["running"][i]),
                output_tok_s=float(means["output_tok_s"][i]),
                samples=int(samples[i]),
            )
    return cells, counts


def _decode(code: int, labels: list[list[str]]) -> tuple[str, ...]:
    """The key tuple of a combined code (the last column varies fastest)."""
    parts: list[str] = []
    for found in reversed(labels):
        code, index = divmod(code, len(found))
        parts.append(found[index])
    return tuple(reversed(parts))


def live_index(usable: pd.DataFrame) -> LiveIndex:
    """``usable`` (``sample_bins.prepare``'s frame) summarised for ``compare_run``: one pass over the range's
    samples, however many runs are compared (a 1,000-server range is ~100 k rows)."""
    if usable.empty or not set(LIVE_SIGNALS) <= set(usable.columns):
        return LiveIndex({}, {}, frozenset())
    rows = usable.dropna(subset=[*LIVE_SIGNALS, "concurrency"])
    rows = rows[(rows["per_request_tok_s"] > 0) & (rows["accept_length"] > 0) & (rows["step_latency_s"] > 0)]
    fine, fine_counts = _summaries(
        rows.dropna(subset=["context_bin"]), ["recipe", "concurrency", "context_bin"]
    )
    coarse, coarse_counts = _summaries(rows, ["recipe", "concurrency"])
    return LiveIndex(
        {**fine, **coarse},
        {**fine_counts, **coarse_counts},
        frozenset(str(recipe) for recipe in rows["recipe"].unique()),
    )


def compare_run(run: OfflineRun, usable: pd.DataFrame | LiveIndex) -> OfflineVsLive:
    """``run`` beside production's samples (``sample_bins.prepare``'s frame, or its ``live_index``) of its
    recipe at its bins."""
    index = usable if isinstance(usable, LiveIndex) else live_index(usable)
    running, context = run_bins(run)
    accept = offline_accept_length(run)

    def unknown(reason: str) -> OfflineVsLive:
        return OfflineVsLive(run, running, context, accept, None, reason)

    recipe = run.recipe_id
    if recipe is None:
        return unknown("the run has no recipe (the client could not read /server_info)")
    if running is None:
        return unknown("the run says neither its max concurrency nor its measured concurrency")
    if recipe not in index.recipes:
        return unknown(f"no production samples of {recipe} in this range")
    key = (recipe, running) if context is None else (recipe, running, context)
    found = index.cells.get(key)
    if found is not None:
        return OfflineVsLive(run, running, context, accept, found, None)
    where = f"{running} running" + ("" if context is None else f" and {context} context")
    count = index.counts.get(key, 0)
    elsewhere = index.counts.get((recipe, running), 0) - count
    tail = f" ({elsewhere:,} at that concurrency at other contexts)" if elsewhere else ""
    if not count:
        return unknown(f"no production samples of {recipe} at {where} in this range{tail}")
    return unknown(
        f"only {count:,} production samples of {recipe} at {where} in this range "
        f"(fewer than {MIN_SAMPLES}){tail}"
    )


def compare_runs(runs: Sequence[OfflineRun], usable: pd.DataFrame) -> list[OfflineVsLive]:
    """Every run beside production, in the store's order (recipe, then concurrency)."""
    index = live_index(usable)
    return [compare_run(run, index) for run in runs]


OFFLINE_POINT_COLUMNS = ["recipe", "concurrency", "label", "user_tok_s", "gpu_tok_s", "context_bin"]


def offline_points(runs: Sequence[OfflineRun]) -> pd.DataFrame:
    """The runs as hollow Pareto points: recipe, concurrency bin, label ("32 offline"), per-request tok/s
    (1000 ÷ TPOT), tok/s per GPU and context bin; runs without a recipe or a GPU count are left out."""
    rows = []
    for run in runs:
        user, fleet = run.per_request_tok_s, run.output_tok_s_per_gpu
        running, context = run_bins(run)
        if run.recipe_id is None or user is None or fleet is None or running is None:
            continue
        rows.append(
            {
                "recipe": run.recipe_id,
                "concurrency": running,
                "label": f"{run_concurrency(run)} offline",
                "user_tok_s": user,
                "gpu_tok_s": fleet,
                "context_bin": context,
            }
        )
    return pd.DataFrame(rows, columns=OFFLINE_POINT_COLUMNS)


def offline_lanes(points: pd.DataFrame) -> pd.DataFrame:
    """``offline_points`` as one point per recipe and concurrency bin (the mean of each lane over the runs in
    it), in the shape ``analysis.pareto``'s verdicts read: the offline sweep's own crossovers."""
    columns = ["recipe", "concurrency", "user_tok_s", "gpu_tok_s", "runs"]
    if points.empty:
        return pd.DataFrame(columns=columns)
    grouped = points.groupby(["recipe", "concurrency"], as_index=False)
    lanes = grouped.agg(
        user_tok_s=("user_tok_s", "mean"), gpu_tok_s=("gpu_tok_s", "mean"), runs=("label", "size")
    )
    return lanes[columns]


__all__ = [
    "LIVE_SIGNALS",
    "OFFLINE_POINT_COLUMNS",
    "LiveCell",
    "LiveIndex",
    "OfflineVsLive",
    "compare_run",
    "compare_runs",
    "live_index",
    "offline_accept_length",
    "offline_lanes",
    "offline_points",
    "percent",
    "run_bins",
    "run_concurrency",
    "run_context_tokens",
]
