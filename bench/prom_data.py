"""The Prometheus benchmark's history: a simulated fleet's SGLang series backfilled into a real Prometheus
TSDB and a real VictoriaMetrics, kept on disk and extended to now on the next run instead of rebuilt.

How it is made (``prepare``), per stretch of history (the first: the whole range; later: from where the kept
data ends to now, a fresh simulation, so counters restart there):

1. ``sim.series_history`` samples ``base_servers`` servers of the demo scenario every ``step_s`` (SGLang's own
   counters, gauges and histogram parts: what Prometheus would have scraped);
2. the base fleet goes into a scratch TSDB (``promtool tsdb create-blocks-from openmetrics``) and a Prometheus
   on it evaluates every recording rule of ``export-recording-rules`` as a range query at the evaluation
   interval — what ``promtool tsdb create-blocks-from rules`` does — so the recorded series are Prometheus's
   own answers;
3. the whole fleet is written as OpenMetrics, 2 h per file (a promtool block each), every base server cloned
   to ``servers`` (``name~k``, as ``bench_pages`` grows its store), raw and recorded series side by side, and
   backfilled with ``promtool``;
4. the new blocks go into VictoriaMetrics through its import API (``vmctl prometheus``, which reads TSDB
   blocks and posts them to ``/api/v1/import``), then into the Prometheus TSDB directory.

Only tp_rank 0 of the scheduler series is written (a TP=2 server exposes rank 1 too, and ~500 other samples
a scrape that no specwatch query reads): both engines hold fewer series than a real fleet's would, which
makes index lookups cheaper, not the samples a query reads.
"""

from __future__ import annotations

import itertools
import json
import math
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import numpy as np
import requests

from bench.prom_engines import start_prometheus, start_victoria
from collectors.prometheus import downsampled
from collectors.prometheus.queries import SignalQueries
from sim.series_history import SeriesHistory, series_history

BLOCK_S = 7200.0  # promtool's block: one OpenMetrics file per aligned 2 h
JOB = "sglang"
SELECTOR = f'job="{JOB}"'
MANIFEST = "manifest.json"
_PROMTOOL_PARALLEL = 2
# The benchmark's Prometheus keeps 15 d (its default): blocks compact up to 18 h (a tenth of it, in the
# compactor's 2 h × 3ⁿ ranges), as they would on a Prometheus that had run for a week.
RETENTION = "15d"
_TRIGGERED = "prometheus_tsdb_compactions_triggered_total"
Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Shape:
    """What a kept dataset must match to be reused."""

    servers: int
    base_servers: int
    step_s: float
    rate_window_s: float
    downsample_s: float  # the Fleet chart's downsampled recordings (a dataset from before them is rebuilt)


@dataclass(slots=True)
class Dataset:
    """A kept history: [start_ts, end_ts] of ``shape`` in ``root`` (TSDB blocks, VictoriaMetrics data)."""

    root: Path
    shape: Shape
    start_ts: float
    end_ts: float
    stretches: int
    seconds: dict[str, float]  # what building it cost, by stage (summed over stretches)
    samples: int

    @property
    def prometheus_dir(self) -> Path:
        return self.root / "prometheus"

    @property
    def victoria_dir(self) -> Path:
        return self.root / "victoria"

    def save(self) -> None:
        record = {k: v for k, v in asdict(self).items() if k != "root"}
        (self.root / MANIFEST).write_text(json.dumps(record, indent=1))

    @classmethod
    def load(cls, root: Path) -> Dataset | None:
        try:
            record = json.loads((root / MANIFEST).read_text())
            record["shape"] = Shape(**record["shape"])
            return cls(root=root, **record)
        except (OSError, ValueError, TypeError, KeyError):
            return None


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def queries(rate_window_s: float, downsample_s: float = 300.0) -> SignalQueries:
    """The PromQL the benchmark's configs render (selector job="sglang", this rate window)."""
    return SignalQueries(SELECTOR, rate_window_s, downsample_s=downsample_s)


def clone_name(base: str, copy: int) -> str:
    return base if copy == 0 else f"{base}~{copy}"


def prepare(
    root: Path,
    shape: Shape,
    *,
    hours: float,
    until_ts: float,
    report: Report = lambda _text: None,
) -> Dataset:
    """A dataset in ``root`` covering at least the ``hours`` before ``until_ts``: the kept one extended to
    ``until_ts``, or a new one when none matches ``shape`` or the kept one ends too long ago."""
    root.mkdir(parents=True, exist_ok=True)
    until = math.floor(until_ts / shape.step_s) * shape.step_s
    kept = Dataset.load(root)
    if kept is not None and (kept.shape != shape or until - kept.end_ts > hours * 3600.0):
        report(
            f"kept data in {root} does not fit ({kept.shape}, ends {until - kept.end_ts:.0f} s ago): rebuilt"
        )
        kept = None
    if kept is None:
        for folder in ("prometheus", "victoria", "work"):
            shutil.rmtree(root / folder, ignore_errors=True)
        start = until - math.ceil(hours * 3600.0 / BLOCK_S) * BLOCK_S
        kept = Dataset(root, shape, start, start, 0, {}, 0)
    if until - kept.end_ts >= shape.step_s:
        _add_stretch(kept, until, report)
        kept.save()
    return kept


def _add_stretch(data: Dataset, until: float, report: Report) -> None:
    shape, work = data.shape, data.root / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spent = data.seconds

    def lap(stage: str, started: float) -> None:
        spent[stage] = round(spent.get(stage, 0.0) + time.perf_counter() - started, 1)
        report(f"{stage}: {time.perf_counter() - started:.0f} s")

    started = time.perf_counter()
    history = series_history(
        start_ts=data.end_ts,
        end_ts=until,
        step_s=shape.step_s,
        servers=shape.base_servers,
        seed=data.stretches,
        window_s=shape.step_s,
    )
    lap("simulate_s", started)

    started = time.perf_counter()
    base_blocks = work / "base"
    _backfill(history, 1, {}, base_blocks, work)
    lap("backfill_base_s", started)

    started = time.perf_counter()
    recorded = _evaluate_rules(history, base_blocks, work, shape.rate_window_s)
    _downsample(history, recorded, queries(shape.rate_window_s, shape.downsample_s))
    lap("evaluate_rules_s", started)

    started = time.perf_counter()
    blocks = work / "blocks"
    samples = _backfill(history, shape.servers // shape.base_servers, recorded, blocks, work)
    lap("backfill_fleet_s", started)

    started = time.perf_counter()
    import_to_victoria(data.victoria_dir, blocks, work)
    lap("import_victoria_s", started)

    data.prometheus_dir.mkdir(exist_ok=True)
    for block in blocks.iterdir():
        if block.is_dir():
            block.rename(data.prometheus_dir / block.name)
    started = time.perf_counter()
    compact(data.prometheus_dir, work, shape.step_s)
    lap("compact_prometheus_s", started)
    shutil.rmtree(work, ignore_errors=True)
    data.end_ts = float(history.ts[-1])
    data.stretches += 1
    data.samples += samples


# -- OpenMetrics ---------------------------------------------------------------------------------------------
def _chunks(ts: np.ndarray) -> Iterator[slice]:
    """Index ranges of ``ts`` falling in one aligned 2 h block each."""
    block = np.floor(ts / BLOCK_S)
    edges = np.flatnonzero(np.diff(block)) + 1
    bounds = [0, *edges.tolist(), len(ts)]
    for first, last in itertools.pairwise(bounds):
        yield slice(first, last)


def _lines(values: np.ndarray, stamps: list[str]) -> list[str]:
    """ " value ts" of every known sample (10 significant digits: counters of 1e9 tokens keep their units)."""
    return [f" {v:.10g} {t}" for v, t in zip(values.tolist(), stamps, strict=True) if v == v]


def write_chunk(
    out: IO[str],
    history: SeriesHistory,
    part: slice,
    copies: int,
    recorded: dict[str, dict[str, np.ndarray]],
) -> int:
    """One block's OpenMetrics: every server of ``history`` × ``copies``, raw series, up, scrape duration and
    the recorded series (base server → record → values). Returns the samples written."""
    stamps = [str(int(t)) for t in history.ts[part].tolist()]
    written = 0
    for server in history.servers:
        target = "".join(f',{k}="{v}"' for k, v in server.target_labels.items())
        up = server.up[part]
        per_series: list[tuple[str, str, list[str]]] = []
        for key, values in server.series.items():
            metric, _, labels = key.partition("{")
            lines = _lines(values[part], stamps)
            if lines:
                per_series.append((metric, target + ("," + labels[:-1] if labels[:-1] else ""), lines))
        per_series.append(("up", "", _lines(up.astype(np.float64), stamps)))
        duration = np.where(up, 0.004, np.nan)
        per_series.append(("scrape_duration_seconds", "", _lines(duration, stamps)))
        for record, values in recorded.get(server.name, {}).items():
            lines = _lines(values[part], stamps)
            if lines:
                per_series.append((record, "", lines))
        for copy in range(copies):
            instance = f'instance="{clone_name(server.name, copy)}",job="{JOB}"'
            for metric, labels, lines in per_series:
                prefix = f"{metric}{{{instance}{labels}}}"
                out.write(prefix + ("\n" + prefix).join(lines) + "\n")
                written += len(lines)
    out.write("# EOF\n")
    return written


def _backfill(
    history: SeriesHistory,
    copies: int,
    recorded: dict[str, dict[str, np.ndarray]],
    output: Path,
    work: Path,
) -> int:
    """Every 2 h of ``history`` through ``promtool tsdb create-blocks-from openmetrics`` into ``output``, a
    few promtool processes at a time while the next file is written."""
    output.mkdir(parents=True, exist_ok=True)
    running: list[tuple[subprocess.Popen[bytes], Path]] = []
    samples = 0

    def finish(process: subprocess.Popen[bytes], path: Path) -> None:
        _, err = process.communicate()
        path.unlink(missing_ok=True)
        if process.returncode != 0:
            raise RuntimeError(f"promtool failed on {path.name}: {err.decode(errors='replace')[-2000:]}")

    try:
        for index, part in enumerate(_chunks(history.ts)):
            path = work / f"chunk-{index:04d}.om"
            with path.open("w") as out:
                samples += write_chunk(out, history, part, copies, recorded)
            while len(running) >= _PROMTOOL_PARALLEL:
                finish(*running.pop(0))
            process = subprocess.Popen(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path), str(output)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            running.append((process, path))
        while running:
            finish(*running.pop(0))
    finally:
        for process, _path in running:
            process.kill()
            process.wait()
    return samples


# -- recording rules, evaluated by Prometheus over the base fleet -------------------------------------------
def _evaluate_rules(
    history: SeriesHistory, blocks: Path, work: Path, rate_window_s: float
) -> dict[str, dict[str, np.ndarray]]:
    """Base server → record → values at ``history.ts``: each rule's range query at the evaluation interval
    (the step), over a Prometheus on the base fleet's blocks."""
    engine = start_prometheus(
        work / "rules-prometheus", blocks, scrape_interval_s=history.ts[1] - history.ts[0]
    )
    step = float(history.ts[1] - history.ts[0])
    index = {server.name: i for i, server in enumerate(history.servers)}
    out: dict[str, dict[str, np.ndarray]] = {server.name: {} for server in history.servers}
    rendered = queries(rate_window_s)
    exprs = rendered.signals()
    try:
        # The recordings this config can render (no price set: no cost series), as the engines' rule file.
        for recording in rendered.recordings():
            # Pieces under Prometheus's 11,000 points per series.
            for first in range(0, len(history.ts), 10_000):
                stamps = history.ts[first : first + 10_000]
                answer = requests.post(
                    f"{engine.url}/api/v1/query_range",
                    data={
                        "query": exprs[recording.signal],
                        "start": f"{stamps[0]:.0f}",
                        "end": f"{stamps[-1]:.0f}",
                        "step": f"{step:.0f}",
                    },
                    timeout=600,
                )
                answer.raise_for_status()
                for item in answer.json()["data"]["result"]:
                    name = item["metric"]["instance"]
                    if name not in index:
                        continue
                    column = out[name].setdefault(recording.record, np.full(len(history.ts), np.nan))
                    points = np.array(item["values"], dtype=np.float64)
                    slots = np.searchsorted(history.ts, points[:, 0])
                    column[slots] = points[:, 1]
    finally:
        engine.stop()
    return out


def _downsample(
    history: SeriesHistory, recorded: dict[str, dict[str, np.ndarray]], rendered: SignalQueries
) -> None:
    """The downsampled group's recordings (``collectors.prometheus.downsampled``) added to ``recorded``, as
    its rules would record them: at every multiple of the resolution, ``up``'s minimum and each signal's
    average (of its recording's known samples) over the window's samples, (t - resolution, t]."""
    step = float(history.ts[1] - history.ts[0])
    per = max(round(rendered.downsample_s / step), 1)
    at = np.flatnonzero(np.isclose(np.mod(history.ts, rendered.downsample_s), 0.0))
    at = at[at >= per - 1]
    windows = at[:, None] - np.arange(per)[None, :]  # each evaluation's samples, by index
    own = {r.signal: r.record for r in rendered.recordings()}

    def column(values: np.ndarray) -> np.ndarray:
        out = np.full(len(history.ts), np.nan)
        out[at] = values
        return out

    for server in history.servers:
        found = recorded[server.name]
        found[downsampled.up_record(rendered)] = column(server.up.astype(np.float64)[windows].min(axis=1))
        for name, record in downsampled.records(rendered).items():
            values = found.get(own[name])
            if values is None:
                continue
            sampled = values[windows]
            known = (~np.isnan(sampled)).sum(axis=1)
            sums = np.nansum(sampled, axis=1)
            found[record] = column(np.where(known > 0, sums / np.maximum(known, 1), np.nan))


def _metric(text: str, name: str) -> float:
    """The first sample of ``name`` in a /metrics body (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def compact(tsdb: Path, work: Path, step_s: float) -> None:
    """Let Prometheus compact the backfilled 2 h blocks as a long-running one would have (its compactor runs
    a minute after start, to the end, and runs again a minute later: the second run means the first ended)."""
    engine = start_prometheus(
        work / "compact-prometheus", tsdb, scrape_interval_s=step_s, retention=RETENTION
    )
    try:
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            if _metric(engine.get("/metrics").text, _TRIGGERED) >= 2:
                return
            time.sleep(5)
        raise TimeoutError(f"Prometheus did not compact {tsdb} within an hour: {engine.log()}")
    finally:
        engine.stop()


# -- VictoriaMetrics -----------------------------------------------------------------------------------------
def import_to_victoria(data_dir: Path, blocks: Path, work: Path) -> None:
    """TSDB ``blocks`` into the VictoriaMetrics at ``data_dir`` (``vmctl prometheus``), merged and flushed."""
    engine = start_victoria(data_dir, work / "victoria.log")
    try:
        # vmctl 1.79 draws a progress bar for the snapshot reader whatever its flags, and fails without a
        # terminal: `script` gives it one.
        command = (
            f"vmctl prometheus -s --prom-snapshot {shlex.quote(str(blocks))} --prom-concurrency 2 "
            f"--vm-addr {engine.url} --vm-concurrency 2 --vm-disable-progress-bar"
        )
        done = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"vmctl failed: {done.stdout.decode(errors='replace')[-2000:]}")
        requests.get(f"{engine.url}/internal/force_flush", timeout=600)
        # Merged as VictoriaMetrics would have merged a week of ingestion; the merge runs in the background
        # and must end before the process stops (1.79 panics, losing the unflushed rows, if it is stopped
        # while one runs).
        requests.get(f"{engine.url}/internal/force_merge", timeout=600)
        deadline = time.monotonic() + 3600
        while _metric(engine.get("/metrics").text, "vm_active_force_merges") > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"VictoriaMetrics did not merge {data_dir} within an hour")
            time.sleep(2)
    finally:
        engine.stop()


def main() -> None:
    """``python -m bench.prom_data ROOT SERVERS BASE HOURS``: build or extend a dataset (a smoke test)."""
    import sys

    root, servers, base, hours = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    data = prepare(
        Path(root), Shape(servers, base, 60.0, 240.0, 300.0), hours=hours, until_ts=time.time(), report=print
    )
    print(json.dumps({k: v for k, v in asdict(data).items() if k != "root"}, indent=1, default=str))


if __name__ == "__main__":
    main()
