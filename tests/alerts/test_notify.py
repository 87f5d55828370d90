"""Delivery to real loopback receivers: order, retry with backoff, refusal, and never blocking evaluation."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts.engine import AlertEngine
from alerts.model import OutboxItem
from alerts.notify import Notifier
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from tests.alerts.conftest import Receiver, snap

INSTANT = {"StatePoolSaturation": {"for_s": 0, "keep_firing_for_s": 0, "window_s": 0.2}}
SATURATED = {"state_pool_usage": 0.98, "kv_usage": 0.29, "queued": 12.0, "running": 48.0}
HEALTHY = {"state_pool_usage": 0.5, "kv_usage": 0.3, "queued": 0.0, "running": 20.0}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AlertStateStore]:
    s = AlertStateStore(tmp_path / "alerts.sqlite")
    yield s
    s.close()


def engine_for(store: AlertStateStore, urls: list[str], notifier: Notifier | None = None) -> AlertEngine:
    return AlertEngine(
        build_rules(INSTANT), store, webhook_urls=urls, on_notify=notifier.wake if notifier else None
    )


def flip(engine: AlertEngine, *states: dict[str, float]) -> None:
    for signals in states:
        now = time.time()
        engine.observe([snap("gpu-1", now, **signals)], now=now)
        time.sleep(0.25)  # past window_s, so the next evaluation sees only the new sample


def statuses(bodies: list[Any]) -> list[str]:
    return [b["status"] for b in bodies]


def test_firing_then_resolved_arrive_in_order(store: AlertStateStore, receiver: Receiver) -> None:
    notifier = Notifier(store, webhook_urls=[receiver.url]).start()
    try:
        flip(engine_for(store, [receiver.url], notifier), SATURATED, HEALTHY)
        bodies = receiver.wait_for(2)
    finally:
        notifier.stop()
    assert statuses(bodies) == ["firing", "resolved"]
    assert bodies[0]["alerts"][0]["labels"]["alertname"] == "StatePoolSaturation"
    assert [d.status for d in store.deliveries()] == ["delivered", "delivered"]


def test_a_down_receiver_gets_everything_in_order_once_it_is_back(
    store: AlertStateStore, receiver: Receiver
) -> None:
    receiver.status = 503
    notifier = Notifier(store, webhook_urls=[receiver.url], backoff_initial_s=0.05, backoff_max_s=0.2).start()
    try:
        flip(engine_for(store, [receiver.url], notifier), SATURATED, HEALTHY, SATURATED)
        assert receiver.bodies == []
        assert store.queued_count(receiver.url) == 3
        retried = max(d.attempts for d in store.deliveries())
        assert retried >= 2  # retried with backoff while down
        assert "HTTP 503" in store.deliveries()[-1].last_error
        receiver.status = 200
        bodies = receiver.wait_for(3)
    finally:
        notifier.stop()
    assert statuses(bodies) == ["firing", "resolved", "firing"]


def test_a_refused_body_is_marked_failed_and_the_queue_moves_on(
    store: AlertStateStore, receiver: Receiver
) -> None:
    store.commit([], [], [], [OutboxItem(receiver.url, "webhook", '{"bad": true}')], time.time())
    receiver.status = 400
    notifier = Notifier(store, webhook_urls=[receiver.url], backoff_initial_s=0.05).start()
    try:
        deadline = time.monotonic() + 5
        while store.queued_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        (failed,) = store.deliveries()
        assert failed.status == "failed"
        assert "HTTP 400" in failed.last_error
        assert failed.attempts == 1
        receiver.status = 200
        store.commit([], [], [], [OutboxItem(receiver.url, "webhook", '{"good": true}')], time.time())
        notifier.wake()
        assert receiver.wait_for(1) == [{"good": True}]
    finally:
        notifier.stop()


def test_a_hanging_receiver_never_slows_evaluation(store: AlertStateStore, receiver: Receiver) -> None:
    receiver.delay_s = 2.0
    notifier = Notifier(store, webhook_urls=[receiver.url], timeout_s=5.0).start()
    engine = engine_for(store, [receiver.url], notifier)
    try:
        for signals in (SATURATED, HEALTHY, SATURATED, HEALTHY):
            started = time.perf_counter()
            now = time.time()
            engine.observe([snap("gpu-1", now, **signals)], now=now)
            assert time.perf_counter() - started < 0.5  # the receiver takes 2 s per message
            time.sleep(0.25)

    finally:
        notifier.stop(flush_timeout_s=0)
    assert store.queued_count(receiver.url) >= 1  # still working through them in the background


def test_old_receivers_queue_is_dropped_with_a_reason(store: AlertStateStore, receiver: Receiver) -> None:
    store.commit([], [], [], [OutboxItem("http://127.0.0.1:9/gone", "webhook", "{}")], time.time())
    notifier = Notifier(store, webhook_urls=[receiver.url]).start()
    notifier.stop()
    (dropped,) = store.deliveries()
    assert dropped.status == "failed"
    assert dropped.last_error == "receiver no longer configured"


def test_alertmanager_snapshot_resends_firing_and_recent_resolutions(store: AlertStateStore) -> None:
    engine = AlertEngine(build_rules(INSTANT), store, alertmanager_url="http://127.0.0.1:9")
    notifier = Notifier(store, alertmanager_url="http://127.0.0.1:9", alertmanager_valid_for_s=240)
    now = time.time()
    engine.observe([snap("gpu-1", now, **SATURATED), snap("gpu-2", now, **SATURATED)], now=now)
    engine.observe([snap("gpu-1", now + 2, **SATURATED), snap("gpu-2", now + 2, **HEALTHY)], now=now + 2)
    alerts = {a["labels"]["target"]: a for a in notifier.alertmanager_snapshot(now + 3)}
    assert set(alerts) == {"gpu-1", "gpu-2"}
    ends = {t: a["endsAt"] for t, a in alerts.items()}
    assert ends["gpu-1"] > ends["gpu-2"]  # still firing: valid for 4 min; resolved: ended at now + 2
    am = json.loads(
        next(d.payload for d in store.deliveries() if d.kind == "alertmanager")
    )  # the newest post
    assert am[0]["labels"]["target"] == "gpu-2"
    assert "endsAt" in am[0]
    assert "status" not in am[0]
    assert notifier.alertmanager_snapshot(now + 2000)[0]["labels"]["target"] == "gpu-1"  # resolution aged out
