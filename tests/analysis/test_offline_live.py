"""Offline runs beside production on constructed runs and samples whose answer is known by construction.

The run: recipe A at max concurrency 8, 800 tok/s, mean TPOT 10 ms (100 tok/s per request), accept length 2.5
(a 25 ms step), 1,024-token prompts and 512-token outputs (it decodes at ~1,280 tokens: the 1K–2K bin).
Production of A at 5–8 running, 1K–2K: 85 tok/s per request at accept length 2.2, so a 2.2 / 85 s step:
−15 % = accept length −12 % over step latency +3.5 %.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from analysis import offline_live
from analysis.sample_bins import prepare
from collectors.model import Recipe
from collectors.store.offline_runs import OfflineRun

SPEC = Recipe.from_flags({"speculative_algorithm": "DSPARK", "speculative_dspark_block_size": 3}, 2)
PLAIN = Recipe.from_flags({"speculative_algorithm": None, "mem_fraction_static": 0.93}, 2)


def run_of(recipe: Recipe | None = SPEC, **fields: object) -> OfflineRun:
    base = OfflineRun(
        run_id="x",
        recipe_id=recipe.recipe_id if recipe is not None else None,
        recipe_flags=json.dumps(recipe.as_dict()) if recipe is not None else None,
        gpu_count=2 if recipe is not None else None,
        backend="sglang",
        dataset_name="random-ids",
        tag=None,
        max_concurrency=8,
        request_rate_rps=float("inf"),
        duration_s=20.0,
        completed=16,
        output_tok_s=800.0,
        mean_ttft_ms=90.0,
        median_ttft_ms=90.0,
        p99_ttft_ms=120.0,
        mean_tpot_ms=10.0,
        median_tpot_ms=10.0,
        p99_tpot_ms=12.0,
        mean_itl_ms=25.0,
        concurrency=7.3,
        accept_length=2.5,
        total_input_tokens=16 * 1024,
        total_output_tokens=16 * 512,
        request_goodput_rps=None,
        slo_attainment=None,
        goodput_slos_ms=None,
        source_file="runs.jsonl",
        source_line=1,
        imported_ts=0.0,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def production(
    recipe: Recipe = SPEC,
    *,
    running: float = 8,
    per_request: float = 85.0,
    accept: float = 2.2,
    context: float = 1536.0,
    n: int = 12,
) -> list[dict[str, object]]:
    return [
        {
            "ts": 1_800_000_000.0 + 5.0 * k,
            "target": "k3-1",
            "up": True,
            "recipe_id": recipe.recipe_id,
            "accept_length": accept,
            "step_latency_s": accept / per_request,
            "running": running,
            "avg_context_tokens": context,
            "per_request_tok_s": per_request,
            "output_tok_s": running * per_request,
            "gpu_count": 2.0,
        }
        for k in range(n)
    ]


def frame(*parts: list[dict[str, object]]) -> pd.DataFrame:
    return prepare(pd.DataFrame([row for part in parts for row in part]))


def test_a_run_beside_production_at_its_concurrency_and_context() -> None:
    found = offline_live.compare_run(run_of(), frame(production()))
    assert (found.concurrency_bin, found.context_bin) == ("5–8", "1K–2K")
    assert found.live is not None
    assert found.live.samples == 12
    assert found.change == pytest.approx(85.0 / 100.0 - 1)
    assert found.accept_change == pytest.approx(2.2 / 2.5 - 1)
    assert found.step_change == pytest.approx((2.2 / 85.0) / 0.025 - 1)
    # The fraction holds per request: production ÷ offline = accept ratio ÷ step ratio.
    assert 1 + found.change == pytest.approx((1 + found.accept_change) / (1 + found.step_change))
    assert found.describe() == (
        "offline 100.0 tok/s per request at 8 (800 tok/s in all), production 85.0 "
        "(−15 %: accept length −12 %, step latency +4 %)"
    )


def test_inside_the_floor_it_says_within_noise() -> None:
    found = offline_live.compare_run(run_of(), frame(production(per_request=95.0, accept=2.45)))
    assert found.within_noise()
    assert found.describe().endswith(
        "production 95.0 (−5 %, within noise: accept length −2 %, step latency +3 %)"
    )


def test_production_unknown_says_why() -> None:
    live = frame(production(), production(running=40, context=9000.0))

    def why(run: OfflineRun, rows: pd.DataFrame = live) -> str:
        found = offline_live.compare_run(run, rows)
        assert found.live is None
        assert found.change is None
        return found.describe().split("production unknown: ", 1)[1]

    recipe = SPEC.recipe_id
    assert why(run_of(max_concurrency=48)) == (
        f"no production samples of {recipe} at 33–64 running and 1K–2K context in this range "
        "(12 at that concurrency at other contexts)"
    )
    assert why(run_of(), frame(production(n=4))) == (
        f"only 4 production samples of {recipe} at 5–8 running and 1K–2K context in this range "
        "(fewer than 10)"
    )
    assert why(run_of(recipe=PLAIN)) == f"no production samples of {PLAIN.recipe_id} in this range"
    assert why(run_of(recipe=None)) == "the run has no recipe (the client could not read /server_info)"
    assert why(run_of(max_concurrency=None, concurrency=None)) == (
        "the run says neither its max concurrency nor its measured concurrency"
    )


def test_without_token_totals_any_context_matches_and_the_measured_concurrency_stands_in() -> None:
    run = run_of(max_concurrency=None, concurrency=7.3, total_input_tokens=None)
    found = offline_live.compare_run(run, frame(production(context=9000.0)))
    assert (found.concurrency_bin, found.context_bin) == ("5–8", None)
    assert found.live is not None
    assert found.describe().startswith("offline 100.0 tok/s per request at 7 ")


def test_the_split_is_unknown_without_accept_length_unless_the_recipe_decodes_plainly() -> None:
    spec = offline_live.compare_run(run_of(accept_length=None), frame(production()))
    assert spec.change == pytest.approx(-0.15)
    assert spec.describe().endswith("(−15 %; the split is unknown: the run recorded no accept length)")
    # Plain decoding: one token per request per step, by the catalogue's rule: the step is the TPOT.
    plain = offline_live.compare_run(
        run_of(recipe=PLAIN, accept_length=None), frame(production(PLAIN, per_request=80.0, accept=1.0))
    )
    assert plain.accept_length == 1.0
    assert plain.step_latency_s == pytest.approx(0.010)
    assert plain.describe().endswith("production 80.0 (−20 %: accept length ±0 %, step latency +25 %)")


def test_offline_points_join_the_pareto_as_labelled_rings() -> None:
    runs = [run_of(), run_of(max_concurrency=32, output_tok_s=2000.0, mean_tpot_ms=16.0), run_of(recipe=None)]
    points = offline_live.offline_points(runs)
    assert list(points["label"]) == ["8 offline", "32 offline"]  # no recipe: nothing to place it with
    assert list(points["concurrency"]) == ["5–8", "17–32"]
    assert list(points["user_tok_s"]) == pytest.approx([100.0, 62.5])
    assert list(points["gpu_tok_s"]) == pytest.approx([400.0, 1000.0])
    # Two runs in one bin are one point of the offline sweep: each lane's mean.
    lanes = offline_live.offline_lanes(offline_live.offline_points([run_of(), run_of(max_concurrency=6)]))
    assert lanes.to_dict("records") == [
        {"recipe": SPEC.recipe_id, "concurrency": "5–8", "user_tok_s": 100.0, "gpu_tok_s": 400.0, "runs": 2}
    ]
