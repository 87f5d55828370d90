"""Notification bodies: Alertmanager's webhook JSON (version 4) and Prometheus-style ``/api/v2/alerts`` posts.

Fingerprints are Prometheus's label-set fingerprint (FNV-1a 64 over sorted name/value pairs), so the
fingerprint in specwatch's own webhooks equals the one Alertmanager computes for the same alert.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from alerts.model import AlertInstance, AlertState, AlertTransition, OutboxItem
from config import DeliverySettings

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt while an alert is firing
RECEIVER = "specwatch"
_DEFAULTS = DeliverySettings()  # alerts.delivery's documented defaults

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1
_SEPARATOR = 0xFF


def fingerprint(labels: Mapping[str, str]) -> str:
    """Prometheus ``model.LabelSet.Fingerprint()`` as 16 hex digits."""
    return _fingerprint(tuple(sorted(labels.items())))


@functools.lru_cache(maxsize=65536)  # the engine asks for the same few thousand label sets every cycle
def _fingerprint(items: tuple[tuple[str, str], ...]) -> str:
    value = _FNV_OFFSET
    for name, label in items:
        for chunk in (name.encode(), bytes([_SEPARATOR]), label.encode(), bytes([_SEPARATOR])):
            for byte in chunk:
                value = ((value ^ byte) * _FNV_PRIME) & _MASK
    return f"{value:016x}"


def rfc3339(ts: float) -> str:
    """Unix seconds as RFC 3339 UTC with milliseconds, the way Alertmanager prints times."""
    moment = datetime.fromtimestamp(ts, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def generator_url(external_url: str, rule: str, target: str) -> str:
    """The back-link to specwatch's Alerts page for one instance."""
    return f"{external_url.rstrip('/')}/alerts?{urlencode({'rule': rule, 'target': target})}"


def alert_body(
    *,
    status: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    starts_at: float,
    ends_at: float | None,
    generator: str,
) -> dict[str, Any]:
    """One alert of a webhook message; ``ends_at`` None means still firing (the zero time)."""
    return {
        "status": status,
        "labels": dict(sorted(labels.items())),
        "annotations": dict(sorted(annotations.items())),
        "startsAt": rfc3339(starts_at),
        "endsAt": ZERO_TIME if ends_at is None else rfc3339(ends_at),
        "generatorURL": generator,
        "fingerprint": fingerprint(labels),
    }


def _common(items: Sequence[Mapping[str, str]]) -> dict[str, str]:
    if not items:
        return {}
    shared = dict(items[0])
    for item in items[1:]:
        shared = {k: v for k, v in shared.items() if item.get(k) == v}
    return dict(sorted(shared.items()))


def group_key(group_labels: Mapping[str, str]) -> str:
    """Alertmanager's group key for a route without matchers: what receivers deduplicate on, with the
    alerts' fingerprints."""
    return "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items())) + "}"


def webhook_message(
    alerts: Sequence[dict[str, Any]], *, group_labels: Mapping[str, str], external_url: str
) -> str:
    """Alertmanager's webhook JSON for one group of alerts (status firing if any alert still fires)."""
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    message = {
        "version": "4",
        "groupKey": group_key(group_labels),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": RECEIVER,
        "groupLabels": dict(sorted(group_labels.items())),
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": external_url,
        "alerts": list(alerts),
    }
    return json.dumps(message, sort_keys=False)


def split_to_fit(
    alerts: Sequence[dict[str, Any]],
    render: Callable[[Sequence[dict[str, Any]]], str],
    *,
    max_bytes: int,
    max_alerts: int,
) -> list[str]:
    """``render`` of consecutive slices of ``alerts``, each at most ``max_alerts`` alerts and ``max_bytes``
    bytes (halved until it fits; a single alert is sent whatever its size, the receiver then decides)."""
    out: list[str] = []
    for start in range(0, len(alerts), max_alerts):
        _halve(alerts[start : start + max_alerts], render, max_bytes, out)
    return out


def _halve(
    alerts: Sequence[dict[str, Any]],
    render: Callable[[Sequence[dict[str, Any]]], str],
    max_bytes: int,
    out: list[str],
) -> None:
    body = render(alerts)
    if len(alerts) <= 1 or len(body.encode()) <= max_bytes:
        out.append(body)
        return
    middle = len(alerts) // 2
    _halve(alerts[:middle], render, max_bytes, out)
    _halve(alerts[middle:], render, max_bytes, out)


def split_payload(kind: str, payload: str) -> list[str] | None:
    """A refused (413) body as two bodies with half the alerts each, same group and identity; None when it
    holds a single alert (nothing left to split)."""
    document = json.loads(payload)
    if kind == "alertmanager":
        alerts: list[dict[str, Any]] = list(document)
        if len(alerts) <= 1:
            return None
        middle = len(alerts) // 2
        return [json.dumps(alerts[:middle]), json.dumps(alerts[middle:])]
    alerts = list(document["alerts"])
    if len(alerts) <= 1:
        return None
    middle = len(alerts) // 2
    return [
        webhook_message(part, group_labels=document["groupLabels"], external_url=document["externalURL"])
        for part in (alerts[:middle], alerts[middle:])
    ]


def alertmanager_alert(body: Mapping[str, Any], ends_at: float) -> dict[str, Any]:
    """A webhook alert as a ``/api/v2/alerts`` postable alert (endsAt always set, like Prometheus)."""
    return {
        "labels": body["labels"],
        "annotations": body["annotations"],
        "startsAt": body["startsAt"],
        "endsAt": rfc3339(ends_at),
        "generatorURL": body["generatorURL"],
    }


def outbox_items(
    changes: Sequence[tuple[AlertTransition, float]],
    *,
    webhook_urls: Sequence[str],
    alertmanager_receiver: str | None,
    external_url: str,
    alertmanager_ends_at: float,
    group_by: Sequence[str] = _DEFAULTS.group_by,
    max_payload_bytes: int = _DEFAULTS.max_payload_bytes,
    max_alerts: int = _DEFAULTS.max_alerts_per_payload,
) -> list[OutboxItem]:
    """The notifications for one evaluation's (transition, startsAt) changes: per receiver one webhook
    message per group (``group_by`` labels, as an Alertmanager route groups), and Alertmanager posts with
    all of them, every body split to stay under ``max_payload_bytes`` and ``max_alerts``."""
    groups: dict[tuple[tuple[str, str], ...], list[dict[str, Any]]] = defaultdict(list)
    postable: list[dict[str, Any]] = []
    for transition, starts_at in changes:
        firing = transition.kind == "firing"
        labels = transition.labels_dict
        body = alert_body(
            status=transition.kind,
            labels=labels,
            annotations=dict(transition.annotations),
            starts_at=starts_at,
            ends_at=None if firing else transition.ts,
            generator=generator_url(external_url, transition.rule, transition.target),
        )
        # A label the alert lacks groups as "" (Alertmanager leaves it out of the group labels).
        key = tuple((name, labels[name]) for name in sorted(group_by) if name in labels)
        groups[key].append(body)
        postable.append(alertmanager_alert(body, alertmanager_ends_at if firing else transition.ts))
    items: list[OutboxItem] = []
    for key, alerts in groups.items():
        labels_of_group = dict(key)

        def render(part: Sequence[dict[str, Any]], g: dict[str, str] = labels_of_group) -> str:
            return webhook_message(part, group_labels=g, external_url=external_url)

        bodies = split_to_fit(alerts, render, max_bytes=max_payload_bytes, max_alerts=max_alerts)
        items.extend(
            OutboxItem(url, "webhook", body, group_key(labels_of_group))
            for url in webhook_urls
            for body in bodies
        )
    if postable and alertmanager_receiver is not None:
        items.extend(
            OutboxItem(alertmanager_receiver, "alertmanager", body)
            for body in split_to_fit(postable, json.dumps, max_bytes=max_payload_bytes, max_alerts=max_alerts)
        )
    return items


def resend_snapshot(
    active: Sequence[AlertInstance],
    recent: Sequence[AlertTransition],
    *,
    now: float,
    valid_for_s: float,
    resolved_retention_s: float,
    external_url: str,
) -> list[dict[str, Any]]:
    """Prometheus's re-send to Alertmanager: every firing alert with endsAt ``valid_for_s`` ahead, and every
    resolution of the last ``resolved_retention_s`` (``recent`` transitions) with its endsAt."""
    firing = [i for i in active if i.state is AlertState.FIRING]
    firing_now = {i.fingerprint for i in firing}
    alerts: list[dict[str, Any]] = [
        {
            "labels": i.labels_dict,
            "annotations": i.annotations_dict,
            "startsAt": rfc3339(i.fired_at if i.fired_at is not None else i.since),
            "endsAt": rfc3339(now + valid_for_s),
            "generatorURL": generator_url(external_url, i.rule, i.target),
        }
        for i in firing
    ]
    started = {t.fingerprint: t.ts for t in recent if t.to_state is AlertState.FIRING}
    for t in recent:
        resolved = t.from_state is AlertState.FIRING and t.to_state is AlertState.INACTIVE
        if not resolved or t.ts < now - resolved_retention_s or t.fingerprint in firing_now:
            continue
        alerts.append(
            {
                "labels": t.labels_dict,
                "annotations": dict(t.annotations),
                "startsAt": rfc3339(min(started.get(t.fingerprint, t.ts), t.ts)),
                "endsAt": rfc3339(t.ts),
                "generatorURL": generator_url(external_url, t.rule, t.target),
            }
        )
    return alerts
