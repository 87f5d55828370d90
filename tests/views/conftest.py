"""Fixtures of the dashboard tests: the seed-fleet history in a temp store, its config, AppTest runners."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from tests.views import seed_fleet

APP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SeedCase:
    store_path: Path
    config_path: Path
    fleet: seed_fleet.SeedFleet


def write_config(
    path: Path,
    store_path: Path,
    *,
    interval_s: float = 15.0,
    targets: list[dict[str, object]] | None = None,
    gpu_hour_usd: float | None = None,
) -> Path:
    config = {
        "source": "direct",
        "scrape": {"interval_s": interval_s, "timeout_s": 3},
        "store": {"path": str(store_path)},
        "targets": targets or [],
        "cost": {"gpu_hour_usd": gpu_hour_usd},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def seed_case(tmp_path_factory: pytest.TempPathFactory) -> SeedCase:
    """The seed fleet's history (ending now) and a viewer config pointing at it."""
    folder = tmp_path_factory.mktemp("seed")
    store_path = folder / "history.sqlite"
    fleet = seed_fleet.build(str(store_path), time.time())
    configured = [
        {"name": seed_fleet.CONFIGURED_ONLY, "url": "http://127.0.0.1:9", "labels": {"deployment": "west"}}
    ]
    config_path = write_config(
        folder / "specwatch.yaml", store_path, targets=configured, gpu_hour_usd=seed_fleet.PRICE
    )
    return SeedCase(store_path, config_path, fleet)


def _app(argv: list[str]) -> None:
    import app

    app.main(argv)


def page_test(config_path: Path, page: str, *, collector: bool = False) -> AppTest:
    """An AppTest of app.py opening on ``page`` (viewer only unless ``collector``); not yet run."""
    argv = ["--config", str(config_path), "--page", page]
    if not collector:
        argv.append("--no-collector")
    return AppTest.from_function(_app, kwargs={"argv": argv}, default_timeout=APP_TIMEOUT_S)


@pytest.fixture
def open_page(seed_case: SeedCase) -> Callable[[str], AppTest]:
    def run(page: str) -> AppTest:
        return page_test(seed_case.config_path, page).run()

    return run
