"""app.py end to end: config resolution, one runtime per process, every empty or broken case in words.

An empty fleet, a down fleet, an empty store, an unreadable store and a bad config each end in a sentence,
never a traceback; with ``sim:`` the app starts the simulated fleet and its own collector, and shows the
servers up.
"""

from __future__ import annotations

import ast
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from collectors.model import Signals, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from tests.views.conftest import APP_TIMEOUT_S, SeedCase, page_test, write_config
from views.menu import PAGES

ROOT = Path(__file__).resolve().parents[2]
PAGE_PATHS = [p.url_path for p in PAGES]


def texts(at: AppTest) -> str:
    parts = [*at.info, *at.warning, *at.error, *at.markdown, *at.caption]
    return "\n".join(str(p.value) for p in parts)


def no_traceback(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def test_app_file_reads_the_config_named_by_the_environment(
    seed_case: SeedCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path / "viewer.yaml", seed_case.store_path)  # no targets: nothing to scrape
    monkeypatch.setenv("SPECWATCH_CONFIG", str(config))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=APP_TIMEOUT_S).run()
    no_traceback(at)
    assert at.title[0].value == "Fleet"  # the first page opens by default
    sidebar = "\n".join(str(c.value) for c in at.sidebar.caption)
    assert "no targets configured" in sidebar
    assert str(config) in sidebar
    assert at.segmented_control(key="range").options == ["15m", "1h", "6h", "24h", "7d"]


@pytest.mark.parametrize("page", PAGE_PATHS)
def test_every_page_explains_an_empty_store(tmp_path: Path, page: str) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "empty.sqlite")
    at = page_test(config, page).run()
    no_traceback(at)
    assert not at.error
    shown = texts(at)
    if page == "alerts":
        assert "No alert engine data yet" in shown
    elif page == "slo":  # without SLOs in the config, how to configure one comes first
        assert "No SLO is configured." in shown
    else:
        assert "is empty: no collector has written to it yet" in shown


def test_time_range_changes_every_page(seed_case: SeedCase) -> None:
    at = page_test(seed_case.config_path, "alerts").run()
    assert "Resolved, last 1 h" in [m.label for m in at.metric]
    at.segmented_control(key="range").set_value("15m").run()
    no_traceback(at)
    assert "Resolved, last 15 min" in [m.label for m in at.metric]


def test_a_link_with_a_range_opens_that_range(seed_case: SeedCase) -> None:
    at = page_test(seed_case.config_path, "fleet")
    at.query_params["range"] = "24h"
    at.run()
    no_traceback(at)
    assert at.segmented_control(key="range").value == "24h"
    assert "history: last 24 h" in "\n".join(str(c.value) for c in at.caption)


@pytest.fixture
def down_fleet(tmp_path: Path) -> Path:
    store = SqliteStore(tmp_path / "down.sqlite")
    now = time.time()
    store.append(
        [
            TargetSnapshot(name, now - 1, False, f"connection refused: {name}", Signals(), None, "east")
            for name in ("k3-a", "k3-b")
        ]
    )
    store.close()
    return write_config(tmp_path / "c.yaml", tmp_path / "down.sqlite")


def test_a_down_fleet_says_so(down_fleet: Path) -> None:
    at = page_test(down_fleet, "fleet").run()
    no_traceback(at)
    assert "No server is up" in at.error[0].value
    assert "connection refused: k3-a" in at.error[0].value
    assert {m.label: m.value for m in at.metric}["Servers up"] == "0 / 2"
    capacity = page_test(down_fleet, "capacity").run()
    no_traceback(capacity)
    assert "No server is up: there is no current capacity to judge." in texts(capacity)
    for page in ("server", "context", "recipes"):
        no_traceback(page_test(down_fleet, page).run())


def test_an_unreadable_store_is_one_sentence(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-file.sqlite"
    folder.mkdir()
    config = write_config(tmp_path / "c.yaml", folder)
    at = page_test(config, "fleet").run()
    no_traceback(at)
    assert at.error[0].value.startswith("Cannot read history: cannot open history store")


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({"scrape": {"interval_s": 5, "timeout_s": 3}, "stor": {}}, "stor: expected a known key"),
        ({"scrape": {"interval_s": 1, "timeout_s": 3}}, "must not exceed interval_s"),
        ({"targets": [{"name": "a", "url": "ftp://x"}]}, "targets.0.url"),
    ],
)
def test_a_bad_config_is_reported_not_raised(tmp_path: Path, document: dict[str, object], says: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    at = page_test(config, "fleet").run()
    no_traceback(at)
    assert "specwatch cannot start: bad configuration" in at.error[0].value
    assert says in at.error[0].value


def test_a_missing_config_file_is_reported(tmp_path: Path) -> None:
    at = page_test(tmp_path / "nope.yaml", "fleet").run()
    no_traceback(at)
    assert "nope.yaml" in at.error[0].value


@pytest.fixture
def sim_app(tmp_path: Path) -> Iterator[AppTest]:
    import app

    config = tmp_path / "sim.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "scrape": {"interval_s": 1, "timeout_s": 1},
                "sim": {"scenario": "demo"},
                "store": {"path": str(tmp_path / "sim.sqlite")},
                "exporter": {"listen": None},
            }
        ),
        encoding="utf-8",
    )
    at = page_test(config, "fleet", collector=True)
    try:
        yield at
    finally:
        app.start_runtime.clear()  # stops the collector thread and the simulated servers
    assert collector_threads() == 0


def collector_threads() -> int:
    return sum(t.name == "specwatch-collector" and t.is_alive() for t in threading.enumerate())


def test_the_app_runs_the_sim_and_its_collector_once(sim_app: AppTest) -> None:
    sim_app.run()
    no_traceback(sim_app)
    sidebar = "\n".join(str(c.value) for c in sim_app.sidebar.caption)
    found = re.search(r"collector \+ alert engine in this process · (\d+) target\(s\)", sidebar)
    assert found, sidebar
    servers = int(found.group(1))
    assert servers > 1
    deadline = time.monotonic() + 30
    shown: dict[str, str] = {}
    while time.monotonic() < deadline:
        shown = {m.label: m.value for m in sim_app.run().metric}
        if shown.get("Servers up") == f"{servers} / {servers}":
            break
        time.sleep(0.5)
    assert shown.get("Servers up") == f"{servers} / {servers}"  # scraped by the app's own collector
    assert collector_threads() == 1  # one collector per process, however many reruns (or tabs)


def test_views_never_fetch_or_simulate() -> None:
    """Imports go one way: views never import requests (they read history) nor sim (only app.py may)."""
    for path in sorted((ROOT / "views").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                assert root not in {"requests", "sim", "app"}, f"{path.name} imports {name}"
