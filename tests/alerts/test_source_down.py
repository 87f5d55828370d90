"""SourceDown and the blind source: while the source cannot answer, every per-target alert holds (no firing,
no resolving, no new pending, no forgetting) and one alert about the source pages; the gap pages nobody."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from alerts.engine import AlertEngine
from alerts.model import AlertState, AlertTransition
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from collectors.model import SourceHealth, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore
from tests.alerts.conftest import Clock, snap

URL = "http://prometheus.example:9090"
SATURATED = {"state_pool_usage": 0.98, "kv_usage": 0.29, "queued": 12.0, "running": 48.0}
HEALTHY = {"state_pool_usage": 0.5, "kv_usage": 0.3, "queued": 0.0, "running": 20.0}
RULES = {"StatePoolSaturation": {"for_s": 20, "window_s": 5}, "TargetDown": {"for_s": 15}}


def test_source_down_waits_target_downs_for_s_unless_configured() -> None:
    def for_s(raw: dict[str, dict[str, float]]) -> float:
        return next(rule.for_s for rule in build_rules(raw) if rule.name == "SourceDown")

    assert for_s({}) == 30  # TargetDown's default
    assert for_s({"TargetDown": {"for_s": 7}}) == 7
    assert for_s({"TargetDown": {"for_s": 7}, "SourceDown": {"for_s": 90}}) == 90


@pytest.fixture
def engine(tmp_path: Path, clock: Clock) -> Iterator[tuple[AlertEngine, list[SourceHealth]]]:
    history = SqliteStore(tmp_path / "history.sqlite")
    alerts = AlertStateStore(tmp_path / "history.sqlite")
    health = [SourceHealth("prometheus", URL)]
    engine = AlertEngine(build_rules(RULES), alerts, history=history, clock=clock)
    engine.watch_source(lambda: health[-1])
    yield engine, health
    alerts.close()
    history.close()


def _cycles(
    engine: AlertEngine,
    clock: Clock,
    seconds: float,
    fleet: dict[str, dict[str, float] | None],
    *,
    blind: bool,
    silent: bool = False,
) -> list[AlertTransition]:
    """Every 5 s: one snapshot per target (None: down); while the source is blind, an unknown one each, or
    nothing at all when ``silent`` (a source blind since its start knows no targets to name)."""
    out: list[AlertTransition] = []
    for _ in range(int(seconds // 5)):
        now = clock.advance(5)
        snaps: list[TargetSnapshot] = [
            replace(snap(name, now, up=False), unknown=True, error=f"{name}: unknown")
            if blind
            else snap(name, now, up=signals is not None, **(signals or {}))
            for name, signals in fleet.items()
            if not (blind and silent)
        ]
        out += engine.observe(snaps)
    return out


@pytest.mark.parametrize("silent", [False, True], ids=["unknown-snapshots", "no-snapshots"])
def test_a_blind_source_holds_every_target_alert_and_pages_once_about_itself(
    engine: tuple[AlertEngine, list[SourceHealth]], clock: Clock, silent: bool
) -> None:
    alerts, health = engine
    fleet: dict[str, dict[str, float] | None] = {"gpu-1": SATURATED, "gpu-2": HEALTHY}
    before = _cycles(alerts, clock, 30, fleet, blind=False)
    fleet["gpu-2"] = None  # goes down: TargetDown pending (for_s 15), not yet firing
    before += _cycles(alerts, clock, 10, fleet, blind=False)
    assert [(t.rule, t.target, t.kind) for t in before] == [
        ("StatePoolSaturation", "gpu-1", "pending"),
        ("StatePoolSaturation", "gpu-1", "firing"),
        ("TargetDown", "gpu-2", "pending"),
    ]

    health.append(SourceHealth("prometheus", URL, answered=False, error="connection refused"))
    # Longer than TargetDown's for_s, the stale limit and the 15-minute forget limit.
    blind = _cycles(alerts, clock, 1000, fleet, blind=True, silent=silent)
    held = {(i.rule, i.target): i for i in alerts.active()}

    health.append(SourceHealth("prometheus", URL))
    fleet["gpu-2"] = HEALTHY
    after = _cycles(alerts, clock, 10, fleet, blind=False)

    assert [(t.rule, t.target, t.kind) for t in blind] == [
        ("SourceDown", URL, "pending"),
        ("SourceDown", URL, "firing"),
    ]
    source_down = held["SourceDown", URL]
    assert "connection refused" in dict(source_down.annotations)["description"]
    assert held["StatePoolSaturation", "gpu-1"].state is AlertState.FIRING  # not resolved, not forgotten
    assert held["StatePoolSaturation", "gpu-1"].suspended
    assert held["TargetDown", "gpu-2"].state is AlertState.PENDING  # the gap did not make it fire
    notified = [(t.rule, t.kind) for t in after if t.kind in ("firing", "resolved")]
    assert notified == [("SourceDown", "resolved")]  # nothing per target pages for the gap
    assert {(i.rule, i.target) for i in alerts.active()} == {("StatePoolSaturation", "gpu-1")}
