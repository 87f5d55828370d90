"""The real thing: `make run`'s command on the simulated demo fleet, in Debian's chromium via Playwright.

The dashboard starts on an empty store and writes its own day of simulated history (config/default.yaml's
``sim.history_h``). Every page at 15 min, 1 h and 24 h (6 h, the demo's default, runs through AppTest in
test_demo_pages): no exception element, every chart draws marks (an empty one would be a sentence instead),
every time axis reads a 24-hour clock (or a date at midnight), the websocket carries < 2 MB per page, and a
screenshot of each page at 1 h lands in test-output/screenshots/. The SLO page counts what the running
collector scraped (the history filler writes no SLO events): three SLOs are added unless the default config
has its own.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from collectors.store.sqlite_store import SqliteStore
from tests.loopback import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, free_port, stop_group, wait_healthy
from views.menu import PAGES

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
MAX_PAGE_BYTES = 2_000_000
PAGE_TIMEOUT_MS = 60_000
DRAWN_CHART = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
RANGES = ("15m", "1h", "24h")
DEMO_SERVERS, HISTORY_H = 11, 24
FILL_TIMEOUT_S = 240.0
DEMO_SLOS = [
    {"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99},
    {"name": "tpot-40ms", "sli": {"kind": "tpot", "threshold_s": 0.04}, "objective": 0.99},
    {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999},
]
TIME_LABEL = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$|^\d{2} [A-Z][a-z]{2}$")  # 21:03, or 01 Dec at midnight
# Per chart: how many data marks Vega drew, and the labels of its time axis (Vega's SVG names axes in aria).
CHART_FACTS = """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].map(c => ({
    marks: c.querySelectorAll('g.role-mark path, g.role-mark line, g.role-mark rect').length,
    time_labels: [...c.querySelectorAll('g[aria-label*="time scale"] g.role-axis-label text')]
        .map(t => t.textContent),
}))"""
# The page shows what the checks below look for: a chart or a sentence, and every chart has drawn its marks (a
# wait on the drawing itself, not a fixed pause; a page that never does is still failed by them, after
# DRAW_TIMEOUT_MS).
SHOWN = f"""() => {{
    const charts = ({CHART_FACTS})();
    const sentences = document.querySelectorAll('[data-testid="stAlertContentInfo"]').length;
    return (charts.length > 0 || sentences > 0) && charts.every(c => c.marks > 0);
}}"""
# The chart facts taken in one tick in which every chart has drawn. A live panel reruns every interval and
# Vega redraws a chart whose data moved, so facts read a moment after SHOWN could catch a chart mid-redraw.
FACTS_WHEN_DRAWN = f"""() => {{
    const charts = ({CHART_FACTS})();
    return charts.every(c => c.marks > 0) ? charts : null;
}}"""
DRAW_TIMEOUT_MS = 20_000

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``make run`` with the embedded default (the simulated demo fleet) on an empty store."""
    folder = tmp_path_factory.mktemp("browser")
    store_path = folder / "history.sqlite"
    config = yaml.safe_load((ROOT / "config" / "default.yaml").read_text(encoding="utf-8"))
    config["store"]["path"] = str(store_path)  # the default, with its history kept out of the work tree
    config.setdefault("slos", DEMO_SLOS)
    config_path = folder / "specwatch.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log = folder / "streamlit.log"
    streamlit = str(Path(sys.executable).with_name("streamlit"))
    command = [
        streamlit, "run", "app.py", "--server.address", "127.0.0.1", "--server.port", str(port),
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--", "--config", str(config_path),
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, log)
        yield url, store_path
    finally:
        stop_group(process)
        SCREENSHOTS.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, SCREENSHOTS.parent / "streamlit-browser.log")  # kept with the screenshots


def wait_for_history(store_path: Path, timeout_s: float = FILL_TIMEOUT_S) -> None:
    """The dashboard's own filler has written the day of history (it starts with the first page view)."""
    wanted = DEMO_SERVERS * HISTORY_H * 720  # one snapshot per server every 5 s
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline:
        if store_path.exists():
            store = SqliteStore(store_path)
            try:
                count = store.count_samples()
            finally:
                store.close()
            if count >= wanted:
                return
        time.sleep(1.0)
    raise AssertionError(f"only {count} of {wanted} history snapshots after {timeout_s:.0f} s")


def test_every_page_at_every_range_draws_or_says_why(dashboard: tuple[str, Path]) -> None:
    from playwright.sync_api import Page, sync_playwright
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    url, store_path = dashboard
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    received = {"bytes": 0}

    def settle(page: Page, title: str) -> None:
        page.wait_for_selector('[data-testid="stApp"]', timeout=PAGE_TIMEOUT_MS)
        page.get_by_role("heading", name=title).first.wait_for(timeout=PAGE_TIMEOUT_MS)
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=PAGE_TIMEOUT_MS)
        # Let vega finish drawing; a chart that draws nothing is named by the checks after this.
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_function(SHOWN, timeout=DRAW_TIMEOUT_MS, polling=100)

    def drawn_chart_facts(page: Page) -> list[dict[str, object]]:
        """The charts' facts once every one has drawn (one still blank after DRAW_TIMEOUT_MS is failed)."""
        try:
            drawn = page.wait_for_function(FACTS_WHEN_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=100)
        except PlaywrightTimeout:
            return list(page.evaluate(CHART_FACTS))
        return list(drawn.json_value())

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2200})
            page.on(
                "websocket",
                lambda ws: ws.on(
                    "framereceived",
                    lambda payload: received.__setitem__("bytes", received["bytes"] + len(payload)),
                ),
            )
            page.goto(url)  # the first view starts the runtime: the fleet, the collector, the filler
            settle(page, PAGES[0].title)
            wait_for_history(store_path)
            for range_key in RANGES:
                for spec in PAGES:
                    where = f"{spec.title} at {range_key}"
                    received["bytes"] = 0
                    path = "" if spec is PAGES[0] else spec.url_path
                    page.goto(f"{url}/{path}?range={range_key}")
                    settle(page, spec.title)
                    if spec.url_path != "alerts":  # a fresh alert engine may have nothing to chart yet
                        page.wait_for_selector(DRAWN_CHART, timeout=PAGE_TIMEOUT_MS)
                    if spec.url_path == "slo":  # the live collector's counts: a budget, not a dash
                        tile = page.locator('[data-testid="stMetric"]', has_text="Error budget left")
                        assert re.search(r"-?\d+\.\d %", tile.first.inner_text()), f"{where}: no budget"
                    if range_key == "1h":
                        page.screenshot(path=str(SCREENSHOTS / f"{spec.url_path}.png"), full_page=True)
                    exceptions = page.locator('[data-testid="stException"]')
                    assert exceptions.count() == 0, f"{where}: {exceptions.first.inner_text()}"
                    charts = drawn_chart_facts(page)
                    sentences = page.locator('[data-testid="stAlertContentInfo"]').count()
                    assert charts or sentences, f"{where}: neither a chart nor a sentence"
                    for i, chart in enumerate(charts):
                        assert chart["marks"] > 0, f"{where}: chart {i} drew nothing and said nothing"
                        odd = [t for t in chart["time_labels"] if not TIME_LABEL.match(t)]
                        assert not odd, f"{where}: chart {i} time labels {odd}"
                    assert received["bytes"] < MAX_PAGE_BYTES, f"{where}: {received['bytes']} bytes"
        finally:
            browser.close()
