"""Fixtures shared by every test area: the golden SGLang 0.5.23 /metrics body (tests/data/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).parent / "data"
GOLDEN_PROM = DATA_DIR / "sglang-0.5.23-hybrid-mtp-tp2.prom"


@pytest.fixture(scope="session")
def golden_text() -> str:
    """What GET /metrics of a real SGLang 0.5.23 hybrid-SSM + MTP server (TP=2) returns."""
    return GOLDEN_PROM.read_text(encoding="utf-8")


# `make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`): most tests wait on servers and
# engines, not the CPU (a serial run kept the load average under 1). Two groups keep the order and company a
# serial run gave them. The tests that load the whole box run on one worker, one after the other: two
# 100-target kill loops side by side timed their own scrapes out (a real down, paged, that a count took for
# a false page). The tests on real engines run on one worker in collection order, so each meets its session
# engine as aged as in a serial run (tests/prometheus/conftest.py orders them): a recorded-series read on a
# worker's young engine found no recorded sample yet at its window's start.
BOX_LOADING = "box_loading"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{BOX_LOADING}: loads the whole box (kill loops, busy CPUs): one at a time under xdist"
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker(BOX_LOADING) or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group(BOX_LOADING))
        elif item.get_closest_marker("engines") or "golden_engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("engines"))


@pytest.fixture(autouse=True)
def _fresh_render_pace() -> None:
    """Every test starts at a fresh process's pace (views.refresh measures the whole process's renders: a
    suite rerunning pages back to back would otherwise slow the live panels of the tests after it)."""
    pace = sys.modules.get("views.refresh")
    if pace is not None:
        pace.PACE.reset()
