"""A simulated fleet's past as the series a Prometheus scraping it would hold: SGLang's own counters, gauges
and histogram parts per server over time (not the derived signals ``sim.fill`` writes), for backfilling a real
Prometheus or VictoriaMetrics (``bench/prom_data.py``).

The same mechanism runs as for ``sim.fill``: each server is advanced through the scenario and, at every step,
what its /metrics would show (``sim.values.metric_values``) is read — only the families specwatch reads (the
catalogue's, the restart counter and the SLIs' buckets at their thresholds), at the series labels a
Prometheus stores: ``tp_rank="0"`` scheduler series, tokenizer series per ``is_streaming``, OpenMetrics'
``sglang_`` spelling, the server's target labels, and its recipe as ``--extra-metric-labels`` on the running
gauge. A server that is down or booting has no samples at that step and ``up`` 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from collectors.model import Recipe
from collectors.signals import all_families
from sim.families import FAMILY_BY_NAME, HistogramValue
from sim.sampler import _failure, sim_server
from sim.scenario import expand_servers, load_scenario
from sim.server import SimServer
from sim.server_engine import ServerEngine
from sim.values import ABORTED_SHARE, STREAMS, _by_stream, _histograms_by_stream, signal_families

FloatArray = npt.NDArray[np.float64]
# Families read besides the catalogue's: the restart counter and the availability SLI's abort counter.
_EXTRA_FAMILIES = ("num_requests", "num_aborted_requests")
# The latency SLIs' families (collectors.slo.LATENCY_FAMILIES; the first one a server exposes counts).
_SLI_FAMILIES = {
    "ttft": ("time_to_first_token_seconds",),
    "tpot": ("request_time_per_output_token_seconds", "inter_token_latency_seconds"),
}


def recipe_labels(recipe: Recipe) -> dict[str, str]:
    """A recipe as SGLang's ``--extra-metric-labels`` would carry it (every flag; unknown ones as "none", so
    a plain-decoding recipe still says speculative decoding is off)."""
    return {name: "none" if value is None else str(value) for name, value in recipe.flags}


def read_families(slo_buckets: Mapping[str, Sequence[float]] | None = None) -> dict[str, tuple[float, ...]]:
    """Family name (no prefix, no ``_total``) → the histogram bucket bounds kept (empty: none, or not a
    histogram). ``slo_buckets``: latency SLI kind → thresholds (default: the default config's SLOs)."""
    names = {f.name.removesuffix("_total") for f in all_families()} | set(_EXTRA_FAMILIES)
    names |= {name for families in _SLI_FAMILIES.values() for name in families}
    kept: dict[str, tuple[float, ...]] = {name: () for name in sorted(names) if name in FAMILY_BY_NAME}
    wanted = {"ttft": (4.0,), "tpot": (0.04,)} if slo_buckets is None else slo_buckets
    for kind, thresholds in wanted.items():
        for family in _SLI_FAMILIES.get(kind, ()):
            if family in kept:
                bounds = FAMILY_BY_NAME[family].buckets
                kept[family] += tuple(le for le in thresholds if le in bounds)
    return kept


@dataclass(slots=True)
class ServerSeries:
    """One server's series over the history's steps. ``series``: ``name{labels}`` without the target labels
    (``instance``, ``job``, the target's labels come first when written) → values, NaN where there is no
    sample (down, booting, or another recipe's label set)."""

    name: str
    target_labels: dict[str, str]
    up: npt.NDArray[np.bool_]
    series: dict[str, FloatArray] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SeriesHistory:
    """Every server's series at ``ts`` (unix seconds, one per step)."""

    ts: FloatArray
    servers: tuple[ServerSeries, ...]

    @property
    def samples(self) -> int:
        return int(sum(np.isfinite(v).sum() for s in self.servers for v in s.series.values())) + sum(
            len(self.ts) for _ in self.servers
        )


def label_text(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


class SeriesNamer:
    """Series names of one server's readings, built once per (family, label values, recipe)."""

    def __init__(self, families: Mapping[str, tuple[float, ...]]) -> None:
        self.families = families
        self._names: dict[tuple[str, tuple[str, ...], str], list[str]] = {}

    def names(self, name: str, key: tuple[str, ...], recipe_text: str) -> list[str]:
        """The series of one family's item: its value, or a histogram's sum, count and kept buckets."""
        cache_key = (name, key, recipe_text)
        found = self._names.get(cache_key)
        if found is not None:
            return found
        spec = FAMILY_BY_NAME[name]
        labels = dict(zip([n for n in spec.labels if n != "pid"], key, strict=True))
        if spec.scope == "S":
            labels["tp_rank"] = "0"
        text = label_text(labels)
        if name == "num_running_reqs" and recipe_text:
            text = f"{text},{recipe_text}" if text else recipe_text
        if spec.kind == "histogram":
            found = [f"sglang_{name}_sum{{{text}}}", f"sglang_{name}_count{{{text}}}"]
            for le in self.families[name]:
                bucket = f'le="{le:g}"'  # "4", "0.04": as the exposition reader keys them
                found.append(
                    f"sglang_{name}_bucket{{{text},{bucket}}}"
                    if text
                    else f"sglang_{name}_bucket{{{bucket}}}"
                )
        else:
            suffix = "_total" if spec.kind == "counter" else ""
            found = [f"sglang_{name}{suffix}{{{text}}}"]
        self._names[cache_key] = found
        return found

    def series(self, values: Mapping[str, object], recipe_text: str) -> list[tuple[str, float]]:
        """(``name{labels}``, value) of every kept series in one /metrics reading."""
        out: list[tuple[str, float]] = []
        for name, bounds in self.families.items():
            value = values.get(name)
            if value is None:
                continue
            items = value.items() if isinstance(value, Mapping) else [((), value)]
            for key, item in items:
                names = self.names(name, key, recipe_text)
                if isinstance(item, HistogramValue):
                    numbers = [float(item.sum), float(item.cumulative[-1])]
                    buckets = FAMILY_BY_NAME[name].buckets
                    numbers += [float(item.cumulative[buckets.index(le)]) for le in bounds]
                    out += zip(names, numbers, strict=True)
                else:
                    out.append((names[0], float(item)))  # type: ignore[arg-type]
        return out


def is_down(server: SimServer, t: float) -> bool:
    """Whether a scrape at scenario second ``t`` would fail (down, booting, hanging, too slow, garbage)."""
    return _failure(server, t) is not None


def readings(engine: ServerEngine) -> dict[str, object]:
    """What /metrics shows of the families kept: the signals' (``signal_families``) and the SLIs' extras."""
    values: dict[str, object] = dict(signal_families(engine))
    completed = sum(engine.published.count(f"num_requests:{s}") for s in STREAMS)
    values["num_requests"] = _by_stream(engine, "num_requests")
    values["num_aborted_requests"] = float(math.floor(completed * ABORTED_SHARE))
    values["request_time_per_output_token_seconds"] = _histograms_by_stream(engine, "tpot")
    return values


def series_history(
    *,
    start_ts: float,
    end_ts: float,
    step_s: float,
    scenario: str | Path = "demo",
    servers: int | None = None,
    seed: int = 0,
    window_s: float = 60.0,
    slo_buckets: Mapping[str, Sequence[float]] | None = None,
) -> SeriesHistory:
    """The scenario's servers sampled every ``step_s`` in (start_ts, end_ts]: servers start at ``start_ts``
    (after the scenario's warm-up) and publish decode-log windows at least ``window_s`` long."""
    loaded = load_scenario(scenario)
    specs = expand_servers(loaded, servers)
    steps = int(np.floor((end_ts - start_ts) / step_s + 1e-9))
    ts = start_ts + step_s * np.arange(1, steps + 1, dtype=np.float64)
    namer = SeriesNamer(read_families(slo_buckets))
    out: list[ServerSeries] = []
    for index, spec in enumerate(specs):
        server = sim_server(spec, index, seed, loaded, window_s)
        target_labels = {"deployment": spec.deployment, **spec.labels}
        up = np.zeros(steps, dtype=bool)
        columns: dict[str, FloatArray] = {}
        cached: tuple[object, list[tuple[str, float]]] | None = None
        recipe_text: tuple[int, str] | None = None  # the recipe changes only at a restart
        for k in range(steps):
            t = float(ts[k] - start_ts)
            server.advance(t)
            if is_down(server, t):
                continue
            up[k] = True
            key = (server.restarts, server.engine.published.at_s)
            if cached is None or cached[0] != key:
                if recipe_text is None or recipe_text[0] != server.restarts:
                    recipe_text = (server.restarts, label_text(recipe_labels(server.recipe)))
                cached = (key, namer.series(readings(server.engine), recipe_text[1]))
            for name, value in cached[1]:
                column = columns.get(name)
                if column is None:
                    column = columns[name] = np.full(steps, np.nan)
                column[k] = value
        out.append(ServerSeries(spec.name, target_labels, up, columns))
    return SeriesHistory(ts, tuple(out))
