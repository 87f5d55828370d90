"""Dashboard benchmark: page script time and bytes per page at 200 / 500 / 1,000 servers × 15 min … 7 d.

History: ``sim.fill`` writes 7 days of BASE_SERVERS simulated servers as the collector would (raw rows for
the raw retention, rollup tiers beyond); the store is then grown to each size by copying those servers'
rows under new names (SQL, seconds), so every size reads the same shape of data a real fleet would write.

Each page runs through AppTest (the script a browser session runs, without the browser); times are measured
inside the script. Baseline (same run): the cheapest dashboard page — one 1,000-point Altair chart and one
200-row table from memory — so a ratio says how many such pages a real page costs.
"warm" = a rerun within the scrape interval (cached reads hit: every tab but the first); "new interval" = the
interval-keyed reads miss (the first rerun after each scrape; long-range fleet reads refresh in the
background); "cold" = every cache cleared (the first visitor after a start). Bytes = the protobuf size of
every element the page sends (charts and tables as Arrow), i.e. the websocket payload of one full run.
"live" = the rerun of an open page right after the collector appended one more cycle for every server (the
interval caches miss, process caches stay), in wall and CPU seconds of the dashboard process.

Before each size's cases the store is caught up to now (one cycle per scrape interval for every server, at
most the last 15 min; an older gap stays a gap), so the 15 min range reads raw rows as a live dashboard would.
The page cases of each size run in a child process of their own, so its peak RSS is the dashboard's (the
fill and the clone run in this process and are reported apart).

Knobs (environment): SPECWATCH_BENCH_PAGES_SIZES=200,1000, SPECWATCH_BENCH_PAGES_PAGES=fleet,server,
SPECWATCH_BENCH_PAGES_RANGES=24h,7d, SPECWATCH_BENCH_PAGES_RUNS=3, SPECWATCH_BENCH_PAGES_STORE=PATH (keep the
filled, grown store there and reuse it on the next run instead of filling again),
SPECWATCH_BENCH_PAGES_HISTORY_H=26 (hours of history instead of 7 d: enough for ranges up to 24 h),
SPECWATCH_BENCH_PAGES_GROW_TABLES=latest_samples,rollup_900,rollup_3600 (what the copies get; default all).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from queue import Empty
from typing import Any

import yaml
from streamlit.testing.v1 import AppTest

from bench.measure import peak_rss_mb
from collectors.store.sqlite_store import SqliteStore
from collectors.store.tiers import TIERS
from sim.fill import fill_store
from views import data

SIZES = (200, 500, 1000)
BASE_SERVERS = 50
HISTORY_H = 7 * 24.0
RAW_H = 6.0
MINUTE_H = 48.0
STEP_S = 5.0
RUNS = 3
TARGET_WARM_S = 0.5
TARGET_COLD_S = 1.0
TARGET_COLD_7D_S = 2.0
TARGET_LIVE_S = 0.2
TARGET_RSS_MB = 300.0
CATCH_UP_S = 900.0  # the store is caught up to now over at most this much (the 15 min range)
PAGES = ("fleet", "server", "context", "capacity", "recipes", "alerts")  # every page of views/menu.py
SCALE_PAGES = ("fleet", "server")  # past the smallest size: the pages the 1,000-server targets name
RANGES = ("15m", "1h", "6h", "24h", "7d")  # every range of the picker
_CLONED = ("samples", "latest_samples", *(tier.table for tier in TIERS))


# Script times recorded from inside the page script: AppTest's own polling and tree parsing stay out. CPU is
# the whole process's over the script (the reader threads' work included).
SCRIPT_TIMES: list[float] = []
SCRIPT_CPU: list[float] = []
SCRIPT_ENDED: list[float] = []  # when the last script run ended (monotonic): bench_prometheus spaces renders


def _baseline_script() -> None:
    """The cheapest dashboard page: one 1,000-point Altair line and one 200-row table, from memory."""
    import time

    import altair as alt
    import numpy as np
    import pandas as pd
    import streamlit as st

    from bench import bench_pages

    started = time.perf_counter()
    cpu = time.process_time()
    line = pd.DataFrame({"x": np.arange(1000.0), "y": np.sin(np.arange(1000.0) / 50)})
    table = pd.DataFrame({"server": [f"s{i}" for i in range(200)], "value": np.arange(200.0)})
    st.title("baseline")
    st.altair_chart(alt.Chart(line).mark_line().encode(x="x:Q", y="y:Q"), width="stretch")
    st.dataframe(table, width="stretch")
    bench_pages.SCRIPT_TIMES.append(time.perf_counter() - started)
    bench_pages.SCRIPT_CPU.append(time.process_time() - cpu)


def _app_script(argv: list[str]) -> None:
    import time

    import app
    from bench import bench_pages

    started = time.perf_counter()
    cpu = time.process_time()
    try:
        app.main(argv)
    finally:
        bench_pages.SCRIPT_TIMES.append(time.perf_counter() - started)
        bench_pages.SCRIPT_CPU.append(time.process_time() - cpu)
        bench_pages.SCRIPT_ENDED[:] = [time.monotonic()]


def _tree_bytes(node: Any) -> int:
    proto = getattr(node, "proto", None)
    size = proto.ByteSize() if proto is not None and hasattr(proto, "ByteSize") else 0
    return size + sum(_tree_bytes(child) for child in getattr(node, "children", {}).values())


def _time_runs(
    make: Callable[[], AppTest], before: Callable[[], None] | None = None, runs: int = RUNS
) -> tuple[float, float, AppTest]:
    """Median script time and CPU of ``runs`` reruns (after a first run that imports, starts and fills the
    caches)."""
    at = make()
    at.run(timeout=120)
    SCRIPT_TIMES.clear()
    SCRIPT_CPU.clear()
    for _ in range(runs):
        if before is not None:
            before()
        at.run(timeout=120)
    if at.exception:
        raise RuntimeError(f"page raised: {at.exception[0].value}")
    return statistics.median(SCRIPT_TIMES), statistics.median(SCRIPT_CPU), at


def _fill(store_path: Path, hours: float = HISTORY_H) -> dict[str, float]:
    """BASE_SERVERS × ``hours`` (7 d) as the collector writes them, then pruned to each tier's retention."""
    report = fill_store(store_path, servers=BASE_SERVERS, hours=hours, raw_hours=RAW_H, step_s=STEP_S)
    store = SqliteStore(store_path)
    now = time.time()
    store.prune(now - hours * 3600 - 3600, minute_older_than_ts=now - MINUTE_H * 3600)
    store.close()
    return {"fill_s": round(report.seconds, 1), "raw_rows": report.raw_rows}


def _grow(store_path: Path, copies: range) -> None:
    """Copy the base servers' rows under the names ``<name>~k`` for each k (the same shape, N× wider).

    Without a journal and without syncs (a bench's scratch store: a crash mid-grow means filling again): at
    5,000 servers (~35 GB) the WAL made the copy write ~5× the data and take hours; now it is disk speed."""
    if not copies:
        return
    db = sqlite3.connect(store_path)
    db.execute("PRAGMA journal_mode=DELETE")  # leave WAL: needs no other connection, as here
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-1000000")  # 1 GB of pages: the B-trees' upper levels stay cached
    for table in _grown_tables():
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
        picked = ", ".join("target || '~' || ?" if c == "target" else c for c in columns)
        for k in copies:
            db.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT {picked} FROM {table} "  # noqa: S608
                "WHERE instr(target, '~') = 0",
                (k,),
            )
            db.commit()
    db.execute("PRAGMA journal_mode=WAL")
    db.close()


def _grown_tables() -> list[str]:
    """The tables the copies get (SPECWATCH_BENCH_PAGES_GROW_TABLES, default all): the Fleet page at 24 h
    reads latest_samples and the 15 min tier, so copying only those measures it at 5,000 servers in minutes
    instead of the hours the raw and 1 min rows take (the other tables then hold the base servers only)."""
    wanted = _listed("SPECWATCH_BENCH_PAGES_GROW_TABLES", _CLONED)
    unknown = sorted(set(wanted) - set(_CLONED))
    if unknown or "latest_samples" not in wanted:
        raise ValueError(
            f"SPECWATCH_BENCH_PAGES_GROW_TABLES: latest_samples and some of {_CLONED}, not {unknown}"
        )
    return [table for table in _CLONED if table in wanted]


def _copies_held(store_path: Path) -> int:
    """How many copies of the base servers the store holds (1 = the base fleet only)."""
    db = sqlite3.connect(store_path)
    try:
        targets = int(db.execute("SELECT COUNT(*) FROM latest_samples").fetchone()[0])
    finally:
        db.close()
    return max(1, targets // BASE_SERVERS)


def scrape_cycles(store: SqliteStore, stamps: Sequence[float]) -> int:
    """Append one cycle per timestamp for every target, as the collector would (each target's newest values
    again, in time order, through ``append``: raw rows, every tier, latest_samples). Returns rows written."""
    newest = store.latest()
    written = 0
    for first in range(
        0, len(stamps), 12
    ):  # a minute of cycles per transaction: the same rows, fewer commits
        batch = [dataclasses.replace(s, ts=ts) for ts in stamps[first : first + 12] for s in newest]
        store.append(batch)
        written += len(batch)
    return written


def _catch_up(store_path: Path) -> dict[str, float]:
    """Cycles from the store's newest sample (or 15 min ago, leaving a gap) to now: the 15 min range then
    reads what a live dashboard reads."""
    started = time.perf_counter()
    store = SqliteStore(store_path)
    try:
        newest = float(str(store._query("SELECT COALESCE(MAX(ts), 0) FROM samples")[0][0]))
        now = time.time()
        first = max(newest + STEP_S, now - CATCH_UP_S)
        stamps = [first + i * STEP_S for i in range(int((now - first) // STEP_S) + 1)]
        rows = scrape_cycles(store, stamps)
    finally:
        store.close()
    return {"catch_up_rows": rows, "catch_up_s": round(time.perf_counter() - started, 1)}


def _collector(store_path: Path, requests: Any, done: Any) -> None:
    """The collector's part of a live dashboard, in a process of its own (its memory is not the pages'):
    one cycle per request, until None. Cycles stay one scrape interval apart, as a real collector's: the
    bench asks faster than real time, so a cycle may be stamped a little ahead of the clock (a window ending
    now leaves it out) rather than crowd the 15 min window with extra rows."""
    store = SqliteStore(store_path)
    try:
        newest = float(str(store._query("SELECT COALESCE(MAX(ts), 0) FROM samples")[0][0]))
        while (ts := requests.get()) is not None:
            newest = max(float(ts), newest + STEP_S)
            scrape_cycles(store, [newest])
            done.put(newest)
    finally:
        store.close()


def _case(
    config: Path, page: str, range_key: str, runs: int, scrape: Callable[[], None]
) -> dict[str, object]:
    def make() -> AppTest:
        argv = ["--config", str(config), "--page", page, "--no-collector"]
        at = AppTest.from_function(_app_script, kwargs={"argv": argv}, default_timeout=120)
        at.query_params["range"] = range_key
        if page == "server":
            at.query_params["server"] = "demo-000"
        return at

    def scrape_lands() -> None:
        scrape()
        data.clear_interval_caches()

    warm, warm_cpu, at = _time_runs(make, runs=runs)
    interval, _, _ = _time_runs(make, data.clear_interval_caches, runs=runs)
    live, live_cpu, _ = _time_runs(make, scrape_lands, runs=runs)
    cold, cold_cpu, _ = _time_runs(make, data.clear_all_caches, runs=runs)
    return {
        "warm_s": round(warm, 3),
        "warm_cpu_s": round(warm_cpu, 3),
        "new_interval_s": round(interval, 3),
        "live_s": round(live, 3),
        "live_cpu_s": round(live_cpu, 3),
        "cold_s": round(cold, 3),
        "cold_cpu_s": round(cold_cpu, 3),
        "bytes_sent": _tree_bytes(at._tree),
        "charts": len(at.get("vega_lite_chart")),
    }


def _size_cases(
    config: Path, store_path: Path, pages: Sequence[str], ranges: Sequence[str], runs: int, out: Any
) -> None:
    """One dashboard process's work at one size (run in a child: its peak RSS is the dashboard's)."""
    context = multiprocessing.get_context("spawn")
    requests, done = context.Queue(), context.Queue()
    collector = context.Process(target=_collector, args=(store_path, requests, done))
    collector.start()

    def scrape() -> None:
        requests.put(time.time())
        done.get(timeout=60)

    baseline_s, _, _ = _time_runs(lambda: AppTest.from_function(_baseline_script), runs=runs)
    cases: dict[str, object] = {"baseline_rerun_s": round(baseline_s, 4)}
    try:
        for page in pages:
            for range_key in ranges:
                case = _case(config, page, range_key, runs, scrape)
                case["warm_vs_baseline"] = round(float(str(case["warm_s"])) / baseline_s, 1)
                cases[f"{page}_{range_key}"] = case
    finally:
        requests.put(None)
        collector.join()
    cases["dashboard_peak_rss_mb"] = round(peak_rss_mb())
    out.put(cases)


def _in_child(*args: object) -> dict[str, object]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_size_cases, args=(*args, queue))
    child.start()
    try:
        while True:  # a child that died (an exception in a page) must not leave this waiting
            try:
                found: dict[str, object] = queue.get(timeout=5.0)
                return found
            except Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the page cases' process ended with {child.exitcode}") from None
    finally:
        child.join()


def _listed(name: str, default: Sequence[str]) -> list[str]:
    return [s.strip() for s in os.environ.get(name, "").split(",") if s.strip()] or list(default)


def main() -> dict[str, object]:
    sizes = sorted(int(s) for s in _listed("SPECWATCH_BENCH_PAGES_SIZES", [str(s) for s in SIZES]))
    pages_small = _listed("SPECWATCH_BENCH_PAGES_PAGES", PAGES)
    pages_scaled = [p for p in pages_small if p in SCALE_PAGES]
    ranges = _listed("SPECWATCH_BENCH_PAGES_RANGES", RANGES)
    runs = int(os.environ.get("SPECWATCH_BENCH_PAGES_RUNS", RUNS))
    kept = os.environ.get("SPECWATCH_BENCH_PAGES_STORE")
    # Past 1,000 servers a week is ~7 MB per server to copy (35 GB at 5,000): 26 h serves the 24 h range.
    history_h = float(os.environ.get("SPECWATCH_BENCH_PAGES_HISTORY_H", HISTORY_H))
    with tempfile.TemporaryDirectory(prefix="specwatch-bench-pages-") as folder:
        store_path = Path(kept) if kept else Path(folder) / "history.sqlite"
        history: dict[str, float] = {"reused": 1.0} if store_path.exists() else _fill(store_path, history_h)
        config = Path(folder) / "viewer.yaml"
        config.write_text(
            yaml.safe_dump(
                {"scrape": {"interval_s": STEP_S, "timeout_s": 3}, "store": {"path": str(store_path)}}
            )
        )
        result: dict[str, object] = {
            "base_servers": BASE_SERVERS,
            "history_h": history_h,
            "grown_tables": _grown_tables(),
            "fill": history,
            "runs_per_case": runs,
        }
        copies_done = _copies_held(store_path)
        worst: dict[str, float] = {"warm": 0.0, "cold_24h": 0.0, "cold_7d": 0.0, "live_cpu": 0.0, "rss": 0.0}
        for size in sizes:
            started = time.perf_counter()
            wanted = max(1, size // BASE_SERVERS)
            if wanted < copies_done:
                raise RuntimeError(f"the kept store {store_path} holds more than {size} servers")
            _grow(store_path, range(copies_done, wanted))
            copies_done = wanted
            cases: dict[str, object] = {"grow_s": round(time.perf_counter() - started, 1)}
            cases.update(_catch_up(store_path))
            cases["store_mb"] = round(store_path.stat().st_size / 1e6)
            pages = pages_small if size == min(sizes) else pages_scaled
            cases.update(_in_child(config, store_path, pages, ranges, runs))
            result[f"servers_{size}"] = cases
            if size == max(sizes):
                worst["rss"] = float(str(cases["dashboard_peak_rss_mb"]))
                for key, case in cases.items():
                    if not isinstance(case, dict) or key.split("_")[0] not in SCALE_PAGES:
                        continue
                    worst["warm"] = max(worst["warm"], float(case["warm_s"]))
                    if key.endswith("_15m"):
                        worst["live_cpu"] = max(worst["live_cpu"], float(case["live_cpu_s"]))
                    if key.endswith("_24h"):
                        worst["cold_24h"] = max(worst["cold_24h"], float(case["cold_s"]))
                    if key.endswith("_7d"):
                        worst["cold_7d"] = max(worst["cold_7d"], float(case["cold_s"]))
        # This process filled and cloned the store; the pages ran in children (their RSS is per size above).
        result["fill_and_clone_peak_rss_mb"] = round(peak_rss_mb())
        result["targets"] = {
            "warm_s": TARGET_WARM_S,
            "cold_24h_s": TARGET_COLD_S,
            "cold_7d_s": TARGET_COLD_7D_S,
            "live_refresh_cpu_s": TARGET_LIVE_S,
            "dashboard_rss_mb": TARGET_RSS_MB,
        }
        result["met"] = {
            "warm": worst["warm"] < TARGET_WARM_S,
            "cold_24h": worst["cold_24h"] < TARGET_COLD_S,
            "cold_7d": worst["cold_7d"] < TARGET_COLD_7D_S,
            "live_refresh_cpu": worst["live_cpu"] < TARGET_LIVE_S,
            "dashboard_rss": worst["rss"] < TARGET_RSS_MB,
        }
        return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
