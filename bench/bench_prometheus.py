"""Fleet benchmark of the Prometheus source: load what the Fleet and Server pages need for 500 servers × 6 h
from a real Prometheus (history backfilled with ``promtool tsdb create-blocks-from openmetrics``) versus the
embedded SQLite store holding the same fleet, both measured in this run.

Knobs (environment): SPECWATCH_BENCH_PROM_SERVERS (500), SPECWATCH_BENCH_PROM_HOURS (6),
SPECWATCH_BENCH_PROM_INTERVAL_S (15: Prometheus's scrape interval), SPECWATCH_BENCH_SQLITE_INTERVAL_S (5).
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import requests

from bench.measure import best_s
from collectors.errors import CollectorError
from collectors.history import HistoryReader
from collectors.model import SIGNAL_NAMES, Recipe
from collectors.prometheus.promql_history import PrometheusHistory
from collectors.prometheus.promql_source import PrometheusSource
from collectors.prometheus.recording_rules import render_rules
from collectors.sample_columns import SAMPLE_TEXTS, SAMPLE_VALUES
from collectors.store.sqlite_store import SqliteStore
from config import Config, Target, parse_config
from views.fleet_frames import FLEET_SERIES_SIGNALS

FLEET_POINTS = 150  # views.pages.fleet.FLEET_SERIES_POINTS: the Fleet chart's points per target
SERVER_POINTS = 1500  # views.page_context.MAX_POINTS_PER_SERIES: a Server page's points
EXTRA_LABELS = 'model_name="kimi-k3",speculative_algorithm="DSPARK",speculative_dspark_block_size="3"'
RECIPE = Recipe.from_flags(
    {"model": "kimi-k3", "speculative_algorithm": "DSPARK", "speculative_dspark_block_size": 3}
)


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _shape(index: int, ts: np.ndarray) -> dict[str, np.ndarray]:
    """One server's signals over time: a daily-ish load wave with a per-server phase (deterministic)."""
    phase = (index * 0.61803) % 1.0 * 2 * math.pi
    wave = np.sin(2 * math.pi * ts / 3600.0 + phase)
    running = np.round(32 + 14 * wave)
    accept = 2.55 + 0.25 * np.cos(2 * math.pi * ts / 5400.0 + phase)
    tpot = 0.028 + 0.006 * wave
    full = 0.24 + 0.08 * wave
    return {
        "running": running,
        "accept": accept,
        "tpot": tpot,
        "full": full,
        "mamba": np.minimum(running / 49, 1),
    }


def _series(index: int, ts: np.ndarray, interval_s: float) -> Iterator[tuple[str, str, np.ndarray]]:
    """(name, extra labels, values) of every series the signals read, as Prometheus stores SGLang's."""
    s = _shape(index, ts)
    tok_s = s["running"] / s["tpot"]
    gen = np.cumsum(tok_s * interval_s)
    yield "num_running_reqs", "tp_rank", s["running"]
    yield "num_queue_reqs", "tp_rank", np.maximum(s["running"] - 40, 0)
    yield "gen_throughput", "tp_rank", tok_s
    yield "full_token_usage", "tp_rank", s["full"]
    yield "mamba_usage", "tp_rank", s["mamba"]
    yield "token_usage", "tp_rank", np.maximum(s["full"], s["mamba"])
    yield "decode_sum_seq_lens", "tp_rank", s["running"] * 9100
    yield "cache_hit_rate", "tp_rank", np.full_like(ts, 0.41)
    yield "spec_accept_length", "tp_rank", s["accept"]
    yield "spec_accept_rate", "tp_rank", (s["accept"] - 1) / 3
    yield "max_total_num_tokens", "tp_rank", np.full_like(ts, 1_562_306)
    yield "kv_used_tokens", "tp_rank", s["full"] * 1_562_306
    yield "num_retracted_requests_total", "tp_rank", np.floor(np.arange(len(ts)) / 240)
    yield "queue_time_seconds_sum", "tp_rank", np.cumsum(np.maximum(s["running"] - 40, 0) * 0.5)
    yield "queue_time_seconds_count", "tp_rank", np.arange(len(ts)) * 2.0
    yield "generation_tokens_total", "", gen
    yield "spec_verify_calls_total", "", np.cumsum(tok_s * interval_s / s["accept"])
    yield "prompt_tokens_total", "", gen * 8
    yield "cached_tokens_total", "", gen * 8 * 0.41
    yield "num_requests_total", "", gen / 1024
    yield "inter_token_latency_seconds_sum", "", np.cumsum(tok_s * interval_s * s["tpot"])
    yield "inter_token_latency_seconds_count", "", gen
    yield "time_to_first_token_seconds_sum", "", np.arange(len(ts)) * 0.9
    yield "time_to_first_token_seconds_count", "", np.arange(len(ts)) * 1.0


def write_openmetrics(out: IO[str], servers: int, ts: np.ndarray, interval_s: float) -> int:
    """The fleet's history as OpenMetrics with timestamps (promtool's backfill input); returns samples."""
    stamps = [str(int(t)) for t in ts]
    samples = 0
    for index in range(servers):
        instance = f'instance="k3-{index:03d}:30000",job="sglang"'
        for name, kind, values in _series(index, ts, interval_s):
            labels = instance + (',tp_rank="0"' if kind else "")
            if name == "num_running_reqs":
                labels += "," + EXTRA_LABELS  # recipes from --extra-metric-labels, as a Prometheus fleet has
            prefix = f"sglang_{name}{{{labels}}} "
            out.write("".join(f"{prefix}{v:.6g} {t}\n" for v, t in zip(values.tolist(), stamps, strict=True)))
            samples += len(stamps)
        for name, value in (("up", 1.0), ("scrape_duration_seconds", 0.012)):
            out.write("".join(f"{name}{{{instance}}} {value} {t}\n" for t in stamps))
            samples += len(stamps)
    out.write("# EOF\n")
    return samples


def fill_sqlite(path: Path, servers: int, ts: np.ndarray) -> int:
    """The same fleet in the embedded store's schema, one row per target per cycle (as the collector writes).

    Rows go in with one executemany per target (the store's own ``append`` is measured in bench_history).
    """
    store = SqliteStore(path)  # creates the schema
    store.put_recipe(RECIPE, float(ts[0]))
    store.close()
    columns = ["ts", "target", "up", "error", "recipe_id", "deployment", "scrape_duration_s", *SIGNAL_NAMES]
    sql = f"INSERT INTO samples ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"  # noqa: S608
    db = sqlite3.connect(path)
    with db:
        for index in range(servers):
            s = _shape(index, ts)
            signals = {
                "accept_length": s["accept"],
                "tokens_per_verify": s["accept"],
                "spec_accept_rate": (s["accept"] - 1) / 3,
                "tpot_s": s["tpot"],
                "step_latency_s": s["accept"] * s["tpot"],
                "output_tok_s": s["running"] / s["tpot"],
                "per_request_tok_s": 1 / s["tpot"],
                "running": s["running"],
                "queued": np.maximum(s["running"] - 40, 0),
                "max_running": np.full_like(ts, 48),
                "state_pool_usage": s["mamba"],
                "kv_usage": s["full"],
                "token_usage": np.maximum(s["full"], s["mamba"]),
                "avg_context_tokens": np.full_like(ts, 9100),
                "cache_hit_rate": np.full_like(ts, 0.41),
                "retractions_per_s": np.zeros_like(ts),
                "ttft_s": np.full_like(ts, 0.9),
                "queue_time_s": np.full_like(ts, 0.25),
            }
            fixed = (f"k3-{index:03d}:30000", 1, None, RECIPE.recipe_id, "", 0.012)
            values = np.column_stack([ts, *(signals[name] for name in SIGNAL_NAMES)]).tolist()
            db.executemany(sql, ((row[0], *fixed, *row[1:]) for row in values))
    db.close()
    return servers * len(ts)


def _pages(
    store: HistoryReader, start: float, end: float, interval_s: float, servers: int
) -> dict[str, Callable[[], Any]]:
    """What the two pages call on a cold cache (views.data), for one server of the fleet."""
    one = [f"k3-{min(7, servers - 1):03d}:30000"]

    def fleet() -> None:
        latest = store.latest_columns(end - 4 * interval_s)
        series = store.read_columns(start, end, FLEET_SERIES_SIGNALS, FLEET_POINTS)
        assert len(latest) > 0
        assert len(series) > 0

    def server() -> None:
        history = store.read_columns(start, end, SAMPLE_VALUES, SERVER_POINTS, one, texts=SAMPLE_TEXTS)
        store.read_events(start, end, one)
        store.recipes()
        assert len(history) > 0

    return {"fleet_page": fleet, "server_page": server}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _start_prometheus(workdir: Path, tsdb: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
    config = workdir / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
    port = _free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/-/ready", timeout=1).status_code == 200:
                return process, url
        except requests.RequestException:
            pass
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"prometheus did not become ready: {(workdir / 'prometheus.log').read_text()[-2000:]}")


def _config(url: str, interval_s: float, store_path: Path) -> Config:
    return parse_config(
        {
            "source": "prometheus",
            "scrape": {"interval_s": interval_s, "timeout_s": min(interval_s, 60)},
            "store": {"path": str(store_path)},
            "prometheus": {"url": url, "selector": 'job="sglang"', "timeout_s": 120},
        }
    )


def _measure_prometheus(
    url: str, work: Path, start: float, end: float, interval_s: float, recorded: bool, servers: int
) -> dict[str, float]:
    """Best-of-3 seconds of each page read through PrometheusHistory (raw series, or recorded ones)."""
    config = _config(url, interval_s, work / "meta.sqlite")
    if recorded and config.prometheus is not None:
        prometheus = config.prometheus.model_copy(update={"use_recording_rules": True})
        config = config.model_copy(update={"prometheus": prometheus})
    source = PrometheusSource(config, recipe_fetcher=_no_server_info, clock=lambda: end)
    history = PrometheusHistory(config, source=source, clock=lambda: end)
    label = "prometheus_recorded" if recorded else "prometheus"
    times: dict[str, float] = {}
    try:
        for name, page in _pages(history, start, end, interval_s, servers).items():
            page()  # warm the page cache of the TSDB files once, as a running Prometheus has it
            times[f"{label}_{name}_s"] = round(best_s(page), 3)
    finally:
        history.close()
    return times


def _no_server_info(target: Target) -> Recipe:
    raise CollectorError(f"{target.name}: /server_info is not read in the benchmark")


def main() -> dict[str, object]:
    servers = int(_env("SPECWATCH_BENCH_PROM_SERVERS", 500))
    hours = _env("SPECWATCH_BENCH_PROM_HOURS", 6)
    prom_interval = _env("SPECWATCH_BENCH_PROM_INTERVAL_S", 15)
    sqlite_interval = _env("SPECWATCH_BENCH_SQLITE_INTERVAL_S", 5)
    end = math.floor(time.time() / 3600) * 3600.0 - 3600  # whole hours in the past: backfill-friendly
    start = end - hours * 3600
    result: dict[str, object] = {"servers": servers, "hours": hours}
    with tempfile.TemporaryDirectory(prefix="specwatch-bench-prom-") as tmp:
        work = Path(tmp)
        # Prometheus: OpenMetrics history → TSDB blocks → a real server on them.
        prom_ts = np.arange(start, end + 1, prom_interval)
        started = time.perf_counter()
        with (work / "fleet.om").open("w") as out:
            samples = write_openmetrics(out, servers, prom_ts, prom_interval)
        result["openmetrics_write_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet",
             str(work / "fleet.om"), str(work / "tsdb")],
            check=True,
            capture_output=True,
        )  # fmt: skip
        result["promtool_backfill_s"] = round(time.perf_counter() - started, 1)
        (work / "fleet.om").unlink()
        result["prometheus_samples"] = samples
        result["prometheus_tsdb_mib"] = round(_dir_bytes(work / "tsdb") / 2**20, 1)
        process, url = _start_prometheus(work, work / "tsdb")
        try:
            # The exported recording rules, backfilled over the same hours by promtool (as a Prometheus
            # that had loaded them would have recorded them).
            rules = work / "rules.yml"
            rules.write_text(render_rules(_config(url, prom_interval, work / "meta.sqlite")))
            started = time.perf_counter()
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "rules", "--quiet", f"--url={url}",
                 f"--start={int(start)}", f"--end={int(end)}", f"--eval-interval={int(prom_interval)}s",
                 f"--output-dir={work / 'recorded'}", str(rules)],
                check=True,
                capture_output=True,
            )  # fmt: skip
            result["promtool_rules_backfill_s"] = round(time.perf_counter() - started, 1)
        finally:
            process.terminate()
            process.wait(timeout=30)
        for block in (work / "recorded").iterdir():
            if block.is_dir():
                block.rename(work / "tsdb" / block.name)
        result["prometheus_tsdb_with_recorded_mib"] = round(_dir_bytes(work / "tsdb") / 2**20, 1)
        process, url = _start_prometheus(work, work / "tsdb")
        try:
            # Raw and recorded reads alternate, so both see the same machine load.
            for _ in range(2):
                for recorded in (False, True):
                    for key, seconds in _measure_prometheus(
                        url, work, start, end, prom_interval, recorded, servers
                    ).items():
                        result[key] = min(seconds, float(str(result.get(key, seconds))))
        finally:
            process.terminate()
            process.wait(timeout=30)

        # The embedded store: the same fleet at the collector's interval (and at Prometheus's, same density).
        for label, interval in (("sqlite", sqlite_interval), ("sqlite_same_interval", prom_interval)):
            path = work / f"{label}.sqlite"
            started = time.perf_counter()
            rows = fill_sqlite(path, servers, np.arange(start, end + 1, interval))
            result[f"{label}_fill_s"] = round(time.perf_counter() - started, 1)
            store = SqliteStore(path)
            result[f"{label}_rows"] = rows
            try:
                for name, page in _pages(store, start, end, interval, servers).items():
                    page()
                    result[f"{label}_{name}_s"] = round(best_s(page), 3)
            finally:
                store.close()
            result[f"{label}_mib"] = round(
                sum(p.stat().st_size for p in work.glob(f"{label}.sqlite*")) / 2**20, 1
            )
    for page_name in ("fleet_page", "server_page"):
        for prom_label in ("prometheus", "prometheus_recorded"):
            prom = float(str(result[f"{prom_label}_{page_name}_s"]))
            for label in ("sqlite", "sqlite_same_interval"):
                baseline = float(str(result[f"{label}_{page_name}_s"]))
                result[f"{page_name}_{prom_label}_over_{label}"] = round(prom / baseline, 2)
    return result
