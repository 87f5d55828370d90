"""Scrape cost against the anchor: the same simulated fleet scraped every 5 s by the collector
(``python -m collectors``) and by a real Prometheus (Debian's), one after the other in the same run.

Three phases per size: the collector against servers that answer ``name[]`` as SGLang 0.5.23 does (empty:
the collector falls back to whole bodies), the collector against servers whose registry resolves ``name[]``
(~25 lines per body), then Prometheus (whole bodies). The fleet runs in this process; the collector and
Prometheus are child processes whose CPU (utime + stime from /proc/PID/stat) is read over a measured window
after a warm-up. Scrapes are counted where they land: the simulated servers' own /metrics request counters.
CPU per server-scrape = CPU seconds / scrapes. Prometheus stores every sample of every body; the collector
stores ~25 signals per server and cycle.

The fleet's own CPU is reported per phase (``fleet_cores``: this process), and ``kept_up`` says whether the
scraper got ≥ 95% of the expected scrapes. Until 2026-12-02 the whole-body phase at 500/1,000 servers did not
keep up (872 of 5,010 scrapes) and that was the fleet, not the collector: py-spy showed the fleet's one
event-loop thread busy ~100% of the wall time (64% rendering bodies, 28% advancing the engines) while the
collector's threads sat waiting for status lines — SGLang's ~2 s decode-log windows meant a fresh ~5 ms render
on nearly every scrape. The fleet now keeps each window ≥ ``SIM_WINDOW_S`` (a new body every 10 s), which
costs it ~0.1–0.3 cores at 1,000 servers; what the collector parses per scrape is the same whole body.

Measured 2026-12-02 (``python -m bench scrape-vs-prometheus``, 40 s windows after 30 s warm-up, 2 shared
cores): see the README's Benchmarks table. In the morning whole bodies cost 0.85–0.92 ms per server-scrape
(0.54–0.73× Prometheus); py-spy at 1,000 servers put the line-by-line parse at 45%, aiohttp at 28%. In the
evening, after the Aho-Corasick reader (``collectors/direct/metrics_reader.py``), ISA-L as aiohttp's gzip
backend (zlib's inflate had become ~18% of the busy samples) and URLs built once per target: 0.49 / 0.50–0.57
/ 0.52–0.69 ms at 100 / 500 / 1,000 servers against Prometheus's 1.34–1.66 ms, 0.30–0.42× in two runs; the
whole body now costs what the ``name[]``-filtered one does. What remains per scrape (py-spy, busy samples):
aiohttp's request cycle ~20%, the SQLite append (runner thread) ~15%, the reader ~15%, socket reads ~10%.

Knobs (environment): SPECWATCH_BENCH_SCRAPE_SIZES (100,500,1000), SPECWATCH_BENCH_SCRAPE_WINDOW_S (40),
SPECWATCH_BENCH_SCRAPE_WARMUP_S (30), SPECWATCH_BENCH_SCRAPE_SIM_WINDOW_S (80).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench.bench_prometheus import _free_port
from bench.measure import peak_rss_mb, process_cpu_s, stop
from sim.fleet import SimFleet

INTERVAL_S = 5
TIMEOUT_S = 3
# The fleet's decode-log windows last at least this long (live SGLang: ~2 s), so each server renders a new
# body every 10 s (an eighth of it) instead of on nearly every scrape: with 2 s windows one Python process
# cannot render 1,000 servers' whole bodies every 5 s, and the phase then measured the fleet, not the scraper.
SIM_WINDOW_S = 80.0
KEEPING_UP = 0.95  # a phase with fewer scrapes than this share of the expected ones is flagged
ROOT = Path(__file__).resolve().parents[1]


def _scrapes(fleet: SimFleet) -> int:
    return sum(server._http_requests[("/metrics", "GET")] for server in fleet.servers)


def _measure(
    process: subprocess.Popen[bytes], fleet: SimFleet, warmup_s: float, window_s: float
) -> dict[str, float]:
    time.sleep(warmup_s)
    if process.poll() is not None:
        raise RuntimeError(f"the measured process exited with {process.returncode} during warm-up")
    cpu0, scrapes0, t0 = process_cpu_s(process.pid), _scrapes(fleet), time.monotonic()
    fleet0 = process_cpu_s(os.getpid())
    time.sleep(window_s)
    cpu1, scrapes1, t1 = process_cpu_s(process.pid), _scrapes(fleet), time.monotonic()
    fleet1 = process_cpu_s(os.getpid())
    cpu, scrapes = cpu1 - cpu0, scrapes1 - scrapes0
    return {
        "fleet_cores": round((fleet1 - fleet0) / (t1 - t0), 3),
        "cpu_s": round(cpu, 2),
        "scrapes": scrapes,
        "expected_scrapes": round(len(fleet.servers) * (t1 - t0) / INTERVAL_S),
        "cpu_ms_per_scrape": round(1000 * cpu / max(scrapes, 1), 3),
        "kept_up": scrapes >= KEEPING_UP * len(fleet.servers) * (t1 - t0) / INTERVAL_S,
        "cores": round(cpu / (t1 - t0), 3),
        "peak_rss_mb": round(peak_rss_mb(process.pid)),
    }


def _collector(fleet: SimFleet, folder: Path) -> subprocess.Popen[bytes]:
    config = fleet.write_config(
        folder / "collector.yaml",
        scrape={"interval_s": INTERVAL_S, "timeout_s": TIMEOUT_S},
        store={"path": str(folder / "history.sqlite")},
        exporter={"listen": None},
    )
    log = (folder / "collector.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "collectors", "--config", str(config)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _prometheus(fleet: SimFleet, folder: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
    targets = ", ".join(f"'127.0.0.1:{server.port}'" for server in fleet.servers)
    config = folder / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {INTERVAL_S}s, scrape_timeout: {TIMEOUT_S}s}}\n"
        f"scrape_configs:\n  - job_name: sglang\n    static_configs:\n      - targets: [{targets}]\n"
    )
    port = _free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                return process
        except requests.RequestException:
            pass
        time.sleep(0.2)
    stop(process)
    raise RuntimeError("prometheus did not become ready")


def main() -> dict[str, object]:
    sizes = [int(s) for s in os.environ.get("SPECWATCH_BENCH_SCRAPE_SIZES", "100,500,1000").split(",") if s]
    window_s = float(os.environ.get("SPECWATCH_BENCH_SCRAPE_WINDOW_S", "40"))
    warmup_s = float(os.environ.get("SPECWATCH_BENCH_SCRAPE_WARMUP_S", "30"))
    sim_window_s = float(os.environ.get("SPECWATCH_BENCH_SCRAPE_SIM_WINDOW_S", str(SIM_WINDOW_S)))
    result: dict[str, object] = {
        "interval_s": INTERVAL_S,
        "window_s": window_s,
        "warmup_s": warmup_s,
        "sim_window_s": sim_window_s,
    }
    for size in sizes:
        fleet = SimFleet("demo", servers=size).start()
        for server in fleet.servers:
            server.set_min_window_s(sim_window_s)
        try:
            with tempfile.TemporaryDirectory(prefix="specwatch-bench-scrape-") as tmp:
                folder = Path(tmp)
                collector = _collector(fleet, folder)
                try:
                    ours = _measure(collector, fleet, warmup_s, window_s)
                finally:
                    stop(collector)
                store_bytes = sum(p.stat().st_size for p in folder.glob("history.sqlite*"))
                for server in fleet.servers:  # a registry that resolves name[]: ~25 lines per body
                    server.honours_name_filter = True
                collector = _collector(fleet, folder)
                try:
                    filtered = _measure(collector, fleet, warmup_s, window_s)
                finally:
                    stop(collector)
                prometheus = _prometheus(fleet, folder)
                try:
                    theirs = _measure(prometheus, fleet, warmup_s, window_s)
                finally:
                    stop(prometheus)
        finally:
            fleet.stop()
        result[f"servers_{size}"] = {
            "collector": ours,  # SGLang 0.5.23 answers name[] empty: whole bodies, as in production today
            "collector_name_filter_honoured": filtered,
            "prometheus": theirs,
            "cpu_per_scrape_vs_prometheus": round(
                ours["cpu_ms_per_scrape"] / max(theirs["cpu_ms_per_scrape"], 1e-9), 2
            ),
            "filtered_cpu_per_scrape_vs_prometheus": round(
                filtered["cpu_ms_per_scrape"] / max(theirs["cpu_ms_per_scrape"], 1e-9), 2
            ),
            "collector_store_bytes": store_bytes,
        }
    largest = result.get(f"servers_{max(sizes)}")
    if isinstance(largest, dict):
        result["met"] = {
            "cpu_per_scrape_le_half_prometheus": largest["cpu_per_scrape_vs_prometheus"] <= 0.5,
            "cores_at_largest_le_0.5": largest["collector"]["cores"] <= 0.5,
        }
    return result
