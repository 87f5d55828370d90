"""Every page from the fleet's Prometheus and VictoriaMetrics beside the embedded store: 1,000 servers ×
15 min, 24 h and 7 d, cold / warm / live, measured in one run.

The three backends hold the same simulated fleet (``BASE_SERVERS`` demo-scenario servers, each cloned to
make ``SERVERS``): the embedded store as ``bench_pages`` fills it (raw rows every 5 s for 6 h, rollup tiers
to 7 d); Debian's Prometheus 2.42 and VictoriaMetrics 1.79 with SGLang's own series backfilled every 60 s and
the recording rules' series beside them (``bench/prom_data.py``: how, and what it costs), then scraping the
live fleet every 15 s (``bench/prom_live.py``) with the rules evaluated live (Prometheus's rule files;
vmalert for VictoriaMetrics). The engines read a hard-linked copy of the kept data, so the live samples of
one run never reach the next.

Each page runs through AppTest in a child process per backend (as ``bench_pages``): "warm" a rerun, "live"
the rerun after the next scrape landed with the caches keyed by the interval or the window cleared (the
interval at which the page's window steps: everything re-read and redrawn), "steady" the rerun in the next
interval with the window where the last render left it (at 24 h and 7 d: what the window keys is kept; a
window step on the way is rendered unmeasured), "cold" every cache cleared (the page's, the history's
result cache: a restarted dashboard). ``interval_cpu_s`` is the CPU per interval averaged over the
intervals: "live" at the share of them where the window steps (``window_step_share``), "steady" at the
rest. Live and steady renders come at least an interval after the last render ended, as a live panel's
reruns do: each then pays the interval's source cycle, as a running dashboard does once per interval. Per
render: wall and CPU seconds of the dashboard process, the engine's CPU (/proc; net of its CPU
with no page reading, measured for 30 s first: its live scrapes and rules), the PromQL queries sent and
the answer bytes read, and the bytes sent to the browser. Ratios: each engine's cold time over the
embedded store's, same page and range, same run.

Knobs (environment): SPECWATCH_BENCH_PROM_DATA (/tmp/specwatch-bench-prom: kept data, extended to now on
the next run), SPECWATCH_BENCH_PROM_SERVERS (1000), SPECWATCH_BENCH_PROM_PAGES (fleet,server,context,
capacity,recipes,slo), SPECWATCH_BENCH_PROM_RANGES (15m,24h,7d), SPECWATCH_BENCH_PROM_BACKENDS (embedded,
victoria-metrics,prometheus), SPECWATCH_BENCH_PROM_RUNS (3), SPECWATCH_BENCH_PROM_HOURS (168: the engines'
history; the embedded store always holds bench_pages' week), SPECWATCH_BENCH_PROM_QUERY_LOG (a path: each
engine's queries, one line each, to ``PATH.<backend>``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from queue import Empty
from typing import Any

import requests
import yaml

from bench import bench_pages, prom_data
from bench.measure import peak_rss_mb
from bench.prom_engines import (
    Engine,
    cpu_seconds,
    free_port,
    live_scrape,
    start_prometheus,
    start_victoria,
    start_vmalert,
)
from bench.prom_live import LiveExporter, LiveFleet
from collectors.prometheus import slo_rules
from collectors.prometheus.queries import signal_queries
from collectors.prometheus.recording_rules import rule_groups
from collectors.prometheus.slo_rules import window_name
from collectors.slo import build_slos
from config import Config, parse_config
from views.data import PER_INTERVAL_TTL_S
from views.page_context import MAX_POINTS_PER_SERIES, TIME_RANGES, quantised_window

_free_port = free_port  # bench_scrape_vs_prometheus starts its engines on one of these
SERVERS = 1000
BASE_SERVERS = bench_pages.BASE_SERVERS  # the same base fleet the embedded store clones
HISTORY_H = 7 * 24.0
BACKFILL_STEP_S = 60.0  # Prometheus's default scrape interval: the backfilled week
INTERVAL_S = 15.0  # the live scrapes, the rules' evaluation and the dashboard's refresh
RATE_WINDOW_S = 4 * BACKFILL_STEP_S  # four samples of the backfilled history in every rate window
DOWNSAMPLE_S = 300.0  # prometheus.downsample_s: its default
PAGES = ("fleet", "server", "context", "capacity", "recipes", "slo")
RANGES = ("15m", "24h", "7d")
BACKENDS = ("embedded", "victoria-metrics", "prometheus")
RUNS = 3
TARGET_RATIO = 2.0
TARGET_FLEET_COLD_S = 1.0
TARGET_LIVE_CPU_S = 0.2
# The SLOs of config/default.yaml (their buckets are in the backfilled series: sim.series_history).
SLOS = [
    {"name": "ttft-4s", "sli": {"kind": "ttft", "threshold_s": 4}, "objective": 0.99},
    {
        "name": "tpot-40ms-long-context",
        "sli": {"kind": "tpot", "threshold_s": 0.04},
        "objective": 0.99,
        "match": {"tier": "long-context"},
    },
    {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999},
]
EMBEDDED_STALE_S = 3600.0  # an embedded store whose newest row is older is filled again


def _listed(name: str, default: Sequence[str]) -> list[str]:
    return [s.strip() for s in os.environ.get(name, "").split(",") if s.strip()] or list(default)


# -- the backends --------------------------------------------------------------------------------------------
def _embedded(root: Path, servers: int) -> tuple[Path, dict[str, object]]:
    """The embedded store of ``bench_pages`` at ``servers``, kept in ``root``, filled again once stale."""
    path = root / "embedded.sqlite"
    report: dict[str, object] = {}
    newest = _newest_row(path)
    if newest is None or time.time() - newest > EMBEDDED_STALE_S:
        for stale in root.glob("embedded.sqlite*"):
            stale.unlink()
        report.update(bench_pages._fill(path))
        started = time.perf_counter()
        bench_pages._grow(path, range(1, servers // BASE_SERVERS))
        report["grow_s"] = round(time.perf_counter() - started, 1)
    else:
        report["reused"] = True
    report.update(bench_pages._catch_up(path))
    report["store_mb"] = round(path.stat().st_size / 1e6)
    return path, report


def _newest_row(path: Path) -> float | None:
    if not path.exists():
        return None
    import sqlite3

    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT MAX(ts) FROM latest_samples").fetchone()
    finally:
        db.close()
    return float(row[0]) if row and row[0] is not None else None


def _linked_copy(source: Path, target: Path) -> Path:
    """A hard-linked copy (the engines write only new files; a block or part is never changed in place)."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)
    return target


def _engine_settings(url: str, store: Path) -> dict[str, object]:
    return {
        "source": "prometheus",
        "scrape": {"interval_s": INTERVAL_S, "timeout_s": 10},
        "store": {"path": str(store)},
        "prometheus": {
            "url": url,
            "selector": prom_data.SELECTOR,
            "timeout_s": 120,
            "rate_window_s": RATE_WINDOW_S,
            "downsample_s": DOWNSAMPLE_S,
            "use_recording_rules": True,
        },
        "slos": SLOS,
    }


def _recording_rules(config: Config) -> str:
    """The exported recording rules the engines evaluate live: the signals' (as the backfill recorded them:
    this selector and rate window) and the SLOs' (``export rules`` without its alerts: nobody is paged)."""
    queries = signal_queries(config)
    groups = rule_groups(queries)["groups"]
    for slo in build_slos(config):
        groups += slo_rules.recording_groups(slo, queries, interval_s=INTERVAL_S)
    return yaml.safe_dump({"groups": groups}, sort_keys=False, width=10_000)


def _engine_config(path: Path, url: str, store: Path) -> Path:
    path.write_text(yaml.safe_dump(_engine_settings(url, store)))
    return path


def _embedded_config(path: Path, store: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "scrape": {"interval_s": bench_pages.STEP_S, "timeout_s": 3},
                "store": {"path": str(store)},
                "slos": SLOS,
            }
        )
    )
    return path


# -- one backend's page cases, in a child process ----------------------------------------------------------
def _runs(
    make: Callable[[], Any],
    before: Callable[[Any], None] | None,
    runs: int,
    engine_pid: int | None,
    idle_cores: float = 0.0,
    spaced_s: float | None = None,
) -> dict[str, float]:
    """Medians over ``runs`` reruns (after a first run that imports, starts and fills the caches): script
    wall and CPU seconds, the engine's CPU (net of ``idle_cores``: its own scrapes and rules), queries and
    answer bytes per render. ``spaced_s``: each render starts at least that long after the last one ended
    (whoever ran it), as a live panel's reruns are an interval apart: the Prometheus history reads its
    source cycle at most once per interval of monotonic time, and a render sooner than that would reuse
    the last one's cycle and leave its ~0.1 s of CPU out."""
    from collectors.prometheus.client import QUERY_STATS

    at = make()
    at.run(timeout=300)
    bench_pages.SCRIPT_TIMES.clear()
    bench_pages.SCRIPT_CPU.clear()
    engine_cpu: list[float] = []
    queries: list[int] = []
    answer_bytes: list[int] = []
    for _ in range(runs):
        if before is not None:
            before(at)
        if spaced_s is not None and bench_pages.SCRIPT_ENDED:
            time.sleep(max(0.0, spaced_s - (time.monotonic() - bench_pages.SCRIPT_ENDED[-1])))
        sent, read = QUERY_STATS.snapshot()
        engine_before = cpu_seconds(engine_pid) if engine_pid else 0.0
        started = time.monotonic()
        at.run(timeout=300)
        if engine_pid:
            time.sleep(0.05)  # the engine finishes writing its answer's last bytes
            # Net of what the engine spends anyway (its scrapes and rules) over the render's wall time.
            spent = cpu_seconds(engine_pid) - engine_before
            engine_cpu.append(max(spent - idle_cores * (time.monotonic() - started), 0.0))
        sent_after, read_after = QUERY_STATS.snapshot()
        queries.append(sent_after - sent)
        answer_bytes.append(read_after - read)
    if at.exception:
        raise RuntimeError(f"page raised: {at.exception[0].value}")
    return {
        "s": statistics.median(bench_pages.SCRIPT_TIMES),
        "cpu_s": statistics.median(bench_pages.SCRIPT_CPU),
        "engine_cpu_s": statistics.median(engine_cpu) if engine_cpu else 0.0,
        "queries": statistics.median(queries),
        "answer_kb": statistics.median(answer_bytes) / 1024,
        "browser_kb": bench_pages._tree_bytes(at._tree) / 1024,
    }


def _case(
    config: Path,
    page: str,
    range_key: str,
    runs: int,
    landed: Callable[[], None],
    engine_pid: int | None,
    idle_cores: float,
    interval_s: float,
) -> dict[str, object]:
    from streamlit.testing.v1 import AppTest

    from views import data

    def make() -> AppTest:
        argv = ["--config", str(config), "--page", page, "--no-collector"]
        at = AppTest.from_function(bench_pages._app_script, kwargs={"argv": argv}, default_timeout=300)
        at.query_params["range"] = range_key
        if page in ("server", "capacity"):
            at.query_params["server"] = "demo-000"
        return at

    def scrape_lands(_: Any) -> None:
        landed()
        data.clear_interval_caches()

    def steady(at: Any) -> None:
        _steady_interval(at, landed, TIME_RANGES[range_key][1], interval_s)

    stepped = window_step_share(TIME_RANGES[range_key][1], interval_s)
    out: dict[str, object] = {}
    cpu_s: dict[str, float] = {}
    kinds: list[tuple[str, Callable[[Any], None] | None]] = [("warm", None), ("live", scrape_lands)]
    if stepped < 1.0:
        kinds.append(("steady", steady))
    kinds.append(("cold", lambda _: data.clear_all_caches()))
    for kind, before in kinds:
        logging.getLogger("collectors.prometheus.client").info("== %s %s %s", page, range_key, kind)
        spaced_s = interval_s + 0.2 if kind in ("live", "steady") else None
        measured = _runs(make, before, runs, engine_pid, idle_cores, spaced_s)
        cpu_s[kind] = measured["cpu_s"]
        for key, value in measured.items():
            if kind != "cold" and key in ("browser_kb",):
                continue
            out[f"{kind}_{key}"] = round(value, 3 if key.endswith("_s") else 1)
    steady_cpu_s = cpu_s.get("steady", cpu_s["live"])
    out["interval_cpu_s"] = round(stepped * cpu_s["live"] + (1.0 - stepped) * steady_cpu_s, 3)
    return out


def window_step_share(range_s: float, interval_s: float) -> float:
    """The share of intervals at which a page's window steps (``PageContext.window``: one chart step,
    at least the interval) or its once-per-interval drawings expire (``data.per_interval``: 2 min): those
    re-read and redraw everything ("live"); the others re-read what changes each interval ("steady")."""
    step_s = max(interval_s, range_s / MAX_POINTS_PER_SERIES)
    return min(1.0, interval_s / min(step_s, PER_INTERVAL_TTL_S))


def _steady_interval(at: Any, landed: Callable[[], None], range_s: float, interval_s: float) -> None:
    """Wait for a scrape and the next interval in which the page's window is where the last render left
    it; a window step on the way is rendered, unmeasured (that interval is "live"'s)."""
    from views.data import tick

    def where() -> tuple[int, float]:
        now = time.time()
        window = quantised_window(now, range_s, interval_s, MAX_POINTS_PER_SERIES)
        return tick(now, interval_s), window.end_ts

    last_tick, last_end = where()
    while True:
        landed()
        now_tick, end = where()
        if end != last_end:
            at.run(timeout=300)
            last_tick, last_end = where()
        elif now_tick != last_tick:
            return
        else:  # the same interval: land the next scrape in the next one (the embedded one lands at once)
            time.sleep(max(0.05, (now_tick + 1) * interval_s - time.time()))


def _backend_cases(
    backend: str,
    config: Path,
    pages: Sequence[str],
    ranges: Sequence[str],
    runs: int,
    engine_pid: int | None,
    live: tuple[str, str] | None,
    store: Path | None,
    out: Any,
) -> None:
    """One dashboard process's cases for one backend. ``live``: (exporter URL, the engine's User-Agent
    product) to wait on for the next scrape; ``store``: the embedded store a collector appends to."""
    query_log = os.environ.get("SPECWATCH_BENCH_PROM_QUERY_LOG")
    if query_log:  # every query this backend's renders send: endpoint, seconds, bytes, step, span, PromQL
        handler = logging.FileHandler(f"{query_log}.{backend}")
        handler.setFormatter(logging.Formatter("%(relativeCreated)d %(message)s"))
        client_log = logging.getLogger("collectors.prometheus.client")
        client_log.addHandler(handler)
        client_log.setLevel(logging.DEBUG)
    context = multiprocessing.get_context("spawn")
    collector = None
    if store is not None:
        asks, done = context.Queue(), context.Queue()
        collector = context.Process(target=bench_pages._collector, args=(store, asks, done))
        collector.start()

        def landed() -> None:
            asks.put(time.time())
            done.get(timeout=60)

    else:
        assert live is not None
        exporter, agent = live

        def landed() -> None:
            seen = requests.get(f"{exporter}/scrapes", timeout=5).json().get(agent, 0)
            deadline = time.monotonic() + 4 * INTERVAL_S
            while requests.get(f"{exporter}/scrapes", timeout=5).json().get(agent, 0) == seen:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{agent} did not scrape the live fleet within {4 * INTERVAL_S:.0f} s")
                time.sleep(0.2)
            time.sleep(1.0)  # ingested

    interval_s = bench_pages.STEP_S if store is not None else INTERVAL_S  # the dashboard's scrape.interval_s
    cases: dict[str, object] = {}
    idle_cores = _idle_cores(engine_pid) if engine_pid else 0.0
    cases["engine_idle_cores"] = round(idle_cores, 3)
    try:
        for page in pages:
            for range_key in ranges:
                cases[f"{page}_{range_key}"] = _case(
                    config, page, range_key, runs, landed, engine_pid, idle_cores, interval_s
                )
    finally:
        if collector is not None:
            asks.put(None)
            collector.join()
    cases["dashboard_peak_rss_mb"] = round(peak_rss_mb())
    out.put(cases)


def _idle_cores(pid: int, seconds: float = 30.0) -> float:
    """The engine's CPU with no page reading it: its scrapes of the live fleet and its rules (the SLOs'
    long windows, the period's increase over days), cores."""
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


def _in_child(*args: object) -> dict[str, object]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_backend_cases, args=(*args, queue))
    child.start()
    try:
        while True:
            try:
                found: dict[str, object] = queue.get(timeout=5.0)
                return found
            except Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the page cases' process ended with {child.exitcode}") from None
    finally:
        child.join()


# -- the run -------------------------------------------------------------------------------------------------
def _start_engines(
    data: prom_data.Dataset, run: Path, exporter: LiveExporter, rules: Path
) -> dict[str, Engine]:
    scrape = live_scrape([exporter.netloc], INTERVAL_S)
    engines: dict[str, Engine] = {}
    engines["prometheus"] = start_prometheus(
        run / "prometheus",
        _linked_copy(data.prometheus_dir, run / "prometheus-tsdb"),
        scrape_interval_s=INTERVAL_S,
        scrape=scrape,
        rule_files=[rules],
        retention=prom_data.RETENTION,
    )
    engines["victoria-metrics"] = start_victoria(
        _linked_copy(data.victoria_dir, run / "victoria-data"), run / "victoria.log", scrape=scrape
    )
    engines["vmalert"] = start_vmalert(run / "vmalert", engines["victoria-metrics"], [rules], INTERVAL_S)
    return engines


def _wait_scraped(exporter: LiveExporter, agents: Sequence[str], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(exporter.scrapes(agent) < 2 for agent in agents):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the engines did not scrape the live fleet: {exporter.fleet.scrapes}")
        time.sleep(0.5)


def _wait_recorded(engines: dict[str, Engine], config: Config, timeout_s: float = 900.0) -> dict[str, float]:
    """Wait until each engine holds every SLO recording (each window's total, the period's too): the
    backfill holds the signals' recordings only, and a page read before a group's first evaluation (the
    period's group runs every 5 minutes) counts from the raw series, which no long-running engine does.
    Returns the seconds waited per engine (230–290 s in the runs of 2026-12-07; one run's vmalert had not
    recorded the 28-day total after 420 s, hence the longer deadline)."""
    want = {
        (f"slo:sli_total:increase{window_name(w)}", slo.name)
        for slo in build_slos(config)
        for w in (*slo_rules.windows_s(slo), slo.window_s)
    }
    expr = 'group by (__name__, sloth_slo) ({__name__=~"slo:sli_total:increase.+"})'
    started = time.monotonic()
    waited: dict[str, float] = {}
    for name in ("prometheus", "victoria-metrics"):
        engine = engines.get(name)
        if engine is None:
            continue
        while True:
            found = {
                (item["metric"]["__name__"], item["metric"].get("sloth_slo", ""))
                for item in engine.get("/api/v1/query", query=expr).json()["data"]["result"]
            }
            if want <= found:
                break
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{name} did not record {sorted(want - found)} within {timeout_s:.0f} s")
            time.sleep(5)
        waited[name] = round(time.monotonic() - started, 1)
    return waited


_AGENTS = {"prometheus": "Prometheus", "victoria-metrics": "vm_promscrape"}


def main() -> dict[str, object]:
    root = Path(os.environ.get("SPECWATCH_BENCH_PROM_DATA", "/tmp/specwatch-bench-prom"))
    servers = int(os.environ.get("SPECWATCH_BENCH_PROM_SERVERS", SERVERS))
    pages = _listed("SPECWATCH_BENCH_PROM_PAGES", PAGES)
    ranges = _listed("SPECWATCH_BENCH_PROM_RANGES", RANGES)
    backends = _listed("SPECWATCH_BENCH_PROM_BACKENDS", BACKENDS)
    runs = int(os.environ.get("SPECWATCH_BENCH_PROM_RUNS", RUNS))
    hours = float(os.environ.get("SPECWATCH_BENCH_PROM_HOURS", HISTORY_H))
    result: dict[str, object] = {"servers": servers, "history_h": hours, "runs_per_case": runs}

    started = time.perf_counter()
    shape = prom_data.Shape(servers, BASE_SERVERS, BACKFILL_STEP_S, RATE_WINDOW_S, DOWNSAMPLE_S)
    data = prom_data.prepare(root, shape, hours=hours, until_ts=time.time())
    result["engine_data"] = {
        "prepare_s": round(time.perf_counter() - started, 1),
        "backfill_step_s": BACKFILL_STEP_S,
        "samples": data.samples,
        "built_in_s_by_stage": data.seconds,
        "stretches": data.stretches,
        "prometheus_mb": round(prom_data.dir_bytes(data.prometheus_dir) / 1e6),
        "victoria_mb": round(prom_data.dir_bytes(data.victoria_dir) / 1e6),
    }
    store: Path | None = None
    if "embedded" in backends:  # bench_pages' week (minutes to fill): only when it is measured
        store, result["embedded_store"] = _embedded(root, servers)

    run = root / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    rules = run / "rules.yml"
    engine_config = parse_config(_engine_settings("http://127.0.0.1:9", run / "rules.sqlite"))
    rules.write_text(_recording_rules(engine_config))
    exporter = LiveExporter(LiveFleet(servers=servers, base_servers=BASE_SERVERS, window_s=INTERVAL_S))
    engines = _start_engines(data, run, exporter, rules)
    try:
        _wait_scraped(exporter, list(_AGENTS.values()))
        result["slo_recordings_waited_s"] = _wait_recorded(engines, engine_config)
        for backend in backends:
            if backend == "embedded":
                assert store is not None
                config = _embedded_config(run / "embedded.yaml", store)
                cases = _in_child(backend, config, pages, ranges, runs, None, None, store)
            else:
                config = _engine_config(
                    run / f"{backend}.yaml", engines[backend].url, run / f"{backend}-meta.sqlite"
                )
                live = (f"http://{exporter.netloc}", _AGENTS[backend])
                cases = _in_child(
                    backend, config, pages, ranges, runs, engines[backend].process.pid, live, None
                )
            result[backend] = cases
    finally:
        for engine in engines.values():
            engine.stop()
        exporter.stop()
    result["summary"] = _summary(result, backends, pages, ranges)
    return result


def _summary(
    result: dict[str, object], backends: Sequence[str], pages: Sequence[str], ranges: Sequence[str]
) -> dict[str, object]:
    """Cold ratios against the embedded store (same page and range, same run) and the targets."""
    summary: dict[str, object] = {}
    embedded = result.get("embedded")
    met: dict[str, bool] = {}
    for backend in backends:
        cases = result.get(backend)
        if backend == "embedded" or not isinstance(cases, dict):
            continue
        ratios: dict[str, float] = {}
        for page in pages:
            for range_key in ranges:
                case = cases.get(f"{page}_{range_key}")
                if not isinstance(case, dict):
                    continue
                if isinstance(embedded, dict) and isinstance(embedded.get(f"{page}_{range_key}"), dict):
                    baseline = float(embedded[f"{page}_{range_key}"]["cold_s"])
                    ratios[f"{page}_{range_key}"] = round(float(case["cold_s"]) / baseline, 2)
                if page == "fleet" and range_key != "15m":
                    met[f"{backend}_fleet_{range_key}_cold_under_1s"] = (
                        float(case["cold_s"]) < TARGET_FLEET_COLD_S
                    )
                if range_key == "15m":
                    met[f"{backend}_{page}_live_cpu_under_0.2s"] = (
                        float(case["live_cpu_s"]) < TARGET_LIVE_CPU_S
                    )
                else:
                    met[f"{backend}_{page}_{range_key}_interval_cpu_under_0.2s"] = (
                        float(case["interval_cpu_s"]) < TARGET_LIVE_CPU_S
                    )
        summary[f"{backend}_cold_over_embedded"] = ratios
        for key, ratio in ratios.items():
            if not key.endswith("_15m"):
                met[f"{backend}_{key}_within_2x"] = ratio <= TARGET_RATIO
    summary["met"] = met
    summary["all_met"] = all(met.values()) if met else False
    return summary
