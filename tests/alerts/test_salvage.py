"""``alerts.salvage.firing_from_outbox``: which alerts a damaged instances table is rebuilt with."""

from __future__ import annotations

import json

from alerts.model import AlertState
from alerts.payloads import alert_body
from alerts.salvage import firing_from_outbox

T0 = 1_800_000_000.0


def webhook(*alerts: dict[str, object]) -> tuple[str, str]:
    return ("webhook", json.dumps({"alerts": list(alerts)}))


def body(status: str, target: str | None, rule: str = "TargetDown") -> dict[str, object]:
    labels = {"alertname": rule, "severity": "critical"}
    if target is not None:
        labels["target"] = target
    return alert_body(
        status=status,
        labels=labels,
        annotations={"summary": "down"},
        starts_at=T0,
        ends_at=None if status == "firing" else T0 + 60,
        generator="http://x",
    )


def test_only_alerts_whose_last_notification_said_firing_come_back() -> None:
    bodies = [
        webhook(body("firing", "a"), body("firing", "b")),
        webhook(body("resolved", "b")),  # b resolved: not firing any more
        ("alertmanager", json.dumps([{"labels": {"alertname": "QueueBacklog", "target": "c"}}])),  # no status
        webhook(body("firing", None, rule="ErrorBudgetBurn")),  # an SLO alert: no target to key it by
        ("webhook", "{not json"),  # a damaged body
    ]
    [rebuilt] = firing_from_outbox(bodies)
    assert (rebuilt.rule, rebuilt.target, rebuilt.state) == ("TargetDown", "a", AlertState.FIRING)
    assert rebuilt.fired_at == rebuilt.since == T0  # firing since its startsAt
    assert rebuilt.fingerprint == body("firing", "a")["fingerprint"]
    assert dict(rebuilt.annotations) == {"summary": "down"}


def test_firing_again_after_a_resolution_comes_back() -> None:
    bodies = [webhook(body("firing", "a")), webhook(body("resolved", "a")), webhook(body("firing", "a"))]
    assert [i.target for i in firing_from_outbox(bodies)] == ["a"]
