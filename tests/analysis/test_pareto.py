"""The Pareto of recipes on constructed samples whose answer is known by construction.

Two recipes at 1K–2K context, TP 2 (two GPUs), constant per bin (tok/s per GPU = running × per-request ÷ 2):
- running 1: A 150 tok/s per request (75 per GPU), B 120 (60): A is 25% better in both lanes — A dominates;
- running 8: A 100 (400), B 95 (380): 5% apart in both lanes — within the ±10% floor;
- running 32: A 40 (640), B 55 (880): B is 37.5% better in both — B dominates.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import pareto
from analysis.fraction import MIN_SAMPLES
from analysis.sample_bins import prepare

GPUS = 2.0
LOADS = {  # recipe → running → tok/s per request
    "r-a": {1: 150.0, 8: 100.0, 32: 40.0},
    "r-b": {1: 120.0, 8: 95.0, 32: 55.0},
}


def _rows(
    recipe: str, target: str, running: float, per_request: float, *, n: int = 12, context: float = 1536.0
) -> list[dict[str, object]]:
    return [
        {
            "ts": 1_800_000_000.0 + 5.0 * k,
            "target": target,
            "up": True,
            "recipe_id": recipe,
            "accept_length": 2.5,
            "step_latency_s": 2.5 / per_request,
            "running": running,
            "avg_context_tokens": context,
            "per_request_tok_s": per_request,
            "output_tok_s": running * per_request,
            "gpu_count": GPUS,
        }
        for k in range(n)
    ]


def fleet(**extra: list[dict[str, object]]) -> pd.DataFrame:
    rows = [
        row
        for recipe, levels in LOADS.items()
        for running, per_request in levels.items()
        for row in _rows(recipe, f"{recipe}-{running}", running, per_request)
    ]
    for more in extra.values():
        rows += more
    return prepare(pd.DataFrame(rows))


def test_points_are_the_two_lanes_per_recipe_and_concurrency() -> None:
    points = pareto.pareto_points(fleet(), "1K–2K")
    got = {(p.recipe, p.concurrency): (p.user_tok_s, p.gpu_tok_s, p.samples) for p in points.itertuples()}
    expected_bins = {1: "1", 8: "5–8", 32: "17–32"}
    assert got == {
        (recipe, expected_bins[running]): pytest.approx((value, running * value / GPUS, 12))
        for recipe, levels in LOADS.items()
        for running, value in levels.items()
    }
    assert list(points["concurrency"][points["recipe"] == "r-a"]) == ["1", "5–8", "17–32"]


def test_the_fleet_lane_pools_tokens_over_gpus_not_a_mean_of_ratios() -> None:
    # Two servers of one recipe at the same bin: 800 tok/s on 2 GPUs and 800 tok/s on 4.
    two = _rows("r-c", "c-tp2", 8, 100.0)
    four = [{**row, "gpu_count": 4.0} for row in _rows("r-c", "c-tp4", 8, 100.0)]
    points = pareto.pareto_points(prepare(pd.DataFrame(two + four)), "1K–2K")
    (point,) = points.itertuples()
    assert point.gpu_tok_s == pytest.approx(1600.0 / 6.0)  # not (400 + 200) / 2
    assert point.servers == 2


def test_too_few_samples_and_unknown_gpus_place_no_point() -> None:
    few = _rows("r-c", "c-1", 8, 100.0, n=MIN_SAMPLES - 1)
    no_gpus = [{**row, "gpu_count": None} for row in _rows("r-d", "d-1", 8, 100.0)]
    frame = prepare(pd.DataFrame(few + no_gpus))
    assert pareto.pareto_points(frame, "1K–2K").empty
    assert pareto.context_bins(frame) == []


def test_context_bins_put_the_one_most_samples_share_first() -> None:
    long_context = _rows("r-a", "a-rag", 32, 30.0, n=30, context=9000.0)
    assert pareto.context_bins(fleet(long=long_context)) == ["1K–2K", "8K–16K"]
    # ... and each bin's points are its own
    only_long = pareto.pareto_points(fleet(long=long_context), "8K–16K")
    assert list(only_long["recipe"]) == ["r-a"]
    assert list(only_long["user_tok_s"]) == [30.0]


def test_the_frontier_and_the_points_dominated_beyond_noise() -> None:
    marked = pareto.mark_frontier(pareto.pareto_points(fleet(), "1K–2K"))
    by_point = {(p.recipe, p.concurrency): p for p in marked.itertuples()}
    frontier = {key for key, p in by_point.items() if p.frontier}
    assert frontier == {("r-a", "1"), ("r-a", "5–8"), ("r-b", "17–32")}
    dominated = {key: p.dominated_by for key, p in by_point.items() if p.dominated}
    # B at 5–8 is off the line (A at 5–8 is 5% better in both lanes) but inside the floor: not greyed.
    assert dominated == {("r-b", "1"): "r-a at 1", ("r-a", "17–32"): "r-b at 17–32"}
    assert pareto.dominated_recipes(marked) == []
    assert pareto.frontier_sentence(marked) == (
        "The frontier, from the user's end to the fleet's: **r-a** at 1, 5–8 running; then **r-b** at 17–32 "
        "running."
    )


def test_the_crossover_in_words() -> None:
    points = pareto.pareto_points(fleet(), "1K–2K")
    verdicts = pareto.pair_verdicts(points, "r-a", "r-b")
    assert [(v.concurrency, v.verdict) for v in verdicts] == [("1", "a"), ("5–8", "noise"), ("17–32", "b")]
    assert verdicts[2].user_ratio == pytest.approx(55.0 / 40.0)
    assert pareto.crossover_sentences(points) == [
        "**r-b** dominates **r-a** above 16 running (17–32); **r-a** and **r-b** are within noise at 5–8 "
        "running; **r-a** dominates **r-b** at 1 running."
    ]
    # A tighter floor than the 5% gap: A's win at 1 and 5–8 merges into one run below the crossover.
    assert pareto.crossover_sentences(points, noise=0.03) == [
        "**r-b** dominates **r-a** above 16 running (17–32); **r-a** dominates **r-b** at 8 running and "
        "below (1–8)."
    ]


def test_a_recipe_beaten_everywhere_is_named_and_a_trade_off_is_said_as_one() -> None:
    # C: faster per request than A at 5–8 on four GPUs, so fewer tok/s per GPU: a trade-off with A there;
    # D: half of B at 17–32 in both lanes, dominated wherever it ran.
    c = [{**row, "gpu_count": 4.0} for row in _rows("r-c", "c-1", 8, 130.0)]
    d = _rows("r-d", "d-1", 32, 27.5)
    points = pareto.pareto_points(fleet(c=c, d=d), "1K–2K")
    marked = pareto.mark_frontier(points)
    assert pareto.dominated_recipes(marked) == ["r-d"]
    sentences = pareto.crossover_sentences(points)
    assert (
        "a trade-off (**r-c** faster per request, **r-a** more tok/s per GPU) at every shared concurrency "
        "(5–8 running)."
    ) in sentences
    assert "**r-b** dominates **r-d** at every shared concurrency (17–32 running)." in sentences


def test_a_lane_call_reads_the_same_whichever_side_comes_first() -> None:
    # 10.5% apart: beyond a 10% floor from either side (larger ÷ smaller), never only from one.
    assert pareto.lane_call(110.5, 100.0) == 1
    assert pareto.lane_call(100.0, 110.5) == -1
    assert pareto.lane_call(109.0, 100.0) == pareto.lane_call(100.0, 109.0) == 0
    # Within noise in one lane, better in the other: dominates.
    assert pareto.verdict((100.0, 100.0), (95.0, 120.0)) == "b"


def test_a_recipes_own_points_never_grey_each_other_and_grey_is_never_on_the_line() -> None:
    # At 2 running a recipe gives up 5% per request (inside the floor) for 90% more per GPU than at 1.
    own = _rows("r-e", "e-1", 1, 105.0) + _rows("r-e", "e-2", 2, 100.0)
    marked = pareto.mark_frontier(pareto.pareto_points(prepare(pd.DataFrame(own)), "1K–2K"))
    assert not marked["dominated"].any()  # its own curve: the trade-off, not a loser
    assert marked["frontier"].all()
    # The same two points from two recipes: the one at 1 is where the other recipe is the better choice, and
    # the line (strictly better nowhere: it is 5% faster per request) leaves it out.
    other = _rows("r-e", "e-1", 1, 105.0) + _rows("r-f", "f-2", 2, 100.0)
    marked = pareto.mark_frontier(pareto.pareto_points(prepare(pd.DataFrame(other)), "1K–2K"))
    by_recipe = marked.set_index("recipe")
    assert by_recipe.loc["r-e", "dominated_by"] == "r-f at 2"
    assert list(marked["frontier"]) == [False, True]
