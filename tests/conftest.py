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


@pytest.fixture(autouse=True)
def _fresh_render_pace() -> None:
    """Every test starts at a fresh process's pace (views.refresh measures the whole process's renders: a
    suite rerunning pages back to back would otherwise slow the live panels of the tests after it)."""
    pace = sys.modules.get("views.refresh")
    if pace is not None:
        pace.PACE.reset()
