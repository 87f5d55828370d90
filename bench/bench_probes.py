"""Probe overhead: requests and tokens per target per hour at the default probe settings, and the collector's
CPU with probes on vs off (same run, same fleet).

A simulated fleet runs in a subprocess (``python -m sim``, speed 20), so this process's CPU is the collector's
and the prober's alone. Measured: CPU per scrape cycle of the whole fleet (probes off), CPU per probe sweep
of the whole fleet at the defaults (4 context lengths, 256 new tokens), and what the servers reported
(prompt + completion tokens). Per hour at the defaults the collector runs 3600 / scrape.interval_s cycles and
3600 / probes.interval_s sweeps; the ratio is (cycles + sweeps) CPU over cycles CPU.
``SPECWATCH_BENCH_CYCLES`` and ``SPECWATCH_BENCH_SWEEPS`` override the sizes.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from collectors.probes.scheduler import ProbeScheduler
from collectors.runner import Collector
from collectors.store.probes import ProbeStore
from collectors.store.sqlite_store import SqliteStore
from config import ProbeSettings, ScrapeSettings, parse_config

SERVERS = 4
SPEED = 20.0
SCENARIO = {
    "description": "probe overhead: four steady DSpark servers",
    "warmup_s": 300,
    "recipes": {"shipped": {"speculative_dspark_block_size": 3}},
    "workloads": {"chat": {"isl": 1024, "osl": 1024, "osl_jitter": 0.3}},
    "servers": [
        {
            "name": f"k3-{i}",
            "deployment": "b",
            "recipe": "shipped",
            "workload": "chat",
            "load": {"concurrency": 16},
        }
        for i in range(SERVERS)
    ],
}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _start_fleet(folder: Path) -> tuple[subprocess.Popen[bytes], Path]:
    scenario, config = folder / "scenario.yaml", folder / "fleet.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO), encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sim",
            "--fleet",
            str(scenario),
            "--speed",
            str(SPEED),
            "--write-config",
            str(config),
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not config.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the simulated fleet did not start")
        time.sleep(0.1)
    time.sleep(0.2)  # the file is written just before the ports are announced
    return process, config


def main() -> dict[str, object]:
    cycles = int(os.environ.get("SPECWATCH_BENCH_CYCLES", "40"))
    sweeps = int(os.environ.get("SPECWATCH_BENCH_SWEEPS", "2"))
    defaults = ProbeSettings()
    scrape_interval_s = ScrapeSettings().interval_s
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        process, fleet_config = _start_fleet(folder)
        try:
            raw = yaml.safe_load(fleet_config.read_text(encoding="utf-8"))
            raw["targets"] = [{**t, "probe": True} for t in raw["targets"]]
            raw["store"] = {"path": str(folder / "history.sqlite")}
            raw["exporter"] = {"listen": None}
            raw["probes"] = {"enabled": True, "timeout_s": 60}  # every other probe setting at its default
            config = parse_config(raw)
            history = SqliteStore(config.store.path)
            collector = Collector(config, history)
            collector.run_cycle()  # warm: connections, recipes
            started = _cpu_s()
            for _ in range(cycles):
                collector.run_cycle()
            cycle_cpu_s = (_cpu_s() - started) / cycles
            scheduler = ProbeScheduler(config, collector, ProbeStore(config.store.path), own_store=True)
            results = []
            started, wall = _cpu_s(), time.monotonic()
            for _ in range(sweeps):
                results += scheduler.run_due(force=True)
            sweep_cpu_s = (_cpu_s() - started) / sweeps
            sweep_wall_s = (time.monotonic() - wall) / sweeps
            scheduler.stop()
            collector.close()
            history.close()
        finally:
            process.terminate()
            process.wait(timeout=10)
    errors = sorted({r.error for r in results if r.error})
    sent = [r for r in results if r.request_id and r.error is None]
    per_target_sweep = len(sent) / (SERVERS * sweeps)
    tokens = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in sent)  # as the servers counted
    tokens_per_target_sweep = tokens / (SERVERS * sweeps)
    sweeps_per_hour = 3600.0 / defaults.interval_s
    cycles_per_hour = 3600.0 / scrape_interval_s
    collector_cpu_h = cycles_per_hour * cycle_cpu_s
    probes_cpu_h = sweeps_per_hour * sweep_cpu_s
    return {
        "servers": SERVERS,
        "probe_defaults": defaults.model_dump(mode="json"),
        "requests_per_target_per_hour": round(per_target_sweep * sweeps_per_hour, 1),
        "tokens_per_target_per_hour": round(tokens_per_target_sweep * sweeps_per_hour),
        "budget_used_fraction": round(
            tokens_per_target_sweep * sweeps_per_hour / defaults.max_tokens_per_hour, 3
        ),
        "cpu_s_per_cycle": round(cycle_cpu_s, 5),
        "cpu_s_per_sweep_of_the_fleet": round(sweep_cpu_s, 4),
        "sweep_wall_s_at_sim_speed": round(sweep_wall_s, 2),
        "collector_cpu_s_per_hour_probes_off": round(collector_cpu_h, 2),
        "collector_cpu_s_per_hour_probes_on": round(collector_cpu_h + probes_cpu_h, 2),
        "cpu_ratio_on_vs_off": round((collector_cpu_h + probes_cpu_h) / collector_cpu_h, 4),
        "probe_errors": errors,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
