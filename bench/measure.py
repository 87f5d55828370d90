"""How the benchmarks measure: a process's CPU from /proc, the best of a few timed rounds, a collector cycle
against the loopback fleet's CPU, the bare-fetch baseline, and stopping a measured child process."""

from __future__ import annotations

import asyncio
import gc
import math
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from collectors.http.loop import HTTP_LOOP
from collectors.http.targets import TargetClient
from config import Target


def process_cpu_s(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process, from /proc (processes sharing the box are told apart)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def peak_rss_mb(pid: int | str = "self") -> float:
    """A process's peak resident set (VmHWM), MB. Not ``getrusage``'s ru_maxrss: a spawned child's starts
    at its parent's peak (kept across fork and exec), which is the benchmark's own, not the dashboard's."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def best_s(
    fn: Callable[[], object],
    rounds: int = 3,
    *,
    clock: Callable[[], float] = time.perf_counter,
    collect_first: bool = False,
) -> float:
    """The fastest of ``rounds`` calls of ``fn``, in seconds of ``clock``: the round least disturbed by the
    box's other work. ``collect_first``: collect garbage before each call (a collection left over from
    building the inputs is not the code's cost)."""
    best = math.inf
    for _ in range(rounds):
        if collect_first:
            gc.collect()
        started = clock()
        fn()
        best = min(best, clock() - started)
    return best


def cycle_stats(cycle: Callable[[], object], cycles: int, server_pid: int) -> dict[str, float]:
    """``cycles`` runs of ``cycle``: wall and CPU seconds of this process per cycle, and the loopback
    fleet's (``server_pid``) CPU per cycle."""
    walls, cpus = [], []
    server_cpu = process_cpu_s(server_pid)
    for _ in range(cycles):
        wall, cpu = time.perf_counter(), time.process_time()
        cycle()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return {
        "wall_s_per_cycle": statistics.mean(walls),
        "wall_s_max": max(walls),
        "cpu_s_per_cycle": statistics.mean(cpus),
        "server_cpu_s_per_cycle": (process_cpu_s(server_pid) - server_cpu) / cycles,
    }


def bare_fetch_cycle(
    client: TargetClient, targets: Sequence[Target], *, accept: str, concurrency: int
) -> Callable[[], None]:
    """The in-run baseline: one cycle of the same GETs of /metrics with the collector's transport and
    concurrency, bodies read, nothing else (no parse, derive or store)."""

    async def fetch_all() -> bool:
        slots = asyncio.Semaphore(concurrency)

        async def fetch(target: Target) -> int:
            async with slots:
                return len((await client.fetch(target, "/metrics", accept=accept)).body)

        return all(await asyncio.gather(*(fetch(target) for target in targets)))

    def cycle() -> None:
        assert HTTP_LOOP.run(fetch_all())

    return cycle


def stop(process: subprocess.Popen[Any], timeout_s: float = 30.0) -> None:
    """SIGTERM (an orderly shutdown), then SIGKILL if it has not exited within ``timeout_s``."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
