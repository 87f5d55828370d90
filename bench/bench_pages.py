"""Dashboard benchmark: page script time and bytes per page on 200 simulated servers × 6 h of 5 s history.

Each page runs through AppTest (the script a browser session runs, without the browser); times are measured
inside the script. Baseline (same run): the cheapest dashboard page — one 1,000-point Altair chart and one
200-row table from memory — so a ratio says how many such pages a real page costs.
"warm" = a rerun within the scrape interval (cached reads hit: every tab but the first); "new interval" = the
interval-keyed reads miss (the first rerun after each scrape; long-range fleet reads refresh in the
background); "cold" = every cache cleared (the first visitor after a start). Bytes = the protobuf size of
every element the page sends (charts and tables as Arrow), i.e. the websocket payload of one full run.
"""

from __future__ import annotations

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
from sim.history import synthesize_history
from views import data

SERVERS = 200
HISTORY_S = 6 * 3600.0
STEP_S = 5.0
RUNS = 9
TARGET_RERUN_S = 0.5
TARGET_BYTES = 2_000_000
PAGES = ("fleet", "server", "context", "capacity", "recipes", "alerts")  # every page of views/menu.py
RANGES = ("15m", "1h", "6h", "24h")  # every range of the picker but 7 d


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
    started = time.perf_counter()
    snapshots, events, recipes = synthesize_history(
        "demo", servers=SERVERS, duration_s=HISTORY_S, step_s=STEP_S, end_ts=time.time()
    )
    synthesized = time.perf_counter() - started
    store = SqliteStore(store_path)
    for recipe in recipes.values():
        store.put_recipe(recipe, snapshots[0].ts)
    store.append(snapshots)
    store.add_events(events)
    store.close()
    return {
        "samples": float(len(snapshots)),
        "synthesize_s": round(synthesized, 1),
        "write_s": round(time.perf_counter() - started - synthesized, 1),
    }


def main() -> dict[str, object]:
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
            "servers": SERVERS,
            "history_h": HISTORY_S / 3600,
            "history_samples": int(history["samples"]),
            "fill_s": {"synthesize": history["synthesize_s"], "write": history["write_s"]},
            "runs_per_case": RUNS,
            "baseline_rerun_s": round(baseline_s, 4),
        }
        worst_rerun, worst_bytes = 0.0, 0
        for page in PAGES:
            for range_key in RANGES:

                def make(page: str = page, range_key: str = range_key) -> AppTest:
                    argv = ["--config", str(config), "--page", page, "--no-collector"]
                    at = AppTest.from_function(_app_script, kwargs={"argv": argv}, default_timeout=120)
                    at.query_params["range"] = range_key
                    if page == "server":
                        at.query_params["server"] = "demo-000"
                    return at

                warm, at = _time_runs(make)
                interval, _ = _time_runs(make, data.clear_interval_caches)
                cold, _ = _time_runs(make, st.cache_data.clear)
                sent = _tree_bytes(at._tree)
                worst_rerun = max(worst_rerun, warm, interval)
                worst_bytes = max(worst_bytes, sent)
                result[f"{page}_{range_key}"] = {
                    "warm_rerun_s": round(warm, 4),
                    "new_interval_rerun_s": round(interval, 4),
                    "cold_rerun_s": round(cold, 4),
                    "warm_vs_baseline": round(warm / baseline_s, 1),
                    "new_interval_vs_baseline": round(interval / baseline_s, 1),
                    "cold_vs_baseline": round(cold / baseline_s, 1),
                    "bytes_sent": sent,
                    "charts": len(at.get("vega_lite_chart")),
                }
        result["targets"] = {"rerun_s": TARGET_RERUN_S, "bytes": TARGET_BYTES}
        result["met"] = {"rerun": worst_rerun < TARGET_RERUN_S, "bytes": worst_bytes < TARGET_BYTES}
        return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
