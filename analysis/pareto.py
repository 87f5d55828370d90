"""The Pareto of recipes: per recipe and concurrency bin, the user's lane (output tok/s one request sees)
against the fleet's lane (output tok/s per GPU), at one context bin; the frontier, the points it leaves
behind, and where one recipe dominates another, in words.

More running requests buy tokens per GPU with tokens per request: each recipe is a curve across concurrency,
and the frontier is the best trade-off any recipe offers. A recipe dominates another at a concurrency when it
is at least as good in both lanes and better in one — "better" only beyond the ±noise run-to-run floor
(``fraction.NOISE_FRACTION``): a difference inside it is noise, not a win.

Pure pandas over ``sample_bins.prepare``'s frame; the Recipes page draws it (``views.analysis_charts``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analysis.fraction import MIN_SAMPLES, NOISE_FRACTION
from analysis.sample_bins import concurrency_bin_order

# The two lanes, as history signals (``sample_bins.ANALYSIS_SIGNALS``): per_request_tok_s = 1 / TPOT, the
# user's; the fleet's is pooled from output_tok_s and gpu_count (Σ output ÷ Σ GPUs, never a mean of ratios).
PARETO_SIGNALS: tuple[str, ...] = ("per_request_tok_s", "output_tok_s", "gpu_count", "running")
POINT_COLUMNS = ["recipe", "concurrency", "user_tok_s", "gpu_tok_s", "running", "samples", "servers"]

# Who wins at one concurrency: "a"/"b" dominates, both lanes within noise, or each wins one lane.
Verdict = Literal["a", "b", "noise", "trade-off"]


def _usable(usable: pd.DataFrame) -> pd.DataFrame:
    """Rows that place a point: a concurrency and context bin, both lanes' inputs known, GPUs counted."""
    if usable.empty or not set(PARETO_SIGNALS) <= set(usable.columns):
        return usable.iloc[0:0]
    known = usable.dropna(subset=["concurrency", "context_bin", *PARETO_SIGNALS])
    # Bin "0": bucket means of a server idle half the time (running 0.5 rounds to 0); no concurrency level.
    return known[(known["gpu_count"] > 0) & (known["per_request_tok_s"] > 0) & (known["concurrency"] != "0")]


def context_bins(usable: pd.DataFrame) -> list[str]:
    """Context bins holding Pareto points, the one most samples share first (the page's default)."""
    rows = _usable(usable)
    if rows.empty:
        return []
    counts = rows.groupby(["context_bin", "recipe", "concurrency"]).size()
    counts = counts[counts >= MIN_SAMPLES].groupby(level="context_bin").sum()
    return [str(label) for label in counts.sort_values(ascending=False, kind="stable").index]


def pareto_points(usable: pd.DataFrame, context_bin: str) -> pd.DataFrame:
    """One point per recipe and concurrency bin with ≥ MIN_SAMPLES samples at ``context_bin``: the user's lane
    (mean per_request_tok_s), the fleet's (Σ output tok/s ÷ Σ GPUs), mean running, samples and servers; by
    recipe, then concurrency."""
    rows = _usable(usable)
    rows = rows[rows["context_bin"] == context_bin]
    if rows.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    grouped = (
        rows.groupby(["recipe", "concurrency"], observed=True)
        .agg(
            samples=("per_request_tok_s", "size"),
            user_tok_s=("per_request_tok_s", "mean"),
            output=("output_tok_s", "sum"),
            gpus=("gpu_count", "sum"),
            running=("running", "mean"),
            servers=("target", "nunique"),
        )
        .reset_index()
    )
    grouped = grouped[grouped["samples"] >= MIN_SAMPLES]
    points = grouped.assign(
        recipe=grouped["recipe"].astype(str),
        concurrency=grouped["concurrency"].astype(str),
        gpu_tok_s=grouped["output"] / grouped["gpus"],  # Σ output ÷ Σ GPUs, never a mean of ratios
    )[POINT_COLUMNS]
    return _by_concurrency(points)


def _by_concurrency(points: pd.DataFrame) -> pd.DataFrame:
    order = {label: i for i, label in enumerate(concurrency_bin_order(list(points["concurrency"])))}
    ranked = points.assign(_order=points["concurrency"].map(order))
    return ranked.sort_values(["recipe", "_order"]).drop(columns="_order").reset_index(drop=True)


def lane_call(x: float, y: float, noise: float = NOISE_FRACTION) -> int:
    """+1 when ``x`` beats ``y`` beyond the noise floor, −1 when ``y`` beats ``x``, 0 within noise. The larger
    over the smaller, as the page's oriented ratios: the call is the same whichever side is named first."""
    high, low = max(x, y), min(x, y)
    if low <= 0 or high / low - 1.0 <= noise:
        return 0
    return 1 if x > y else -1


def verdict(a: tuple[float, float], b: tuple[float, float], noise: float = NOISE_FRACTION) -> Verdict:
    """Who wins between two (user, fleet) points: the one better in a lane and not worse in the other."""
    user, fleet = lane_call(a[0], b[0], noise), lane_call(a[1], b[1], noise)
    if user == fleet == 0:
        return "noise"
    if user >= 0 and fleet >= 0:
        return "a"
    if user <= 0 and fleet <= 0:
        return "b"
    return "trade-off"


def mark_frontier(points: pd.DataFrame, noise: float = NOISE_FRACTION) -> pd.DataFrame:
    """``points`` with ``dominated`` (a point of another recipe dominates it beyond the noise floor: greyed),
    ``dominated_by`` ("recipe at bin" of such a point — one at the same concurrency if any — else "") and
    ``frontier`` (the line drawn: among the points not dominated, those no other one is at least as good as in
    both lanes and better in one). A recipe's own points never grey each other: its curve across concurrency
    is the trade-off the frontier is made of; the greying says where another recipe is the better choice."""
    user = points["user_tok_s"].to_numpy(np.float64)
    fleet = points["gpu_tok_s"].to_numpy(np.float64)
    recipe = points["recipe"].to_numpy()
    level = points["concurrency"].to_numpy()
    dominated, by = [], []
    for i in range(len(points)):
        beaten = [
            j
            for j in range(len(points))
            if recipe[j] != recipe[i] and verdict((user[j], fleet[j]), (user[i], fleet[i]), noise) == "a"
        ]
        beaten.sort(key=lambda j: level[j] != level[i])  # the same concurrency first (stable)
        dominated.append(bool(beaten))
        by.append(f"{recipe[beaten[0]]} at {level[beaten[0]]}" if beaten else "")
    kept = [i for i in range(len(points)) if not dominated[i]]
    frontier = [
        not dominated[i]
        and not any(
            user[j] >= user[i] and fleet[j] >= fleet[i] and (user[j] > user[i] or fleet[j] > fleet[i])
            for j in kept
            if j != i
        )
        for i in range(len(points))
    ]
    return points.assign(frontier=frontier, dominated=dominated, dominated_by=by)


# -- two recipes across concurrency --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BinVerdict:
    """Two recipes at one concurrency bin: who wins, and each lane as b ÷ a."""

    concurrency: str
    verdict: Verdict
    user_ratio: float  # b's per-request tok/s ÷ a's
    gpu_ratio: float  # b's tok/s per GPU ÷ a's


def pair_verdicts(points: pd.DataFrame, a: str, b: str, noise: float = NOISE_FRACTION) -> list[BinVerdict]:
    """``a`` against ``b`` at every concurrency bin both have a point in, lowest concurrency first."""
    mine, theirs = _lanes(points, a), _lanes(points, b)
    out = []
    for concurrency in concurrency_bin_order([c for c in mine if c in theirs]):
        lanes_a, lanes_b = mine[concurrency], theirs[concurrency]
        out.append(
            BinVerdict(
                concurrency,
                verdict(lanes_a, lanes_b, noise),
                lanes_b[0] / lanes_a[0],
                lanes_b[1] / lanes_a[1],
            )
        )
    return out


def _lanes(points: pd.DataFrame, recipe: str) -> dict[str, tuple[float, float]]:
    """Concurrency bin → (user lane, fleet lane) of one recipe's points."""
    mine = points[points["recipe"] == recipe]
    return {
        str(c): (float(u), float(g))
        for c, u, g in zip(mine["concurrency"], mine["user_tok_s"], mine["gpu_tok_s"], strict=True)
    }


def _low(label: str) -> int:
    return int(label.split("–")[0])


def _high(label: str) -> int:
    return int(label.split("–")[-1])


def _span(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low}–{high}"


def _clause(run: Sequence[BinVerdict], a: str, b: str) -> str:
    kind = run[0].verdict
    if kind == "a":
        return f"**{a}** dominates **{b}**"
    if kind == "b":
        return f"**{b}** dominates **{a}**"
    if kind == "noise":
        return f"**{a}** and **{b}** are within noise"
    faster, fuller = (b, a) if run[0].user_ratio > 1 else (a, b)
    return f"a trade-off (**{faster}** faster per request, **{fuller}** more tok/s per GPU)"


def _runs(verdicts: Sequence[BinVerdict]) -> list[list[BinVerdict]]:
    """Consecutive bins with the same verdict (a trade-off's direction too)."""

    def key(v: BinVerdict) -> tuple[str, bool]:
        return v.verdict, v.verdict == "trade-off" and v.user_ratio > 1

    return [list(group) for _, group in itertools.groupby(verdicts, key=key)]


def describe_pair(a: str, b: str, verdicts: Sequence[BinVerdict]) -> str | None:
    """The crossover in one sentence (markdown), highest concurrency first: "**B** dominates **A** above 16
    running (17–64); **A** dominates **B** at 16 running and below (1–16)." None without a shared bin."""
    runs = _runs(verdicts)
    if not runs:
        return None
    if len(runs) == 1:
        run = runs[0]
        span = _span(_low(run[0].concurrency), _high(run[-1].concurrency))
        return f"{_clause(run, a, b)} at every shared concurrency ({span} running)."
    clauses = []
    for index, run in reversed(list(enumerate(runs))):
        low, high = _low(run[0].concurrency), _high(run[-1].concurrency)
        if index == len(runs) - 1:
            where = f"above {low - 1} running ({_span(low, high)})"
        elif index == 0 and len(run) > 1:
            where = f"at {high} running and below ({_span(low, high)})"
        else:
            where = f"at {_span(low, high)} running"
        clauses.append(f"{_clause(run, a, b)} {where}")
    return "; ".join(clauses) + "."


def crossover_sentences(points: pd.DataFrame, noise: float = NOISE_FRACTION) -> list[str]:
    """One sentence per pair of recipes sharing a concurrency bin (``describe_pair``), recipes by name."""
    recipes = sorted(points["recipe"].unique())
    out = []
    for a, b in itertools.combinations(recipes, 2):
        sentence = describe_pair(a, b, pair_verdicts(points, a, b, noise))
        if sentence is not None:
            out.append(sentence)
    return out


def dominated_recipes(marked: pd.DataFrame) -> list[str]:
    """Recipes every point of which another point dominates beyond noise (``mark_frontier``'s frame)."""
    if marked.empty:
        return []
    everywhere = marked.groupby("recipe")["dominated"].all()
    return sorted(str(recipe) for recipe in everywhere[everywhere].index)


def frontier_sentence(marked: pd.DataFrame) -> str | None:
    """Which recipe holds the frontier where, lowest per-GPU throughput first: "The frontier: **A** at 1–8
    running, **B** at 17–32 and 33–64." None without points."""
    on = marked[marked["frontier"]].sort_values("gpu_tok_s")
    if on.empty:
        return None
    parts = []
    for recipe, group in itertools.groupby(on.itertuples(), key=lambda p: str(p.recipe)):
        bins = [str(p.concurrency) for p in group]
        parts.append(f"**{recipe}** at {', '.join(bins)} running")
    return "The frontier, from the user's end to the fleet's: " + "; then ".join(parts) + "."


__all__ = [
    "PARETO_SIGNALS",
    "POINT_COLUMNS",
    "BinVerdict",
    "Verdict",
    "context_bins",
    "crossover_sentences",
    "describe_pair",
    "dominated_recipes",
    "frontier_sentence",
    "lane_call",
    "mark_frontier",
    "pair_verdicts",
    "pareto_points",
    "verdict",
]
