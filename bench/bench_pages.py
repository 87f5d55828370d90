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
"""

from __future__ import annotations

import os
import resource
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st
import yaml
from streamlit.testing.v1 import AppTest

from collectors.store.history import SqliteStore
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
TARGET_BYTES = 2_000_000
PAGES = ("fleet", "server", "context", "capacity", "recipes", "alerts")  # every page of views/menu.py
SCALE_PAGES = ("fleet", "server")  # past the smallest size: the pages the 1,000-server targets name
RANGES = ("15m", "1h", "6h", "24h", "7d")  # every range of the picker
_CLONED = ("samples", "latest_samples", *(tier.table for tier in TIERS))


# Script times recorded from inside the page script: AppTest's own polling and tree parsing stay out.
SCRIPT_TIMES: list[float] = []


def _baseline_script() -> None:
    """The cheapest dashboard page: one 1,000-point Altair line and one 200-row table, from memory."""
    import time

    import altair as alt
    import numpy as np
    import pandas as pd
    import streamlit as st

    from bench import bench_pages

    started = time.perf_counter()
    line = pd.DataFrame({"x": np.arange(1000.0), "y": np.sin(np.arange(1000.0) / 50)})
    table = pd.DataFrame({"server": [f"s{i}" for i in range(200)], "value": np.arange(200.0)})
    st.title("baseline")
    st.altair_chart(alt.Chart(line).mark_line().encode(x="x:Q", y="y:Q"), width="stretch")
    st.dataframe(table, width="stretch")
    bench_pages.SCRIPT_TIMES.append(time.perf_counter() - started)


def _app_script(argv: list[str]) -> None:
    import time

    import app
    from bench import bench_pages

    started = time.perf_counter()
    try:
        app.main(argv)
    finally:
        bench_pages.SCRIPT_TIMES.append(time.perf_counter() - started)


def _tree_bytes(node: Any) -> int:
    proto = getattr(node, "proto", None)
    size = proto.ByteSize() if proto is not None and hasattr(proto, "ByteSize") else 0
    return size + sum(_tree_bytes(child) for child in getattr(node, "children", {}).values())


def _time_runs(
    make: Callable[[], AppTest], before: Callable[[], None] | None = None
) -> tuple[float, AppTest]:
    """Median script time of RUNS reruns (after a first run that imports, starts and fills the caches)."""
    at = make()
    at.run(timeout=120)
    SCRIPT_TIMES.clear()
    for _ in range(RUNS):
        if before is not None:
            before()
        at.run(timeout=120)
    if at.exception:
        raise RuntimeError(f"page raised: {at.exception[0].value}")
    return statistics.median(SCRIPT_TIMES), at


def _fill(store_path: Path) -> dict[str, float]:
    """BASE_SERVERS × 7 d as the collector writes them, then pruned to the retention of each tier."""
    report = fill_store(store_path, servers=BASE_SERVERS, hours=HISTORY_H, raw_hours=RAW_H, step_s=STEP_S)
    store = SqliteStore(store_path)
    now = time.time()
    store.prune(now - HISTORY_H * 3600 - 3600, minute_older_than_ts=now - MINUTE_H * 3600)
    store.close()
    return {"fill_s": round(report.seconds, 1), "raw_rows": report.raw_rows}


def _grow(store_path: Path, copies: range) -> None:
    """Copy the base servers' rows under the names ``<name>~k`` for each k (the same shape, N× wider)."""
    db = sqlite3.connect(store_path)
    for table in _CLONED:
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
        picked = ", ".join("target || '~' || ?" if c == "target" else c for c in columns)
        for k in copies:
            db.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT {picked} FROM {table} "  # noqa: S608
                "WHERE instr(target, '~') = 0",
                (k,),
            )
        db.commit()
    db.close()


def _case(config: Path, page: str, range_key: str) -> dict[str, object]:
    def make() -> AppTest:
        argv = ["--config", str(config), "--page", page, "--no-collector"]
        at = AppTest.from_function(_app_script, kwargs={"argv": argv}, default_timeout=120)
        at.query_params["range"] = range_key
        if page == "server":
            at.query_params["server"] = "demo-000"
        return at

    warm, at = _time_runs(make)
    interval, _ = _time_runs(make, data.clear_interval_caches)
    cold, _ = _time_runs(make, st.cache_data.clear)
    return {
        "warm_s": round(warm, 3),
        "new_interval_s": round(interval, 3),
        "cold_s": round(cold, 3),
        "bytes_sent": _tree_bytes(at._tree),
        "charts": len(at.get("vega_lite_chart")),
    }


def main() -> dict[str, object]:
    sizes = [int(s) for s in os.environ.get("SPECWATCH_BENCH_PAGES_SIZES", "").split(",") if s] or SIZES
    with tempfile.TemporaryDirectory(prefix="specwatch-bench-pages-") as folder:
        store_path = Path(folder) / "history.sqlite"
        history = _fill(store_path)
        config = Path(folder) / "viewer.yaml"
        config.write_text(
            yaml.safe_dump(
                {"scrape": {"interval_s": STEP_S, "timeout_s": 3}, "store": {"path": str(store_path)}}
            )
        )
        baseline_s, _ = _time_runs(lambda: AppTest.from_function(_baseline_script))
        result: dict[str, object] = {
            "base_servers": BASE_SERVERS,
            "history_h": HISTORY_H,
            "fill": history,
            "runs_per_case": RUNS,
            "baseline_rerun_s": round(baseline_s, 4),
        }
        copies_done = 1
        worst: dict[str, float] = {"warm": 0.0, "cold_24h": 0.0, "cold_7d": 0.0, "live": 0.0}
        for size in sorted(sizes):
            started = time.perf_counter()
            wanted = max(1, size // BASE_SERVERS)
            _grow(store_path, range(copies_done, wanted))
            copies_done = wanted
            grown_s = time.perf_counter() - started
            cases: dict[str, object] = {
                "grow_s": round(grown_s, 1),
                "store_mb": round(store_path.stat().st_size / 1e6),
            }
            for page in PAGES if size == min(sizes) else SCALE_PAGES:
                for range_key in RANGES:
                    case = _case(config, page, range_key)
                    case["warm_vs_baseline"] = round(float(str(case["warm_s"])) / baseline_s, 1)
                    cases[f"{page}_{range_key}"] = case
                    if size == max(sizes):
                        worst["warm"] = max(worst["warm"], float(str(case["warm_s"])))
                        worst["live"] = max(worst["live"], float(str(case["new_interval_s"])))
                        if range_key == "24h":
                            worst["cold_24h"] = max(worst["cold_24h"], float(str(case["cold_s"])))
                        if range_key == "7d":
                            worst["cold_7d"] = max(worst["cold_7d"], float(str(case["cold_s"])))
            result[f"servers_{size}"] = cases
        result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        result["targets"] = {
            "warm_s": TARGET_WARM_S,
            "cold_24h_s": TARGET_COLD_S,
            "cold_7d_s": TARGET_COLD_7D_S,
            "live_refresh_s": TARGET_LIVE_S,
        }
        result["met"] = {
            "warm": worst["warm"] < TARGET_WARM_S,
            "cold_24h": worst["cold_24h"] < TARGET_COLD_S,
            "cold_7d": worst["cold_7d"] < TARGET_COLD_7D_S,
            "live_refresh": worst["live"] < TARGET_LIVE_S,
        }
        return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
