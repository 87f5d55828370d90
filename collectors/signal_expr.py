"""The nodes of the signal catalogue's expressions (``collectors.signals`` declares the signals with them).

Each node has one meaning that every rendering keeps: ``collectors.derive`` compiles nodes to Python
closures, ``collectors.prometheus.queries`` renders them as PromQL. None (PromQL: no series) is unknown.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

FamilyKind = Literal["gauge", "counter", "histogram"]
# Who exposes a family: the SGLang server's /metrics, or the DCGM exporter of its GPUs (one series per GPU,
# joined to the server by its node: ``targets[].gpu_exporter_url``, ``prometheus.node_label``).
Exposer = Literal["sglang", "dcgm"]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family (SGLang's: name without the prefix) and the labels that select it."""

    name: str
    kind: FamilyKind
    since: str  # first SGLang release exposing it (sglang-metrics.md §4); DCGM: the exporter's field
    match: tuple[tuple[str, str], ...] = ()  # extra equality matchers, e.g. mode="decode"
    # Added only when a request finishes (the tokenizer's completion counters): its rates are taken over at
    # least COMPLETION_WINDOW_S, since with outputs of thousands of tokens a window of seconds sees none.
    at_completion: bool = False
    exposer: Exposer = "sglang"

    @property
    def samples(self) -> tuple[str, ...]:
        """The canonical sample names: SGLang's colon names (the gauge, the counter, or a histogram's _sum and
        _count); a DCGM field's own name (its value summed over the server's GPUs)."""
        if self.exposer == "dcgm":
            return (self.name,)
        if self.kind == "histogram":
            return (f"sglang:{self.name}_sum", f"sglang:{self.name}_count")
        return (f"sglang:{self.name}",)


# -- the expression nodes ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Gauge:
    """The gauge's current value (tp_rank 0, priority ""). ``how`` is the PromQL aggregation over DP ranks:
    max for fractions (the worst rank), sum for counts. A DCGM gauge is aggregated over the server's GPUs in
    both sources: sum (watts) or avg (utilization)."""

    family: Family
    how: Literal["max", "sum", "avg"] = "max"


@dataclass(frozen=True, slots=True)
class Count:
    """How many series of a DCGM family belong to the server: its GPUs as the exporter shows them."""

    family: Family


@dataclass(frozen=True, slots=True)
class Scale:
    """value × factor (a unit change: mJ/s → W, % → ratio)."""

    value: Expr
    factor: float


@dataclass(frozen=True, slots=True)
class Param:
    """A number from the config (``cost.gpu_hour_usd``): the same for every target; unknown when unset, and
    a signal reading an unset one is left out of the PromQL renderings."""

    name: str


@dataclass(frozen=True, slots=True)
class Rate:
    """Per-second increase of a counter (or a histogram's ``_sum``/``_count``) over the window."""

    family: Family
    part: Literal["", "_sum", "_count"] = ""


@dataclass(frozen=True, slots=True)
class Ratio:
    """numerator / denominator; unknown when the denominator is unknown or not positive."""

    numerator: Expr
    denominator: Expr


@dataclass(frozen=True, slots=True)
class Product:
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Inverse:
    """1 / x; unknown unless x > 0."""

    value: Expr


@dataclass(frozen=True, slots=True)
class Total:
    """The sum of several gauges; unknown unless every one is known."""

    parts: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Positive:
    """x where x > 0, else unknown."""

    value: Expr


@dataclass(frozen=True, slots=True)
class Zero:
    """0 where x is known and exactly 0, else unknown (used as a condition: "nothing running")."""

    value: Expr


@dataclass(frozen=True, slots=True)
class When:
    """value where condition is known, else unknown (PromQL ``and on (instance, job)``)."""

    value: Expr
    condition: Expr


@dataclass(frozen=True, slots=True)
class Unless:
    """value where condition is unknown (PromQL ``unless on (instance, job)``)."""

    value: Expr
    condition: Expr


@dataclass(frozen=True, slots=True)
class First:
    """The fallback chain: the first known choice (PromQL ``or``)."""

    choices: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Ref:
    """Another signal of the catalogue, declared earlier."""

    signal: str


Expr = (
    Gauge
    | Rate
    | Ratio
    | Product
    | Inverse
    | Total
    | Positive
    | Zero
    | When
    | Unless
    | First
    | Ref
    | Count
    | Scale
    | Param
)


def mean(histogram: Family) -> Ratio:
    """A histogram's window mean: rate(_sum) / rate(_count)."""
    return Ratio(Rate(histogram, "_sum"), Rate(histogram, "_count"))


def families_of(expr: Expr) -> Iterator[Family]:
    """Every family an expression reads (references not followed)."""
    if isinstance(expr, Gauge | Rate | Count):
        yield expr.family
    elif isinstance(expr, Scale):
        yield from families_of(expr.value)
    elif isinstance(expr, Ratio):
        yield from families_of(expr.numerator)
        yield from families_of(expr.denominator)
    elif isinstance(expr, Product):
        yield from families_of(expr.left)
        yield from families_of(expr.right)
    elif isinstance(expr, Inverse | Positive | Zero):
        yield from families_of(expr.value)
    elif isinstance(expr, Total | First):
        for part in expr.parts if isinstance(expr, Total) else expr.choices:
            yield from families_of(part)
    elif isinstance(expr, When | Unless):
        yield from families_of(expr.value)
        yield from families_of(expr.condition)


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, Ratio):
        return (expr.numerator, expr.denominator)
    if isinstance(expr, Product):
        return (expr.left, expr.right)
    if isinstance(expr, Inverse | Positive | Zero | Scale):
        return (expr.value,)
    if isinstance(expr, When | Unless):
        return (expr.value, expr.condition)
    if isinstance(expr, Total):
        return expr.parts
    if isinstance(expr, First):
        return expr.choices
    return ()


def refs_of(expr: Expr) -> tuple[str, ...]:
    """The signals an expression refers to (``Ref``), in order."""
    if isinstance(expr, Ref):
        return (expr.signal,)
    return tuple(ref for child in _children(expr) for ref in refs_of(child))


def params_of(expr: Expr) -> tuple[str, ...]:
    """The config parameters an expression reads (``Param``; references not followed)."""
    if isinstance(expr, Param):
        return (expr.name,)
    return tuple(name for child in _children(expr) for name in params_of(child))
