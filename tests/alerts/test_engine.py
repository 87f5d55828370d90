"""The engine over timed snapshot feeds: transitions, suspension while down, notifications, restarts."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from alerts.engine import AlertEngine
from alerts.model import AlertState, Evaluation
from alerts.rules import Rule, build_rules
from alerts.rules.target_down import TargetDownSettings
from alerts.state_store import AlertStateStore
from alerts.window import TargetHistory
from collectors.model import Recipe
from collectors.store.sqlite_store import SqliteStore
from tests.alerts.conftest import Clock, recipe, snap

FAST = {
    "StatePoolSaturation": {"for_s": 20, "keep_firing_for_s": 10, "window_s": 5},
    "TargetDown": {"for_s": 15},
    "KVPoolSaturation": {"window_s": 5},
    "QueueBacklog": {"window_s": 5},
}
HEALTHY = {"state_pool_usage": 0.5, "kv_usage": 0.3, "queued": 0.0, "running": 20.0}
SATURATED = {"state_pool_usage": 0.98, "kv_usage": 0.29, "queued": 12.0, "running": 48.0}


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SqliteStore, AlertStateStore]]:
    history = SqliteStore(tmp_path / "history.sqlite")
    alerts = AlertStateStore(tmp_path / "history.sqlite")
    yield history, alerts
    alerts.close()
    history.close()


def make_engine(
    stores: tuple[SqliteStore, AlertStateStore],
    clock: Clock,
    rules: dict[str, Any] | None = None,
    **kwargs: Any,
) -> AlertEngine:
    history, alerts = stores
    return AlertEngine(
        build_rules(rules or FAST),
        alerts,
        history=history,
        clock=clock,
        webhook_urls=["http://127.0.0.1:9/hook"],
        **kwargs,
    )


def feed(
    engine: AlertEngine,
    clock: Clock,
    seconds: float,
    per_target: dict[str, dict[str, float] | None],
    history: SqliteStore | None = None,
) -> list[Any]:
    """Advance 5 s at a time; ``None`` signals mean the target is down. Returns every transition."""
    transitions = []
    for _ in range(int(seconds // 5)):
        now = clock.advance(5)
        snaps = [
            snap(name, now, up=signals is not None, **(signals or {})) for name, signals in per_target.items()
        ]
        if history is not None:
            history.append(snaps)
        transitions += engine.observe(snaps)
    return transitions


def kinds(transitions: Sequence[Any], rule: str | None = None) -> list[tuple[str, str]]:
    return [(t.target, t.kind) for t in transitions if rule is None or t.rule == rule]


def test_pending_then_firing_after_for_then_resolved_after_keep_firing(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    engine = make_engine(stores, clock)
    start = clock.now
    fired = feed(engine, clock, 30, {"gpu-1": SATURATED})
    assert kinds(fired) == [("gpu-1", "pending"), ("gpu-1", "firing")]
    assert fired[1].ts - fired[0].ts == 20  # for_s
    assert fired[0].ts == start + 5
    resolved = feed(engine, clock, 20, {"gpu-1": HEALTHY})
    assert kinds(resolved) == [("gpu-1", "resolved")]
    assert resolved[0].ts == start + 30 + 10  # last breach at +30, then keep_firing_for_s (10 s)

    assert stores[1].active() == []
    stored = stores[1].transitions(start, clock.now)
    assert [t.kind for t in stored] == ["pending", "firing", "resolved"]


def test_notifications_are_alertmanager_webhook_json(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    engine = make_engine(stores, clock)
    feed(engine, clock, 30, {"gpu-1": SATURATED})
    feed(engine, clock, 20, {"gpu-1": HEALTHY})
    firing, resolved = (json.loads(d.payload) for d in reversed(stores[1].deliveries()))
    assert firing["version"] == "4"
    assert firing["status"] == "firing"
    assert resolved["status"] == "resolved"
    alert = firing["alerts"][0]
    assert alert["labels"] == {
        "alertname": "StatePoolSaturation",
        "target": "gpu-1",
        "deployment": "east",
        "recipe_id": "r-base",
        "severity": "critical",
    }
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert "KV cache at 29%" in alert["annotations"]["summary"]
    assert alert["fingerprint"] == resolved["alerts"][0]["fingerprint"]
    assert resolved["alerts"][0]["startsAt"] == alert["startsAt"]
    assert resolved["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"
    # Grouped as an Alertmanager route with the default group_by: rule and deployment.
    assert firing["groupLabels"] == {"alertname": "StatePoolSaturation", "deployment": "east"}
    assert firing["groupKey"] == '{}:{alertname="StatePoolSaturation", deployment="east"}'
    assert firing["commonLabels"]["target"] == "gpu-1"


def test_a_down_target_fires_target_down_and_suspends_the_rest(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    engine = make_engine(stores, clock)
    feed(engine, clock, 30, {"gpu-1": SATURATED, "gpu-2": HEALTHY})
    down = feed(engine, clock, 60, {"gpu-1": None, "gpu-2": HEALTHY})
    assert kinds(down) == [("gpu-1", "pending"), ("gpu-1", "firing")]
    assert {t.rule for t in down} == {"TargetDown"}
    by_rule = {i.rule: i for i in stores[1].active()}
    assert by_rule["StatePoolSaturation"].state is AlertState.FIRING  # neither resolved ...
    assert by_rule["StatePoolSaturation"].suspended  # ... nor evaluated: no data
    assert by_rule["TargetDown"].target == "gpu-1"
    back = feed(engine, clock, 30, {"gpu-1": HEALTHY, "gpu-2": HEALTHY})
    assert sorted(kinds(back)) == [("gpu-1", "resolved"), ("gpu-1", "resolved")]
    assert stores[1].active() == []


def test_restart_restores_state_and_windows_without_renotifying(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    history, alerts = stores
    first = make_engine(stores, clock)
    feed(first, clock, 30, {"gpu-1": SATURATED}, history)
    queued = len(alerts.deliveries())
    assert queued == 1
    second = make_engine(stores, clock)  # a new process on the same file
    assert second.restore() == 1
    restored = second.history("gpu-1")
    assert restored is not None
    assert len(restored) == int(second.horizon_s // 5) + 1  # whole snapshots: the short rules' reach
    assert len(restored.samples_since(0.0)) == 6  # the columns: all 30 s written
    again = feed(second, clock, 30, {"gpu-1": SATURATED}, history)
    assert again == []  # still firing: no new transition, nothing re-notified
    assert len(alerts.deliveries()) == queued
    resolved = feed(second, clock, 20, {"gpu-1": HEALTHY}, history)
    assert kinds(resolved) == [("gpu-1", "resolved")]


def test_evaluation_interval_spaces_evaluations(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    engine = make_engine(stores, clock, evaluation_interval_s=30)
    transitions = feed(engine, clock, 120, {"gpu-1": SATURATED})
    assert [t.ts - transitions[0].ts for t in transitions] == [
        0,
        30,
    ]  # pending, then firing at the next evaluation


def test_a_locked_store_loses_nothing(tmp_path: Path, clock: Clock) -> None:
    history = SqliteStore(tmp_path / "h.sqlite")
    alerts = AlertStateStore(tmp_path / "h.sqlite", busy_timeout_s=0.05)
    engine = make_engine((history, alerts), clock)
    blocker = sqlite3.connect(tmp_path / "h.sqlite")
    blocker.execute("BEGIN EXCLUSIVE")
    during = feed(engine, clock, 30, {"gpu-1": SATURATED})
    assert kinds(during) == [("gpu-1", "pending"), ("gpu-1", "firing")]  # evaluation went on in memory
    blocker.rollback()
    blocker.close()
    feed(engine, clock, 5, {"gpu-1": SATURATED})
    assert [t.kind for t in alerts.transitions(0, clock.now)] == ["pending", "firing"]
    assert len(alerts.deliveries()) == 1
    alerts.close()
    history.close()


class Broken(Rule[TargetDownSettings]):
    name = "Broken"
    settings_class = TargetDownSettings

    def evaluate(self, history: TargetHistory, now: float, recipes: Any) -> Sequence[Evaluation]:
        raise ZeroDivisionError("a bug in a rule")

    def describe(self) -> str:
        return "always fails"

    def export(self, q: Any) -> Any:
        raise NotImplementedError


def test_a_failing_rule_does_not_stop_the_others(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    rules: list[Rule[Any]] = [Broken(TargetDownSettings()), *build_rules(FAST)]
    engine = AlertEngine(rules, stores[1], history=stores[0], clock=clock)
    transitions = feed(engine, clock, 30, {"gpu-1": SATURATED})
    assert kinds(transitions, "StatePoolSaturation") == [("gpu-1", "pending"), ("gpu-1", "firing")]


def test_a_recipe_change_resolves_the_old_instance_and_starts_a_new_one(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    engine = make_engine(stores, clock)
    feed(engine, clock, 30, {"gpu-1": SATURATED})
    new: Recipe = recipe(max_running_requests=64)
    transitions = []
    for _ in range(6):
        now = clock.advance(5)
        transitions += engine.observe([snap("gpu-1", now, recipe_id=new.recipe_id, **SATURATED)])
    # The old recipe's instance is no longer produced: it recovers (after keep_firing_for_s); the new one
    # starts.
    assert [(t.labels_dict["recipe_id"], t.kind) for t in transitions] == [
        (new.recipe_id, "pending"),
        ("r-base", "resolved"),
        (new.recipe_id, "firing"),
    ]


def test_alert_events_land_in_history_for_chart_markers(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    start = clock.now
    engine = make_engine(stores, clock)
    feed(engine, clock, 30, {"gpu-1": SATURATED})
    events = stores[0].read_events(start, clock.now)
    assert [(e.kind, e.detail) for e in events] == [("alert", "StatePoolSaturation firing")]


def test_restart_finds_a_recipe_change_older_than_the_windows(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    history, _ = stores
    old, new = recipe(speculative_dspark_block_size=3), recipe(speculative_dspark_block_size=5)
    for item in (old, new):
        history.put_recipe(item, clock.now)
    start = clock.now
    rows = []
    for i in range(100 * 12):  # 40 min of the old recipe, then 60 min of the new one, 5 s apart
        changed = i >= 40 * 12
        rows.append(
            snap(
                "gpu-1",
                start + 5 * i,
                recipe_id=(new if changed else old).recipe_id,
                accept_length=2.2 if changed else 2.55,
                running=40,
                avg_context_tokens=8192,
                output_tok_s=800 if changed else 1000,
            )
        )
    history.append(rows)
    clock.now = start + 5 * len(rows)
    engine = make_engine(stores, clock, {"AcceptLengthRegression": {"for_s": 0}})
    engine.restore()
    restored = engine.history("gpu-1")
    assert restored is not None
    assert restored.previous is not None
    assert restored.previous.recipe_id == old.recipe_id  # found although the change is an hour old
    transitions = engine.evaluate(clock.now)
    assert kinds(transitions, "AcceptLengthRegression") == [("gpu-1", "firing")]
    assert "speculative_dspark_block_size 3 → 5" in dict(transitions[0].annotations)["description"]


def test_a_target_that_left_the_fleet_is_suspended_then_resolved(
    stores: tuple[SqliteStore, AlertStateStore], clock: Clock
) -> None:
    engine = make_engine(stores, clock)
    feed(engine, clock, 30, {"gpu-1": SATURATED, "gpu-2": HEALTHY})
    left = clock.now
    gap = feed(engine, clock, 300, {"gpu-2": HEALTHY})  # gpu-1 no longer in the cycles
    assert gap == []
    (instance,) = stores[1].active()
    assert instance.suspended  # no data: neither resolved nor fired
    later = feed(engine, clock, 700, {"gpu-2": HEALTHY})
    assert kinds(later) == [("gpu-1", "resolved")]
    assert later[0].ts - left == pytest.approx(900, abs=5)  # forgotten after 15 minutes without a snapshot
    assert dict(later[0].annotations)["resolved_because"] == "target no longer scraped"
