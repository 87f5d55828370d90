"""A real Alertmanager (Debian's prometheus-alertmanager on 127.0.0.1) receives specwatch's alert and its
resolution, groups them, and delivers both to a webhook receiver of this test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.engine import AlertEngine
from alerts.notify import Notifier
from alerts.payloads import fingerprint
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from tests.alerts.conftest import Receiver, snap
from tests.prometheus.engines import ALERTMANAGER, start_alertmanager

pytestmark = [
    pytest.mark.engines,
    pytest.mark.skipif(ALERTMANAGER is None, reason="prometheus-alertmanager not on PATH (Debian package)"),
]
INSTANT = {"StatePoolSaturation": {"for_s": 0, "keep_firing_for_s": 0, "window_s": 0.2}}


@pytest.fixture
def alertmanager(tmp_path: Path, receiver: Receiver) -> Iterator[str]:
    engine = start_alertmanager(tmp_path / "alertmanager", receiver.url)
    try:
        yield engine.url
    finally:
        engine.stop()


def test_alertmanager_delivers_the_alert_then_its_resolution(
    tmp_path: Path, alertmanager: str, receiver: Receiver
) -> None:
    store = AlertStateStore(tmp_path / "alerts.sqlite")
    notifier = Notifier(store, alertmanager_url=alertmanager, backoff_initial_s=0.1).start()
    engine = AlertEngine(build_rules(INSTANT), store, alertmanager_url=alertmanager, on_notify=notifier.wake)
    try:
        now = time.time()
        engine.observe(
            [snap("gpu-7", now, state_pool_usage=0.98, kv_usage=0.29, queued=12, running=48)], now=now
        )
        (firing,) = receiver.wait_for(1, timeout_s=20)
        time.sleep(0.3)
        now = time.time()
        engine.observe(
            [snap("gpu-7", now, state_pool_usage=0.5, kv_usage=0.3, queued=0, running=20)], now=now
        )
        resolved = receiver.wait_for(2, timeout_s=20)[1]
    finally:
        notifier.stop()
        store.close()
    assert firing["status"] == "firing"
    assert resolved["status"] == "resolved"
    assert firing["receiver"] == "specwatch-test"
    (alert,) = firing["alerts"]
    labels = {
        "alertname": "StatePoolSaturation",
        "target": "gpu-7",
        "deployment": "east",
        "recipe_id": "r-base",
        "severity": "critical",
    }
    assert alert["labels"] == labels
    assert alert["annotations"]["summary"] == "State pool at 98% on gpu-7, 12 queued; KV cache at 29%"
    assert alert["fingerprint"] == fingerprint(labels)  # Alertmanager's fingerprint is specwatch's
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"]
    assert resolved["alerts"][0]["endsAt"] > alert["startsAt"]
    assert firing["groupLabels"] == {"alertname": "StatePoolSaturation", "target": "gpu-7"}
