"""Which half of the fraction burned an SLO's error budget: the burning servers' signals over the last
quarter hour against the latest stretch as long that did not burn (TPOT: step latency vs accept length;
TTFT: queueing vs prefill; availability: retractions vs the rest).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analysis.slo_budget import burn_rate, scope_members
from analysis.words import tokens
from collectors.history import HistoryReader
from collectors.model import loss_shares
from collectors.sample_columns import means_by_target
from collectors.slo import EventCounts, Scope, Slo
from collectors.slo_ledger import SloCounts

# The attribution compares the last quarter hour with the latest quarter hour before it that did not burn:
# long enough to average a few decode-log windows and requests, short enough that a burn which began twenty
# minutes ago is compared with what came just before it.
ATTRIBUTION_WINDOW_S = 900.0
ATTRIBUTION_MAX_TARGETS = 20  # the servers read for an attribution: those with the most bad events


@dataclass(frozen=True, slots=True)
class Attribution:
    """Shares summing to 1 (keys: step_latency/accept_length, queue/prefill, aborted/retracted), or None
    with the reason in words; ``sentence`` says what moved, with the numbers (only with shares: without
    them the reason says it all)."""

    shares: dict[str, float] | None
    reason: str
    sentence: str = ""


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
    members = scope_members(counts, slo, scope, start, now + 1.0, deployments or {})
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
        context_text = f" (context {tokens(c0)} → {tokens(c)})"
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


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
