"""Notification bodies: Alertmanager's webhook JSON (version 4) and Prometheus-style ``/api/v2/alerts`` posts.

Fingerprints are Prometheus's label-set fingerprint (FNV-1a 64 over sorted name/value pairs), so the
fingerprint in specwatch's own webhooks equals the one Alertmanager computes for the same alert.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from alerts.model import AlertTransition, OutboxItem

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt while an alert is firing
RECEIVER = "specwatch"

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


def webhook_message(
    alerts: Sequence[dict[str, Any]], *, group_labels: Mapping[str, str], external_url: str
) -> str:
    """Alertmanager's webhook JSON for one group of alerts (status firing if any alert still fires)."""
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items())) + "}"
    message = {
        "version": "4",
        "groupKey": group_key,
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
) -> list[OutboxItem]:
    """The notifications for one evaluation's (transition, startsAt) changes: one webhook message per rule per
    receiver (alerts that started firing or resolved), and one Alertmanager post with all of them."""
    bodies: dict[str, list[dict[str, Any]]] = defaultdict(list)
    postable: list[dict[str, Any]] = []
    for transition, starts_at in changes:
        firing = transition.kind == "firing"
        body = alert_body(
            status=transition.kind,
            labels=transition.labels_dict,
            annotations=dict(transition.annotations),
            starts_at=starts_at,
            ends_at=None if firing else transition.ts,
            generator=generator_url(external_url, transition.rule, transition.target),
        )
        bodies[transition.rule].append(body)
        postable.append(alertmanager_alert(body, alertmanager_ends_at if firing else transition.ts))
    items = [
        OutboxItem(
            url,
            "webhook",
            webhook_message(alerts, group_labels={"alertname": rule}, external_url=external_url),
        )
        for rule, alerts in bodies.items()
        for url in webhook_urls
    ]
    if postable and alertmanager_receiver is not None:
        items.append(OutboxItem(alertmanager_receiver, "alertmanager", json.dumps(postable)))
    return items
