"""The notification receiver is down for minutes while alerts fire and resolve, then comes back: every
notification is delivered afterwards, in order, exactly once, and scraping never waited for it.

Time is accelerated: the production runtime runs on a clock the test advances 15 s per cycle, so seven
minutes of outage (and the notifier's backoff, which runs on the same clock) take a few wall seconds.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.service import Service
from config import parse_config
from tests.collectors.servers import FakeSGLang, wait_for
from tests.reliability.harness import Receiver, expected_notifications, fake_fleet, transitions_notified

pytestmark = pytest.mark.slow

STEP_S = 15.0
CYCLES = 60
OUTAGE = range(6, 34)  # cycles 6–33: seven simulated minutes without a receiver


class StepClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def servers() -> Iterator[dict[str, FakeSGLang]]:
    with fake_fleet("k3-0", "k3-1", "k3-2") as fleet:
        yield fleet


def down_at(name: str, cycle: int) -> bool:
    """Each server dies and comes back on its own schedule, so alerts fire and resolve during the outage."""
    period = {"k3-0": 10, "k3-1": 14, "k3-2": 22}[name]
    return (cycle // (period // 2)) % 2 == 1


def test_every_notification_arrives_once_after_the_receiver_comes_back(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    receiver = Receiver()
    clock = StepClock()
    store = tmp_path / "history.sqlite"
    config = parse_config(
        {
            "scrape": {"interval_s": STEP_S, "timeout_s": 1},
            "targets": [{"name": name, "url": s.url} for name, s in servers.items()],
            "store": {"path": str(store)},
            "alerts": {"webhook_urls": [receiver.url], "rules": {"TargetDown": {"for_s": 30}}},
        }
    )
    service = Service(config, clock=clock)
    durations = []
    queued_during_outage = 0
    try:
        service.notifier.start()
        for cycle in range(CYCLES):
            if cycle == OUTAGE.start:
                receiver.down()
            if cycle == OUTAGE.stop:
                receiver.up()
            for name, server in servers.items():
                server.metrics_status = 503 if down_at(name, cycle) else 200
            started = time.monotonic()
            service.run_cycle()
            durations.append(time.monotonic() - started)
            if cycle == OUTAGE.stop - 1:
                queued_during_outage = service.alert_store.queued_count()
                head = min(
                    (d for d in service.alert_store.deliveries(limit=1000) if d.status == "queued"),
                    key=lambda d: d.id,
                )
            clock.now += STEP_S
            time.sleep(0.05)  # the notifier's thread gets its turns
        assert wait_for(lambda: service.alert_store.queued_count() == 0, timeout_s=20), "deliveries stuck"
    finally:
        service.stop()
        receiver.down()

    expected = expected_notifications(store, receiver.url)
    delivered = Counter(receiver.alerts())
    assert queued_during_outage >= 5  # the outage really held back notifications
    assert head.attempts >= 3  # retried while down...
    assert head.attempts <= 12  # ...with backoff, not hammering (7 min at 1 s doubling to 60 s)
    assert sum(expected.values()) >= 10
    assert delivered == expected  # nothing lost, nothing twice
    assert max(delivered.values()) == 1
    # every firing and every resolution the engine recorded was notified
    notified = Counter((fingerprint, status) for fingerprint, status, _ in delivered)
    assert notified == transitions_notified(store)
    # in order: an alert's resolution never arrives before its firing
    order: dict[str, list[str]] = {}
    for fingerprint, status, _ in receiver.alerts():
        order.setdefault(fingerprint, []).append(status)
    for statuses in order.values():
        assert statuses[0] == "firing"
        assert all(a != b for a, b in itertools.pairwise(statuses))  # alternating
    assert max(durations) < 1.0  # a dead receiver never slowed a cycle
