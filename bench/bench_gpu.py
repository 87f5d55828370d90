"""GPU telemetry's cost: the collector's cycle with a DCGM exporter beside every server, against the same
cycle without them, same run, same servers.

N loopback SGLang servers (the golden 0.5.23 body, /server_info with tp_size 8) and N loopback dcgm-exporters
(8 GPUs each: the simulator's rendering of the default counters plus the rest of dcgm-exporter's default
fields, so the reader skips what a real body carries) run in a subprocess; this process runs a ``Collector``
(scrape, derive, store) over them, first without ``gpu_exporter_url``, then with. Also timed alone: reading
one exporter body (``parse_gpu_exposition``) against reading one SGLang body (``parse_exposition``).
``SPECWATCH_BENCH_SERVERS`` (default 500) and ``SPECWATCH_BENCH_CYCLES`` (5) override the sizes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from bench.bench_fleet import GOLDEN
from bench.loopback import keep_alive, listen, response, routes, served, until_stdin_closes
from bench.measure import bare_fetch_cycle, cycle_stats
from collectors.direct.gpu_scrape import GPU_ACCEPT, ExporterClient, parse_gpu_exposition
from collectors.direct.metrics_reader import parse_exposition
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import Config, Target, parse_config
from sim import gpu

SERVER_INFO = {
    "served_model_name": "moonshotai/Kimi-K3",
    "version": "0.5.23",
    "tp_size": 8,
    "speculative_algorithm": "DSPARK",
    "speculative_dspark_block_size": 3,
    "max_running_requests": 48,
}
# dcgm-exporter's other default fields (etc/default-counters.csv), one series per GPU each.
OTHER_FIELDS = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)  # fmt: skip


def dcgm_body(hostname: str = "node-0", gpus: int = 8) -> bytes:
    identity = gpu.GpuIdentity(hostname, gpus, hostname)
    body = gpu.render(identity, gpu.Reading(1100.0, 9.0e8, 1.0, 0.8), 0.93).decode()
    extra = []
    for field in OTHER_FIELDS:
        extra += [f"# HELP {field} {field}.", f"# TYPE {field} gauge"]
        extra += [f"{field}{{{identity.labels(i)}}} {1000 + i}" for i in range(gpus)]
    return (body + "\n".join(extra) + "\n").encode()


async def _serve(count: int) -> None:
    sglang = {
        b"/metrics": response(GOLDEN.read_bytes(), b"text/plain; version=0.0.4; charset=utf-8"),
        b"/server_info": response(json.dumps(SERVER_INFO).encode(), b"application/json"),
    }
    exporter = {b"/metrics": response(dcgm_body(), b"text/plain; version=0.0.4; charset=utf-8")}
    ports = [await listen([keep_alive(routes(answers))] * count) for answers in (sglang, exporter)]
    print(json.dumps(ports), flush=True)
    await until_stdin_closes()


def _config(ports: list[int], exporters: list[int] | None, store_path: str) -> Config:
    targets = []
    for i, port in enumerate(ports):
        target: dict[str, object] = {"name": f"k3-{i:03d}", "url": f"http://127.0.0.1:{port}"}
        if exporters is not None:
            target["gpu_exporter_url"] = f"http://127.0.0.1:{exporters[i]}"
        targets.append(target)
    return parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": 3},
            "targets": targets,
            "store": {"path": store_path},
            "exporter": {"listen": None},
            "cost": {"gpu_hour_usd": 2.5},
        }
    )


def _cycles(
    config: Config, store_path: Path, cycles: int, server_pid: int
) -> tuple[dict[str, float], object]:
    store = SqliteStore(store_path)
    with Collector(config, store) as collector:
        collector.run_cycle()  # connects, reads every /server_info
        stats = cycle_stats(collector.run_cycle, cycles, server_pid)
        last = collector.latest()
    store.close()
    return stats, last


def _parse_us(body: bytes, parse: object, rounds: int = 2000) -> float:
    started = time.process_time()
    for _ in range(rounds):
        parse(body)  # type: ignore[operator]
    return (time.process_time() - started) / rounds * 1e6


def main() -> dict[str, object]:
    count = int(os.environ.get("SPECWATCH_BENCH_SERVERS", "500"))
    cycles = int(os.environ.get("SPECWATCH_BENCH_CYCLES", "5"))
    body = dcgm_body()
    gpu_parse_us = _parse_us(body, parse_gpu_exposition)
    sglang_parse_us = _parse_us(GOLDEN.read_bytes(), parse_exposition)
    with served("bench.bench_gpu", count) as (ports, server_pid):
        sglang_ports, exporter_ports = cast(list[list[int]], ports)
        with tempfile.TemporaryDirectory() as tmp:
            plain, _ = _cycles(
                _config(sglang_ports, None, f"{tmp}/a.sqlite"), Path(tmp) / "a.sqlite", cycles, server_pid
            )
            with_gpus, last = _cycles(
                _config(sglang_ports, exporter_ports, f"{tmp}/b.sqlite"),
                Path(tmp) / "b.sqlite",
                cycles,
                server_pid,
            )
        known = sum(s.signals.gpu_power_w is not None for s in last)  # type: ignore[attr-defined]
        assert known == count, f"GPU power known on {known} of {count} servers"
        # Baseline: the exporters' GETs alone, same transport and concurrency, bodies read, nothing else.
        config = _config(sglang_ports, exporter_ports, "unused")
        client = ExporterClient(config.scrape)
        exporters = [Target(name=t.name, url=str(t.gpu_exporter_url)) for t in config.targets]
        bare_cycle = bare_fetch_cycle(
            client, exporters, accept=GPU_ACCEPT, concurrency=config.scrape.concurrency
        )
        bare_cycle()
        bare_stats = cycle_stats(bare_cycle, cycles, server_pid)

    def r(value: float) -> float:
        return round(value, 4)

    return {
        "servers": count,
        "cycles": cycles,
        "gpus_per_exporter": 8,
        "exporter_body_bytes": len(body),
        "exporter_body_parse_us": round(gpu_parse_us, 1),
        "sglang_body_parse_us": round(sglang_parse_us, 1),
        "exporter_parse_ratio_vs_sglang": r(gpu_parse_us / sglang_parse_us),
        "cycle_cpu_s_without_exporters": r(plain["cpu_s_per_cycle"]),
        "cycle_cpu_s_with_exporters": r(with_gpus["cpu_s_per_cycle"]),
        "cpu_ratio_with_vs_without": r(with_gpus["cpu_s_per_cycle"] / plain["cpu_s_per_cycle"]),
        "exporters_bare_fetch_cpu_s": r(bare_stats["cpu_s_per_cycle"]),
        "added_cpu_beyond_the_fetch_s": r(
            with_gpus["cpu_s_per_cycle"] - plain["cpu_s_per_cycle"] - bare_stats["cpu_s_per_cycle"]
        ),
        "cycle_wall_s_without_exporters": r(plain["wall_s_per_cycle"]),
        "cycle_wall_s_with_exporters": r(with_gpus["wall_s_per_cycle"]),
        "cycle_wall_s_max_with_exporters": r(with_gpus["wall_s_max"]),
        "cores": os.cpu_count(),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_serve(int(sys.argv[2])))
    else:
        print(json.dumps(main(), indent=2))
