"""Pure derivation: previous counter state + this scrape's samples + elapsed time → ``Signals``.

The signals are the catalogue's (``collectors.signals``): each expression is compiled once, at import, into
small Python closures, so this module says nothing about SGLang that the catalogue does not. No I/O and no
clock: the caller passes timestamps, from a monotonic clock (a wall-clock step would otherwise turn into a
rate spike or a negative window). Safe across counter resets: if any counter went down the server restarted,
and every rate of that cycle is None (unknown) rather than negative or a spike.

Both sources derive through it: the direct source from each scrape, the Prometheus source for what PromQL
cannot say (plain decoding's rules, whether speculative decoding is on).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from collectors.model import SIGNAL_NAMES, Recipe, Signals
from collectors.signal_expr import refs_of
from collectors.signals import (
    BY_NAME,
    COMPLETION_WINDOW_S,
    SIGNALS,
    Count,
    Expr,
    First,
    Gauge,
    Inverse,
    Param,
    Positive,
    Product,
    Rate,
    Ratio,
    Scale,
    Total,
    Unless,
    When,
    Zero,
    all_families,
    gpu_families,
)

# Counters and histograms' _sum/_count (the direct reader sums them over labels): they only ever go up, except
# at a restart or a counter reset.
CUMULATIVE_SAMPLES: tuple[str, ...] = tuple(
    dict.fromkeys(sample for family in all_families() if family.kind != "gauge" for sample in family.samples)
)
# The GPUs' counters (the energy counter, mJ since the driver loaded) are kept between cycles too, but not
# read for restarts: the GPUs keep counting while SGLang restarts, and a driver reload resets them alone
# (their rate is then unknown for one window, like any counter that fell).
GPU_CUMULATIVE_SAMPLES: tuple[str, ...] = tuple(
    sample for family in gpu_families() if family.kind == "counter" for sample in family.samples
)
# When the exporter's answer arrived (the rate clock, s): the GPUs' counters are a second body, read
# concurrently with SGLang's, so their rates divide by their own window. Timed by SGLang's arrival, a 1 s
# window carried the two bodies' arrival jitter: 2 % on a busy box.
GPU_READ_AT = "dcgm:read_at_s"
_KEPT_SAMPLES = (*CUMULATIVE_SAMPLES, *GPU_CUMULATIVE_SAMPLES, GPU_READ_AT)
# What the older states keep: only the completion-counted samples their long window reads (4 of the 14 kept
# samples; a 1,000-server fleet at 5 s holds twelve older states per server).
_COMPLETION_SAMPLES = tuple(
    sample for family in all_families() if family.at_completion for sample in family.samples
)


@dataclass(frozen=True, slots=True)
class CounterState:
    """What the next derivation needs from this one: the cumulative samples and when (monotonic s) they were
    read, and the earlier states completion-counted rates still need (newest first, back to the newest one at
    least ``COMPLETION_WINDOW_S`` old)."""

    ts: float
    values: Mapping[str, float]
    older: tuple[CounterState, ...] = ()

    def baseline(self, ts: float) -> CounterState:
        """The state completion-counted rates at ``ts`` measure from: the newest at least
        ``COMPLETION_WINDOW_S`` before ``ts``, else the oldest kept."""
        for state in (self, *self.older):
            if ts - state.ts >= COMPLETION_WINDOW_S:
                return state
        return self.older[-1] if self.older else self


@dataclass(frozen=True, slots=True)
class Derivation:
    signals: Signals
    state: CounterState
    reset: tuple[str, ...] = ()  # cumulative samples that went down since the previous scrape: a restart


def _completion_only(state: CounterState) -> dict[str, float]:
    return {name: state.values[name] for name in _COMPLETION_SAMPLES if name in state.values}


def detect_reset(values: Mapping[str, float], previous: CounterState | None) -> tuple[str, ...]:
    """Cumulative samples lower now than at the previous scrape (any one means the server restarted)."""
    if previous is None:
        return ()
    return tuple(
        name
        for name in CUMULATIVE_SAMPLES
        if name in values and name in previous.values and values[name] < previous.values[name]
    )


def is_restart(values: Mapping[str, float], previous: CounterState, fell: Sequence[str]) -> bool:
    """A restart starts every counter again: none keeps counting. Some falling while another still rises
    is a counter reset (a proxy alternating replicas, a worker's counter): no restart, and no reason to
    read /server_info again."""
    rose = any(
        values[n] > previous.values[n] for n in CUMULATIVE_SAMPLES if n in values and n in previous.values
    )
    return bool(fell) and not rose


def spec_enabled(recipe: Recipe | None) -> bool | None:
    """True/False when the recipe says whether speculative decoding is on; None when there is no recipe."""
    if recipe is None:
        return None
    algorithm = recipe.get("speculative_algorithm")
    return algorithm not in (None, "", "NONE", "none", False)


# -- the catalogue compiled to closures ----------------------------------------------------------------------
class _Cycle:
    """One derivation's inputs and the signals computed so far (closures read it)."""

    __slots__ = ("elapsed_s", "long_elapsed_s", "long_previous", "out", "params", "previous", "values")

    def __init__(
        self,
        values: Mapping[str, float],
        previous: Mapping[str, float] | None,
        elapsed_s: float,
        out: dict[str, float | None],
        long_previous: Mapping[str, float] | None = None,
        long_elapsed_s: float = 0.0,
        params: Mapping[str, float | None] | None = None,
    ) -> None:
        self.values = values
        self.previous = previous  # None: no window (first scrape, restart, no time elapsed)
        self.elapsed_s = elapsed_s
        self.out = out
        self.long_previous = long_previous  # the completion-counted rates' baseline
        self.long_elapsed_s = long_elapsed_s
        self.params = params or {}  # the config's numbers (``Param``): cost.gpu_hour_usd


_Fn = Callable[[_Cycle], float | None]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def gpu_key(sample: str, how: str = "sum") -> str:
    """The key of a DCGM field's value in ``values``: summed over the server's GPUs (the field's own name),
    averaged (``name:avg``), or how many GPUs report it (``name:count``)."""
    return sample if how == "sum" else f"{sample}:{how}"


def _compile(expr: Expr) -> _Fn:
    if isinstance(expr, Gauge):
        key = expr.family.samples[0]
        if expr.family.exposer == "dcgm":
            key = gpu_key(key, expr.how)
        return lambda c: c.values.get(key)
    if isinstance(expr, Count):
        key = gpu_key(expr.family.samples[0], "count")
        return lambda c: c.values.get(key)
    if isinstance(expr, Rate):
        family = expr.family
        sample = family.samples[0] if family.exposer == "dcgm" else f"sglang:{family.name}{expr.part}"
        # Completion-counted families move only when a request finishes: their rate spans the longer window.
        long = expr.family.at_completion
        own_clock = family.exposer == "dcgm"

        def rate(c: _Cycle) -> float | None:
            previous = c.long_previous if long else c.previous
            if previous is None:
                return None
            now, before = c.values.get(sample), previous.get(sample)
            if now is None or before is None or now < before:  # a counter that fell: unknown, never < 0
                return None
            elapsed_s = c.long_elapsed_s if long else c.elapsed_s
            if own_clock:
                read_at, read_before = c.values.get(GPU_READ_AT), previous.get(GPU_READ_AT)
                if read_at is not None and read_before is not None:
                    elapsed_s = read_at - read_before
                    if elapsed_s <= 0:
                        return None
            return _finite((now - before) / elapsed_s)

        return rate
    if isinstance(expr, Scale):
        inner, factor = _compile(expr.value), expr.factor

        def scale(c: _Cycle) -> float | None:
            x = inner(c)
            return _finite(x * factor) if x is not None else None

        return scale
    if isinstance(expr, Param):
        param = expr.name
        return lambda c: c.params.get(param)
    if isinstance(expr, Ratio):
        numerator, denominator = _compile(expr.numerator), _compile(expr.denominator)

        def ratio(c: _Cycle) -> float | None:
            den = denominator(c)
            if den is None or den <= 0:
                return None
            num = numerator(c)
            return _finite(num / den) if num is not None else None

        return ratio
    if isinstance(expr, Product):
        left, right = _compile(expr.left), _compile(expr.right)

        def product(c: _Cycle) -> float | None:
            a, b = left(c), right(c)
            return _finite(a * b) if a is not None and b is not None else None

        return product
    if isinstance(expr, Inverse):
        inner = _compile(expr.value)

        def inverse(c: _Cycle) -> float | None:
            x = inner(c)
            return _finite(1.0 / x) if x is not None and x > 0 else None

        return inverse
    if isinstance(expr, Total):
        parts = tuple(_compile(part) for part in expr.parts)

        def total(c: _Cycle) -> float | None:
            sum_ = 0.0
            for part in parts:
                x = part(c)
                if x is None:
                    return None
                sum_ += x
            return sum_

        return total
    if isinstance(expr, Positive):
        inner = _compile(expr.value)

        def positive(c: _Cycle) -> float | None:
            x = inner(c)
            return x if x is not None and x > 0 else None

        return positive
    if isinstance(expr, Zero):
        inner = _compile(expr.value)
        return lambda c: 0.0 if inner(c) == 0 else None
    if isinstance(expr, When):
        value, condition = _compile(expr.value), _compile(expr.condition)
        return lambda c: value(c) if condition(c) is not None else None
    if isinstance(expr, Unless):
        value, condition = _compile(expr.value), _compile(expr.condition)
        return lambda c: value(c) if condition(c) is None else None
    if isinstance(expr, First):
        choices = tuple(_compile(choice) for choice in expr.choices)

        def first(c: _Cycle) -> float | None:
            for choice in choices:
                x = choice(c)
                if x is not None:
                    return x
            return None

        return first
    name = expr.signal
    return lambda c: c.out.get(name)


def _evaluation_order() -> tuple[str, ...]:
    """Catalogue order, each signal after the signals it refers to."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise ValueError(f"signal catalogue: {' → '.join((*path, name))} refers to itself")
        expr = BY_NAME[name].expr
        for ref in refs_of(expr) if expr is not None else ():
            visit(ref, (*path, name))
        order.append(name)

    for signal in SIGNALS:
        visit(signal.name, ())
    return tuple(order)


_ORDER = _evaluation_order()
EVALUATION_ORDER: tuple[str, ...] = _ORDER  # every signal after the signals it refers to
_COMPILED: dict[str, _Fn] = {
    name: _compile(expr) for name in _ORDER if (expr := BY_NAME[name].expr) is not None
}
_PLAIN: dict[str, str] = {signal.name: signal.plain for signal in SIGNALS}
assert set(_ORDER) == set(SIGNAL_NAMES), "every Signals field is declared in collectors.signals"


def _dependents(names: frozenset[str]) -> tuple[str, ...]:
    """Signals that refer to any of ``names``, directly or through others, in evaluation order."""
    found: set[str] = set(names)
    for name in _ORDER:
        expr = BY_NAME[name].expr
        if expr is not None and any(ref in found for ref in refs_of(expr)):
            found.add(name)
    return tuple(name for name in _ORDER if name in found and name not in names)


# What a source may know better than /metrics: the server's GPU count from /server_info (the recipe).
GIVEN: frozenset[str] = frozenset({"gpu_count"})
_GIVEN_DEPENDENTS = _dependents(GIVEN)


def given_of(recipe: Recipe | None) -> dict[str, float]:
    """The signals a recipe gives outright (its GPU count), which win over what the metrics say."""
    if recipe is None or recipe.gpu_count is None:
        return {}
    return {"gpu_count": float(recipe.gpu_count)}


def _evaluate(
    cycle: _Cycle, plain: bool, given: Mapping[str, float] | None = None
) -> dict[str, float | None]:
    out = cycle.out
    for name in _ORDER:
        fn = _COMPILED.get(name)
        rule = _PLAIN[name] if plain else "as computed"
        if given and name in given:
            out[name] = given[name]
        elif rule == "one":
            out[name] = 1.0  # plain decoding emits exactly one token per request per step
        elif rule == "unknown":
            out[name] = None
        elif fn is None:
            out[name] = out.get(name)  # not from /metrics (max_running): the caller filled it in
        else:
            out[name] = fn(cycle)
    return out


def apply_plain_decoding(signals: Mapping[str, float | None]) -> dict[str, float | None]:
    """``signals`` as they are when the recipe says speculative decoding is off (the catalogue's plain rules):
    accept length 1, no accept rate, and what derives from them recomputed. For sources that got the rest
    elsewhere (the Prometheus source)."""
    out: dict[str, float | None] = dict(signals)
    cycle = _Cycle({}, None, 0.0, out)
    for name in _ORDER:
        rule = _PLAIN[name]
        if rule == "one":
            out[name] = 1.0
        elif rule == "unknown":
            out[name] = None
        elif rule == "recomputed" and (fn := _COMPILED.get(name)) is not None:
            out[name] = fn(cycle)
    return out


def apply_given(
    signals: Mapping[str, float | None],
    given: Mapping[str, float],
    params: Mapping[str, float | None] | None = None,
) -> dict[str, float | None]:
    """``signals`` with ``given`` (``given_of(recipe)``) in force and what refers to them recomputed from the
    other signals: for sources that computed the rest elsewhere (the Prometheus source's PromQL counted the
    exporter's GPUs)."""
    out: dict[str, float | None] = dict(signals)
    if not given:
        return out
    out.update(given)
    cycle = _Cycle({}, None, 0.0, out, params=params)
    for name in _GIVEN_DEPENDENTS:
        fn = _COMPILED.get(name)
        if fn is not None:
            out[name] = fn(cycle)
    return out


def _telemetry() -> tuple[str, ...]:
    """Signals read from the GPUs' exporter and what derives from them, but the GPU count a recipe gives."""
    read = frozenset(s.name for s in SIGNALS if any(f.exposer == "dcgm" for f in s.families)) - GIVEN
    derived = set(_dependents(read))
    return tuple(name for name in _ORDER if name in read or name in derived)


GPU_TELEMETRY: tuple[str, ...] = _telemetry()


def apply_server_gpus(
    signals: Mapping[str, float | None], gpus: int, params: Mapping[str, float | None] | None = None
) -> tuple[dict[str, float | None], str | None]:
    """``signals`` with the server's own GPU count (/server_info's) in force, for a source whose GPU figures
    counted the exporter's GPUs (PromQL's join on the node): when the node shows another number, its power
    is not this server's and the GPU telemetry is unknown (the reason is returned in words)."""
    shown = signals.get("gpu_count")
    out = dict(signals)
    problem = None
    if shown is not None and shown != gpus:
        problem = (
            f"GPU telemetry unknown: the node's exporter shows {shown:g} GPUs, the server runs on {gpus} "
            "(/server_info tp × pp × dp); set prometheus.node_label/gpu_node_label (or gpu_selector) so "
            "the join picks only its GPUs"
        )
        out.update(dict.fromkeys(GPU_TELEMETRY))
    return apply_given(out, {"gpu_count": float(gpus)}, params), problem


def derive_signals(
    values: Mapping[str, float],
    ts: float,
    previous: CounterState | None,
    recipe: Recipe | None = None,
    params: Mapping[str, float | None] | None = None,
) -> Derivation:
    """Derive one cycle's signals for one target.

    ``values`` are the kept samples (``Exposition.values``, plus the GPU exporter's fields summed over the
    server's GPUs: ``gpu_key``), ``ts`` when they were read on a monotonic clock (seconds; only differences
    matter), ``previous`` the state returned by the last derivation for this target (None on the first scrape
    or after a target change), ``params`` the config's numbers (``signals.config_params``).
    """
    reset = detect_reset(values, previous)
    elapsed_s = ts - previous.ts if previous is not None else 0.0
    windowed = previous is not None and not reset and elapsed_s > 0
    counters = {name: values[name] for name in _KEPT_SAMPLES if name in values}
    long_previous: Mapping[str, float] | None = None
    long_elapsed_s = 0.0
    older: tuple[CounterState, ...] = ()
    if windowed and previous is not None:
        baseline = previous.baseline(ts)
        long_previous, long_elapsed_s = baseline.values, ts - baseline.ts
        # Keep what the next completion-counted rate may need: back to the newest state a full window old.
        kept: list[CounterState] = []
        for earlier in (previous, *previous.older):
            # The earlier states were stored trimmed, without their own history: reused as they are.
            kept.append(earlier if not earlier.older else CounterState(earlier.ts, _completion_only(earlier)))
            if ts - earlier.ts >= COMPLETION_WINDOW_S:
                break
        older = tuple(kept)
    state = CounterState(ts=ts, values=counters, older=older)
    max_running = recipe.max_running if recipe is not None else None
    out: dict[str, float | None] = {"max_running": float(max_running) if max_running is not None else None}
    cycle = _Cycle(
        values,
        previous.values if windowed and previous is not None else None,
        elapsed_s,
        out,
        long_previous,
        long_elapsed_s,
        params,
    )
    signals = Signals(**_evaluate(cycle, spec_enabled(recipe) is False, given_of(recipe)))
    return Derivation(signals=signals, state=state, reset=reset)
