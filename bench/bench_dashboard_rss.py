"""Dashboard memory as a user gets it: `streamlit run app.py` on a 1,000-server store, every page at every
range opened in Debian's chromium (Playwright), the server process's RSS read from /proc after each.

``bench pages`` measures the same pages through AppTest (script times, a cold rerun after every cache is
cleared, three runs each): its peak RSS is that harness's. Here the process is the one `make run` starts,
with `--no-collector` (a viewer of a store another process writes); a stand-in collector appends one cycle
for every server every scrape interval (stamped now), so the 15 min range reads a live raw window.

Phases, in one server process: start (imports only), the Alerts page (the floor with the runtime and a
session), Fleet and Server at every range (the pages the 1,000-server targets name), then Context, Capacity
and Recipes at every range. Reported: RSS after each page view and the peak (VmHWM) after each phase.

Store: SPECWATCH_BENCH_PAGES_STORE=PATH reuses the store ``bench pages`` keeps (filled and grown to 1,000
servers); without it one is filled here as ``bench pages`` does (minutes).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import bench_pages
from collectors.store.sqlite_store import SqliteStore
from tests.loopback import CHROMIUM, CHROMIUM_ARGS, free_port, stop_group, wait_healthy
from views.menu import PAGES

SERVERS = 1000
PHASES = (("fleet_server", ("fleet", "server")), ("analysis", ("context", "capacity", "recipes")))
RANGES = bench_pages.RANGES
TARGET_RSS_MB = bench_pages.TARGET_RSS_MB
PAGE_TIMEOUT_MS = 120_000
ROOT = Path(__file__).resolve().parents[1]
TITLES = {spec.url_path: spec.title for spec in PAGES}


def _status_mb(pid: int) -> tuple[float, float]:
    """VmRSS and VmHWM of ``pid`` in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _collector(store_path: Path, stop: Any) -> None:
    """One cycle for every server every scrape interval, stamped now (what a live collector writes)."""
    store = SqliteStore(store_path)
    try:
        while not stop.wait(bench_pages.STEP_S):
            bench_pages.scrape_cycles(store, [time.time()])
    finally:
        store.close()


def _store() -> Path:
    kept = os.environ.get("SPECWATCH_BENCH_PAGES_STORE")
    if kept and Path(kept).exists():
        return Path(kept)
    path = Path(kept) if kept else Path(tempfile.mkdtemp(prefix="specwatch-bench-rss-")) / "history.sqlite"
    bench_pages._fill(path)
    bench_pages._grow(path, range(1, SERVERS // bench_pages.BASE_SERVERS))
    return path


def main() -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    store_path = _store()
    bench_pages._catch_up(store_path)
    folder = Path(tempfile.mkdtemp(prefix="specwatch-bench-rss-"))
    config = folder / "viewer.yaml"
    config.write_text(
        yaml.safe_dump(
            {"scrape": {"interval_s": bench_pages.STEP_S, "timeout_s": 3}, "store": {"path": str(store_path)}}
        )
    )
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    collector = context.Process(target=_collector, args=(store_path, stop))
    collector.start()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        str(Path(sys.executable).with_name("streamlit")), "run", "app.py", "--server.address", "127.0.0.1",
        "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--", "--config", str(config), "--no-collector",
    ]  # fmt: skip
    log = folder / "streamlit.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    result: dict[str, object] = {"servers": SERVERS, "store_mb": round(store_path.stat().st_size / 1e6)}
    views: dict[str, object] = {}
    try:
        wait_healthy(url, server, log)
        result["started_rss_mb"] = round(_status_mb(server.pid)[0])
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1200})

            sidebar = page.locator('[data-testid="stSidebar"]')

            def settle() -> None:
                page.wait_for_selector('[data-testid="stApp"]', timeout=PAGE_TIMEOUT_MS)
                page.wait_for_timeout(400)  # the rerun starts
                page.wait_for_selector(
                    '[data-testid="stStatusWidget"]', state="detached", timeout=PAGE_TIMEOUT_MS
                )
                page.wait_for_timeout(400)

            def view(title: str, range_key: str) -> dict[str, object]:
                """One tab, as a user clicks: the page in the menu, then the range in the sidebar."""
                started = time.perf_counter()
                page.get_by_role("link", name=re.compile(f"{title}$")).click()  # the menu, at the top
                settle()
                sidebar.locator("button", has_text=re.compile(f"^{range_key}$")).click()
                settle()
                page.get_by_role("heading", name=title).first.wait_for(timeout=PAGE_TIMEOUT_MS)
                rss, peak = _status_mb(server.pid)
                return {
                    "seconds": round(time.perf_counter() - started, 1),
                    "rss_mb": round(rss),
                    "peak_mb": round(peak),
                    "exceptions": page.locator('[data-testid="stException"]').count(),
                }

            page.goto(f"{url}/alerts?range=15m")
            settle()
            views["alerts_15m"] = view("Alerts", "15m")
            result["floor_rss_mb"] = views["alerts_15m"]["rss_mb"]  # type: ignore[index]
            for phase, names in PHASES:
                for name in names:
                    for range_key in RANGES:
                        views[f"{name}_{range_key}"] = view(TITLES[name], range_key)
                result[f"peak_rss_after_{phase}_mb"] = round(_status_mb(server.pid)[1])
            browser.close()
    finally:
        stop_group(server)
        stop.set()
        collector.join(timeout=30)
    result["views"] = views
    result["exceptions"] = sum(int(str(v["exceptions"])) for v in views.values() if isinstance(v, dict))
    result["target_rss_mb"] = TARGET_RSS_MB
    result["met"] = {
        "fleet_server": float(str(result["peak_rss_after_fleet_server_mb"])) < TARGET_RSS_MB,
        "every_page": float(str(result["peak_rss_after_analysis_mb"])) < TARGET_RSS_MB,
    }
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
