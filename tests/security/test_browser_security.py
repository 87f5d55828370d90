"""The dashboard in Debian's chromium, started like ``make run`` but without ``--server.address`` (so the
project's ``.streamlit/config.toml`` decides the binding), with an access token in the environment and a fleet
whose label values are hostile:

- simulated servers whose model name is ``<script>window.__pwned=1</script>`` or an ``<img onerror>``, and
  whose deployment label is HTML;
- a server whose HTTP status line carries HTML, a script tag and a markdown image pointing at a canary server.

It must listen on loopback only, show nothing before the token, and render every hostile value as text:
``window.__pwned`` stays undefined and no browser request reaches the canary.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from tests.collectors.servers import LoopbackServer
from tests.loopback import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, free_port, stop_group
from tests.security.hostile import Canary, canary, status_line_server
from views.menu import PAGES

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "browser-gate-5d1c9e"
TIMEOUT_MS = 60_000
SCRIPT_MODEL = "<script>window.__pwned=1</script>"
IMG_MODEL = '<img src=x onerror="window.__pwned=1">'

pytestmark = BROWSER_MARKS


@dataclass
class Dashboard:
    url: str
    port: int
    trap: Canary
    store: Path


def hostile_scenario(path: Path) -> Path:
    scenario = {
        "description": "hostile label values",
        "warmup_s": 60,
        "recipes": {
            "script": {"served_model_name": SCRIPT_MODEL, "speculative_dspark_block_size": 3},
            "img": {"served_model_name": IMG_MODEL},
        },
        "workloads": {"chat": {"isl": 1024, "osl": 256}},
        "servers": [
            {
                "name": "evil-script",
                "deployment": "<b onmouseover=window.__pwned=1>east</b>",
                "recipe": "script",
                "workload": "chat",
                "load": {"concurrency": 8},
            },
            {
                "name": "evil-img",
                "deployment": "west",
                "recipe": "img",
                "workload": "chat",
                "load": {"concurrency": 8},
            },
        ],
    }
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    return path


def wait_until(
    condition: Any, what: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 90
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"streamlit exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if condition():
                return
        except (OSError, sqlite3.Error):
            pass
        time.sleep(0.3)
    raise AssertionError(f"{what} within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    folder = tmp_path_factory.mktemp("hostile")
    with canary() as trap:
        image = f"![t]({trap.url}/md.png)"  # a markdown image: the browser would fetch it
        reason = f'<img src=x onerror="window.__pwned=1"> <script>window.__pwned=1</script> {image}'
        evil: LoopbackServer = status_line_server(f"HTTP/1.1 503 {reason}".encode())
        store = folder / "history.sqlite"
        config = {
            "scrape": {"interval_s": 1, "timeout_s": 0.8},
            "sim": {"scenario": str(hostile_scenario(folder / "hostile.yaml"))},
            "targets": [{"name": "evil-status", "url": evil.url, "labels": {"deployment": "<i>x</i>"}}],
            "store": {"path": str(store)},
            "alerts": {"rules": {"TargetDown": {"for_s": 0}}},
        }
        config_path = folder / "specwatch.yaml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        port = free_port()
        log = folder / "streamlit.log"
        command = [
            str(Path(sys.executable).with_name("streamlit")),
            "run",
            "app.py",
            "--server.port",
            str(port),
            "--",
            "--config",
            str(config_path),
        ]  # fmt: skip  (no --server.address: .streamlit/config.toml must bind loopback)
        env = {**os.environ, "SPECWATCH_DASHBOARD_TOKEN": TOKEN}
        with log.open("wb") as sink:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        url = f"http://127.0.0.1:{port}"
        try:

            def healthy() -> bool:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:  # noqa: S310
                    return bool(answer.read() == b"ok")

            wait_until(healthy, "streamlit not healthy", process, log)
            yield Dashboard(url, port, trap, store)
        finally:
            stop_group(process)
            evil.stop()


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                found.add(address)
    return found


def test_the_dashboard_listens_on_loopback_only(dashboard: Dashboard) -> None:
    addresses = listening_addresses(dashboard.port)
    assert addresses, "nothing listens on the dashboard's port"
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
    assert addresses <= loopback, f"listening on {addresses}: not loopback only"


def open_page(page: Any, url: str, title: str | None) -> None:
    """Load ``url``, pass the access gate, wait for the page (``title``) to finish drawing."""
    page.goto(url)
    page.wait_for_selector('[data-testid="stApp"]', timeout=TIMEOUT_MS)
    page.get_by_label("Access token", exact=True).and_(page.locator("input")).fill(TOKEN, timeout=TIMEOUT_MS)
    page.get_by_role("button", name="Open the dashboard").click()
    if title is not None:
        page.get_by_role("heading", name=title).first.wait_for(timeout=TIMEOUT_MS)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=TIMEOUT_MS)
    page.wait_for_timeout(1200)  # charts and tables finish drawing


def assert_not_injected(page: Any, where: str) -> None:
    assert page.evaluate("typeof window.__pwned") == "undefined", f"script ran on {where}"
    assert page.locator('img[src="x"]').count() == 0, f"an <img> from a label value on {where}"
    assert (
        page.evaluate("[...document.scripts].filter(s => s.textContent.includes('__pwned')).length") == 0
    ), f"a <script> from a label value on {where}"


def test_hostile_label_values_render_as_text(dashboard: Dashboard) -> None:
    from playwright.sync_api import sync_playwright

    def collected() -> bool:
        """The dashboard's own collector (running before anyone signed in) stored the hostile fleet."""
        try:
            with sqlite3.connect(dashboard.store) as db:
                recipes = db.execute("SELECT flags FROM recipes").fetchall()
                errors = db.execute("SELECT COUNT(*) FROM samples WHERE target = 'evil-status'").fetchone()[0]
        except sqlite3.Error:
            return False
        return errors > 0 and sum("__pwned" in str(r[0]) for r in recipes) >= 2

    frames: list[bytes] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2000})
            page.on(
                "websocket",
                lambda ws: ws.on(
                    "framereceived", lambda p: frames.append(p if isinstance(p, bytes) else p.encode())
                ),
            )
            # Before the token: the gate only.
            page.goto(dashboard.url)
            page.get_by_label("Access token", exact=True).and_(page.locator("input")).wait_for(
                timeout=TIMEOUT_MS
            )
            assert page.get_by_role("heading", name="Fleet").count() == 0
            page.get_by_label("Access token", exact=True).and_(page.locator("input")).fill("not-the-token")
            page.get_by_role("button", name="Open the dashboard").click()
            page.get_by_text("That token is not right.").wait_for(timeout=TIMEOUT_MS)
            assert page.get_by_role("heading", name="Fleet").count() == 0

            deadline = time.monotonic() + 60
            while not collected() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert collected(), "the dashboard's collector never stored the hostile fleet"

            for spec in PAGES:
                open_page(page, f"{dashboard.url}/{'' if spec is PAGES[0] else spec.url_path}", spec.title)
                assert page.locator('[data-testid="stException"]').count() == 0, spec.title
                assert_not_injected(page, spec.title)
                if spec.url_path == "fleet":
                    banner = page.locator('[data-testid="stAlert"]').all_inner_texts()
                    # the status line reached the page, as literal text
                    assert any("onerror" in text and "<script>" in text for text in banner), banner
            for server in ("evil-status", "evil-script", "evil-img", IMG_MODEL):
                # a deep link survives the gate, and the server's page shows its words as text
                open_page(page, f"{dashboard.url}/server?server={quote(server)}", "Server")
                if server != IMG_MODEL:
                    assert page.get_by_text(f"{server}", exact=False).count() > 0
                assert_not_injected(page, f"the server page of {server}")
        finally:
            browser.close()
    assert any(b"__pwned=1</script>" in frame for frame in frames)  # the model names reached the browser
    assert dashboard.trap.hits == [], "a markdown image in a server's words made the browser fetch it"
