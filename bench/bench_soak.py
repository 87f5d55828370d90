"""Soak: the production runtime (collector + alert engine + notifier, ``alerts.service.Service``) over a
simulated fleet with faults, restarts, recipe changes, load swings and a notification-receiver outage, for
hours of accelerated time.

Reports memory over the run, history rows stored vs expected (one per target per cycle), and notifications
queued vs delivered (lost, duplicated). Baseline in the same run: the memory after warm-up, and the first
cycles' wall time.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

from alerts.service import Service
from config import parse_config
from sim.fleet import SimFleet
from sim.receiver import Receiver, notification_key

T0 = 1_800_000_000.0
STEP_S = 5.0  # simulated seconds between cycles, as in production
LOOP_S = 1200.0  # the scenario repeats every 20 simulated minutes
SOAK_SCENARIO: dict[str, Any] = {
    "description": "every fault a scraper meets, repeating, beside steady servers",
    "warmup_s": 300,
    "loop_s": LOOP_S,
    "boot_s": 60,
    "recipes": {"wide": {"speculative_dspark_block_size": 7}, "narrow": {"speculative_dspark_block_size": 3}},
    "workloads": {"chat": {"isl": 1024, "osl": 1024, "osl_jitter": 0.3}, "rag": {"isl": 8192, "osl": 1024}},
    "servers": [
        *(
            {
                "name": name,
                "deployment": "faulty",
                "recipe": "wide",
                "workload": "chat",
                "load": {"concurrency": 24},
            }
            for name in ("flap", "slow", "garbage", "hang", "restart")
        ),
        {
            "name": "swing",
            "deployment": "load",
            "recipe": "wide",
            "workload": "rag",
            "load": {"concurrency": 8},
        },
    ],
    "phases": [
        {"at_s": 60, "until_s": 150, "servers": ["flap"], "fault": "down"},
        {"at_s": 300, "until_s": 320, "servers": ["flap"], "fault": "down"},
        {"at_s": 700, "until_s": 900, "servers": ["flap"], "fault": "down"},
        {"at_s": 200, "until_s": 400, "servers": ["slow"], "fault": "slow", "fault_delay_s": 1},
        {"at_s": 500, "until_s": 560, "servers": ["garbage"], "fault": "garbage"},
        {"at_s": 800, "until_s": 1000, "servers": ["hang"], "fault": "hang"},
        {"at_s": 400, "servers": ["restart"], "restart": {"recipe": "narrow"}},
        {"at_s": 1000, "servers": ["restart"], "restart": {"recipe": "wide"}},
        {"at_s": 100, "servers": ["swing"], "load": {"concurrency": 80}},
        {"at_s": 700, "servers": ["swing"], "load": {"concurrency": 8}},
    ],
}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _queued_notifications(store: Path, url: str) -> Counter[tuple[str, str, str]]:
    with closing(sqlite3.connect(store)) as db:
        rows = db.execute("SELECT payload FROM alert_outbox WHERE receiver = ?", (url,)).fetchall()
    return Counter(notification_key(alert) for (payload,) in rows for alert in json.loads(payload)["alerts"])


def _notified_transitions(store: Path) -> Counter[tuple[str, str]]:
    with closing(sqlite3.connect(store)) as db:
        rows = db.execute("SELECT fingerprint, from_state, to_state, rule FROM alert_transitions").fetchall()
    out: Counter[tuple[str, str]] = Counter()
    for fingerprint, before, after, _rule in rows:
        if after == "firing":
            out[(fingerprint, "firing")] += 1
        elif before == "firing" and after == "inactive":
            out[(fingerprint, "resolved")] += 1
    return out


def run_soak(
    *, sim_duration_s: float, speed: float, steady_servers: int, folder: Path, outage: tuple[float, float]
) -> dict[str, Any]:
    """Run the soak; ``outage`` is the receiver's down time as fractions of the run (e.g. 0.4, 0.6)."""
    scenario = dict(SOAK_SCENARIO)
    scenario["servers"] = [
        *SOAK_SCENARIO["servers"],
        *(
            {"name": f"steady-{i}", "deployment": "control", "recipe": "wide", "workload": "chat",
             "load": {"concurrency": 16 + i}}
            for i in range(steady_servers)
        ),
    ]  # fmt: skip
    scenario_path = folder / "soak.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    store = folder / "history.sqlite"
    receiver = Receiver()
    fleet = SimFleet(scenario_path, speed=speed).start()
    config = parse_config(
        {
            "scrape": {"interval_s": STEP_S, "timeout_s": min(0.2, STEP_S / speed * 0.8)},
            "targets": [t.model_dump() for t in fleet.targets],
            "store": {"path": str(store)},
            "alerts": {"webhook_urls": [receiver.url]},
        }
    )
    service = Service(config, clock=lambda: T0 + fleet.sim_time_s())
    cycle_s: list[float] = []
    memory: list[tuple[float, float]] = []  # (fraction of the run, RSS MB)
    outage_s = (outage[0] * sim_duration_s, outage[1] * sim_duration_s)
    queued_at_outage_end = 0
    started = time.monotonic()
    try:
        service.notifier.start()
        while (now_s := fleet.sim_time_s()) < sim_duration_s:
            if outage_s[0] <= now_s < outage_s[1]:
                receiver.down()
            elif now_s >= outage_s[1] and not receiver.is_up:
                queued_at_outage_end = service.alert_store.queued_count()
                receiver.up()
            began = time.monotonic()
            service.run_cycle()
            cycle_s.append(time.monotonic() - began)
            if len(cycle_s) % 20 == 0:
                memory.append((now_s / sim_duration_s, _rss_mb()))
            time.sleep(max(0.0, (STEP_S - (fleet.sim_time_s() - now_s)) / speed))
        receiver.up()
        wall_s = time.monotonic() - started
        health = service.collector.health()
    finally:
        service.stop(flush_timeout_s=60)
        fleet.stop()
        receiver.down()

    targets = len(config.targets)
    with closing(sqlite3.connect(store)) as db:
        stored = int(db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
        fired = dict(
            db.execute(
                "SELECT rule, COUNT(*) FROM alert_transitions WHERE to_state = 'firing' GROUP BY rule"
            ).fetchall()
        )
        still_queued = int(
            db.execute("SELECT COUNT(*) FROM alert_outbox WHERE status != 'delivered'").fetchone()[0]
        )
    queued = _queued_notifications(store, receiver.url)
    delivered = Counter(receiver.alerts())
    notified = Counter((fp, status) for fp, status, _ in delivered)
    warm = [mb for fraction, mb in memory if fraction >= 0.1] or [_rss_mb()]
    second_half = [mb for fraction, mb in memory if fraction >= 0.5] or warm
    return {
        "sim_duration_h": round(sim_duration_s / 3600, 2),
        "speed": speed,
        "wall_s": round(wall_s, 1),
        "targets": targets,
        "cycles": len(cycle_s),
        "cycle_wall_s_p50": round(statistics.median(cycle_s), 4),
        "cycle_wall_s_max": round(max(cycle_s), 4),
        "samples_expected": len(cycle_s) * targets,
        "samples_stored": stored,
        "store_errors": health.store_error,
        "dropped_rows": health.dropped_rows,
        "rss_mb_after_warmup": round(warm[0], 1),
        "rss_mb_end": round(memory[-1][1] if memory else _rss_mb(), 1),
        "rss_mb_max": round(max(mb for _, mb in memory) if memory else _rss_mb(), 1),
        "rss_mb_growth_second_half": round(second_half[-1] - second_half[0], 1),
        "receiver_outage_sim_min": round((outage_s[1] - outage_s[0]) / 60, 1),
        "notifications_queued_at_outage_end": queued_at_outage_end,
        "notifications_queued": sum(queued.values()),
        "notifications_delivered": sum(delivered.values()),
        "notifications_lost": sum((queued - delivered).values()),
        "notifications_duplicated": sum(count - 1 for count in delivered.values() if count > 1),
        "notifications_unexpected": sum((delivered - queued).values()),
        "transitions_without_notification": sum((_notified_transitions(store) - notified).values()),
        "outbox_not_delivered": still_queued,
        "alerts_fired": fired,
    }


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="specwatch-soak-") as tmp:
        # 4 simulated hours at 24× (≈ 10 min wall); the receiver is down for 36 simulated minutes.
        return run_soak(
            sim_duration_s=4 * 3600, speed=24, steady_servers=24, folder=Path(tmp), outage=(0.4, 0.55)
        )
