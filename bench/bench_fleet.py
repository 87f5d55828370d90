"""Fleet benchmark: one collector against 500 loopback servers serving the golden SGLang body.

The servers run in a subprocess (asyncio, one listening port each), so the collector's CPU and RSS are its
own. Reported per cycle: CPU seconds (all collector threads), wall seconds, and peak RSS, plus the same cycle
done as a bare fetch (the same transport: ``Fetcher`` on the scrape loop, ``scrape.concurrency`` at once, no
parse/derive/store) as the in-run baseline, and as the old transport did it (``requests`` + a thread pool).
Targets: a 500-server cycle within 2 s wall on 2 cores; peak RSS < 300 MB. ``SPECWATCH_BENCH_SERVERS`` and
``SPECWATCH_BENCH_CYCLES`` override the sizes.

2026-12-02 (``python -m bench fleet``, two runs, 2 shared cores), after the Aho-Corasick exposition reader:
0.20–0.23 s wall and 0.19–0.20 CPU s per cycle (0.37 CPU s before it the same day), 2.4–2.5× the bare fetch
(0.076–0.083 CPU s), 0.62–0.63× the old ``requests`` bare fetch; peak RSS 198–200 MB.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import requests
import requests.adapters

from bench.loopback import ROOT, keep_alive, listen, response, routes, served, until_stdin_closes
from bench.measure import bare_fetch_cycle, cycle_stats
from collectors.direct.scrape import METRICS_ACCEPT, Fetcher
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import Config, parse_config

GOLDEN = ROOT / "tests" / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
SERVER_INFO = {
    "served_model_name": "moonshotai/Kimi-K3",
    "version": "0.5.23",
    "speculative_algorithm": "DSPARK",
    "speculative_dspark_block_size": 3,
    "max_running_requests": 48,
}
TARGET_WALL_S = 2.0
TARGET_RSS_MB = 300.0


# -- the servers (subprocess) --------------------------------------------------------------------------------
async def _serve(count: int) -> None:
    responses = {
        b"/metrics": response(GOLDEN.read_bytes(), b"text/plain; version=0.0.4; charset=utf-8"),
        b"/server_info": response(json.dumps(SERVER_INFO).encode(), b"application/json"),
    }
    handle = keep_alive(routes(responses))
    print(json.dumps(await listen([handle] * count)), flush=True)
    await until_stdin_closes()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the collector (this process) ----------------------------------------------------------------------------
def _config(ports: list[int], store_path: str) -> Config:
    return parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": 3},
            "targets": [
                {"name": f"k3-{i:03d}", "url": f"http://127.0.0.1:{port}"} for i, port in enumerate(ports)
            ],
            "store": {"path": store_path},
            "exporter": {"listen": None},
        }
    )


def _requests_session(pools: int) -> requests.Session:
    """The old transport's session: keep-alive to every server (without its deadline watchdog, which only
    added to its cost)."""
    session = requests.Session()
    session.trust_env = False
    adapter = requests.adapters.HTTPAdapter(pool_connections=pools, pool_maxsize=4, max_retries=0)
    session.mount("http://", adapter)
    return session


@contextmanager
def golden_servers(count: int) -> Iterator[tuple[list[int], int]]:
    """``count`` loopback servers of the golden body in a subprocess (its CPU is its own): their ports and
    its pid."""
    with served("bench.bench_fleet", count) as (ports, pid):
        yield cast(list[int], ports), pid


def main() -> dict[str, object]:
    count = int(os.environ.get("SPECWATCH_BENCH_SERVERS", "500"))
    cycles = int(os.environ.get("SPECWATCH_BENCH_CYCLES", "5"))
    with golden_servers(count) as (ports, server_pid):
        with tempfile.TemporaryDirectory() as tmp:
            rss_before_mb = _rss_mb()
            store = SqliteStore(Path(tmp) / "history.sqlite")
            config = _config(ports, str(Path(tmp) / "history.sqlite"))
            with Collector(config, store) as collector:
                warm = time.perf_counter()
                first = collector.run_cycle()  # connects, reads every /server_info
                warmup_s = time.perf_counter() - warm
                collector_stats = cycle_stats(collector.run_cycle, cycles, server_pid)
                last = collector.latest()
            peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rows = store.count_samples()
            store.close()
        up = sum(s.up for s in last)
        assert up == count, f"only {up} of {count} targets up: {[s.error for s in last if not s.up][:3]}"
        assert all(s.signals.accept_length == 2.91 for s in first)

        bare_cycle = bare_fetch_cycle(
            Fetcher(config.scrape),
            config.targets,
            accept=METRICS_ACCEPT,
            concurrency=config.scrape.concurrency,
        )
        bare_cycle()
        baseline_stats = cycle_stats(bare_cycle, cycles, server_pid)

        # The transport before 2026-12-02: requests + a thread pool of scrape.concurrency.
        urls = [f"http://127.0.0.1:{port}/metrics" for port in ports]
        with _requests_session(count) as session, ThreadPoolExecutor(config.scrape.concurrency) as pool:

            def requests_cycle() -> None:
                def fetch(url: str) -> int:
                    return len(session.get(url, timeout=3).content)

                assert all(pool.map(fetch, urls))

            requests_cycle()
            requests_stats = cycle_stats(requests_cycle, cycles, server_pid)

    def r(value: float) -> float:
        return round(value, 3)

    return {
        "servers": count,
        "cycles": cycles,
        "concurrency": config.scrape.concurrency,
        "warmup_cycle_wall_s": r(warmup_s),
        "collector_wall_s_per_cycle": r(collector_stats["wall_s_per_cycle"]),
        "collector_wall_s_max": r(collector_stats["wall_s_max"]),
        "collector_cpu_s_per_cycle": r(collector_stats["cpu_s_per_cycle"]),
        "servers_cpu_s_per_cycle": r(collector_stats["server_cpu_s_per_cycle"]),
        "bare_fetch_wall_s_per_cycle": r(baseline_stats["wall_s_per_cycle"]),
        "bare_fetch_cpu_s_per_cycle": r(baseline_stats["cpu_s_per_cycle"]),
        "wall_ratio_vs_bare_fetch": r(
            collector_stats["wall_s_per_cycle"] / baseline_stats["wall_s_per_cycle"]
        ),
        "cpu_ratio_vs_bare_fetch": r(collector_stats["cpu_s_per_cycle"] / baseline_stats["cpu_s_per_cycle"]),
        "requests_bare_fetch_cpu_s_per_cycle": r(requests_stats["cpu_s_per_cycle"]),
        "requests_bare_fetch_wall_s_per_cycle": r(requests_stats["wall_s_per_cycle"]),
        "collector_cpu_ratio_vs_requests_bare_fetch": r(
            collector_stats["cpu_s_per_cycle"] / requests_stats["cpu_s_per_cycle"]
        ),
        "rss_before_collector_mb": round(rss_before_mb, 1),
        "peak_rss_mb": round(peak_rss_mb, 1),
        "history_rows_written": rows,
        "target_wall_s": TARGET_WALL_S,
        "target_peak_rss_mb": TARGET_RSS_MB,
        "meets_targets": collector_stats["wall_s_max"] <= TARGET_WALL_S and peak_rss_mb < TARGET_RSS_MB,
        "cores": os.cpu_count(),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_serve(int(sys.argv[2])))
    else:
        print(json.dumps(main(), indent=2))
