"""The SLOs of ``collectors.slo`` rendered as PromQL, once: Sloth-compatible recording rules per SLO and
scope, and the burn conditions the ``ErrorBudgetBurn`` alert rules test (``alerts.rules.error_budget_burn``).

An SLI's events over a window are ``increase()`` of SGLang's cumulative series, reset-safe like the direct
source's per-scrape deltas: good = the bucket at ``le = threshold_s``, total = ``_count`` (availability: bad =
``num_aborted_requests_total``, total = ``num_requests_total``), both spellings (``sglang:`` as exposed,
``sglang_`` as stored from OpenMetrics), ``tp_rank`` "0" or absent, summed over ``priority``, ``is_streaming``
and any other label. Per target first (a TPOT SLI reads the per-request histogram where the server has it,
else ``inter_token_latency_seconds``), then per scope.

Scopes: the SLO's whole fleet (its ``match`` labels) and, unless the match fixes a deployment, each
``deployment``. Prometheus sees a deployment only as a label on the series: set it as a target label in the
scrape config (``static_configs: [{targets: [...], labels: {deployment: east}}]``, or a relabelling), the same
value as the target's ``deployment`` in specwatch's config; series without one count in the whole fleet only
(in these rules: specwatch's own counts, ``slo_counts``, also read the config's labels per target).

The ``le`` label: SGLang's prometheus_client writes boundaries as Go-style floats (``le="1.0"``, ``"0.04"``),
a Go or OpenMetrics exporter may write ``le="1"``, and Prometheus 3 normalises text-format ``le`` to the float
form on ingestion. The matcher accepts each spelling of the one boundary and nothing else: ``le=~"1(\\.0+)?"``
for a whole number, ``le=~"0\\.040*"`` for a decimal (never a neighbouring bucket such as ``10`` or ``0.4``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collectors.prometheus.queries import SignalQueries
from collectors.signal_expr import Family
from collectors.signals import REQUESTS
from collectors.slo import ABORTED, BurnWindow, Slo

SLOTH_SERVICE = "specwatch"
# Sloth's windows (``slo:sli_error:ratio_rate<window>``), plus each condition's and the period.
SLOTH_WINDOWS_S: tuple[float, ...] = (300.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0, 259200.0)
LONG_WINDOW_S = 3600.0  # windows this long or longer are recorded every LONG_INTERVAL_S
LONG_INTERVAL_S = 60.0
DAY_WINDOW_S = 86400.0  # windows this long or longer (and the period) are recorded every PERIOD_INTERVAL_S
PERIOD_INTERVAL_S = 300.0  # increase over days or weeks of every server: not at every evaluation
# What a reader of a series recorded every PERIOD_INTERVAL_S looks back over for its newest evaluation:
# twice the interval, so a late evaluation leaves no gap (the engines' default lookback is the interval).
RECORDED_LOOKBACK_S = 2 * PERIOD_INTERVAL_S
SLOTH_LABELS = ("sloth_id", "sloth_service", "sloth_slo", "sloth_window")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def window_name(seconds: float) -> str:
    """A window as Sloth and PromQL write it, in its largest whole unit: ``5m``, ``1h``, ``3d``, ``28d``."""
    whole = round(seconds)
    if whole <= 0 or not math.isclose(whole, seconds):
        return f"{round(seconds * 1000)}ms"
    for unit, size in _UNITS:
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"  # unreachable: every whole number of seconds divides by 1


def le_matcher(boundary: float) -> str:
    """The regex matching every spelling of one bucket boundary (see the module docstring)."""
    if float(boundary).is_integer():
        return f"{int(boundary)}(\\\\.0+)?"
    text = repr(float(boundary))
    if "e" in text:
        text = f"{boundary:.12f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"{re.escape(whole)}\\\\.{fraction}0*"


def sloth_id(slo: Slo) -> str:
    return f"{SLOTH_SERVICE}-{slo.name}"


@dataclass(frozen=True, slots=True)
class ScopeShape:
    """How one kind of scope is summed: by which labels, and which extra matchers keep its series."""

    by: tuple[str, ...]  # the scope's labels (the SLO's match keys, plus deployment per deployment)
    matchers: str = ""  # e.g. deployment!="" (a series without a deployment is in no deployment scope)


def scope_shapes(slo: Slo) -> tuple[ScopeShape, ...]:
    """The whole fleet the SLO covers, and per deployment unless its match fixes one (as ``Slo.scopes``)."""
    keys = tuple(name for name, _ in slo.match)
    whole = ScopeShape(keys)
    if "deployment" in keys:
        return (whole,)
    return (whole, ScopeShape(tuple(sorted((*keys, "deployment"))), 'deployment!=""'))


@dataclass(frozen=True, slots=True)
class SloQueries:
    """The PromQL of one SLO's SLI events over a window, for one fleet selector."""

    queries: SignalQueries

    def _matchers(self, slo: Slo, shape: ScopeShape, extra: str = "") -> str:
        parts = [extra] if extra else []
        parts.append(self.queries.cumulative_matchers)
        parts += [f'{name}="{value}"' for name, value in slo.match]
        if shape.matchers:
            parts.append(shape.matchers)
        return ", ".join(parts)

    def _increase(self, name: str, matchers: str, window: str, by: Sequence[str]) -> str:
        """Per target (and scope labels): the increase of both spellings of ``sglang:<name>``."""
        labels = ", ".join(("instance", "job", *by))
        return (
            f"sum by ({labels}) (increase(sglang:{name}{{{matchers}}}[{window}]) "
            f"or increase(sglang_{name}{{{matchers}}}[{window}]))"
        )

    def per_target(self, slo: Slo, shape: ScopeShape, window_s: float) -> tuple[str, str]:
        """(bad, total) events per target over the window, labelled instance, job and the scope's labels.
        Targets that cannot say (no bucket at the threshold) are in neither."""
        window = window_name(window_s)
        if slo.sli.kind == "availability":
            matchers = self._matchers(slo, shape)
            total = self._increase(REQUESTS.name, matchers, window, shape.by)
            aborted = self._increase(ABORTED.name, matchers, window, shape.by)
            # No abort counter (SGLang < 0.4.2): none aborted, as the direct source; bad capped at total.
            bad = f"(({aborted}) or (0 * {total}))"
            return f"(({bad} < {total}) or ({total}))", total
        assert slo.sli.threshold_s is not None
        pairs = [self._family(slo, shape, family, window) for family in slo.sli.families]
        bad, counted = pairs[0]
        for later_bad, later_counted in pairs[1:]:
            # The first family the server exposes, as the direct source: the next one only where it has none.
            earlier = self._increase(
                f"{slo.sli.families[0].name}_count", self._matchers(slo, shape), window, shape.by
            )
            bad = f"({bad}) or (({later_bad}) unless on (instance, job) ({earlier}))"
            counted = f"({counted}) or (({later_counted}) unless on (instance, job) ({earlier}))"
        return bad, counted

    def _family(self, slo: Slo, shape: ScopeShape, family: Family, window: str) -> tuple[str, str]:
        assert slo.sli.threshold_s is not None
        total = self._increase(f"{family.name}_count", self._matchers(slo, shape), window, shape.by)
        le = f'le=~"{le_matcher(slo.sli.threshold_s)}"'
        good = self._increase(f"{family.name}_bucket", self._matchers(slo, shape, le), window, shape.by)
        return f"clamp_min(({total}) - ({good}), 0)", f"({total}) and ({good})"

    def oldest_request(
        self, slo: Slo, scope_labels: Mapping[str, str], *, within_s: float | None = None, every: str = "1h"
    ) -> str:
        """When the scope's oldest sample of the SLI's own events (its histogram's ``_count``, or the request
        counter) within the SLO's period (or the last ``within_s``) was taken (unix s, at the resolution
        ``every``): how much of the period Prometheus holds."""
        matchers = ", ".join(
            [self.queries.cumulative_matchers, *(f'{k}="{v}"' for k, v in sorted(scope_labels.items()))]
        )
        window = window_name(slo.window_s if within_s is None else within_s)
        return _min_of_each(
            slo, matchers, lambda series: f"min_over_time(timestamp({series})[{window}:{every}])"
        )

    def sampled(self, slo: Slo) -> str:
        """When the oldest of the SLI's event series' latest samples within the lookback (5 minutes) before
        the instant it is asked at was taken; empty where none: one instant's samples, however long the
        period (what ``oldest_request`` finds at each step of its subquery)."""
        return _min_of_each(slo, self.queries.cumulative_matchers, lambda series: f"timestamp({series})")

    def event_series(self, slo: Slo) -> str:
        """A series selector of the SLI's own events (both spellings, every target the SLO may count):
        what ``/api/v1/series`` lists to say which targets a scope holds without reading a sample."""
        names = "|".join(_event_series(slo))  # catalogue names: [a-z_] only
        return f'{{__name__=~"sglang[:_](?:{names})", {self.queries.cumulative_matchers}}}'

    def error_ratio(self, slo: Slo, shape: ScopeShape, window_s: float) -> str:
        """Bad ÷ total over the window per scope; no series without events (no traffic is unknown)."""
        bad, total = self.per_target(slo, shape, window_s)
        return f"{_sum(shape.by)} (\n  {bad}\n)\n/\n({_sum(shape.by)} (\n  {total}\n) > 0)"

    def total(self, slo: Slo, shape: ScopeShape, window_s: float) -> str:
        """The events the error ratio counts over the window, per scope (the traffic floor reads it)."""
        _, total = self.per_target(slo, shape, window_s)
        return f"{_sum(shape.by)} (\n  {total}\n)"


def _min_of_each(slo: Slo, matchers: str, render: Callable[[str], str]) -> str:
    """``min`` over ``render`` of each of the SLI's event series, in both spellings."""
    found = " or ".join(
        render(f"{prefix}{name}{{{matchers}}}")
        for name in _event_series(slo)
        for prefix in ("sglang:", "sglang_")
    )
    return f"min({found})"


def _event_series(slo: Slo) -> list[str]:
    """The series (without the ``sglang:`` prefix) counting the SLI's events: its histograms' ``_count``,
    or the request counter."""
    if slo.sli.kind == "availability":
        return [REQUESTS.name]
    return [f"{family.name}_count" for family in slo.sli.families]


def _every_scope(slo: Slo, render: Callable[[ScopeShape], str]) -> str:
    """One expression for every scope of the SLO (their label sets differ, so ``or`` keeps them all): one
    rule per recorded name, as promtool wants."""
    parts = [render(shape) for shape in scope_shapes(slo)]
    return parts[0] if len(parts) == 1 else "\nor\n".join(f"(\n{_indent(p)}\n)" for p in parts)


def _sum(by: Sequence[str]) -> str:
    return f"sum by ({', '.join(by)})" if by else "sum"


def _number(value: float) -> str:
    return f"{value:.12g}"


def selector(slo: Slo, window: str | None = None) -> str:
    """The recorded series of one SLO: ``{sloth_id="specwatch-ttft-1s"}`` (and one window)."""
    parts = [f'sloth_id="{sloth_id(slo)}"']
    if window is not None:
        parts.append(f'sloth_window="{window}"')
    return "{" + ", ".join(parts) + "}"


def windows_s(slo: Slo) -> tuple[float, ...]:
    """Every window recorded for the SLO except the period: Sloth's, and each condition's two."""
    conditions = [*slo.page, *slo.ticket]
    found = {*SLOTH_WINDOWS_S, *(c.long_s for c in conditions), *(c.short_s for c in conditions)}
    return tuple(sorted(w for w in found if w < slo.window_s))


def _labels(slo: Slo, window: str | None = None) -> dict[str, str]:
    out = {"sloth_id": sloth_id(slo), "sloth_service": SLOTH_SERVICE, "sloth_slo": slo.name}
    if window is not None:
        out["sloth_window"] = window
    return out


def _window_rules(slo: Slo, q: SloQueries, windows: Sequence[float]) -> list[dict[str, Any]]:
    """Each window's error ratio and its events: with the ratios the events are a report's counts
    (``slo_counts`` reads them with use_recording_rules instead of increase() over raw series)."""
    return [
        {
            "record": f"slo:{name}{window_name(seconds)}",
            "expr": _every_scope(slo, functools.partial(render, slo, window_s=seconds)),
            "labels": _labels(slo, window_name(seconds)),
        }
        for name, render in (("sli_error:ratio_rate", q.error_ratio), ("sli_total:increase", q.total))
        for seconds in windows
    ]


def recording_groups(slo: Slo, queries: SignalQueries, *, interval_s: float) -> list[dict[str, Any]]:
    """Four groups for one SLO: the windows under an hour and the burn rates at the evaluation interval,
    the windows under a day at least a minute apart, and those of a day or more and the whole period
    (``increase`` over days or weeks) every ``PERIOD_INTERVAL_S``. An ``increase`` over days of every
    server's histogram is what the engine pays for: at 1,000 servers the windows of 1 h to 3 d once a minute
    were two thirds of a Prometheus's rule evaluation, most of it the 1 d and 3 d ones (bench prometheus's
    engines). A minute moves no sub-day window's burn rate that an alert reads, five move a day's by under
    0.4 %; the readers of the day windows take their newest evaluation (``newest``)."""
    q = SloQueries(queries)
    short = [w for w in windows_s(slo) if w < LONG_WINDOW_S]
    long = [w for w in windows_s(slo) if w >= LONG_WINDOW_S and not every_five_minutes(slo, w)]
    days = [w for w in windows_s(slo) if every_five_minutes(slo, w)]
    rules = _window_rules(slo, q, short)
    on = "on (sloth_id, sloth_service, sloth_slo) group_left"
    rules += [
        {
            "record": "slo:objective:ratio",
            "expr": f"vector({_number(slo.objective)})",
            "labels": _labels(slo),
        },
        {
            "record": "slo:error_budget:ratio",
            "expr": f"vector({_number(slo.budget)})",
            "labels": _labels(slo),
        },
        {
            "record": "slo:time_period:days",
            "expr": f"vector({_number(slo.window_s / 86400)})",
            "labels": _labels(slo),
        },
        {
            "record": "slo:current_burn_rate:ratio",
            "expr": f"slo:sli_error:ratio_rate5m{selector(slo)}\n/ {on}\n"
            f"slo:error_budget:ratio{selector(slo)}",
            "labels": _labels(slo),
        },
    ]
    period = window_name(slo.window_s)
    period_rules: list[dict[str, Any]] = [
        {
            "record": f"slo:sli_error:ratio_rate{period}",
            "expr": _every_scope(slo, functools.partial(q.error_ratio, slo, window_s=slo.window_s)),
            "labels": _labels(slo, period),
        },
        {
            "record": f"slo:sli_total:increase{period}",
            "expr": _every_scope(slo, functools.partial(q.total, slo, window_s=slo.window_s)),
            "labels": _labels(slo, period),
        },
    ]
    period_rules += [
        {
            "record": "slo:period_burn_rate:ratio",
            "expr": f"slo:sli_error:ratio_rate{period}{selector(slo)}\n/ {on}\n"
            f"slo:error_budget:ratio{selector(slo)}",
            "labels": _labels(slo),
        },
        {
            "record": "slo:period_error_budget_remaining:ratio",
            "expr": f"1 - slo:period_burn_rate:ratio{selector(slo)}",
            "labels": _labels(slo),
        },
    ]
    every_minute = window_name(max(interval_s, LONG_INTERVAL_S))
    every_five = window_name(max(interval_s, PERIOD_INTERVAL_S))
    later = [
        (f"specwatch-slo-{slo.name}-long", every_minute, _window_rules(slo, q, long)),
        (f"specwatch-slo-{slo.name}-days", every_five, _window_rules(slo, q, days)),
        (f"specwatch-slo-{slo.name}-period", every_five, period_rules),
    ]
    return [
        {"name": f"specwatch-slo-{slo.name}", "interval": window_name(interval_s), "rules": rules},
        *({"name": name, "interval": every, "rules": group} for name, every, group in later if group),
    ]


def every_five_minutes(slo: Slo, window_s: float) -> bool:
    """Whether the SLO's recordings over ``window_s`` are evaluated every ``PERIOD_INTERVAL_S``: the windows
    of a day or more, and the period (its budget and burn rate too), however short it is."""
    return window_s >= DAY_WINDOW_S or window_s >= slo.window_s


def newest(series: str, slo: Slo, window_s: float) -> str:
    """A recorded series of the SLO (a selector) over ``window_s`` as an alert or a panel reads it: those
    evaluated every ``PERIOD_INTERVAL_S``, which the engines' 5-minute lookback may just miss, as their
    newest evaluation within ``RECORDED_LOOKBACK_S``."""
    if not every_five_minutes(slo, window_s):
        return series
    return f"last_over_time({series}[{window_name(RECORDED_LOOKBACK_S)}])"


def burn_condition(slo: Slo, window: BurnWindow, factor: float) -> str:
    """Both windows burn above ``factor`` with at least ``min_events`` in the long one; per scope, the
    long window's burn rate as value (``ErrorBudgetBurn``'s condition, as ``BurnCheck.holds``)."""

    def read(name: str, window_s: float) -> str:
        return newest(f"{name}{window_name(window_s)}{selector(slo)}", slo, window_s)

    budget, threshold = _number(slo.budget), _number(factor)
    both = "and ignoring (sloth_window)"
    return (
        f"{read('slo:sli_error:ratio_rate', window.long_s)} / {budget} > {threshold}\n"
        f"{both} {read('slo:sli_error:ratio_rate', window.short_s)} / {budget} > {threshold}\n"
        f"{both} {read('slo:sli_total:increase', window.long_s)} >= {_number(slo.min_events)}"
    )


def burn_expr(slo: Slo, windows: Sequence[BurnWindow], fraction: float = 1.0) -> str:
    """Any of the conditions, one series per scope (the highest long-window burn rate), without the sloth
    labels: the alert's labels are the scope's, as the engine's."""
    parts = [f"(\n{_indent(burn_condition(slo, w, w.factor * fraction))}\n)" for w in windows]
    return f"max without ({', '.join(SLOTH_LABELS)}) (\n" + _indent("\nor\n".join(parts)) + "\n)"


def scope_labels(slo: Slo) -> tuple[str, ...]:
    """Every label a scope of the SLO can carry (the alert's hysteresis joins on them)."""
    return tuple(sorted({label for shape in scope_shapes(slo) for label in shape.by}))


def recorded_names(slos: Sequence[Slo]) -> set[str]:
    """Every series name the SLO groups record (Grafana's --check)."""
    out = {"slo:objective:ratio", "slo:error_budget:ratio", "slo:time_period:days"}
    out |= {
        "slo:current_burn_rate:ratio",
        "slo:period_burn_rate:ratio",
        "slo:period_error_budget_remaining:ratio",
    }
    for slo in slos:
        out |= {f"slo:sli_error:ratio_rate{window_name(w)}" for w in (*windows_s(slo), slo.window_s)}
        out |= {f"slo:sli_total:increase{window_name(w)}" for w in (*windows_s(slo), slo.window_s)}
    return out


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
