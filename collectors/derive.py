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
from collectors.signals import (
    BY_NAME,
    COMPLETION_WINDOW_S,
    SIGNALS,
    Expr,
    First,
    Gauge,
    Inverse,
    Positive,
    Product,
    Rate,
    Ratio,
    Ref,
    Total,
    Unless,
    When,
    Zero,
    all_families,
)

# Counters and histograms' _sum/_count (the direct reader sums them over labels): they only ever go up, except
# at a restart or a counter reset.
CUMULATIVE_SAMPLES: tuple[str, ...] = tuple(
    dict.fromkeys(sample for family in all_families() if family.kind != "gauge" for sample in family.samples)
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

    __slots__ = ("elapsed_s", "long_elapsed_s", "long_previous", "out", "previous", "values")

    def __init__(
        self,
        values: Mapping[str, float],
        previous: Mapping[str, float] | None,
        elapsed_s: float,
        out: dict[str, float | None],
        long_previous: Mapping[str, float] | None = None,
        long_elapsed_s: float = 0.0,
    ) -> None:
        self.values = values
        self.previous = previous  # None: no window (first scrape, restart, no time elapsed)
        self.elapsed_s = elapsed_s
        self.out = out
        self.long_previous = long_previous  # the completion-counted rates' baseline
        self.long_elapsed_s = long_elapsed_s


_Fn = Callable[[_Cycle], float | None]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _compile(expr: Expr) -> _Fn:
    if isinstance(expr, Gauge):
        key = expr.family.samples[0]
        return lambda c: c.values.get(key)
    if isinstance(expr, Rate):
        sample = f"sglang:{expr.family.name}{expr.part}"
        # Completion-counted families move only when a request finishes: their rate spans the longer window.
        long = expr.family.at_completion

        def rate(c: _Cycle) -> float | None:
            previous = c.long_previous if long else c.previous
            if previous is None:
                return None
            now, before = c.values.get(sample), previous.get(sample)
            if now is None or before is None:
                return None
            return _finite((now - before) / (c.long_elapsed_s if long else c.elapsed_s))

        return rate
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


def _refs(expr: Expr) -> tuple[str, ...]:
    if isinstance(expr, Ref):
        return (expr.signal,)
    children: tuple[Expr, ...] = ()
    if isinstance(expr, Ratio):
        children = (expr.numerator, expr.denominator)
    elif isinstance(expr, Product):
        children = (expr.left, expr.right)
    elif isinstance(expr, Inverse | Positive | Zero):
        children = (expr.value,)
    elif isinstance(expr, When | Unless):
        children = (expr.value, expr.condition)
    elif isinstance(expr, Total):
        children = expr.parts
    elif isinstance(expr, First):
        children = expr.choices
    return tuple(ref for child in children for ref in _refs(child))


def _evaluation_order() -> tuple[str, ...]:
    """Catalogue order, each signal after the signals it refers to."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise ValueError(f"signal catalogue: {' → '.join((*path, name))} refers to itself")
        expr = BY_NAME[name].expr
        for ref in _refs(expr) if expr is not None else ():
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


def _evaluate(cycle: _Cycle, plain: bool) -> dict[str, float | None]:
    out = cycle.out
    for name in _ORDER:
        fn = _COMPILED.get(name)
        rule = _PLAIN[name] if plain else "as computed"
        if rule == "one":
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


def derive_signals(
    values: Mapping[str, float],
    ts: float,
    previous: CounterState | None,
    recipe: Recipe | None = None,
) -> Derivation:
    """Derive one cycle's signals for one target.

    ``values`` are the kept samples (``Exposition.values``), ``ts`` when they were read on a monotonic clock
    (seconds; only differences matter), ``previous`` the state returned by the last derivation for this
    target (None on the first scrape or after a target change).
    """
    reset = detect_reset(values, previous)
    elapsed_s = ts - previous.ts if previous is not None else 0.0
    windowed = previous is not None and not reset and elapsed_s > 0
    counters = {name: values[name] for name in CUMULATIVE_SAMPLES if name in values}
    long_previous: Mapping[str, float] | None = None
    long_elapsed_s = 0.0
    older: tuple[CounterState, ...] = ()
    if windowed and previous is not None:
        baseline = previous.baseline(ts)
        long_previous, long_elapsed_s = baseline.values, ts - baseline.ts
        # Keep what the next completion-counted rate may need: back to the newest state a full window old.
        kept: list[CounterState] = []
        for earlier in (previous, *previous.older):
            # The earlier states were stored without their own history: reused as they are, not rebuilt.
            kept.append(earlier if not earlier.older else CounterState(earlier.ts, earlier.values))
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
    )
    signals = Signals(**_evaluate(cycle, spec_enabled(recipe) is False))
    return Derivation(signals=signals, state=state, reset=reset)
