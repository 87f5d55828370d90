"""Where each SLO stands, computed once for every reader (the SLO page, the Fleet status, ``specwatch slo``
and the ``ErrorBudgetBurn`` rule): budget over the period, burn rates per window, the burn conditions, the
goodput bounds, and which half of the fraction burned the budget.

Counts come from a ``SloCounts`` (the ledger in the collecting process, the SLO tables elsewhere); the
attribution reads the burning servers' signals from the history store.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from collectors.history import HistoryReader
from collectors.model import loss_shares
from collectors.sample_columns import means_by_target
from collectors.slo import (
    REPORT_WINDOWS_S,
    BurnWindow,
    EventCounts,
    Scope,
    Slo,
    attainment,
    budget_remaining,
    burn_rate,
)
from collectors.slo_ledger import SloCounts

GOODPUT_WINDOW_S = 300.0
# The attribution compares the last quarter hour with the latest quarter hour before it that did not burn:
# long enough to average a few decode-log windows and requests, short enough that a burn which began twenty
# minutes ago is compared with what came just before it.
ATTRIBUTION_WINDOW_S = 900.0
ATTRIBUTION_MAX_TARGETS = 20  # the servers read for an attribution: those with the most bad events


@dataclass(frozen=True, slots=True)
class BurnCheck:
    """One burn condition at ``now``: both windows' burn rates, and whether it holds."""

    severity: str  # page | ticket
    window: BurnWindow
    long_rate: float | None
    short_rate: float | None
    long_events: float

    def holds(self, min_events: float) -> bool:
        return (
            self.long_rate is not None
            and self.short_rate is not None
            and self.long_events >= min_events
            and self.long_rate > self.window.factor
            and self.short_rate > self.window.factor
        )


@dataclass(frozen=True, slots=True)
class Attribution:
    """Shares summing to 1 (keys: step_latency/accept_length, queue/prefill, aborted/retracted), or None
    with the reason in words; ``sentence`` says what moved, with the numbers (only with shares: without
    them the reason says it all)."""

    shares: dict[str, float] | None
    reason: str
    sentence: str = ""


@dataclass(frozen=True, slots=True)
class SloStatus:
    slo: Slo
    scope: Scope
    period: EventCounts  # events over the SLO's period (as much of it as the store holds)
    covered_s: float  # how much of the period the counts cover
    burn_rates: dict[str, float | None]  # REPORT_WINDOWS_S key → burn rate (None: no events)
    checks: tuple[BurnCheck, ...] = ()
    attribution: Attribution | None = None
    worst_targets: tuple[tuple[str, EventCounts], ...] = ()  # most bad events in the last hour

    @property
    def attainment(self) -> float | None:
        return attainment(self.period)

    @property
    def budget_remaining(self) -> float | None:
        return budget_remaining(self.period, self.slo.objective)

    @property
    def burning(self) -> tuple[str, ...]:
        """The severities whose conditions hold now (page before ticket)."""
        found = [c.severity for c in self.checks if c.holds(self.slo.min_events)]
        return tuple(s for s in ("page", "ticket") if s in found)

    @property
    def fastest_burn(self) -> tuple[str, float] | None:
        known = [(w, r) for w, r in self.burn_rates.items() if r is not None]
        return max(known, key=lambda item: item[1]) if known else None


def window_counts(counts: SloCounts, slo: Slo, scope: Scope, window_s: float, now: float) -> EventCounts:
    """Events of the minutes that started within the last ``window_s`` (the current one included)."""
    return counts.counts(slo.name, scope.key, now - window_s, now + 1.0)


def burn_checks(counts: SloCounts, slo: Slo, scope: Scope, now: float) -> tuple[BurnCheck, ...]:
    """Every page and ticket condition of the SLO in one scope."""
    out: list[BurnCheck] = []
    for severity, windows in (("page", slo.page), ("ticket", slo.ticket)):
        for window in windows:
            long = window_counts(counts, slo, scope, window.long_s, now)
            short = window_counts(counts, slo, scope, window.short_s, now)
            out.append(
                BurnCheck(
                    severity,
                    window,
                    burn_rate(long, slo.objective),
                    burn_rate(short, slo.objective),
                    long.total,
                )
            )
    return tuple(out)


def slo_scopes(counts: SloCounts, slo: Slo, now: float) -> list[Scope]:
    """The scopes this SLO has events in over its period; the whole fleet always first."""
    keys = set(counts.scopes(slo.name, now - slo.window_s))
    whole = Scope(slo.match).key
    keys.add(whole)
    return [Scope.from_key(key) for key in sorted(keys, key=lambda k: (k != whole, k))]


def slo_status(
    counts: SloCounts,
    slo: Slo,
    scope: Scope,
    now: float,
    *,
    history: HistoryReader | None = None,
    deployments: Mapping[str, str] | None = None,
    worst: int = 5,
) -> SloStatus:
    """One SLO in one scope; ``history`` adds the attribution (the burning servers' signals).
    ``deployments`` (target → deployment; default: the history's latest rows) narrows per-server counts
    to a deployment scope."""
    if deployments is None:
        deployments = target_deployments(history) if history is not None else {}
    period = counts.counts(slo.name, scope.key, now - slo.window_s, now + 1.0)
    first = counts.first_minute(slo.name, scope.key)
    covered = 0.0 if first is None else min(slo.window_s, max(now - first, 0.0))
    rates = {
        name: burn_rate(window_counts(counts, slo, scope, seconds, now), slo.objective)
        for name, seconds in REPORT_WINDOWS_S.items()
    }
    checks = burn_checks(counts, slo, scope, now)
    ranked = _worst_targets(counts, slo, scope, now, worst, deployments) if worst else ()
    attribution = (
        attribute(counts, slo, scope, now, history=history, deployments=deployments)
        if history is not None
        else None
    )
    return SloStatus(slo, scope, period, covered, rates, checks, attribution, ranked)


def slo_statuses(
    counts: SloCounts, slos: Sequence[Slo], now: float, *, history: HistoryReader | None = None
) -> list[SloStatus]:
    """Every SLO in every scope it has events in (the whole fleet first)."""
    deployments = target_deployments(history) if history is not None else {}
    return [
        slo_status(counts, slo, scope, now, history=history, deployments=deployments)
        for slo in slos
        for scope in slo_scopes(counts, slo, now)
    ]


def target_deployments(history: HistoryReader) -> dict[str, str]:
    """Each target's deployment as of its latest row."""
    return {s.target: s.deployment for s in history.latest()}


def _worst_targets(
    counts: SloCounts,
    slo: Slo,
    scope: Scope,
    now: float,
    limit: int,
    deployments: Mapping[str, str],
) -> tuple[tuple[str, EventCounts], ...]:
    """The servers of the scope with the most bad events in the last hour."""
    members = _members(counts, slo, scope, now - 3600.0, now + 1.0, deployments)
    ranked = sorted(
        ((t, c) for t, c in members.items() if c.bad > 0), key=lambda item: (-item[1].bad, item[0])
    )
    return tuple(ranked[:limit])


def _members(
    counts: SloCounts, slo: Slo, scope: Scope, start: float, end: float, deployments: Mapping[str, str]
) -> dict[str, EventCounts]:
    """The per-target counts of the SLO restricted to the scope's deployment (other labels are not kept
    per target: a scope narrower than a deployment lists every target the SLO counted)."""
    per_target = counts.by_target(slo.name, start, end)
    deployment = scope.as_dict().get("deployment")
    if deployment is None or not deployments:
        return per_target
    return {t: c for t, c in per_target.items() if deployments.get(t, deployment) == deployment}


# -- goodput -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Goodput:
    """Requests per second that met every latency SLO of a scope, as bounds: histograms are per signal, so
    which requests failed two SLOs at once is not known (lower: total − Σ bad; upper: min over SLOs of good).
    """

    scope: Scope
    lower_rps: float | None
    upper_rps: float | None
    slos: tuple[str, ...]
    window_s: float = GOODPUT_WINDOW_S


def goodput(counts: SloCounts, slos: Sequence[Slo], now: float) -> list[Goodput]:
    """Per scope (SLO match and deployment), over the last five minutes — or as much of them as the store
    holds: a scope counted for 45 s served its requests in 45 s, not in five minutes."""
    by_scope: dict[str, list[EventCounts]] = {}
    names: dict[str, list[str]] = {}
    firsts: dict[str, list[int]] = {}
    for slo in slos:
        if slo.sli.kind == "availability":
            continue
        for scope in slo_scopes(counts, slo, now):
            window = window_counts(counts, slo, scope, GOODPUT_WINDOW_S, now)
            by_scope.setdefault(scope.key, []).append(window)
            names.setdefault(scope.key, []).append(slo.name)
            first = counts.first_minute(slo.name, scope.key)
            if first is not None:
                firsts.setdefault(scope.key, []).append(first)
    out: list[Goodput] = []
    for key, windows in by_scope.items():
        total = max(w.total for w in windows)
        stored_s = now - min(firsts[key]) if key in firsts else GOODPUT_WINDOW_S
        window_s = min(GOODPUT_WINDOW_S, max(stored_s, 1.0))
        if total <= 0:
            out.append(Goodput(Scope.from_key(key), None, None, tuple(names[key]), window_s))
            continue
        lower = max(total - sum(w.bad for w in windows), 0.0) / window_s
        upper = min(w.good for w in windows) / window_s
        out.append(Goodput(Scope.from_key(key), lower, upper, tuple(names[key]), window_s))
    return sorted(out, key=lambda g: (g.scope.key != "", g.scope.key))


@dataclass(frozen=True, slots=True)
class ProbeGoodput:
    """The active probes' own goodput in a scope: of the probe requests answered in the window, how many
    met every latency SLO of the scope (per request, so no bounds are needed; probes sweep fixed context
    lengths, so this is the served-from-1K-to-64K view, not the traffic's)."""

    scope: Scope
    met: int
    sent: int
    window_s: float


_PROBE_COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def probe_goodput(
    slos: Sequence[Slo],
    probes: pd.DataFrame,
    deployments: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]] | None = None,
    *,
    window_s: float = 3600.0,
) -> list[ProbeGoodput]:
    """Per scope of the latency SLOs, from the probe rows of the last ``window_s`` (``ProbeStore.read``);
    ``labels``: each target's configured labels (default: its deployment only)."""
    answered = probes[probes["error"].isna()] if "error" in probes else probes
    if answered.empty:
        return []
    rows: dict[str, list[bool]] = {}
    for record in answered.to_dict("records"):
        target = str(record["target"])
        target_labels = dict((labels or {}).get(target, {}))
        if deployments.get(target):
            target_labels.setdefault("deployment", deployments[target])
        met_by_scope: dict[str, bool] = {}
        for slo in slos:
            column = _PROBE_COLUMNS.get(slo.sli.kind)
            if column is None or slo.sli.threshold_s is None:
                continue
            value = record.get(column)
            if value is None or pd.isna(value):
                continue
            for scope in slo.scopes(target_labels):
                ok = float(value) <= slo.sli.threshold_s
                met_by_scope[scope.key] = met_by_scope.get(scope.key, True) and ok
        for key, ok in met_by_scope.items():
            rows.setdefault(key, []).append(ok)
    return [
        ProbeGoodput(Scope.from_key(key), sum(found), len(found), window_s)
        for key, found in sorted(rows.items(), key=lambda item: (item[0] != "", item[0]))
    ]


# -- attribution ---------------------------------------------------------------------------------------------
def baseline_span(
    counts: SloCounts, slo: Slo, scope: Scope, before_ts: float, length_s: float
) -> tuple[float, float] | None:
    """The latest stretch of ``length_s`` ending before ``before_ts`` that did not burn (burn rate ≤ 1 with
    events), walking back half a stretch at a time over the SLO's period; None when there is none. The
    period's minutes are read once (a scope burning all month would otherwise cost a sum per step)."""
    minutes = counts.minutes(slo.name, scope.key, before_ts - slo.window_s, before_ts)
    if not minutes:
        return None
    starts = [m for m, _, _ in minutes]
    good = list(itertools.accumulate([g for _, g, _ in minutes], initial=0.0))
    total = list(itertools.accumulate([t for _, _, t in minutes], initial=0.0))
    end = before_ts
    while end - length_s >= starts[0] - 60.0:
        i, j = bisect.bisect_left(starts, end - length_s), bisect.bisect_left(starts, end)
        window = EventCounts(good[j] - good[i], total[j] - total[i])
        rate = burn_rate(window, slo.objective)
        if rate is not None and rate <= 1.0 and window.total > 0:
            return end - length_s, end
        end -= length_s / 2
    return None


def attribute(
    counts: SloCounts,
    slo: Slo,
    scope: Scope,
    now: float,
    *,
    history: HistoryReader,
    window_s: float = ATTRIBUTION_WINDOW_S,
    deployments: Mapping[str, str] | None = None,
) -> Attribution:
    """Which half of the fraction burned the budget over the last ``window_s``, against the latest stretch
    as long of the same scope that did not burn, on the servers that served the bad events (weighted by
    them)."""
    start = now - window_s
    burn = counts.counts(slo.name, scope.key, start, now + 1.0)
    rate = burn_rate(burn, slo.objective)
    if burn.bad <= 0 or rate is None or rate <= 1.0:
        shown = "no events" if rate is None else f"burn rate {rate:.1f}×"
        return Attribution(
            None, f"the last {_duration(window_s)} did not burn ({shown}): nothing to attribute"
        )
    span = baseline_span(counts, slo, scope, start, window_s)
    if span is None:
        return Attribution(
            None, "no stretch of this scope's stored history that did not burn, to compare with"
        )
    members = _members(counts, slo, scope, start, now + 1.0, deployments or {})
    burning = sorted(((c.bad, t) for t, c in members.items() if c.bad > 0), reverse=True)
    burning = burning[:ATTRIBUTION_MAX_TARGETS]
    if not burning:
        return Attribution(None, "the servers behind the bad events are not known (per-server counts: a day)")
    targets = [t for _, t in burning]
    weights = {t: bad for bad, t in burning}
    now_means = _means(history, targets, start, now)
    base_means = _means(history, targets, *span)
    if slo.sli.kind in ("tpot", "e2e"):
        return _split_tpot(now_means, base_means, weights)
    if slo.sli.kind == "ttft":
        return _split_ttft(now_means, base_means, weights)
    return _split_availability(now_means, burn, window_s)


def _means(
    history: HistoryReader, targets: Sequence[str], start: float, end: float
) -> dict[str, dict[str, float]]:
    """Per target: the mean of each signal over [start, end] (only the known ones)."""
    wanted = ["tpot_s", "step_latency_s", "accept_length", "avg_context_tokens", "ttft_s", "queue_time_s"]
    wanted += ["retractions_per_s"]
    return means_by_target(history.read_columns(start, end, wanted, 120, list(targets)))


def _weighted(
    now: Mapping[str, Mapping[str, float]],
    base: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
    names: Sequence[str],
) -> dict[str, tuple[float, float]] | None:
    """Bad-event-weighted means of each signal now and at baseline, over the targets that know all of
    ``names`` in both spans; None when no target does."""
    used = [t for t in weights if all(n in now.get(t, {}) and n in base.get(t, {}) for n in names)]
    total = sum(weights[t] for t in used)
    if not used or total <= 0:
        return None
    return {
        n: (
            sum(weights[t] * now[t][n] for t in used) / total,
            sum(weights[t] * base[t][n] for t in used) / total,
        )
        for n in names
    }


def _split_tpot(
    now: Mapping[str, Mapping[str, float]],
    base: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
) -> Attribution:
    means = _weighted(now, base, weights, ("tpot_s", "step_latency_s", "accept_length"))
    if means is None:
        return Attribution(
            None, "step latency or accept length not measured on the burning servers (now and at baseline)"
        )
    (tpot, tpot0), (step, step0), (accept, accept0) = (
        means["tpot_s"],
        means["step_latency_s"],
        means["accept_length"],
    )
    if min(tpot0, step0, accept0, step, accept) <= 0:
        return Attribution(None, "a baseline mean is zero: no ratio to split")
    step_factor, accept_factor = step / step0, accept / accept0
    # TPOT = step latency ÷ accept length: a slower step and a shorter accept length both raise it.
    shares = loss_shares(step_factor, 1.0 / accept_factor)
    context = _weighted(now, base, weights, ("avg_context_tokens",))
    context_text = ""
    if context is not None:
        c, c0 = context["avg_context_tokens"]
        context_text = f" (context {_tokens(c0)} → {_tokens(c)})"
    head = f"TPOT {tpot0 * 1000:.0f} → {tpot * 1000:.0f} ms"
    if shares is None:
        return Attribution(
            None,
            f"{head}: step latency ×{step_factor:.2f} and accept length ×{accept_factor:.2f} pull opposite "
            "ways (or barely moved): no split",
        )
    step_share, accept_share = shares
    sentence = (
        f"{head}: {step_share:.0%} step latency{context_text}, {accept_share:.0%} accept length "
        f"({accept0:.2f} → {accept:.2f})"
    )
    return Attribution({"step_latency": step_share, "accept_length": accept_share}, sentence, sentence)


def _split_ttft(
    now: Mapping[str, Mapping[str, float]],
    base: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
) -> Attribution:
    means = _weighted(now, base, weights, ("ttft_s", "queue_time_s"))
    if means is None:
        return Attribution(
            None, "TTFT or queue time not measured on the burning servers (now and at baseline)"
        )
    (ttft, ttft0), (queue, queue0) = means["ttft_s"], means["queue_time_s"]
    rise = ttft - ttft0
    head = f"TTFT {_seconds(ttft0)} → {_seconds(ttft)}"
    if rise <= 0:
        return Attribution(None, f"{head}: the mean did not rise against the baseline (a tail burned)")
    queue_share = min(max((queue - queue0) / rise, 0.0), 1.0)
    sentence = (
        f"{head}: {queue_share:.0%} queueing ({_seconds(queue0)} → {_seconds(queue)}), "
        f"{1 - queue_share:.0%} prefill and the rest"
    )
    return Attribution({"queue": queue_share, "prefill": 1.0 - queue_share}, sentence, sentence)


def _split_availability(
    now: Mapping[str, Mapping[str, float]], burn: EventCounts, window_s: float
) -> Attribution:
    rates = [m["retractions_per_s"] for m in now.values() if "retractions_per_s" in m]
    if not rates:
        return Attribution(None, "retractions not measured on the servers that aborted (SGLang < 0.5.7?)")
    retracted = sum(rates) * window_s
    share = min(retracted / burn.bad, 1.0) if burn.bad > 0 else 0.0
    sentence = (
        f"{burn.bad:.0f} requests aborted in {_duration(window_s)}; {retracted:.0f} retractions on the same "
        "servers: "
        f"at most {share:.0%} of the aborts can follow a retraction (evicted under memory pressure), the "
        "rest are clients or errors"
    )
    return Attribution({"aborted": 1.0 - share, "retracted": share}, sentence, sentence)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def _tokens(count: float) -> str:
    return (
        f"{count / 1024:.0f}K"
        if count >= 10 * 1024
        else (f"{count / 1024:.1f}K" if count >= 1024 else f"{count:.0f}")
    )


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
