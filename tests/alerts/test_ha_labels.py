"""What makes two evaluators' alerts one alert in Alertmanager: the same labels, whatever each one remembers.

The HA pair's end-to-end test (``test_ha_pair.py``) starts both daemons before the incident; here the second
evaluator starts during it, as a replacement daemon with a fresh store would, and never sees the target up.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from alerts.engine import AlertEngine
from alerts.payloads import fingerprint
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from tests.alerts.conftest import Clock, snap

INSTANT = {"TargetDown": {"for_s": 0}, "StatePoolSaturation": {"for_s": 0, "window_s": 0.2}}


def _engine(path: Path, clock: Clock) -> tuple[AlertEngine, AlertStateStore]:
    store = AlertStateStore(path)
    engine = AlertEngine(
        build_rules(INSTANT), store, alertmanager_url="http://alertmanager:9093", clock=clock
    )
    return engine, store


def _posted(store: AlertStateStore) -> list[dict[str, object]]:
    return [a for d in store.deliveries() if d.kind == "alertmanager" for a in json.loads(d.payload)]


def test_a_daemon_started_during_an_outage_labels_target_down_as_the_one_that_saw_it_up(
    tmp_path: Path, clock: Clock
) -> None:
    seen_up, a_store = _engine(tmp_path / "a.sqlite", clock)
    started_late, b_store = _engine(tmp_path / "b.sqlite", clock)
    try:
        seen_up.observe([snap("gpu-1", clock.now)], now=clock.now)  # recipe r-base, up
        # The direct source keeps a down target's last recipe on its snapshot; only the first daemon knows it.
        down = dataclasses.replace(snap("gpu-1", clock.advance(5), up=False), recipe_id="r-base")
        seen_up.observe([down], now=clock.now)
        started_late.observe([dataclasses.replace(down, recipe_id=None)], now=clock.now)
        (first,), (second,) = _posted(a_store), _posted(b_store)
    finally:
        a_store.close()
        b_store.close()
    labels = {"alertname": "TargetDown", "target": "gpu-1", "deployment": "east", "severity": "critical"}
    assert first["labels"] == second["labels"] == labels  # no recipe_id: what neither can see now
    assert first["generatorURL"] == second["generatorURL"]
    assert seen_up.active()[0].fingerprint == started_late.active()[0].fingerprint == fingerprint(labels)


def test_an_up_target_keeps_its_recipe_label(tmp_path: Path, clock: Clock) -> None:
    engine, store = _engine(tmp_path / "a.sqlite", clock)
    try:
        saturated = {"state_pool_usage": 0.98, "kv_usage": 0.29, "queued": 12.0, "running": 48.0}
        engine.observe([snap("gpu-1", clock.now, **saturated)], now=clock.now)
        (alert,) = _posted(store)
    finally:
        store.close()
    assert alert["labels"] == {  # type: ignore[index]
        "alertname": "StatePoolSaturation",
        "target": "gpu-1",
        "deployment": "east",
        "recipe_id": "r-base",
        "severity": "critical",
    }
