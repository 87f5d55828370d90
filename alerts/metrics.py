"""The notifier's outbox on the collector's /metrics: queued, delivered, failed per receiver, and whether the
outbox store can be written (a delivered mark held in memory is counted as unsaved)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from alerts.notify import Notifier
from collectors.errors import StoreError


class DeliveryMetrics:
    """A prometheus_client collector reading a ``Notifier``'s outbox at scrape time."""

    def __init__(self, notifier: Notifier) -> None:
        self._notifier = notifier

    def collect(self) -> Iterator[Metric]:
        readable = GaugeMetricFamily(
            "specwatch_notifications_store_ok", "1 if the notification outbox could be read just now."
        )
        try:
            statuses = self._notifier.status()
        except StoreError:
            readable.add_metric([], 0.0)
            yield readable
            return
        readable.add_metric([], 1.0)
        yield readable
        counts = GaugeMetricFamily(
            "specwatch_notifications",
            "Notifications in the outbox by receiver and status (queued, delivered, failed, split).",
            labels=["receiver", "status"],
        )
        oldest = GaugeMetricFamily(
            "specwatch_notifications_oldest_queued_seconds",
            "Age of the oldest notification still queued for the receiver.",
            labels=["receiver"],
        )
        unsaved = GaugeMetricFamily(
            "specwatch_notifications_unsaved_marks",
            "Delivered or failed notifications whose mark the store has not accepted yet (held in memory).",
            labels=["receiver"],
        )
        for status in statuses:
            for name in ("queued", "delivered", "failed", "split"):
                counts.add_metric([status.receiver, name], float(getattr(status, name)))
            if status.oldest_queued_age_s is not None:
                oldest.add_metric([status.receiver], status.oldest_queued_age_s)
            unsaved.add_metric([status.receiver], float(status.unsaved_marks))
        yield counts
        yield oldest
        yield unsaved
