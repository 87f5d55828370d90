"""Render a simulated server's values as SGLang 0.5.23's /metrics families through prometheus_client.

``SglangCollector`` yields prometheus_client metric families built from the catalogue, so the registry's own
encoders (text 0.0.4 or OpenMetrics, picked by ``choose_encoder``) do the rendering, including OpenMetrics'
``sglang:`` → ``sglang_`` sample-name rewrite. TP = 2: rank 0 carries live values, rank 1 constants and zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from sim.catalogue import HELP, HISTOGRAM, SCHEDULER_LABELS, TABLE, TOKENIZER_LABELS, Kind, Scope

PREFIX = "sglang:"
TP_RANKS = ("0", "1")


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One family as SGLang 0.5.23 exposes it. ``name`` has no prefix and, for counters, no ``_total``."""

    name: str
    kind: Kind
    scope: Scope
    help: str
    labels: tuple[str, ...] = ()  # per-family labels beyond the scope's set, e.g. is_streaming, mode
    buckets: tuple[float, ...] = ()
    all_ranks: bool = False  # every TP rank emits it (constants, pre-seeded counters), not only tp_rank 0

    @property
    def label_names(self) -> tuple[str, ...]:
        base = {"S": SCHEDULER_LABELS, "T": TOKENIZER_LABELS, "N": ()}[self.scope]
        return tuple(sorted((*base, *self.labels)))

    @property
    def bucket_bounds(self) -> list[str]:
        return [*map(floatToGoString, self.buckets), "+Inf"]


def _from_row(row: tuple[object, ...]) -> FamilySpec:
    name, kind, scope, labels, buckets, all_ranks = (*row, (), (), False)[:6]
    return FamilySpec(
        cast(str, name),
        cast(Kind, kind),
        cast(Scope, scope),
        HELP[cast(str, name)],
        cast(tuple[str, ...], labels),
        tuple(float(b) for b in cast(tuple[float, ...], buckets)),
        bool(all_ranks),
    )


FAMILIES: tuple[FamilySpec, ...] = tuple(_from_row(row) for row in TABLE)
FAMILY_BY_NAME: dict[str, FamilySpec] = {spec.name: spec for spec in FAMILIES}


@dataclass(frozen=True, slots=True)
class HistogramValue:
    """Cumulative bucket counts (one per bound, then +Inf) and the sum of observations."""

    cumulative: Sequence[float]
    sum: float


Value = float | HistogramValue
# Per family: one value (no per-family labels) or {per-family label values, in ``spec.labels`` order: value}.
FamilyValues = Value | Mapping[tuple[str, ...], Value]
MetricValues = Mapping[str, FamilyValues]


@dataclass(frozen=True, slots=True)
class Identity:
    """The label values every scheduler/tokenizer series of one server carries."""

    model_name: str
    engine_type: str = "unified"
    pp_rank: str = "0"
    moe_ep_rank: str = "0"
    pid: str = "24500"


def _zero(spec: FamilySpec) -> Value:
    if spec.kind == HISTOGRAM:
        return HistogramValue([0.0] * (len(spec.buckets) + 1), 0.0)
    return 0.0


def series_of(spec: FamilySpec, value: FamilyValues | None) -> list[tuple[tuple[str, ...], Value]]:
    if value is None:
        return [((), _zero(spec))] if not [n for n in spec.labels if n != "pid"] else []
    if isinstance(value, float | int | HistogramValue):
        return [((), value)]
    return list(value.items())


def _base_labels(spec: FamilySpec, identity: Identity, tp_rank: str) -> dict[str, str]:
    if spec.scope == "N":
        return {}
    labels = {"engine_type": identity.engine_type, "model_name": identity.model_name}
    if spec.scope == "S":
        labels.update(moe_ep_rank=identity.moe_ep_rank, pp_rank=identity.pp_rank, tp_rank=tp_rank)
    if "pid" in spec.labels:
        labels["pid"] = identity.pid  # multiprocess mode "all" gauges carry the writer's pid
    return labels


def build_family(spec: FamilySpec, value: FamilyValues | None, identity: Identity) -> Metric:
    """One prometheus_client family: rank 0 carries ``value``; other ranks repeat gauges and zero counters."""
    names = spec.label_names
    own = [n for n in spec.labels if n != "pid"]
    rows: list[tuple[list[str], Value]] = []
    for rank in TP_RANKS if spec.all_ranks else TP_RANKS[:1]:
        base = _base_labels(spec, identity, rank)
        for extra, item in series_of(spec, value):
            if rank != "0" and spec.kind != "gauge":
                item = _zero(spec)  # pre-seeded counters of the non-logging rank stay at zero
            labels = {**base, **dict(zip(own, extra, strict=True))}
            rows.append(([labels[n] for n in names], item))
    full_name = PREFIX + spec.name
    if spec.kind == "histogram":
        histogram = HistogramMetricFamily(full_name, spec.help, labels=names)
        for label_values, item in rows:
            assert isinstance(item, HistogramValue), spec.name
            buckets = list(zip(spec.bucket_bounds, item.cumulative, strict=True))
            histogram.add_metric(label_values, buckets, item.sum)
        return histogram
    family = (GaugeMetricFamily if spec.kind == "gauge" else CounterMetricFamily)(
        full_name, spec.help, labels=names
    )
    for label_values, item in rows:
        assert not isinstance(item, HistogramValue), spec.name
        family.add_metric(label_values, float(item))
    return family


class SglangCollector:
    """A prometheus_client collector over one simulated server, built from its values on collect."""

    def __init__(self, values: Callable[[], MetricValues], identity: Callable[[], Identity]) -> None:
        self._values = values
        self._identity = identity

    def describe(self) -> list[Metric]:
        return []  # nothing to pre-declare; keeps registration from calling collect()

    def collect(self) -> Iterator[Metric]:
        values, identity = self._values(), self._identity()
        for spec in FAMILIES:
            yield build_family(spec, values.get(spec.name), identity)
