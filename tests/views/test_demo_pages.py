"""The demo as `make run` shows it: six hours of the simulated fleet's history (written by the dashboard's own
history filler), every page through AppTest, and the numbers the Context, Capacity and Recipes pages show
checked against the mechanism and the simulator's raw output — never against a page run.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import app
from collectors.model import TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from config import SimSettings
from sim import calibration as cal
from sim.sampler import synthesize_history
from tests.views.conftest import page_test, write_config
from views.menu import PAGES

HOURS = 6


@dataclass(frozen=True)
class Demo:
    config_path: Path
    store_path: Path
    end_ts: float


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    folder = tmp_path_factory.mktemp("demo")
    store_path = folder / "history.sqlite"
    end_ts = time.time()
    written = app.write_sim_history(str(store_path), SimSettings(scenario="demo", history_h=HOURS), end_ts)
    assert written == 11 * HOURS * 720  # eleven servers, one sample every 5 s
    return Demo(write_config(folder / "specwatch.yaml", store_path, interval_s=5.0), store_path, end_ts)


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
