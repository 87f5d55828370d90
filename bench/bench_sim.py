"""Simulated-fleet benchmark: what 500 simulated servers cost while a collector scrapes them, and what a long
synthetic history costs.

The fleet runs in its own process (``python -m sim``) so its CPU is measured apart from the scraper's; scrapes
use Prometheus 2.x's Accept header, gzip and keep-alive, 500 targets every 5 s. Baselines from the same run:
one bare prometheus_client render of the same body (what any exporter pays per scrape), and building the
history's snapshot objects from constant signals (the floor of any history synthesis).
"""

from __future__ import annotations

import gzip
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench.measure import process_cpu_s
from collectors.model import Signals, TargetSnapshot
from config import load_config
from sim.fleet import SimFleet
from sim.sampler import synthesize_history

SERVERS = 500
INTERVAL_S = 5.0
ROUNDS = 6
WORKERS = 16
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
HISTORY = {"servers": 200, "duration_s": 6 * 3600.0, "step_s": 5.0}


def _start_fleet_process(folder: Path) -> tuple[subprocess.Popen[str], list[str], float]:
    config = folder / "fleet.yaml"
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "sim", "--servers", str(SERVERS), "--write-config", str(config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("serving"):
            break
    else:
        raise RuntimeError(f"python -m sim exited with {process.wait()} before serving")
    threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
    urls = [target.url + "/metrics" for target in load_config(config).targets]
    return process, urls, time.perf_counter() - started


def _scrape_round(urls: list[str], pool: ThreadPoolExecutor, sessions: list[requests.Session]) -> list[float]:
    """Scrape every target once; each worker keeps its own targets (one keep-alive connection per target)."""

    def scrape(worker: int) -> list[float]:
        latencies = []
        for url in urls[worker :: len(sessions)]:
            started = time.perf_counter()
            response = sessions[worker].get(url, headers={"Accept": PROMETHEUS_ACCEPT}, timeout=10)
            response.raise_for_status()
            latencies.append(time.perf_counter() - started)
        return latencies

    return [latency for part in pool.map(scrape, range(len(sessions))) for latency in part]


def serving_cost() -> dict[str, object]:
    """500 simulated servers scraped every 5 s: CPU of the simulator process, against a bare render."""
    with tempfile.TemporaryDirectory() as tmp:
        process, urls, startup_s = _start_fleet_process(Path(tmp))
        try:
            pool, sessions = ThreadPoolExecutor(WORKERS), [requests.Session() for _ in range(WORKERS)]
            _scrape_round(urls, pool, sessions)  # first scrape: warm-up windows, connections
            cpu0, wall0 = process_cpu_s(process.pid), time.perf_counter()
            time.sleep(INTERVAL_S)
            idle_cores = (process_cpu_s(process.pid) - cpu0) / (time.perf_counter() - wall0)
            samples: list[float] = []
            cpu0, wall0 = process_cpu_s(process.pid), time.perf_counter()
            for round_index in range(ROUNDS):
                samples += _scrape_round(urls, pool, sessions)
                time.sleep(max(0.0, wall0 + (round_index + 1) * INTERVAL_S - time.perf_counter()))
            scraping_cpu, scraping_wall = process_cpu_s(process.pid) - cpu0, time.perf_counter() - wall0
            cpu0 = process_cpu_s(process.pid)
            _scrape_round(urls, pool, sessions)  # straight after: mostly the same window, served from cache
            cached_cpu = process_cpu_s(process.pid) - cpu0
            pool.shutdown()
        finally:
            process.terminate()
            exit_code = process.wait(timeout=30)
    latencies = sorted(samples)
    per_scrape_ms = scraping_cpu / len(samples) * 1e3
    render_ms, template_ms, body_bytes, gzip_bytes = _render_baseline()
    return {
        "servers": SERVERS,
        "startup_wall_s": round(startup_s, 2),
        "idle_cores": round(idle_cores, 4),
        "scrape_interval_s": INTERVAL_S,
        "cores_while_scraped": round(scraping_cpu / scraping_wall, 3),
        "cpu_ms_per_scrape": round(per_scrape_ms, 2),
        "cpu_ms_per_cached_scrape": round(cached_cpu / len(urls) * 1e3, 2),
        "baseline_prometheus_client_render_ms": round(render_ms, 2),
        "template_render_ms": round(template_ms, 2),
        "scrape_vs_render_ratio": round(per_scrape_ms / render_ms, 3),
        "latency_p50_ms": round(latencies[len(latencies) // 2] * 1e3, 1),
        "latency_p99_ms": round(latencies[math.ceil(0.99 * len(latencies)) - 1] * 1e3, 1),
        "body_kb": round(body_bytes / 1024, 1),
        "gzip_kb": round(gzip_bytes / 1024, 1),
        "exit_code_on_sigterm": exit_code,
    }


def _render_baseline() -> tuple[float, float, int, int]:
    """Best of 30: one bare prometheus_client render (OpenMetrics) of a simulated server's families — what any
    exporter pays per scrape — and the simulator's template render of the same body."""
    server = SimFleet("demo").servers[0]
    server.advance(60.0)
    body = server.render_body(PROMETHEUS_ACCEPT)
    assert body == server.render_direct(PROMETHEUS_ACCEPT)
    timings = []
    for render in (server.render_direct, server.render_body):
        best = math.inf
        for _ in range(30):
            started = time.perf_counter()
            render(PROMETHEUS_ACCEPT)
            best = min(best, time.perf_counter() - started)
        timings.append(best * 1e3)
    return timings[0], timings[1], len(body), len(gzip.compress(body, compresslevel=1))


def history_cost() -> dict[str, object]:
    """The views' fixture: 200 servers × 6 h at 5 s (864,000 snapshots), against building those objects."""
    started = time.process_time()
    snapshots, events, recipes = synthesize_history(
        "demo",
        servers=int(HISTORY["servers"]),
        duration_s=HISTORY["duration_s"],
        step_s=HISTORY["step_s"],
        end_ts=1_800_000_000.0,
    )
    history_s = time.process_time() - started
    count = len(snapshots)
    started = time.process_time()
    signals = Signals(accept_length=2.5, running=32.0, state_pool_usage=0.6, kv_usage=0.1)
    floor = [
        TargetSnapshot(f"k3-{i % 200:03d}", float(i), True, None, signals, "r-x", "east")
        for i in range(count)
    ]
    floor_s = time.process_time() - started
    del floor
    up = [s.signals.accept_length for s in snapshots if s.up and s.signals.accept_length is not None]
    return {
        "history_snapshots": count,
        "history_events": len(events),
        "history_recipes": len(recipes),
        "history_cpu_s": round(history_s, 1),
        "history_us_per_snapshot": round(history_s / count * 1e6, 1),
        "baseline_object_floor_cpu_s": round(floor_s, 2),
        "history_vs_floor_ratio": round(history_s / floor_s, 1),
        "history_mean_accept_length": round(statistics.fmean(up), 3),
    }


def main() -> dict[str, object]:
    return {**serving_cost(), **history_cost()}


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
