"""The probe curve on the Context, Recipes and Server pages (AppTest on a store holding real probe rows)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from collectors.model import Signals, TargetSnapshot
from collectors.probe_result import ProbeResult
from collectors.store.probes import ProbeStore
from collectors.store.sqlite_store import SqliteStore
from tests.views.conftest import page_test, write_config
from tests.views.test_pages import assert_clean, chart_data, frame, markdown

# (recipe, context) → (accept length, step latency s): two sweeps each, the second 2% off the first.
CURVE = {
    ("narrow", 1024): (3.30, 0.040),
    ("narrow", 8192): (2.50, 0.045),
    ("narrow", 32768): (2.05, 0.052),
    ("wide", 1024): (4.50, 0.060),
    ("wide", 8192): (3.00, 0.066),
    ("wide", 32768): (2.20, 0.085),
}
TARGET = {"narrow": "k3-probe-narrow", "wide": "k3-probe-wide"}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("probe-pages")
    store_path = folder / "history.sqlite"
    now = time.time()
    history = SqliteStore(str(store_path))
    # A few passive samples of the probed servers: the Server page needs one to open a server.
    history.append(
        [
            TargetSnapshot(
                name, now - age_s, True, signals=Signals(accept_length=2.5, running=8.0), recipe_id=r
            )
            for r, name in TARGET.items()
            for age_s in (60.0, 30.0)
        ]
    )
    history.close()
    store = ProbeStore(str(store_path))
    rows = []
    for sweep, (age_s, factor) in enumerate(((900.0, 1.0), (300.0, 1.02))):
        for (recipe, context), (accept, step_s) in CURVE.items():
            rows.append(
                ProbeResult(
                    ts=now - age_s,
                    target=TARGET[recipe],
                    recipe_id=recipe,
                    context_tokens=context,
                    prompt_tokens=context - 2,
                    completion_tokens=256,
                    verify_ct=round(256 / accept),
                    accept_length=accept * factor,
                    step_latency_s=step_s * factor,
                    ttft_s=context / 12000,
                    tpot_s=step_s / accept,
                    running=8.0,
                    request_id=f"specwatch-probe-{sweep}{recipe}{context}",
                )
            )
    rows.append(ProbeResult(now - 100.0, "k3-probe-full", "wide", 1024, error="skipped: 3 requests queued"))
    store.append(rows)
    store.close()
    targets = [{"name": name, "url": "http://127.0.0.1:9"} for name in (*TARGET.values(), "k3-probe-full")]
    return write_config(folder / "specwatch.yaml", store_path, targets=targets)


def median(recipe: str, context: int, index: int) -> float:
    return float(pd.Series([CURVE[recipe, context][index] * f for f in (1.0, 1.02)]).median())


def test_context_page_plots_the_probe_curve_and_factorises_it(config_path: Path) -> None:
    at = page_test(config_path, "context").run()
    assert_clean(at)
    assert "measured by probes" in " ".join(str(c.value) for c in at.caption)
    plotted = [df for chart in chart_data(at) for df in chart if "context_tokens" in df]
    accept = next(df for df in plotted if "accept_length" in df)
    step = next(df for df in plotted if "step_latency_ms" in df)
    for (recipe, context), _ in CURVE.items():
        row = accept[(accept["recipe"] == recipe) & (accept["context_tokens"] == context)]
        assert float(row["accept_length"].iloc[0]) == pytest.approx(median(recipe, context, 0))
        assert int(row["probes"].iloc[0]) == 2
        row = step[(step["recipe"] == recipe) & (step["context_tokens"] == context)]
        assert float(row["step_latency_ms"].iloc[0]) == pytest.approx(median(recipe, context, 1) * 1000)
    table = frame(at, "slowdown", "step-latency ratio", "accept-length ratio").set_index("recipe")
    for recipe in ("narrow", "wide"):
        step_ratio = CURVE[recipe, 32768][1] / CURVE[recipe, 1024][1]
        accept_ratio = CURVE[recipe, 1024][0] / CURVE[recipe, 32768][0]
        assert table.loc[recipe, "step-latency ratio"] == pytest.approx(step_ratio)
        assert table.loc[recipe, "accept-length ratio"] == pytest.approx(accept_ratio)
        assert table.loc[recipe, "slowdown"] == pytest.approx(step_ratio * accept_ratio)
    assert "**1K** to **32K** tokens" in markdown(at)
    # Another pair of lengths re-factorises.
    at.selectbox(key="probe_long").set_value(8192).run()
    table = frame(at, "slowdown").set_index("recipe")
    assert table.loc["wide", "accept-length ratio"] == pytest.approx(4.50 / 3.00)


def test_recipes_page_compares_recipes_at_matched_probe_context(config_path: Path) -> None:
    at = page_test(config_path, "recipes").run()
    assert_clean(at)
    table = frame(at, "context tokens", "accept_length · narrow", "accept_length · wide")
    assert list(table["context tokens"]) == [1024, 8192, 32768]
    assert list(table["accept_length · wide"]) == pytest.approx(
        [median("wide", c, 0) for c in (1024, 8192, 32768)]
    )
    tok_s = table.set_index("context tokens")["tok_s · narrow"]
    assert tok_s[32768] == pytest.approx(median("narrow", 32768, 0) / median("narrow", 32768, 1))


def test_server_page_shows_the_latest_sweep(config_path: Path) -> None:
    at = page_test(config_path, "server")
    at.query_params["server"] = TARGET["wide"]
    at.run()
    assert_clean(at)
    sweep = frame(at, "context tokens", "accept length", "step latency (ms)").set_index("context tokens")
    assert list(sweep.index) == [1024, 8192, 32768]  # the latest sweep only, not both
    for context in (1024, 8192, 32768):
        accept, step_s = CURVE["wide", context]
        assert sweep.loc[context, "accept length"] == pytest.approx(accept * 1.02)
        assert sweep.loc[context, "step latency (ms)"] == pytest.approx(step_s * 1.02 * 1000)
