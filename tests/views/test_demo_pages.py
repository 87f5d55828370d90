"""The demo as `make run` shows it: six hours of the simulated fleet's history (written by the dashboard's own
history filler, at the demo's price) and its shipped benchmark results, every page through AppTest, and the
numbers the Context, Capacity and Recipes pages show checked against the mechanism, the simulator's raw output
and the shipped result files — never against a page run.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

import app
from collectors.model import TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from config import SimSettings
from sim import calibration as cal
from sim.bench_client import result_files
from sim.sampler import synthesize_history
from tests.views.conftest import page_test, write_config
from views.menu import PAGES

HOURS = 6
PRICE = 2.5  # config/default.yaml's cost.gpu_hour_usd
FRESH_FOR_S = 120.0


@dataclass(frozen=True)
class Demo:
    config_path: Path
    store_path: Path
    end_ts: float


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    folder = tmp_path_factory.mktemp("demo")
    store_path = folder / "history.sqlite"
    # The history runs a little past its writing, as the demo's live collector keeps scraping while pages
    # open: the Fleet tests right after the fill would otherwise find every server stale (> 3 intervals, 15 s)
    # whenever the fill and the first pages take longer than that on a loaded machine.
    end_ts = time.time() + FRESH_FOR_S
    sim = SimSettings(scenario="demo", history_h=HOURS)
    written = app.write_sim_history(str(store_path), sim, end_ts, gpu_hour_usd=PRICE)
    assert written == 11 * HOURS * 720  # eleven servers, one sample every 5 s
    app._import_shipped_bench_results(str(store_path), "demo")  # as the demo does at start
    config = write_config(folder / "specwatch.yaml", store_path, interval_s=5.0, gpu_hour_usd=PRICE)
    return Demo(config, store_path, end_ts)


def open_page(demo: Demo, page: str, range_key: str = "6h") -> AppTest:
    at = page_test(demo.config_path, page)
    at.query_params["range"] = range_key
    return at.run()


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def factor(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)×", text)
    assert match, text
    return float(match.group(1))


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("range_key", ["15m", "1h", "6h", "24h"])
@pytest.mark.parametrize("page", [p.url_path for p in PAGES])
def test_every_page_draws_or_says_why(demo: Demo, page: str, range_key: str) -> None:
    at = open_page(demo, page, range_key)
    assert_clean(at)
    charts = at.get("vega_lite_chart")
    explained = [i.value for i in at.info] + [c.value for c in at.caption]
    assert charts or explained, f"{page} at {range_key}: neither a chart nor a sentence"


def test_context_split_is_the_seeds_mechanism(demo: Demo) -> None:
    """k3-east-longctx swept 1K → 64K: its split reads the seed's 3.50× (step) × 1.75× (accept)."""
    at = open_page(demo, "context")
    assert_clean(at)
    shown = metrics(at)
    (isl_lo, step_lo), (isl_hi, step_hi) = cal.STEP_LATENCY_S_BY_ISL
    accept = dict(cal.ACCEPT_LENGTH_BY_ISL)
    assert factor(shown["Step latency"]) == pytest.approx(step_hi / step_lo, rel=0.10)
    assert factor(shown["Accept length"]) == pytest.approx(accept[isl_lo] / accept[isl_hi], rel=0.10)
    assert at.selectbox(key="split_server").value == "k3-east-longctx"


def raw_demo() -> dict[str, list[TargetSnapshot]]:
    """The simulator's own output for the same hours (what the collector would have stored)."""
    out: dict[str, list[TargetSnapshot]] = defaultdict(list)
    for k in range(HOURS):
        snapshots, _, _ = synthesize_history("demo", duration_s=3600, end_ts=1.8e9 - 3600 * k, seed=k)
        for s in snapshots:
            out[s.target].append(s)
    return out


def test_capacity_finds_the_simulated_knee(demo: Demo) -> None:
    """k3-east-batch holds 1, 2, 4, 8, 16, 32 and 48 clients: the knee is where the gain per doubling falls
    the most, computed here from its raw samples."""
    levels: dict[int, list[float]] = defaultdict(list)
    for s in raw_demo()["k3-east-batch"]:
        sig = s.signals
        if s.up and sig.running and sig.accept_length and sig.step_latency_s:
            levels[round(sig.running)].append(sig.running * sig.accept_length / sig.step_latency_s)
    held = sorted(n for n in levels if n in (1, 2, 4, 8, 16, 32, 48))
    throughput = [statistics.fmean(levels[n]) for n in held]
    elasticity = [
        math.log(throughput[i + 1] / throughput[i]) / math.log(held[i + 1] / held[i])
        for i in range(len(held) - 1)
    ]
    falls = [elasticity[i - 1] - elasticity[i] for i in range(1, len(elasticity))]
    expected_knee = held[1 + falls.index(max(falls))]
    at = open_page(demo, "capacity")
    assert_clean(at)
    text = "\n".join(str(m.value) for m in at.markdown)
    assert f"**The knee is at {expected_knee}**" in text
    assert f"stop at {expected_knee} if latency matters" in text


def test_recipes_judges_block_size_3_faster_than_7(demo: Demo) -> None:
    store = SqliteStore(demo.store_path)
    try:
        recipes = store.recipes()
    finally:
        store.close()
    by_block = {
        r.get("speculative_dspark_block_size"): rid
        for rid, r in recipes.items()
        if r.get("speculative_algorithm")
    }
    at = page_test(demo.config_path, "recipes")
    at.query_params["range"] = "6h"
    at.run()
    at.selectbox(key="recipe_a").set_value(by_block[7])
    at.selectbox(key="recipe_b").set_value(by_block[3])
    at.run()
    assert_clean(at)
    shown = metrics(at)
    assert shown["Verdict"] == "B faster"
    ratio = factor(shown["Throughput"])
    text = "\n".join(str(m.value) for m in at.markdown)
    found = re.search(
        r"is \*\*faster\*\* than .*: \*\*([\d.]+)×\*\* \(95% interval ([\d.]+)–([\d.]+)× from (\d+)", text
    )
    assert found, text
    windows_ratio, low, high, windows = (float(g) for g in found.groups())
    assert low < windows_ratio < high
    assert low > 1.0  # the interval clears 1×: faster, not noise
    assert windows_ratio == pytest.approx(ratio, rel=0.05)  # per-window means agree with the pooled ratio
    assert windows >= 10
    assert ratio > 1.3  # block size 3 trades accept length for a much cheaper step (the seed: 1.68×)
    assert factor(shown["Accept length"]) < 1.0  # ... accept length down, throughput up


def _shipped_runs() -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in result_files("demo")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def test_recipes_shows_the_pareto_with_the_shipped_offline_runs(demo: Demo) -> None:
    """The Pareto at the demo's chat context with a ring per shipped run; the shipped sweep's crossover (the
    default window ahead at one request, block size 3 from 16 up) in words; each run's offline figure as its
    file says; energy and cost per recipe from the history's GPU telemetry and the demo's price."""
    store = SqliteStore(demo.store_path)
    try:
        recipes = store.recipes()
    finally:
        store.close()
    spec = {rid: r for rid, r in recipes.items() if r.get("speculative_algorithm")}
    by_block = {r.get("speculative_dspark_block_size"): rid for rid, r in spec.items()}
    shipped, default_window = by_block[3], by_block[7]
    at = open_page(demo, "recipes")
    assert_clean(at)
    assert at.selectbox(key="pareto_context").value == "1K–2K"  # the chat servers' context: most samples
    charts = [
        pa.ipc.open_stream(d.data.data).read_all().to_pandas()
        for element in at.get("vega_lite_chart")
        for d in element.proto.datasets
    ]
    rings = next(frame for frame in charts if "label" in frame.columns)
    runs = _shipped_runs()
    assert sorted(rings["label"]) == sorted(f"{run['max_concurrency']} offline" for run in runs)
    for run in runs:
        user = 1000 / run["mean_tpot_ms"]
        drawn = rings[(rings["label"] == f"{run['max_concurrency']} offline") & (rings["user_tok_s"] == user)]
        assert len(drawn) == 1, run["tag"]
        gpus = run["server_info"]["tp_size"] * run["server_info"]["dp_size"]
        assert drawn["gpu_tok_s"].iloc[0] == pytest.approx(run["output_throughput"] / gpus)
    live = next(frame for frame in charts if "dominated" in frame.columns)
    assert {shipped, default_window} <= set(live["recipe"])
    text = "\n".join(str(m.value) for m in at.markdown)
    assert f"**{default_window}** dominates **{shipped}** at 1 running" in text
    assert f"**{shipped}** dominates **{default_window}** above 8 running (9–64)" in text
    at_32 = next(r for r in runs if r["max_concurrency"] == 32 and "k3-east-0" in r["tag"])
    assert (
        f"- **{shipped}**: offline {1000 / at_32['mean_tpot_ms']:,.1f} tok/s per request at 32 "
        f"({at_32['output_throughput']:,.0f} tok/s in all), production "
    ) in text
    energy = next(e.value for e in at.dataframe if "tokens_per_joule" in e.value.columns)
    assert energy["tokens_per_joule"].notna().all()
    assert energy["usd_per_million_tokens"].notna().all()
