"""SLO benchmark: what SLOs add to a collector cycle at 1,000 servers × 4 SLOs × 11 scopes.

In one process, on the golden SGLang body, no HTTP (the fetch is the same with or without SLOs, so leaving
it out makes the baseline smaller and the shares larger than in a real cycle): the cycle's own work — read
every body, derive the signals, append the snapshots to a real SQLite store, evaluate every alert rule —
against

- the arithmetic: each SLI's events counted from two scrapes' samples, the ledger's per-scope sums and its
  SQLite writes, and what ErrorBudgetBurn adds to the alert engine's evaluation (a real ``AlertEngine`` with
  every rule, minus the same engine without the SLOs, on the same snapshots). Target: < 5 % of the cycle;
- the wider read: the same bodies read with the SLIs' buckets and counters kept (7 to 14 more lines a body).

CPU time of this thread (``time.thread_time``), best of ``ROUNDS`` (medians for the arithmetic's parts),
ratios in the same run; and, for the target, the share of a real collector cycle measured in the same run
(scraping that many loopback servers over HTTP, bench_fleet's, in a subprocess: process CPU, median).
``SPECWATCH_BENCH_SERVERS`` overrides the fleet size.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from alerts.engine import AlertEngine
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from bench.bench_fleet import golden_servers
from collectors.derive import derive_signals
from collectors.direct.metrics_reader import parse_exposition, sample_plan
from collectors.model import TargetSnapshot
from collectors.runner import Collector
from collectors.slo import build_slos, counter_for, kept_samples, slis
from collectors.slo_ledger import SloLedger
from collectors.store.slo_counts import SloCountStore
from collectors.store.sqlite_store import SqliteStore
from config import parse_config

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
ROUNDS = 9
DEPLOYMENTS = 10
TARGET_SHARE = 0.05
SLOS = [
    {"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99},
    {"name": "tpot-40ms", "sli": {"kind": "tpot", "threshold_s": 0.04}, "objective": 0.99},
    {"name": "e2e-60s", "sli": {"kind": "e2e", "threshold_s": 60}, "objective": 0.995},
    {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999},
]


def _best(rounds: int, fn: Callable[[int], None]) -> float:
    best = float("inf")
    for index in range(rounds):
        started = time.thread_time()
        fn(index)
        best = min(best, time.thread_time() - started)
    return best


def _real_cycle_cpu_s(servers: int, rounds: int) -> float:
    """Median CPU of a real collector cycle without SLOs (scrape over HTTP, read, derive, store) against
    ``servers`` loopback servers serving the golden body (bench_fleet's, in a subprocess)."""
    with golden_servers(servers) as (ports, _), tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "history.sqlite")
        config = parse_config(
            {
                "targets": [
                    {"name": f"k3-{i:04d}", "url": f"http://127.0.0.1:{port}"} for i, port in enumerate(ports)
                ],
                "store": {"path": path},
                "exporter": {"listen": None},
            },
            "bench",
        )
        store = SqliteStore(path)
        with Collector(config, store) as collector:
            collector.run_cycle()  # connects, reads every /server_info
            cpus = []
            for _ in range(rounds):
                started = time.process_time()
                collector.run_cycle()
                cpus.append(time.process_time() - started)
        store.close()
    return statistics.median(cpus)


def main() -> dict[str, object]:
    servers = int(os.environ.get("SPECWATCH_BENCH_SERVERS", "1000"))
    body = GOLDEN.read_bytes()
    slos = build_slos(parse_config({"slos": SLOS}, "bench"))
    plan = sample_plan(kept_samples(slos))
    counters = [(sli.key, counter_for(sli)) for sli in slis(slos)]  # as the direct source keeps them
    names = [f"k3-{n:04d}" for n in range(servers)]
    deployment = {name: f"d{n % DEPLOYMENTS}" for n, name in enumerate(names)}
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "history.sqlite")
        counts_store = SloCountStore(str(Path(tmp) / "history.sqlite"))
        clock = {"now": 1_800_000_000.0}
        ledger = SloLedger(slos, counts_store, clock=lambda: clock["now"])
        previous = {name: parse_exposition(body, plan=plan).values for name in names[:1]}
        before = {k: v * 0.99 for k, v in previous[names[0]].items()}

        # Two engines on the same snapshots: every rule, and every rule plus ErrorBudgetBurn on the SLOs.
        rules = build_rules()
        with_slos = AlertEngine(
            rules,
            AlertStateStore(Path(tmp) / "alerts-slo.sqlite"),
            slos=slos,
            slo_counts=ledger,
            clock=lambda: clock["now"],
        )
        without = AlertEngine(
            [r for r in rules if r.name != "ErrorBudgetBurn"],
            AlertStateStore(Path(tmp) / "alerts.sqlite"),
            clock=lambda: clock["now"],
        )
        bodies = {name: body for name in names}
        parsed: dict[str, dict[str, float]] = {}

        baseline = AlertEngine(
            [r for r in rules if r.name != "ErrorBudgetBurn"],
            AlertStateStore(Path(tmp) / "alerts-baseline.sqlite"),
            clock=lambda: clock["now"],
        )

        def cycle(index: int) -> None:
            """The collector's own work per cycle without SLOs: read, derive, store, evaluate the rules."""
            snapshots = []
            ts = clock["now"] + index * 5.0
            for name in names:
                values = parse_exposition(bodies[name]).values
                derived = derive_signals(values, ts, None)
                snapshots.append(
                    TargetSnapshot(name, ts, True, signals=derived.signals, deployment=deployment[name])
                )
            store.append(snapshots)
            baseline.observe(snapshots, now=ts)

        def read(index: int) -> None:
            """The same reads with the SLIs' buckets and counters kept too."""
            for name in names:
                parsed[name] = dict(parse_exposition(bodies[name], plan=plan).values)

        def plain_read(index: int) -> None:
            for name in names:
                parse_exposition(bodies[name])

        def arithmetic(index: int) -> tuple[float, float, float]:
            """Each SLI's events counted, the ledger's sums and writes, and what ErrorBudgetBurn adds to the
            alert engine's evaluation (CPU s; building the snapshots and the other rules, which a cycle
            does anyway, are not counted)."""
            clock["now"] += 5.0
            ts = clock["now"]
            started = time.thread_time()
            events = {
                name: tuple(
                    (key, found.good, found.total)
                    for key, count in counters
                    if (found := count(parsed[name], before)) is not None
                )
                for name in names
            }
            counting = time.thread_time() - started
            snapshots = [
                TargetSnapshot(name, ts, True, deployment=deployment[name], slo_events=events[name])
                for name in names
            ]
            started = time.thread_time()
            ledger.observe(snapshots)
            summing = time.thread_time() - started
            started = time.thread_time()
            with_slos.observe(snapshots, now=ts)
            judging = time.thread_time() - started
            started = time.thread_time()
            without.observe(snapshots, now=ts)
            judging -= time.thread_time() - started  # what the other rules cost anyway
            return counting, summing, judging

        base_s = _best(ROUNDS, cycle)
        read(0)
        read_s = _best(ROUNDS, read) - _best(ROUNDS, plain_read)
        rounds = [arithmetic(index) for index in range(ROUNDS)]
        # Medians: the rule's share is a difference of two engines' times, whose noise a minimum would pick.
        counting_s, summing_s, judging_s = (statistics.median(r[part] for r in rounds) for part in range(3))
        arithmetic_s = counting_s + summing_s + judging_s
        counts_store.close()
        store.close()
    real_cycle_s = _real_cycle_cpu_s(servers, ROUNDS)
    return {
        "servers": servers,
        "slos": len(slos),
        "scopes_per_slo": 1 + DEPLOYMENTS,
        "cycle_cpu_s": round(base_s, 4),
        "slo_counting_cpu_s": round(counting_s, 4),
        "slo_ledger_cpu_s": round(summing_s, 4),
        "slo_rule_cpu_s": round(judging_s, 4),
        "slo_arithmetic_cpu_s": round(arithmetic_s, 4),
        "slo_arithmetic_share_of_cycle": round(arithmetic_s / base_s, 4),
        "real_cycle_cpu_s": round(real_cycle_s, 4),
        "slo_arithmetic_share_of_real_cycle": round(arithmetic_s / real_cycle_s, 4),
        "slo_read_added_cpu_s": round(read_s, 4),
        "slo_read_share_of_cycle": round(read_s / base_s, 4),
        "slo_read_share_of_real_cycle": round(read_s / real_cycle_s, 4),
        "target_share": TARGET_SHARE,
        "meets_target": arithmetic_s / real_cycle_s < TARGET_SHARE,
    }
