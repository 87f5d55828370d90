"""Every page on an hour of the simulated demo fleet's history (sim.sampler), as `make run` shows it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from collectors.model import TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from sim.sampler import synthesize_history
from tests.views.conftest import page_test, write_config
from views.menu import PAGES
from views.pages import slo as slo_page

STEP_S = 5.0


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, TargetSnapshot]]:
    folder = tmp_path_factory.mktemp("demo")
    snapshots, events, recipes = synthesize_history(
        "demo", duration_s=3600, step_s=STEP_S, end_ts=time.time()
    )
    store = SqliteStore(folder / "history.sqlite")
    for recipe in recipes.values():
        store.put_recipe(recipe, snapshots[0].ts)
    store.append(snapshots)
    store.add_events(events)
    store.close()
    latest: dict[str, TargetSnapshot] = {}
    for snapshot in snapshots:
        latest[snapshot.target] = snapshot
    return write_config(folder / "c.yaml", folder / "history.sqlite", interval_s=STEP_S), latest


@pytest.fixture(scope="module")
def open_demo(demo: tuple[Path, dict[str, TargetSnapshot]]) -> Callable[[str], AppTest]:
    return lambda page: page_test(demo[0], page).run()


@pytest.mark.parametrize("page", [p.url_path for p in PAGES])
def test_every_page_renders_the_demo(open_demo: Callable[[str], AppTest], page: str) -> None:
    at = open_demo(page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    if page == "slo":  # no SLO configured (synthesized history counts no SLO events): it says how
        assert [i.value for i in at.info] == [slo_page.NO_SLOS]
    elif page != "alerts":  # no alert engine ran over synthesized history
        assert at.get("vega_lite_chart"), f"{page} draws no chart"


def test_fleet_numbers_are_the_newest_snapshots(
    open_demo: Callable[[str], AppTest], demo: tuple[Path, dict[str, TargetSnapshot]]
) -> None:
    latest = demo[1]
    up = [s for s in latest.values() if s.up]
    shown = {m.label: m.value for m in open_demo("fleet").metric}
    assert shown["Servers up"] == f"{len(up)} / {len(latest)}"
    output = sum(s.signals.output_tok_s or 0.0 for s in up)
    assert shown["Output"] == f"{output:,.0f} tok/s"
    assert shown["Queued"] == f"{sum(s.signals.queued or 0.0 for s in up):,.0f}"


def test_the_long_context_server_shows_the_decay(open_demo: Callable[[str], AppTest]) -> None:
    at = open_demo("context")
    fits = [df for df in (e.value for e in at.dataframe) if "trend" in df.columns]
    assert "falling" in set(fits[0]["trend"])  # k3-east-longctx ramps its prompts from 1K to 64K


def test_the_loss_split_defaults_to_the_server_that_swept_context(
    open_demo: Callable[[str], AppTest],
) -> None:
    at = open_demo("context")
    assert at.selectbox(key="split_server").value == "k3-east-longctx"
    shown = {m.label: float(m.value.rstrip("×")) for m in at.metric}
    assert shown["Measured"] > 2  # long prompts are slower per request ...
    assert shown["Step latency"] > 1  # ... because each verify step costs more (attention) ...
    assert shown["Accept length"] > 1  # ... and the draft accepts less (the decay)
    assert shown["Predicted"] == pytest.approx(shown["Step latency"] * shown["Accept length"], rel=0.01)
