"""The ``source: prometheus`` cycle's CPU at 1,000 servers, read from Debian's VictoriaMetrics and Prometheus
as they scrape the live simulated fleet with the recording rules evaluated (``bench prometheus``'s engines,
with an hour of history): every interval the dashboard and the daemon pay this before any page draws.

Two ways of reading the cycle's ~28 instant answers, measured in the same run, alternately, on the same
engines:

- ``parsed``: each answer parsed whole (``orjson``), then keyed by target (``vector_by_target``) — the
  baseline;
- ``lean``: the client's path (``collectors/prometheus/vector.py``): only each series' labels parsed, nothing
  per series for the garbage collector to track.

Per cycle: the CPU of the threads the cycle runs on (each thread's CPU clock; the live fleet's exporter
shares the process and is left out), and the full garbage collections it set off with their seconds: in
a process with a large heap a full collection costs 0.1 s or more, and parsed answers set one off most
cycles. Knobs: SPECWATCH_BENCH_CYCLE_DATA (/tmp/specwatch-bench-cycle), SPECWATCH_BENCH_CYCLE_SERVERS
(1000), SPECWATCH_BENCH_CYCLE_CYCLES (30 per way and engine).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

from bench import bench_prometheus as bp
from bench import prom_data
from bench.prom_live import LiveExporter, LiveFleet
from collectors.prometheus import client as client_module
from collectors.prometheus.promql_source import PrometheusSource
from config import parse_config

SERVERS = 1000
CYCLES = 30
HISTORY_H = 1.0
_CYCLE_THREADS = ("MainThread", "specwatch", "asyncio")  # the cycle, its query pool, the HTTP loop


def _cycle_cpu_s() -> float:
    """CPU seconds so far of the threads a source cycle runs on."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.ident is not None and thread.name.startswith(_CYCLE_THREADS):
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # the thread ended in between
                continue
    return total


def _measure(source: PrometheusSource, cycles: int) -> dict[str, float]:
    full: list[float] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                full.append(time.perf_counter())
            else:
                full[-1] = time.perf_counter() - full[-1]

    cpu: list[float] = []
    gc.callbacks.append(note)
    try:
        for _ in range(cycles):
            before = _cycle_cpu_s()
            source.collect(time.time())
            cpu.append(_cycle_cpu_s() - before)
            time.sleep(0.5)
    finally:
        gc.callbacks.remove(note)
    return {
        "cpu_s_median": round(statistics.median(cpu), 4),
        "cpu_s_mean": round(statistics.mean(cpu), 4),
        "full_collections_per_cycle": round(len(full) / cycles, 2),
        "full_collection_s_per_cycle": round(sum(full) / cycles, 4),
    }


def _cycles(url: str, store: Path, cycles: int) -> dict[str, dict[str, float]]:
    source = PrometheusSource(parse_config(bp._engine_settings(url, store)))
    found: dict[str, dict[str, float]] = {}
    try:
        source.collect(time.time())  # discovery, the labels, the first /server_info reads
        source.settle_recipes(10)
        # The client falls back to parsing the whole answer when the lean read returns None.
        with mock.patch.object(client_module, "decode_vector", return_value=None):
            found["parsed"] = _measure(source, cycles)
        found["lean"] = _measure(source, cycles)
    finally:
        source.close()
    return found


def main() -> dict[str, object]:
    root = Path(os.environ.get("SPECWATCH_BENCH_CYCLE_DATA", "/tmp/specwatch-bench-cycle"))
    servers = int(os.environ.get("SPECWATCH_BENCH_CYCLE_SERVERS", SERVERS))
    cycles = int(os.environ.get("SPECWATCH_BENCH_CYCLE_CYCLES", CYCLES))
    shape = prom_data.Shape(servers, bp.BASE_SERVERS, bp.BACKFILL_STEP_S, bp.RATE_WINDOW_S, bp.DOWNSAMPLE_S)
    data = prom_data.prepare(root, shape, hours=HISTORY_H, until_ts=time.time())
    run = root / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    rules = run / "rules.yml"
    rules.write_text(
        bp._recording_rules(parse_config(bp._engine_settings("http://127.0.0.1:9", run / "r.db")))
    )
    exporter = LiveExporter(LiveFleet(servers=servers, base_servers=bp.BASE_SERVERS, window_s=bp.INTERVAL_S))
    engines = bp._start_engines(data, run, exporter, rules)
    result: dict[str, object] = {"servers": servers, "cycles_per_way": cycles}
    try:
        bp._wait_scraped(exporter, list(bp._AGENTS.values()))
        time.sleep(2 * bp.INTERVAL_S)  # the rules' first evaluations: the cycle reads the recorded series
        for name in ("victoria-metrics", "prometheus"):
            found = _cycles(engines[name].url, run / f"{name}.db", cycles)
            found["lean_over_parsed_cpu"] = {
                "ratio": round(found["lean"]["cpu_s_median"] / found["parsed"]["cpu_s_median"], 2)
            }
            result[name] = found
    finally:
        for engine in engines.values():
            engine.stop()
        exporter.stop()
    return result
