"""Write hours of a simulated fleet into a history store, every tier as the collector would have written it.

One writer for both pasts the sim writes: ``python -m sim history --config FILE --hours H``
(``fill_store``: an empty store, oldest first, as fast as the store loads) and the demo's day on ``make run``
(``demo_history``: newest hour first beside the live collector, so pages show the last hours within the
first minutes). Both are ``write_history`` over ``Segment``s: stretches sampled by servers started fresh.

Within a segment the fleet is sampled time-major, a quarter hour at a time for every server, so rows land in
time order and memory stays a chunk of the fleet. From ``raw_from_t`` on it is sampled every ``step_s`` into
raw rows and rollups; before it — hours the collector would keep only as rollups — once per minute, each
sample standing for the minute's ``60 / step_s`` scrapes (``Batch.weight``). That is what the collector writes
for a server whose gauges change every five minutes (ROLLUP_WINDOW_S).
"""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Protocol

import numpy as np

from collectors.model import SIGNAL_NAMES, Event, Recipe, Signals, TargetSnapshot
from collectors.store.bulk import HistoryLoader
from collectors.store.sqlite_store import SqliteStore
from collectors.store.tiers import MINUTE_TIER, Batch, FloatArray
from sim.sampler import WINDOW_SAMPLES, Sampler, sim_server
from sim.scenario import expand_servers, load_scenario

# Decode-log windows: the simulated engine's cost is per window (~0.12 ms), so the fill publishes one every
# minute within raw retention (live servers: 40 steps, usually < 5 s) and one every 5 min beyond.
RAW_WINDOW_S = 60.0
ROLLUP_WINDOW_S = 300.0
ROLLUP_STEP_S = MINUTE_TIER.seconds  # one sample per minute beyond raw retention
# A quarter hour of the fleet in memory at a time. Part of the content: a bucket straddling two chunks is
# the merge of two partial rows, so changing it changes the last bits of some sums.
CHUNK_S = 900.0
DEMO_SEGMENT_S = 3600.0  # the demo loops hourly: each hour of its past is a fresh run of the scenario
SCRAPE_DURATION_S = 0.004

Row = tuple[object, ...]
Progress = Callable[[float, float], None]  # (seconds of history written, seconds in all)


@dataclass(frozen=True, slots=True)
class FillReport:
    servers: int
    hours: float
    raw_rows: int
    rollup_samples: int  # scrapes the rollup-only hours stand for
    events: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Segment:
    """``duration_s`` of history from unix ``start_ts``, sampled by servers started at its start with
    ``seed``: one sample per minute before scenario second ``raw_from_t``, raw rows every step from it on."""

    start_ts: float
    duration_s: float
    seed: int
    raw_from_t: float
    raw_window_s: float = RAW_WINDOW_S  # decode-log windows within the raw rows
    rollup_window_s: float = ROLLUP_WINDOW_S  # ... and before them


class StoreNotEmptyError(ValueError):
    """The store already holds history: filling it would interleave two fleets' pasts."""


def fill_store(
    store_path: str | Path,
    *,
    scenario: str | Path = "demo",
    servers: int | None = None,
    hours: float,
    raw_hours: float = 6.0,
    step_s: float = 5.0,
    end_ts: float | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    sample_in_process: bool = False,
    gpu_hour_usd: float | None = None,
) -> FillReport:
    """Write ``hours`` of the scenario's fleet ending at ``end_ts`` (default now) into an empty store
    (``sample_in_process``, ``gpu_hour_usd``: see ``write_history``)."""
    if not 0 < hours <= 400 * 24:
        raise ValueError(f"hours must be in (0, 9600], not {hours}")
    _check_step(step_s)
    end = time.time() if end_ts is None else end_ts
    duration_s = math.floor(hours * 3600.0 / ROLLUP_STEP_S) * ROLLUP_STEP_S
    start = math.floor((end - duration_s) / ROLLUP_STEP_S) * ROLLUP_STEP_S  # minute-aligned buckets
    raw_from_t = max(0.0, duration_s - raw_hours * 3600.0)
    raw_from_t = math.floor(raw_from_t / ROLLUP_STEP_S) * ROLLUP_STEP_S
    probe = SqliteStore(store_path)
    try:
        if probe.count_samples():
            raise StoreNotEmptyError(
                f"history store {probe.path} already holds samples; point store.path at a new file "
                "(or delete this one) to fill it with simulated history"
            )
    finally:
        probe.close()

    def told(done_s: float, total_s: float) -> None:
        if progress is not None:
            progress(f"{done_s / 3600:.0f} / {total_s / 3600:.0f} h")

    return write_history(
        store_path,
        [Segment(start, duration_s, seed, raw_from_t)],
        scenario=scenario,
        servers=servers,
        step_s=step_s,
        exclusive=True,
        progress=told,
        sample_in_process=sample_in_process,
        gpu_hour_usd=gpu_hour_usd,
    )


def demo_history(
    store_path: str | Path,
    *,
    scenario: str | Path = "demo",
    servers: int | None = None,
    hours: float,
    end_ts: float,
    step_s: float = 5.0,
    seed: int = 0,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    bodies: BodyObserver | None = None,
    gpu_hour_usd: float | None = None,
) -> FillReport:
    """The demo's past beside its live collector: whole hours ending at ``end_ts`` (the live fleet's start,
    so every hour begins where the hourly scenario loop does), newest first, raw rows every step; a row
    never replaces a target's newer latest one. ``bodies`` sees every server's /metrics body every
    ``BODY_EVERY_S`` (the SLO counts of the past are read from them as the live collector reads them)."""
    _check_step(step_s)
    window_s = WINDOW_SAMPLES * step_s  # gauges refresh every ≥ 15 s, as ``synthesize_history``'s do
    segments = [
        Segment(end_ts - (k + 1) * DEMO_SEGMENT_S, DEMO_SEGMENT_S, seed + k, 0.0, window_s, window_s)
        for k in range(math.ceil(hours * 3600.0 / DEMO_SEGMENT_S))
    ]
    return write_history(
        store_path,
        segments,
        scenario=scenario,
        servers=servers,
        step_s=step_s,
        exclusive=False,
        stop=stop,
        progress=progress,
        bodies=bodies,
        gpu_hour_usd=gpu_hour_usd,
    )


def write_history(
    store_path: str | Path,
    segments: Sequence[Segment],
    *,
    scenario: str | Path,
    servers: int | None,
    step_s: float,
    exclusive: bool,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    sample_in_process: bool = False,
    bodies: BodyObserver | None = None,
    gpu_hour_usd: float | None = None,
) -> FillReport:
    """Sample each segment in turn and write it (``HistoryLoader``: ``exclusive`` = an empty store nothing
    else writes, oldest segment first; else beside a live collector, in any order). Each server's GPUs are
    read as its DCGM exporter shows them, and $ per million tokens derived at ``gpu_hour_usd`` (the config's
    ``cost.gpu_hour_usd``; None: unknown), as the live collector derives them.

    ``sample_in_process``: the simulation runs in a child process a few chunks ahead while this one writes
    (the two halves cost about the same: on two cores the wall time nearly halves). Not inside the dashboard.
    """
    started = time.monotonic()
    specs = expand_servers(load_scenario(scenario), servers)
    total_s = sum(s.duration_s for s in segments)
    done_s = 0.0
    raw_rows = rollup_samples = event_count = 0
    with HistoryLoader(store_path, exclusive=exclusive) as loader:
        if sample_in_process:
            parts = _sampled_in_child(scenario, servers, segments, step_s, gpu_hour_usd)
        else:
            parts = _sampled(scenario, servers, segments, step_s, stop, bodies, gpu_hour_usd)
        with closing(parts):  # a failed write stops the sampling (and its child) at once
            for part in parts:
                if isinstance(part, _SegmentEnd):
                    loader.store.add_events(part.events)
                    event_count += len(part.events)
                    loader.write((), (), latest=part.latest)
                    done_s += part.duration_s
                    continue
                for recipe in part.recipes:
                    loader.store.put_recipe(recipe, part.segment_start_ts)
                rows = _raw_rows(part.raw) if part.raw is not None else []
                loader.write(rows, [b for b in (part.raw, part.rollup) if b is not None])
                raw_rows += len(rows)
                if part.rollup is not None:
                    rollup_samples += len(part.rollup.target) * int(ROLLUP_STEP_S / step_s)
                if progress is not None:
                    progress(done_s + part.done_s, total_s)
    return FillReport(
        len(specs), done_s / 3600.0, raw_rows, rollup_samples, event_count, time.monotonic() - started
    )


# The demo's past is read into SLO counts from a body every five minutes: burn-downs over the day and the
# long windows need minutes, not seconds, and a body costs ~1 ms to render and read.
BODY_EVERY_S = 300.0


class BodyObserver(Protocol):
    """Sees simulated /metrics bodies in each server's time order (the app counts SLO events from them)."""

    def body(self, target: str, labels: dict[str, str], ts: float, body: bytes) -> None: ...

    def flush(self) -> None: ...


@dataclass(slots=True)
class _Part:
    """One chunk of every server, as arrays (cheap to send between processes)."""

    raw: Batch | None  # raw rows, server by server
    rollup: Batch | None  # one sample per minute standing for its scrapes
    recipes: list[Recipe]  # every recipe seen so far in the segment
    segment_start_ts: float
    done_s: float  # of the segment, after this chunk


@dataclass(slots=True)
class _SegmentEnd:
    events: list[Event]
    latest: list[TargetSnapshot]
    duration_s: float  # sampled (less than the segment's if stopped)


def _sampled(
    scenario: str | Path,
    servers: int | None,
    segments: Sequence[Segment],
    step_s: float,
    stop: threading.Event | None = None,
    bodies: BodyObserver | None = None,
    gpu_hour_usd: float | None = None,
) -> Generator[_Part | _SegmentEnd, None, None]:
    """Each segment's chunks in time order, then its events and latest rows."""
    loaded = load_scenario(scenario)
    specs = expand_servers(loaded, servers)
    for segment in segments:
        if stop is not None and stop.is_set():
            return
        recipes: dict[str, Recipe] = {}
        samplers = [
            Sampler(
                sim_server(spec, i, segment.seed, loaded, segment.rollup_window_s),
                segment.start_ts,
                recipes,
                gpu_hour_usd,
            )
            for i, spec in enumerate(specs)
        ]
        last: dict[str, TargetSnapshot] = {}
        chunk_t = 0.0
        while chunk_t < segment.duration_s and not (stop is not None and stop.is_set()):
            chunk_end = min(chunk_t + CHUNK_S, segment.duration_s)
            raw, rollup = _chunk(samplers, chunk_t, chunk_end, segment, step_s, last, bodies)
            chunk_t = chunk_end
            yield _Part(raw, rollup, list(recipes.values()), segment.start_ts, chunk_t)
        events: list[Event] = []
        for sampler in samplers:
            events += sampler.events + sampler.server_events(chunk_t)
        events.sort(key=lambda e: e.ts)
        yield _SegmentEnd(events, list(last.values()), chunk_t)


_AHEAD = 3  # chunks the child may sample ahead of the writer (memory: a few chunks of the fleet)


def _sampled_in_child(
    scenario: str | Path,
    servers: int | None,
    segments: Sequence[Segment],
    step_s: float,
    gpu_hour_usd: float | None = None,
) -> Generator[_Part | _SegmentEnd, None, None]:
    context = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited locks or threads
    queue: multiprocessing.Queue[_Part | _SegmentEnd | BaseException | None] = context.Queue(_AHEAD)
    child = context.Process(
        target=_sample_into,
        args=(queue, scenario, servers, list(segments), step_s, gpu_hour_usd),
        daemon=True,
    )
    child.start()
    try:
        while True:
            try:
                item = queue.get(timeout=1.0)
            except Empty:
                if child.is_alive():
                    continue
                # Gone without a word (killed, out of memory): never wait for it forever.
                raise RuntimeError(f"the simulating process died (exit code {child.exitcode})") from None
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
        child.join()
    finally:
        if child.is_alive():  # the writer failed or was interrupted: the child has nothing left to do
            child.terminate()
            child.join()


def _sample_into(
    queue: multiprocessing.Queue[_Part | _SegmentEnd | BaseException | None],
    scenario: str | Path,
    servers: int | None,
    segments: list[Segment],
    step_s: float,
    gpu_hour_usd: float | None = None,
) -> None:
    """The child's whole life: every part into ``queue``, then None (or the exception that stopped it)."""
    try:
        for part in _sampled(scenario, servers, segments, step_s, gpu_hour_usd=gpu_hour_usd):
            queue.put(part)
        queue.put(None)
    except BaseException as exc:  # its text crosses (any exception object might not)
        queue.put(RuntimeError(f"simulating history failed: {type(exc).__name__}: {exc}"))


def _raw_rows(batch: Batch) -> list[Row]:
    """``samples`` rows of a chunk in time order (stable: servers in fleet order within a timestamp); unknowns
    are NaN, which SQLite stores as NULL."""
    order = np.argsort(batch.ts, kind="stable")
    take = order.tolist()
    columns: list[list[object]] = [
        batch.ts[order].tolist(),
        [batch.target[i] for i in take],
        batch.up[order].astype(np.int64).tolist(),
        [batch.error[i] for i in take],
        [batch.recipe_id[i] for i in take],
        [batch.deployment[i] for i in take],
        batch.scrape_duration_s[order].tolist(),
        *batch.signals[order].T.tolist(),
    ]
    return list(zip(*columns, strict=True))


def _check_step(step_s: float) -> None:
    if not 0 < step_s <= ROLLUP_STEP_S or ROLLUP_STEP_S % step_s:
        raise ValueError(f"step_s must divide {ROLLUP_STEP_S:g} s, not {step_s}")


@dataclass(slots=True)
class _Columns:
    """Samples of a chunk as columns (one entry per sample), turned into a ``Batch`` at its end."""

    ts: list[float] = field(default_factory=list)
    target: list[str] = field(default_factory=list)
    up: list[bool] = field(default_factory=list)
    error: list[str | None] = field(default_factory=list)
    recipe_id: list[str | None] = field(default_factory=list)
    deployment: list[str] = field(default_factory=list)
    signals: list[int] = field(
        default_factory=list
    )  # the index of each sample's signals in the chunk's table

    def batch(self, table: FloatArray, weight: float) -> Batch | None:
        if not self.ts:
            return None
        up = np.array(self.up, dtype=np.float64)
        return Batch(
            target=self.target,
            ts=np.array(self.ts, dtype=np.float64),
            up=up,
            error=self.error,
            recipe_id=self.recipe_id,
            deployment=self.deployment,
            scrape_duration_s=np.where(up > 0, SCRAPE_DURATION_S, np.nan),
            signals=table[np.array(self.signals, dtype=np.int64)],
            weight=np.full(len(self.ts), weight),
        )


def _chunk(
    samplers: list[Sampler],
    from_t: float,
    to_t: float,
    segment: Segment,
    step_s: float,
    last: dict[str, TargetSnapshot],
    bodies: BodyObserver | None = None,
) -> tuple[Batch | None, Batch | None]:
    """Raw rows (every step) and rollup-only samples (one per minute, at its middle) of every server;
    ``bodies`` gets each up server's /metrics body every ``BODY_EVERY_S``, then ``flush`` once."""
    raw, rollup = _Columns(), _Columns()
    vectors: list[tuple[float | None, ...]] = []
    # Signals are shared while no new window is published: convert each once (kept alive, so ids stay unique).
    values: dict[int, tuple[Signals, int]] = {}
    raw_from_t = segment.raw_from_t
    half_minute = ROLLUP_STEP_S / 2
    for sampler in samplers:
        name, deployment, start = sampler.name, sampler.deployment, sampler.start_ts
        raw_before, rollup_before = len(raw.ts), len(rollup.ts)
        t = from_t
        newest: tuple[float, bool, str | None, Signals] | None = None
        while t < to_t:
            if t >= raw_from_t:
                if t == raw_from_t:
                    sampler.server.set_min_window_s(segment.raw_window_s)
                t += step_s
                at, into = t, raw
            else:
                t += ROLLUP_STEP_S
                at, into = t - half_minute, rollup  # the minute's mean time stands for its scrapes
            up, error, signals = sampler.sample(at)
            stride = step_s if into is raw else ROLLUP_STEP_S
            if bodies is not None and up and (start + at) % BODY_EVERY_S < stride:
                bodies.body(
                    name, dict(sampler.server.target.labels), start + at, sampler.server.render_body()
                )
            found = values.get(id(signals))
            if found is None:
                found = values[id(signals)] = (signals, len(vectors))
                vectors.append(tuple(getattr(signals, n) for n in SIGNAL_NAMES))
            into.ts.append(start + at)
            into.up.append(up)
            into.error.append(error)
            into.recipe_id.append(sampler.recipe_id)
            into.signals.append(found[1])
            newest = (start + at, up, error, signals)
        for columns, before in ((raw, raw_before), (rollup, rollup_before)):
            columns.target += [name] * (len(columns.ts) - before)
            columns.deployment += [deployment] * (len(columns.ts) - before)
        if newest is not None:  # the server's newest sample so far: its latest once the segment is written
            ts, up, error, signals = newest
            duration = SCRAPE_DURATION_S if up else None
            last[name] = TargetSnapshot(name, ts, up, error, signals, sampler.recipe_id, deployment, duration)
    if bodies is not None:
        bodies.flush()
    table = np.array(vectors, dtype=np.float64).reshape(len(vectors), len(SIGNAL_NAMES))  # None → NaN
    return raw.batch(table, 1.0), rollup.batch(table, ROLLUP_STEP_S / step_s)
