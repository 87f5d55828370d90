"""The real thing: ``make run``'s command on the simulated fleet, in Debian's chromium driven by Playwright.

Every page loads, its charts render, no exception element appears, the websocket carries < 2 MB per page, and
a screenshot of each page lands in test-output/screenshots/.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from collectors.store.history import SqliteStore
from sim.history import synthesize_history
from tests.loopback import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, free_port
from views.menu import PAGES

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
MAX_PAGE_BYTES = 2_000_000
PAGE_TIMEOUT_MS = 60_000
DRAWN_CHART = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'

pytestmark = BROWSER_MARKS


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"streamlit exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:  # noqa: S310 (loopback)
                if answer.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"streamlit not healthy within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``make run`` with the embedded default (the simulated demo fleet), on an hour of prior history."""
    folder = tmp_path_factory.mktemp("browser")
    store_path = folder / "history.sqlite"
    snapshots, events, recipes = synthesize_history("demo", duration_s=3600, step_s=5.0, end_ts=time.time())
    store = SqliteStore(store_path)
    for recipe in recipes.values():
        store.put_recipe(recipe, snapshots[0].ts)
    store.append(snapshots)
    store.add_events(events)
    store.close()
    config = yaml.safe_load((ROOT / "config" / "default.yaml").read_text(encoding="utf-8"))
    config["store"]["path"] = str(store_path)  # the default, with its history kept out of the work tree
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
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        SCREENSHOTS.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, SCREENSHOTS.parent / "streamlit-browser.log")  # kept with the screenshots


def test_every_page_renders_in_chromium(dashboard: str) -> None:
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    received = {"bytes": 0}
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
            for spec in PAGES:
                received["bytes"] = 0
                page.goto(f"{dashboard}/{'' if spec is PAGES[0] else spec.url_path}")
                page.wait_for_selector('[data-testid="stApp"]', timeout=PAGE_TIMEOUT_MS)
                page.get_by_role("heading", name=spec.title).first.wait_for(timeout=PAGE_TIMEOUT_MS)
                if spec.url_path != "alerts":  # a fresh alert engine may have nothing to chart yet
                    page.wait_for_selector(DRAWN_CHART, timeout=PAGE_TIMEOUT_MS)
                page.wait_for_selector(
                    '[data-testid="stStatusWidget"]', state="detached", timeout=PAGE_TIMEOUT_MS
                )
                page.wait_for_timeout(1500)  # let vega finish drawing before the screenshot
                page.screenshot(path=str(SCREENSHOTS / f"{spec.url_path}.png"), full_page=True)
                exceptions = page.locator('[data-testid="stException"]')
                assert exceptions.count() == 0, exceptions.first.inner_text()
                charts = page.locator('[data-testid="stVegaLiteChart"]').count()
                assert spec.url_path == "alerts" or charts > 0, f"{spec.title}: no chart rendered"
                assert received["bytes"] < MAX_PAGE_BYTES, f"{spec.title}: {received['bytes']} bytes"
        finally:
            browser.close()
