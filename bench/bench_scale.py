"""The embedded store past 1,000 servers: one collector (``python -m collectors``, then the production daemon
``python -m alerts run``: collector + alert rules) scraping 5,000 loopback servers every 5 s on this box.

The simulator cannot serve 5,000 servers and leave the collector a core (README: 0.28–0.35 cores at 500), so
the fleet here is pre-rendered: TEMPLATES simulated K3 servers (``sim``'s demo scenario, real SGLang 0.5.23
bodies) are advanced one scrape interval at a time and each /metrics body (plain and gzipped, as
prometheus_client answers ``Accept-Encoding: gzip``) is kept; server *i* answers template *i* mod TEMPLATES's
body of the interval it is in, so every target's counters advance as a live server's do. A child process
serves them (asyncio, one listening port per server, keep-alive) and counts the /metrics requests; the bench
reads the collector's and the fleet's CPU from /proc (utime + stime) over a window after a warm-up.

Reported per phase: the collector's cores and CPU per server-scrape, the fleet's cores, scrapes requested
vs expected, cycles completed (the collector's own ``specwatch_cycles``) and the last cycle's wall time, rows
stored for the window (up and down) vs expected, rows dropped or pending (the store falling behind), peak
RSS, and the store's growth per hour. "Landed" = every expected scrape reached a server and its row is
in the store with ``up = 1``.

Measured 2026-12-03 (two runs, the box at load 7–17 from other work; README's Benchmarks table and
docs/prometheus.md "Past 1,000 servers"): 1.0–1.2 ms of collector CPU per server-scrape, 0.9 at 2,500; the
collector got 0.3–0.45 cores and made 27–43% of the scrapes at 5,000, 67% at 2,500, storing every one it made.
A 5,000-target cycle is 4.8–5.1 CPU s in one Python thread: at 5 s that is the whole core one process can use.

Knobs (environment): SPECWATCH_BENCH_SCALE_SERVERS (5000, or a list: 2500,5000),
SPECWATCH_BENCH_SCALE_INTERVAL_S (5), SPECWATCH_BENCH_SCALE_WINDOW_S (60), SPECWATCH_BENCH_SCALE_WARMUP_S (30,
after the collector's first two cycles), SPECWATCH_BENCH_SCALE_PHASES (collector,daemon).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from contextlib import closing
from pathlib import Path

import requests
import yaml

from bench.bench_prometheus import _free_port
from bench.loopback import Answer, keep_alive, listen
from bench.measure import peak_rss_mb, process_cpu_s, stop

SERVERS = 5000
TEMPLATES = 25
INTERVAL_S = 5.0
TIMEOUT_S = 3.0
KEEPING_UP = 0.99  # a phase where fewer scrapes than this share landed did not keep up
TARGET_CORES = 1.0
ROOT = Path(__file__).resolve().parents[1]


# -- the pre-rendered fleet (child process) ------------------------------------------------------------------
def _response(body: bytes, content_type: str, gzipped: bool = False) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    if gzipped:
        head += "Content-Encoding: gzip\r\n"
    return head.encode() + b"\r\n" + body


Bodies = list[list[tuple[bytes, bytes]]]  # per template, per interval: the plain and the gzipped answer


def _render(steps: int, interval_s: float) -> tuple[Bodies, list[bytes], list[dict[str, str]]]:
    """Per template and interval: the /metrics answer (plain, gzipped); per template: /server_info; and
    the template's target labels."""
    from sim.scenario import expand_servers, load_scenario
    from sim.server import SimServer

    now = [0.0]
    scenario = load_scenario("demo")
    servers = [
        SimServer(spec, index=i, seed=0, clock=lambda: now[0], warmup_s=scenario.spec.warmup_s)
        for i, spec in enumerate(expand_servers(scenario, TEMPLATES))
    ]
    bodies: Bodies = [[] for _ in servers]
    for step in range(steps):
        now[0] = step * interval_s
        for index, server in enumerate(servers):
            reply = server.handle("GET", "/metrics", {"accept": "text/plain;version=0.0.4"})
            if reply.status != 200:
                raise RuntimeError(f"template {server.name} answered {reply.status} at {now[0]} s")
            kind = reply.headers["Content-Type"]
            bodies[index].append(
                (_response(reply.body, kind), _response(gzip.compress(reply.body, 6), kind, gzipped=True))
            )
    infos = [
        _response(server.handle("GET", "/server_info", {}).body, "application/json") for server in servers
    ]
    labels = [{"deployment": server.deployment} for server in servers]
    return bodies, infos, labels


async def _serve(count: int, steps: int, interval_s: float) -> None:
    bodies, infos, labels = _render(steps, interval_s)
    not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    scrapes = array("q", [0]) * count
    started = time.monotonic()

    def answer_of(index: int) -> Answer:
        template = index % TEMPLATES
        steps_of = bodies[template]

        def answer(path: bytes, head: bytes) -> bytes:
            if path == b"/metrics":
                step = min(int((time.monotonic() - started) / interval_s), len(steps_of) - 1)
                plain, zipped = steps_of[step]
                scrapes[index] += 1
                return zipped if b"gzip" in head.lower() else plain
            if path in (b"/server_info", b"/get_server_info"):
                return infos[template]
            return not_found

        return answer

    ports = await listen((keep_alive(answer_of(i)) for i in range(count)), backlog=256)
    print(json.dumps({"ports": ports, "labels": [labels[i % TEMPLATES] for i in range(count)]}), flush=True)
    loop = asyncio.get_running_loop()

    def commands() -> None:  # one line in, one JSON line out: the scrape counts so far
        for _ in sys.stdin:
            print(json.dumps({"scrapes": sum(scrapes), "targets_scraped": sum(1 for n in scrapes if n)}))
            sys.stdout.flush()
        loop.call_soon_threadsafe(done.set)

    done = asyncio.Event()
    threading.Thread(target=commands, daemon=True).start()
    await done.wait()  # until stdin closes
    sys.stdout.flush()
    os._exit(0)  # keep-alive connections may still be open: no orderly teardown of 5,000 handlers to wait for


class Fleet:
    """The pre-rendered fleet's process: its ports, its CPU, its scrape counts."""

    def __init__(self, count: int, steps: int, interval_s: float) -> None:
        self.interval_s = interval_s
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_scale", "--serve", str(count), str(steps), str(interval_s)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        started = json.loads(self.process.stdout.readline())
        self.ports: list[int] = started["ports"]
        self.labels: list[dict[str, str]] = started["labels"]

    def scrapes(self) -> int:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("count\n")
        self.process.stdin.flush()
        return int(json.loads(self.process.stdout.readline())["scrapes"])

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


# -- the measured process ------------------------------------------------------------------------------------
def _config(fleet: Fleet, folder: Path, exporter_port: int) -> Path:
    config = {
        "scrape": {"interval_s": fleet.interval_s, "timeout_s": min(TIMEOUT_S, fleet.interval_s)},
        "targets": [
            {"name": f"k3-{i:04d}", "url": f"http://127.0.0.1:{port}", "labels": fleet.labels[i]}
            for i, port in enumerate(fleet.ports)
        ],
        "store": {"path": str(folder / "history.sqlite")},
        "exporter": {"listen": f"127.0.0.1:{exporter_port}"},
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _start(phase: str, config: Path, log: Path) -> subprocess.Popen[bytes]:
    command = ["collectors"] if phase == "collector" else ["alerts", "run"]
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", *command, "--config", str(config)],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def _exported(port: int) -> dict[str, float]:
    """The collector's own cycle counter, last cycle duration and store backlog from its /metrics."""
    wanted = (
        "specwatch_cycles_total",
        "specwatch_cycle_duration_seconds",
        "specwatch_store_pending_rows",
        "specwatch_store_dropped_rows_total",
    )
    started = time.monotonic()
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=120).text
    out: dict[str, float] = {"exporter_wall_s": time.monotonic() - started}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[name] = float(value)
    return out


def _rows(store: Path, start_ts: float, end_ts: float) -> tuple[int, int]:
    """(up rows, down rows) stored with ts in [start, end)."""
    with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        db.execute("PRAGMA busy_timeout = 10000")
        found = dict(
            db.execute(
                "SELECT up, COUNT(*) FROM samples WHERE ts >= ? AND ts < ? GROUP BY up", (start_ts, end_ts)
            ).fetchall()
        )
    return int(found.get(1, 0)), int(found.get(0, 0))


def _wait_cycles(process: subprocess.Popen[bytes], port: int, cycles: int, log: Path) -> None:
    """Until the collector's /metrics says ``cycles`` cycles ran (a loaded box may take a minute)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the measured process exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if _exported(port).get("specwatch_cycles_total", 0) >= cycles:
                return
        except requests.RequestException:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"no {cycles} cycles within 600 s: {log.read_text(errors='replace')[-2000:]}")


def _phase(phase: str, fleet: Fleet, warmup_s: float, window_s: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="specwatch-bench-scale-") as tmp:
        folder = Path(tmp)
        exporter_port = _free_port()
        process = _start(phase, _config(fleet, folder, exporter_port), folder / "collector.log")
        try:
            started = time.monotonic()
            _wait_cycles(process, exporter_port, 2, folder / "collector.log")  # connected, recipes read
            startup_s = time.monotonic() - started
            time.sleep(warmup_s)
            before = _exported(exporter_port)
            cpu0, fleet0, scrapes0 = (
                process_cpu_s(process.pid),
                process_cpu_s(fleet.process.pid),
                fleet.scrapes(),
            )
            t0, wall0 = time.monotonic(), time.time()
            time.sleep(window_s)
            cpu1, fleet1, scrapes1 = (
                process_cpu_s(process.pid),
                process_cpu_s(fleet.process.pid),
                fleet.scrapes(),
            )
            t1, wall1 = time.monotonic(), time.time()
            after = _exported(exporter_port)
            collector_peak_rss_mb = peak_rss_mb(process.pid)
            time.sleep(fleet.interval_s + 1)  # the window's last cycle written before counting its rows
            # Each row carries the time its scrape answered: the window's rows ≈ its scrapes.
            up_rows, down_rows = _rows(folder / "history.sqlite", wall0, wall1)
        finally:
            stop(process, timeout_s=60)
        store_bytes = sum(p.stat().st_size for p in folder.glob("history.sqlite*"))
        log = (folder / "collector.log").read_text(errors="replace")
    span_s = t1 - t0
    count = len(fleet.ports)
    nan = float("nan")  # a value the collector's /metrics did not have yet (no cycle finished)
    cycles = after.get("specwatch_cycles_total", nan) - before.get("specwatch_cycles_total", nan)
    scrapes = scrapes1 - scrapes0
    cpu = cpu1 - cpu0
    expected = count * span_s / fleet.interval_s
    return {
        "startup_s": round(startup_s, 1),
        "cores": round(cpu / span_s, 3),
        "cpu_ms_per_scrape": round(1000 * cpu / max(scrapes, 1), 3),
        "fleet_cores": round((fleet1 - fleet0) / span_s, 3),
        "scrapes": scrapes,
        "expected_scrapes": round(expected),
        "cycles": cycles,
        "expected_cycles": round(span_s / fleet.interval_s, 1),
        "last_cycle_wall_s": round(after.get("specwatch_cycle_duration_seconds", nan), 2),
        "own_metrics_wall_s": round(max(before["exporter_wall_s"], after["exporter_wall_s"]), 2),
        "rows_up": up_rows,
        "rows_down": down_rows,
        "rows_pending": int(after.get("specwatch_store_pending_rows", 0)),
        "rows_dropped": int(after.get("specwatch_store_dropped_rows_total", 0)),
        "overran_interval": log.count("a cycle took longer than scrape.interval_s"),
        "landed": scrapes >= KEEPING_UP * expected
        and up_rows >= KEEPING_UP * expected
        and down_rows == 0
        and not after.get("specwatch_store_dropped_rows_total", 0),
        "peak_rss_mb": round(collector_peak_rss_mb),
        "store_mb_per_hour": round(store_bytes / 1e6 * 3600 / (warmup_s + window_s), 1),
    }


def _size(
    count: int, interval_s: float, phases: list[str], warmup_s: float, window_s: float
) -> dict[str, object]:
    phase_s = warmup_s + window_s + 2 * interval_s + 10
    steps = int(len(phases) * phase_s / interval_s) + 12
    started = time.monotonic()
    fleet = Fleet(count, steps, interval_s)
    result: dict[str, object] = {"fleet_start_s": round(time.monotonic() - started, 1)}
    try:
        for phase in phases:
            result[phase] = _phase(phase, fleet, warmup_s, window_s)
    finally:
        fleet.stop()
    return result


def main() -> dict[str, object]:
    sizes = [int(s) for s in os.environ.get("SPECWATCH_BENCH_SCALE_SERVERS", str(SERVERS)).split(",") if s]
    interval_s = float(os.environ.get("SPECWATCH_BENCH_SCALE_INTERVAL_S", INTERVAL_S))
    window_s = float(os.environ.get("SPECWATCH_BENCH_SCALE_WINDOW_S", "60"))
    warmup_s = float(os.environ.get("SPECWATCH_BENCH_SCALE_WARMUP_S", "30"))
    phases = [p for p in os.environ.get("SPECWATCH_BENCH_SCALE_PHASES", "collector,daemon").split(",") if p]
    result: dict[str, object] = {
        "templates": TEMPLATES,
        "interval_s": interval_s,
        "warmup_s": warmup_s,
        "window_s": window_s,
        "load_before": os.getloadavg()[0],
    }
    met: dict[str, object] = {}
    for count in sizes:
        found = _size(count, interval_s, phases, warmup_s, window_s)
        result[f"servers_{count}"] = found
        met[f"servers_{count}"] = {
            phase: {
                "cores_le_1": float(str(found[phase]["cores"])) <= TARGET_CORES,  # type: ignore[index]
                "every_scrape_landed": bool(found[phase]["landed"]),  # type: ignore[index]
            }
            for phase in phases
        }
    result["load_after"] = os.getloadavg()[0]
    result["met"] = met
    return result


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        asyncio.run(_serve(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
    else:
        print(json.dumps(main(), indent=2))
