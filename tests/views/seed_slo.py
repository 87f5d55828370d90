"""A known SLO history for the SLO page and the Fleet status: two servers, four hours, a burn since 110 min.

k3-east-1 (east) serves 100 requests a minute, all good. k3-west-1 (west) serves 100 a minute, all good until
110 minutes ago; then its step latency doubles (30 → 60 ms, context 2K → 58K) while its accept length falls
(2.5 → 1.5), so TPOT goes 12 → 40 ms and 30 of its 100 requests a minute miss the 40 ms TPOT SLO; its queue
grows (100 → 900 ms of a TTFT 500 ms → 1.5 s), so 10 a minute miss the 1 s TTFT SLO. No availability event
was ever counted (that SLO is configured but has no events).

Rows sit mid-minute (``N − 30 − 60 k``) and mid-bucket, so every window the page reads (quantised up to the
scrape interval) holds the same rows as long as the page runs within 25 s of ``build``: the numbers shown
are exact constants, computed by the tests from these counts and never copied from a page run. The burn
starts 110 (not 120) minutes back: the attribution's baseline hour (two hours back) reads history through
minute-aligned rollups, which must not reach a burning sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from alerts.model import AlertInstance, AlertState, to_pairs
from alerts.state_store import AlertStateStore
from collectors.model import Signals, TargetSnapshot
from collectors.store.slo_counts import MinuteRow, SloCountStore, TargetRow
from collectors.store.sqlite_store import SqliteStore

MINUTES = 240  # four hours of minutes
BURN_MINUTES = 110  # the newest 110 minutes burn
PER_MINUTE = 100.0  # requests per server and minute
TPOT_BAD_WEST = 30.0  # per minute while burning
TTFT_BAD_WEST = 10.0
OBJECTIVE = 0.99
SLOS: list[dict[str, object]] = [
    {"name": "tpot-40ms", "sli": {"kind": "tpot", "threshold_s": 0.04}, "objective": OBJECTIVE},
    {"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": OBJECTIVE},
    {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999},
]
HEALTHY = {"step": 0.030, "accept": 2.5, "context": 2048.0, "ttft": 0.5, "queue": 0.1}
BURNING = {"step": 0.060, "accept": 1.5, "context": 59392.0, "ttft": 1.5, "queue": 0.9}
DEPLOYMENTS = {"k3-east-1": "east", "k3-west-1": "west"}
# The alert engine's view: ErrorBudgetBurn pages for tpot-40ms in west (labels as the rule sets them).
ALERT_LABELS = {
    "alertname": "ErrorBudgetBurn",
    "slo": "tpot-40ms",
    "severity": "page",
    "long_window": "1h",
    "short_window": "5m",
    "deployment": "west",
}
ALERT_SUMMARY = "tpot-40ms burns its error budget 30× in deployment west"
ALERT_DESCRIPTION = "TPOT 12 → 40 ms: 58% step latency (context 2.0K → 58K), 42% accept length (2.50 → 1.50)"


@dataclass(frozen=True)
class SeedSlo:
    now_ts: float  # N: the newest row is 30 s older


def _signals(load: dict[str, float]) -> Signals:
    return Signals(
        accept_length=load["accept"],
        step_latency_s=load["step"],
        tpot_s=load["step"] / load["accept"],
        avg_context_tokens=load["context"],
        ttft_s=load["ttft"],
        queue_time_s=load["queue"],
        running=8.0,
        max_running=48.0,
        output_tok_s=8 * load["accept"] / load["step"],
        retractions_per_s=0.0,
    )


def build(store_path: str, now_ts: float, *, alerts: bool = True, per_server: bool = True) -> SeedSlo:
    """The counts, the servers' history, (``per_server``) each server's closed 5-minute buckets and
    (``alerts``) the alert engine's one firing ErrorBudgetBurn."""
    n = int(now_ts)
    minutes: list[MinuteRow] = []
    snapshots: list[TargetSnapshot] = []
    for k in range(MINUTES):
        ts = n - 30 - 60 * k
        burning = k < BURN_MINUTES
        bad = {"tpot-40ms": TPOT_BAD_WEST, "ttft-1s": TTFT_BAD_WEST} if burning else {}
        for slo in ("tpot-40ms", "ttft-1s"):
            west_good = PER_MINUTE - bad.get(slo, 0.0)
            minutes += [
                MinuteRow(slo, "", ts, PER_MINUTE + west_good, 2 * PER_MINUTE),
                MinuteRow(slo, "deployment=east", ts, PER_MINUTE, PER_MINUTE),
                MinuteRow(slo, "deployment=west", ts, west_good, PER_MINUTE),
            ]
        for target, deployment in DEPLOYMENTS.items():
            load = BURNING if burning and deployment == "west" else HEALTHY
            snapshots.append(
                TargetSnapshot(target, float(ts), True, signals=_signals(load), deployment=deployment)
            )
    for target, deployment in DEPLOYMENTS.items():  # fresh (2 s old): the Fleet page shows them up
        load = BURNING if deployment == "west" else HEALTHY
        snapshots.append(TargetSnapshot(target, n - 2.0, True, signals=_signals(load), deployment=deployment))
    # Per-server 5-minute buckets of the last 50 minutes (all inside the page's last hour).
    targets: list[TargetRow] = []
    for j in range(10):
        ts = n - 150 - 300 * j
        for slo, bad in (("tpot-40ms", TPOT_BAD_WEST), ("ttft-1s", TTFT_BAD_WEST)):
            targets.append(TargetRow(slo, "k3-east-1", ts, 5 * PER_MINUTE, 5 * PER_MINUTE))
            targets.append(TargetRow(slo, "k3-west-1", ts, 5 * (PER_MINUTE - bad), 5 * PER_MINUTE))
    history = SqliteStore(store_path)
    history.append(sorted(snapshots, key=lambda s: s.ts))
    history.close()
    counts = SloCountStore(store_path)
    counts.add(minutes, targets if per_server else [])
    counts.close()
    if alerts:
        _alert(store_path, n)
    return SeedSlo(now_ts=float(n))


def _alert(store_path: str, n: int) -> None:
    state = AlertStateStore(store_path)
    firing = AlertInstance(
        rule="ErrorBudgetBurn",
        target="",
        state=AlertState.FIRING,
        since=n - 600.0,
        active_since=n - 720.0,
        fired_at=n - 600.0,
        last_eval_ts=n - 5.0,
        value=30.0,
        labels=to_pairs(ALERT_LABELS),
        annotations=to_pairs({"summary": ALERT_SUMMARY, "description": ALERT_DESCRIPTION}),
        fingerprint="ErrorBudgetBurn:tpot-40ms:deployment=west:page",
    )
    state.commit([firing], [], [], [], n)
    state.close()
