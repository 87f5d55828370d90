"""Service-level objectives, declared once beside the signal catalogue: what a good event is, and the
error-budget arithmetic every rendering shares.

An SLI counts events per window from SGLang's cumulative series, reset-safe:

- ``ttft``, ``tpot``, ``e2e``: good = the histogram's bucket at ``le = threshold_s`` (cumulative, so every
  request at or under the threshold), total = its ``_count``; a threshold must be a bucket boundary, since a
  count between two boundaries would be an interpolation passed off as exact. TPOT reads the per-request
  ``request_time_per_output_token_seconds`` (0.5.22+) and, before it, ``inter_token_latency_seconds``, whose
  ``_count`` counts tokens: the SLI is then the share of *tokens* on time (said wherever it is shown).
- ``availability``: total = ``num_requests_total``, bad = ``num_aborted_requests_total``.

Renderings: ``event_counts`` (the direct source, per scrape: the change since the previous scrape) and
``collectors.prometheus.slo_rules`` (PromQL: ``increase`` over a window, Sloth's recording rules). The
error-budget arithmetic on the counts (burn rates, budget left, attribution, goodput) is ``analysis.slo_*``:
the pages, the CLI and the alert rule ``ErrorBudgetBurn`` read it from there.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from collectors.signals import ITL, REQUESTS, TTFT, Family
from config import Config, ConfigError, SloSettings
from config.settings import (
    DEFAULT_BOUNDARIES_S,
    boundary_of,
)

# How the exposition reader keeps a sample: a gauge's value, a cumulative sum over series, or one histogram
# bucket (``bucket_sample``) summed the same way.
SampleKind = Literal["gauge", "cumulative", "bucket"]

# -- the families ------------------------------------------------------------------------------------------
# ITL (inter_token_latency_seconds) counts tokens: the TPOT SLI before 0.5.22. QUEUE_TIME splits a TTFT burn.
TPOT_PER_REQUEST = Family("request_time_per_output_token_seconds", "histogram", "0.5.22")
E2E = Family("e2e_request_latency_seconds", "histogram", "0.3.6")
ABORTED = Family("num_aborted_requests_total", "counter", "0.4.2")

LATENCY_FAMILIES: dict[str, tuple[Family, ...]] = {
    "ttft": (TTFT,),
    "tpot": (TPOT_PER_REQUEST, ITL),  # the first one the server exposes
    "e2e": (E2E,),
}
# What the SLI measures, in words (the page, the CLI and the alert say it).
SLI_WORDS = {
    "ttft": "requests whose time to first token is at most {t}",
    "tpot": "requests whose time per output token is at most {t}",
    "e2e": "requests whose end-to-end latency is at most {t}",
    "availability": "requests not aborted",
}
# The SRE workbook's multi-window, multi-burn-rate conditions for a 30-day period: (long s, short s, factor).
WORKBOOK_PERIOD_S = 30 * 86400.0
WORKBOOK_PAGE: tuple[tuple[float, float, float], ...] = ((3600.0, 300.0, 14.4), (21600.0, 1800.0, 6.0))
WORKBOOK_TICKET: tuple[tuple[float, float, float], ...] = ((259200.0, 21600.0, 1.0),)


def bucket_sample(family: Family, le: float) -> str:
    """The canonical key of one cumulative bucket, as the exposition reader keeps it."""
    return f"sglang:{family.name}_bucket{{le={format_le(le)}}}"


def format_le(le: float) -> str:
    """One spelling per boundary (``1``, ``0.4``, ``+Inf``), whatever the server wrote (``1.0``, ``4e-1``)."""
    if math.isinf(le):
        return "+Inf"
    return f"{le:g}" if float(f"{le:g}") == le else repr(le)


def format_seconds(seconds: float) -> str:
    """A threshold as people say it: 800 ms, 1 s, 2.5 s."""
    return f"{seconds * 1000:g} ms" if seconds < 1 else f"{seconds:g} s"


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """Both windows' burn rates above ``factor``: the condition of one severity."""

    long_s: float
    short_s: float
    factor: float


@dataclass(frozen=True, slots=True)
class Sli:
    kind: str  # ttft | tpot | e2e | availability
    threshold_s: float | None = None

    @property
    def key(self) -> str:
        """Stable, short: ``ttft_le_1``, ``tpot_le_0.04``, ``availability``."""
        return self.kind if self.threshold_s is None else f"{self.kind}_le_{format_le(self.threshold_s)}"

    @property
    def words(self) -> str:
        t = format_seconds(self.threshold_s) if self.threshold_s is not None else ""
        return SLI_WORDS[self.kind].format(t=t)

    @property
    def families(self) -> tuple[Family, ...]:
        return (REQUESTS, ABORTED) if self.kind == "availability" else LATENCY_FAMILIES[self.kind]

    def samples(self) -> dict[str, SampleKind]:
        """Every sample the direct source must keep for this SLI: counter → "cumulative", threshold bucket →
        "bucket"."""
        if self.threshold_s is None:
            return {family.samples[0]: "cumulative" for family in self.families}
        out: dict[str, SampleKind] = {}
        for family in self.families:
            out[bucket_sample(family, self.threshold_s)] = "bucket"
            out[f"sglang:{family.name}_count"] = "cumulative"
        return out


@dataclass(frozen=True, slots=True)
class Slo:
    """One configured objective, validated: its SLI, objective, period, scope filter and alert conditions."""

    name: str
    sli: Sli
    objective: float
    window_s: float
    match: tuple[tuple[str, str], ...] = ()
    page: tuple[BurnWindow, ...] = ()
    ticket: tuple[BurnWindow, ...] = ()
    min_events: float = 100.0

    @property
    def budget(self) -> float:
        """The error budget as a ratio: 1 − objective."""
        return 1.0 - self.objective

    def covers(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(name) == value for name, value in self.match)

    def scopes(self, labels: Mapping[str, str]) -> tuple[Scope, ...]:
        """The scopes a target with ``labels`` counts in: the SLO's whole fleet, and its deployment."""
        if not self.covers(labels):
            return ()
        whole = Scope(self.match)
        deployment = labels.get("deployment", "")
        if not deployment or dict(self.match).get("deployment") == deployment:
            return (whole,)
        return (whole, Scope(tuple(sorted({**dict(self.match), "deployment": deployment}.items()))))


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """The labels that select a scope (``()``: the whole fleet the SLO covers)."""

    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """Stable text form, stored: ``deployment=east`` (``""``: the whole fleet)."""
        return ",".join(f"{name}={value}" for name, value in self.labels)

    @classmethod
    def from_key(cls, key: str) -> Scope:
        if not key:
            return cls()
        return cls(tuple(sorted(tuple(part.split("=", 1)) for part in key.split(","))))  # type: ignore[misc]

    def as_dict(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def words(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in self.labels) or "whole fleet"


# -- counting ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EventCounts:
    """Good and total events over some window (``total`` ≥ ``good`` ≥ 0)."""

    good: float = 0.0
    total: float = 0.0

    @property
    def bad(self) -> float:
        return max(self.total - self.good, 0.0)

    def __add__(self, other: EventCounts) -> EventCounts:
        return EventCounts(self.good + other.good, self.total + other.total)


def event_counts(
    sli: Sli, values: Mapping[str, float], previous: Mapping[str, float] | None
) -> EventCounts | None:
    """The events one target served between two scrapes (their kept cumulative samples); None when
    unknown: the first scrape, a counter that went down (a restart: the change is not this window's), or a
    server that exposes none of the SLI's families (or not the threshold's bucket)."""
    if previous is None:
        return None
    return counter_for(sli)(values, previous)


Counter = Callable[[Mapping[str, float], Mapping[str, float]], "EventCounts | None"]


@functools.lru_cache(maxsize=256)
def counter_for(sli: Sli) -> Counter:
    """``event_counts`` of one SLI (given a previous scrape) with its sample names worked out once: a
    source counting a fleet every scrape keeps these."""
    if sli.kind == "availability":
        requests, aborted = REQUESTS.samples[0], ABORTED.samples[0]

        def availability(values: Mapping[str, float], previous: Mapping[str, float]) -> EventCounts | None:
            total = _delta(values, previous, requests)
            if total is None:
                return None
            bad = _delta(values, previous, aborted)
            if bad is None:
                if aborted in values:
                    return None  # the abort counter went down: a restart
                bad = 0.0  # 0.4.1 and older: no abort counter
            return EventCounts(max(total - min(bad, total), 0.0), total)

        return availability
    assert sli.threshold_s is not None
    threshold_s = sli.threshold_s
    keys = tuple(
        (f"sglang:{family.name}_count", bucket_sample(family, threshold_s)) for family in sli.families
    )

    def latency(values: Mapping[str, float], previous: Mapping[str, float]) -> EventCounts | None:
        # Inlined (no _delta calls): a thousand servers × every SLI, every scrape.
        for count, bucket in keys:
            total_now = values.get(count)
            if total_now is None:
                continue
            total_before, good_now, good_before = (
                previous.get(count),
                values.get(bucket),
                previous.get(bucket),
            )
            if total_before is None or good_now is None or good_before is None:
                return None
            if total_now < total_before or good_now < good_before:
                return None  # a counter went down: a restart
            total, good = total_now - total_before, good_now - good_before
            return EventCounts(good if good < total else total, total)
        return None

    return latency


def _delta(values: Mapping[str, float], previous: Mapping[str, float], name: str) -> float | None:
    now, before = values.get(name), previous.get(name)
    if now is None or before is None or now < before:
        return None
    return now - before


def missing_reason(sli: Sli, values: Mapping[str, float]) -> str | None:
    """Why ``event_counts`` cannot count on a server exposing ``values`` (None when it can)."""
    if sli.kind == "availability":
        return None if REQUESTS.samples[0] in values else "no sglang:num_requests_total (SGLang < 0.4.2)"
    assert sli.threshold_s is not None
    for family in sli.families:
        if f"sglang:{family.name}_count" in values:
            if bucket_sample(family, sli.threshold_s) in values:
                return None
            return (
                f"sglang:{family.name} has no bucket le={format_le(sli.threshold_s)} (the server's "
                "--bucket-* boundaries differ): the SLI is unknown, never interpolated"
            )
    names = " or ".join(f"sglang:{f.name}" for f in sli.families)
    return f"no {names} histogram on the server"


def scaled_conditions(
    workbook: Sequence[tuple[float, float, float]], window_s: float
) -> tuple[BurnWindow, ...]:
    """The workbook's 30-day conditions for another period: same windows, same share of the budget spent
    (factor × long ÷ period), so the factor scales with the period."""
    return tuple(
        BurnWindow(long_s, short_s, factor * window_s / WORKBOOK_PERIOD_S)
        for long_s, short_s, factor in workbook
    )


def build_slos(config: Config, source: str = "<config>") -> tuple[Slo, ...]:
    """The configured SLOs with their alert conditions (the workbook's, scaled to each period, unless set);
    ``ConfigError`` for a condition longer than the SLO's period. (A threshold off the histogram's bucket
    boundaries already failed when the config was loaded.)"""
    return tuple(_build(index, slo, source) for index, slo in enumerate(config.slos))


def _build(index: int, raw: SloSettings, source: str) -> Slo:
    sli = Sli(raw.sli.kind, raw.sli.threshold_s)
    if sli.threshold_s is not None:
        # The settings checked it is a boundary (``SloSettings``); the boundary itself is kept, so 1.0000001
        # and 1 name one bucket.
        boundary = boundary_of(sli.threshold_s, raw.buckets or DEFAULT_BOUNDARIES_S[sli.kind])
        sli = Sli(sli.kind, boundary if boundary is not None else sli.threshold_s)
    window_s = raw.window_s
    page = (
        tuple(BurnWindow(w.long_s, w.short_s, w.factor) for w in raw.alerting.page)
        if raw.alerting.page is not None
        else scaled_conditions(WORKBOOK_PAGE, window_s)
    )
    ticket = (
        tuple(BurnWindow(w.long_s, w.short_s, w.factor) for w in raw.alerting.ticket)
        if raw.alerting.ticket is not None
        else scaled_conditions(WORKBOOK_TICKET, window_s)
    )
    for severity, conditions in (("page", page), ("ticket", ticket)):
        for n, condition in enumerate(conditions):
            if condition.long_s > window_s:
                raise ConfigError(
                    source,
                    f"slos[{index}].alerting.{severity}[{n}].long_s",
                    f"at most the SLO's window ({window_s:g} s)",
                    condition.long_s,
                )
    return Slo(
        name=raw.name,
        sli=sli,
        objective=raw.objective,
        window_s=window_s,
        match=tuple(sorted(raw.match.items())),
        page=page,
        ticket=ticket,
        min_events=raw.alerting.min_events,
    )


def kept_samples(slos: Iterable[Slo]) -> dict[str, SampleKind]:
    """Every sample the direct source keeps for these SLOs (bucket keys and cumulative counters)."""
    out: dict[str, SampleKind] = {}
    for slo in slos:
        out.update(slo.sli.samples())
    return out


def slis(slos: Iterable[Slo]) -> tuple[Sli, ...]:
    """The distinct SLIs of these SLOs (two SLOs on one SLI count it once)."""
    seen: dict[str, Sli] = {}
    for slo in slos:
        seen.setdefault(slo.sli.key, slo.sli)
    return tuple(seen.values())
