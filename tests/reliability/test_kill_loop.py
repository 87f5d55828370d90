"""The production daemon (``python -m alerts run``) SIGKILLed twenty times at random points of its cycle, as
an OOM killer would, under a 100-target loopback fleet whose servers go down and come back, with a webhook
receiver: alone (restarted after each kill) and as a ``--standby`` pair killed alternately.

After every restart the store is whole (each stored cycle has all 100 targets; at most the cycle in flight
is lost per kill), alert state survives (a firing alert is not paged again, nothing resolves twice), and
every notification the engine queued reaches the receiver once, with the same identity across restarts. The
one exception HTTP allows: a kill between the receiver's 200 and the outbox's mark re-sends that
notification after the restart, with the same identity (Alertmanager deduplicates it); a repeat is excused
only when a kill fell within ``_MARK_WINDOW_S`` of its first delivery. With the pair, the standby takes over
within two intervals.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.collectors.servers import FakeSGLang, wait_for
from tests.loopback import start_module
from tests.reliability.harness import (
    Receiver,
    expected_notifications,
    integrity,
    notification_key,
    samples_by_target,
    transitions_notified,
)

pytestmark = [pytest.mark.slow, pytest.mark.box_loading]

TARGETS = 100
FLAPPING = 4  # targets that go down and come back during the run: the alerts fire and resolve across kills
KILLS = 20
INTERVAL_S = 1.0
LAST = f"k3-{TARGETS - 1:03d}"  # an always-up target: its rows count the stored cycles
_MARK_WINDOW_S = 0.05  # receiver's 200 → outbox row marked: a local SQLite commit, well under this


def arrivals(receiver: Receiver) -> list[tuple[tuple[str, str, str], float]]:
    """Each notification the receiver got, with when its message arrived (monotonic)."""
    with receiver.lock:
        messages = list(zip(receiver.bodies, receiver.arrived_at, strict=True))
    return [(notification_key(alert), at) for body, at in messages for alert in body.get("alerts", [])]


@dataclass
class Fleet:
    servers: list[FakeSGLang]
    receiver: Receiver
    downs: Counter[str] = field(default_factory=Counter)  # target → how many times it went down
    stop: threading.Event = field(default_factory=threading.Event)

    def flap(self, seed: int) -> None:
        """Take the flapping targets down and up, each on its own random schedule, until told to stop."""
        rng = random.Random(seed)
        while not self.stop.wait(0.05):
            if rng.random() < 0.05 * INTERVAL_S / 2.5:  # ~ one flip every 2.5 s of the run
                index = rng.randrange(FLAPPING)
                server = self.servers[index]
                going_down = server.metrics_status == 200
                server.metrics_status = 503 if going_down else 200
                if going_down:
                    self.downs[f"k3-{index:03d}"] += 1


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    servers = [FakeSGLang() for _ in range(TARGETS)]
    fleet = Fleet(servers, Receiver())
    seed = random.randrange(1 << 30)
    print(f"kill loop seed {seed}")  # shown on failure: the same schedule again
    flapper = threading.Thread(target=fleet.flap, args=(seed,), daemon=True)
    flapper.start()
    yield fleet
    fleet.stop.set()
    flapper.join(timeout=5)
    for server in servers:
        server.stop()
    fleet.receiver.down()


def write_config(tmp_path: Path, fleet: Fleet) -> Path:
    config = {
        "scrape": {"interval_s": INTERVAL_S, "timeout_s": 0.8},
        "targets": [{"name": f"k3-{i:03d}", "url": s.url} for i, s in enumerate(fleet.servers)],
        "store": {"path": str(tmp_path / "history.sqlite")},
        "exporter": {"listen": None},
        "alerts": {"webhook_urls": [fleet.receiver.url], "rules": {"TargetDown": {"for_s": 0}}},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def start(config: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:  # a file, not a pipe nobody reads (a full pipe would block the daemon)
        return start_module(
            "alerts",
            "run",
            "--config",
            str(config),
            *extra,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )


def cycles_stored(store: Path, target: str) -> int:
    if not store.exists():
        return 0
    try:
        with closing(sqlite3.connect(store, timeout=5)) as db:
            row = db.execute("SELECT COUNT(*) FROM samples WHERE target = ?", (target,)).fetchone()
    except sqlite3.OperationalError:  # the table is not made yet
        return 0
    return int(row[0])


def metrics_hits(fleet: Fleet) -> int:
    """Cycles begun, as the always-up servers saw them (one /metrics request per cycle)."""
    return fleet.servers[-1].hits("/metrics")


def kill(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait(timeout=10)


def check_store(store: Path, kills: int, fleet: Fleet) -> None:
    assert integrity(store) == "ok"
    kept = samples_by_target(store)
    assert len(kept) == TARGETS
    assert len(set(kept.values())) == 1, "a stored cycle lacks some targets"
    lost = metrics_hits(fleet) - kept[LAST]
    assert 0 <= lost <= kills, f"{lost} cycles lost over {kills} kills"


def check_alerts(store: Path, fleet: Fleet, kill_times: list[float]) -> None:
    """Every queued notification arrived; a repeat only right after a kill; no episode paged twice."""
    queued = expected_notifications(store, fleet.receiver.url)
    assert all(count == 1 for count in queued.values()), "the engine queued one notification twice"
    assert sum(queued.values()) == sum(transitions_notified(store).values())
    arrived = Counter(key for key, _ in arrivals(fleet.receiver))
    assert set(arrived) == set(queued), "a queued notification never arrived, or one arrived unqueued"
    first: dict[tuple[str, str, str], float] = {}
    for key, at in arrivals(fleet.receiver):
        if key in first:  # a repeat: only if a kill landed between its delivery and the outbox's mark
            assert any(0 <= k - first[key] <= _MARK_WINDOW_S + 0.05 for k in kill_times), key
        first.setdefault(key, at)
    firing = Counter(key[0] for key in queued if key[1] == "firing")
    with closing(sqlite3.connect(store)) as db:
        fingerprints = dict(
            db.execute("SELECT target, fingerprint FROM alert_instances WHERE rule = 'TargetDown'").fetchall()
        )
        rows = db.execute("SELECT target, state FROM alert_instances WHERE rule = 'TargetDown'")
        states = dict(rows.fetchall())
        episodes = {target: _down_episodes(db, target) for target in fingerprints}
    for target, fingerprint in fingerprints.items():
        # One page per time the target went down, at most (a short outage inside a dead gap pages nothing):
        # the times the fleet took it down, or more if the collector saw more (a scrape timing out on a box
        # busy with other work is a down the collector really saw, and pages).
        assert firing[fingerprint] <= max(fleet.downs[target], episodes[target]), target
    for index, server in enumerate(fleet.servers[:FLAPPING]):
        target = f"k3-{index:03d}"
        assert (states.get(target) == "firing") == (server.metrics_status != 200), target


def _down_episodes(db: sqlite3.Connection, target: str) -> int:
    """How many times the stored rows of ``target`` went from up (or nothing yet) to down."""
    ups = [int(up) for (up,) in db.execute("SELECT up FROM samples WHERE target = ? ORDER BY ts", (target,))]
    return sum(1 for before, now in itertools.pairwise([1, *ups]) if before == 1 and now == 0)


def settle(process: subprocess.Popen[bytes], store: Path, fleet: Fleet, log: Path) -> None:
    """Stop flapping, let the survivor deliver what is queued, SIGTERM it: exit 0 and nothing left queued."""
    fleet.stop.set()
    time.sleep(0.1)
    hits = metrics_hits(fleet)
    assert wait_for(lambda: metrics_hits(fleet) >= hits + 3, timeout_s=20)  # the last flips evaluated
    wait_for(lambda: queued(store) == 0, timeout_s=20)  # and their notifications sent (checked below)
    process.terminate()
    assert process.wait(timeout=30) == 0
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert queued(store) == 0


def queued(store: Path) -> int:
    """Notifications in the outbox not yet delivered."""
    with closing(sqlite3.connect(store, timeout=5)) as db:
        return int(db.execute("SELECT COUNT(*) FROM alert_outbox WHERE status = 'queued'").fetchone()[0])


def running(store: Path, after: int, timeout_s: float = 30) -> bool:
    """The evaluator stored a cycle beyond ``after``."""
    return wait_for(lambda: cycles_stored(store, LAST) > after, timeout_s=timeout_s)


def standing_by(log: Path) -> bool:
    """The daemon writing ``log`` waits for the evaluator role (its newest line says so)."""
    return wait_for(lambda: log.read_text(errors="replace").rstrip().endswith("takes over when it stops"), 20)


def test_twenty_kills_lose_at_most_a_cycle_each(tmp_path: Path, fleet: Fleet) -> None:
    config, log = write_config(tmp_path, fleet), tmp_path / "daemon.log"
    store = tmp_path / "history.sqlite"
    rng = random.Random()
    kill_times: list[float] = []
    daemon = start(config, log)
    try:
        for kills in range(1, KILLS + 1):
            assert running(store, cycles_stored(store, LAST)), log.read_text()[-3000:]
            time.sleep(rng.uniform(0, INTERVAL_S))  # a random point of the cycle
            kill(daemon)
            kill_times.append(time.monotonic())
            check_store(store, kills, fleet)
            daemon = start(config, log)
        assert running(store, cycles_stored(store, LAST))
        settle(daemon, store, fleet, log)
    finally:
        if daemon.poll() is None:
            kill(daemon)
    check_store(store, KILLS, fleet)
    check_alerts(store, fleet, kill_times)
    assert sum(fleet.downs.values()) >= 3  # the alerts did fire and resolve across kills


def test_standby_pair_killed_alternately_takes_over_in_two_intervals(tmp_path: Path, fleet: Fleet) -> None:
    config = write_config(tmp_path, fleet)
    store = tmp_path / "history.sqlite"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    rng = random.Random()
    kill_times: list[float] = []
    takeovers_s: list[float] = []
    pair: list[Any] = [start(config, logs[0], "--standby"), None]
    try:
        assert running(store, 0)
        pair[1] = start(config, logs[1], "--standby")
        assert standing_by(logs[1])
        active = 0
        for kills in range(1, KILLS + 1):
            time.sleep(rng.uniform(0, INTERVAL_S))
            kill(pair[active])
            killed_at = time.monotonic()
            kill_times.append(killed_at)
            check_store(store, kills, fleet)
            # The first cycle the survivor stores ends its takeover.
            assert running(store, cycles_stored(store, LAST), timeout_s=10), "the standby never took over"
            takeovers_s.append(time.monotonic() - killed_at)
            # The OOM-killed one comes back, as the standby.
            pair[active] = start(config, logs[active], "--standby")
            active = 1 - active
            assert standing_by(logs[1 - active])  # before the next kill
        settle(pair[active], store, fleet, logs[active])
        pair[1 - active].terminate()
        assert pair[1 - active].wait(timeout=30) == 0
    finally:
        for process in pair:
            if process is not None and process.poll() is None:
                kill(process)
    check_store(store, KILLS, fleet)
    check_alerts(store, fleet, kill_times)
    print(f"takeover after a kill: max {max(takeovers_s):.2f} s over {KILLS}")
    assert max(takeovers_s) <= 2 * INTERVAL_S + 0.5, takeovers_s  # two intervals (+ the check's own polling)
