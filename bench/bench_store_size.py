"""Store size per server-day: specwatch's SQLite history beside Prometheus's TSDB, same simulated servers.

specwatch: ``python -m sim history``'s writer fills a store with SPECWATCH_BENCH_STORE_SERVERS (20) demo
servers × 24 h at the default retentions (raw 6 h, 1 min tier 48 h, the rest 7 d); measured is the file after
a WAL checkpoint, and per table (``dbstat``), from which the steady state of a server kept a week follows.

Prometheus: the same scenario's servers, scraped every 5 s as a live Prometheus would (SGLang's own decode-log
windows, every sample of the full ``/metrics`` body plus ``instance`` and ``job`` labels), written as
OpenMetrics text with timestamps and turned into real TSDB blocks by ``promtool tsdb create-blocks-from
openmetrics``: Prometheus's compacted on-disk format. A full body is ~556 samples (82 KB of text), so this
part runs SPECWATCH_BENCH_STORE_PROM_SERVERS (2) servers × SPECWATCH_BENCH_STORE_PROM_HOURS (4) h and scales
chunks by time; the index (one per 2 h block here) is counted once per block, as a running Prometheus keeps
it. Its head block and WAL (the last ~2–3 h, uncompressed in the WAL) come on top of the blocks.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from sim.fill import fill_store
from sim.scenario import expand_servers, load_scenario
from sim.server import SimServer

DAY_S = 86_400.0
STEP_S = 5.0
BLOCK_S = 7200.0  # promtool writes 2 h blocks (Prometheus's smallest compaction range)
END_TS = 1_767_225_600.0  # 2026-01-01T00:00Z: block-aligned, so the Prometheus span fills whole blocks
# A store kept a week at the default retentions holds, of each table, this many times what the 24 h fill holds
# (raw rows: 6 h either way; the 1 min tier 48 h; the rest 7 d; latest rows, recipes: the same).
WEEK_OVER_FILL = {"rollup_60": 2.0, "rollup_300": 7.0, "rollup_900": 7.0, "rollup_3600": 7.0, "events": 7.0}


def _specwatch(folder: Path, servers: int) -> dict[str, object]:
    path = folder / "history.sqlite"
    started = time.process_time()
    fill_store(path, servers=servers, hours=24, raw_hours=6.0, end_ts=END_TS)
    fill_cpu_s = time.process_time() - started
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    per_table: dict[str, int] = {}  # an index counts with its table
    for table, size in db.execute(
        "SELECT COALESCE(m.tbl_name, s.name), SUM(s.pgsize) FROM dbstat AS s "
        "LEFT JOIN sqlite_master AS m ON m.name = s.name GROUP BY 1"
    ):
        per_table[str(table)] = int(size)
    db.close()
    file_bytes = path.stat().st_size
    # A week at the default retentions: what the 24 h fill holds of each table, times its retention over that.
    week = sum(size * WEEK_OVER_FILL.get(t, 1.0) for t, size in per_table.items())
    return {
        "specwatch_servers": servers,
        "specwatch_fill_cpu_s": round(fill_cpu_s, 1),
        "specwatch_file_bytes": file_bytes,
        "specwatch_bytes_per_server_day": round(file_bytes / servers),
        "specwatch_table_bytes_per_server": {t: round(s / servers) for t, s in sorted(per_table.items())},
        "specwatch_week_bytes_per_server": round(week / servers),
        "specwatch_kept_bytes_per_server_day": round(week / servers / 7.0),
    }


def _openmetrics(path: Path, servers: int, hours: float) -> int:
    """Every sample of every body the servers serve at each 5 s scrape, with timestamps; returns samples."""
    scenario = load_scenario("demo")
    specs = expand_servers(scenario, servers)
    now = [0.0]
    fleet = [
        SimServer(
            spec,
            index=i,
            seed=0,
            clock=lambda: now[0],
            boot_s=scenario.spec.boot_s,
            warmup_s=scenario.spec.warmup_s,
        )
        for i, spec in enumerate(specs)
    ]
    start = END_TS - hours * 3600.0
    written = 0
    with path.open("w") as out:
        for k in range(round(hours * 3600.0 / STEP_S)):  # [start, END_TS): whole 2 h blocks
            now[0] = k * STEP_S
            stamp = f" {start + now[0]:.3f}\n"
            for server in fleet:
                server.advance(now[0])
                if not server.listening:
                    continue  # a failed scrape stores no sample (only the target's up = 0)
                extra = f'instance="{server.name}:30000",job="sglang"'
                lines = []
                for line in server.render_body().decode().splitlines():
                    if not line or line[0] == "#":
                        continue
                    brace = line.find("{")
                    if brace < 0:
                        name, value = line.split(" ", 1)
                        lines.append(f"{name}{{{extra}}} {value}{stamp}")
                    else:
                        comma = "" if line[brace + 1] == "}" else ","
                        lines.append(f"{line[: brace + 1]}{extra}{comma}{line[brace + 1 :]}{stamp}")
                out.write("".join(lines))
                written += len(lines)
        out.write("# EOF\n")
    return written


def _prometheus(folder: Path, servers: int, hours: float) -> dict[str, object]:
    promtool = shutil.which("promtool")
    if promtool is None:
        return {"prometheus_skipped": "promtool not installed (apt-get install prometheus)"}
    text = folder / "metrics.om"
    samples = _openmetrics(text, servers, hours)
    blocks = folder / "blocks"
    started = time.monotonic()
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(text), str(blocks)],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    promtool_s = time.monotonic() - started
    chunks = index = other = 0
    block_count = 0
    for block in (p for p in blocks.iterdir() if p.is_dir()):
        block_count += 1
        for file in block.rglob("*"):
            if file.is_file():
                size = file.stat().st_size
                if file.parent.name == "chunks":
                    chunks += size
                elif file.name == "index":
                    index += size
                else:
                    other += size
    days = servers * hours / 24.0
    blocks_per_day = DAY_S / BLOCK_S
    per_server_day = (chunks + other) / days + index / block_count * blocks_per_day / servers
    return {
        "prometheus_servers": servers,
        "prometheus_hours": hours,
        "prometheus_samples": samples,
        "prometheus_samples_per_body": round(samples / (servers * hours * 3600.0 / STEP_S)),
        "openmetrics_text_bytes": text.stat().st_size,
        "promtool_wall_s": round(promtool_s, 1),
        "prometheus_blocks": block_count,
        "prometheus_chunk_bytes": chunks,
        "prometheus_index_bytes": index,
        "prometheus_bytes_per_sample": round((chunks + index + other) / samples, 2),
        "prometheus_bytes_per_server_day": round(per_server_day),
    }


def main() -> dict[str, object]:
    servers = int(os.environ.get("SPECWATCH_BENCH_STORE_SERVERS", "20"))
    prom_servers = int(os.environ.get("SPECWATCH_BENCH_STORE_PROM_SERVERS", "2"))
    prom_hours = float(os.environ.get("SPECWATCH_BENCH_STORE_PROM_HOURS", "4"))
    with tempfile.TemporaryDirectory() as tmp:
        result = _specwatch(Path(tmp), servers)
        result.update(_prometheus(Path(tmp), prom_servers, prom_hours))
    ours, theirs = result["specwatch_bytes_per_server_day"], result.get("prometheus_bytes_per_server_day")
    kept = result["specwatch_kept_bytes_per_server_day"]
    if isinstance(ours, int) and isinstance(theirs, int) and isinstance(kept, int):
        result["prometheus_over_specwatch_24h_store"] = round(theirs / ours, 2)
        result["prometheus_over_specwatch_week_kept"] = round(theirs / kept, 2)
    return result
