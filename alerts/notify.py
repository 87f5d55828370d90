"""Background delivery of the notification outbox: one thread per receiver, retried with capped backoff.

The contract, per receiver: an attempt may take ``timeout_s`` (webhooks are often slow); a failed attempt is
retried with the same body (same group key and fingerprints, same ``Idempotency-Key``) after a doubling wait
capped at ``backoff_max_s``; after ``max_attempts`` or ``max_age_s`` the notification is marked failed, kept,
and shown. A redirect is never followed (an error in words); a 413 splits the body in two and sends both; a
delivered notification is never sent again, even when the store cannot record it (the mark waits in memory).
Order is kept within a group; another group, or another receiver, never waits behind a failing one. The
Alertmanager thread also re-sends every firing alert each ``resend_interval_s``, as Prometheus does.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from alerts.delivery_http import RefusedError, TooLargeError, UnreachableError, post_notification
from alerts.model import Delivery
from alerts.payloads import resend_snapshot, split_payload, split_to_fit
from alerts.state_store import AlertStateStore
from collectors.errors import StoreError
from collectors.secrets import Redactor, safe_url
from config import DeliverySettings

log = logging.getLogger(__name__)

_DEFAULTS = DeliverySettings()
_JOIN_S = 2.0  # how long stop() waits for the receiver threads


@dataclass(slots=True)
class _Local:
    """What the notifier knows of one notification that the store may not have recorded yet."""

    attempts: int
    next_attempt_ts: float
    final: str | None = None  # "delivered" or "failed": never sent again, whatever the store says
    ts: float = 0.0
    error: str = ""


@dataclass(frozen=True, slots=True)
class ReceiverStatus:
    """One receiver's outbox, for the collector's /metrics and the Alerts page."""

    receiver: str  # without userinfo
    queued: int
    delivered: int
    failed: int
    split: int
    oldest_queued_age_s: float | None
    unsaved_marks: int  # outcomes held in memory because the store refused the write


class Notifier:
    """Delivers queued webhook and Alertmanager notifications in the background."""

    def __init__(
        self,
        store: AlertStateStore,
        *,
        webhook_urls: Sequence[str] = (),
        alertmanager_url: str | None = None,
        clock: Callable[[], float] = time.time,
        timeout_s: float = _DEFAULTS.timeout_s,
        backoff_initial_s: float = _DEFAULTS.backoff_initial_s,
        backoff_max_s: float = _DEFAULTS.backoff_max_s,
        max_attempts: int = _DEFAULTS.max_attempts,
        max_age_s: float = _DEFAULTS.max_age_s,
        max_payload_bytes: int = _DEFAULTS.max_payload_bytes,
        max_alerts_per_payload: int = _DEFAULTS.max_alerts_per_payload,
        resend_interval_s: float = 60.0,
        resolved_retention_s: float = 900.0,
        alertmanager_valid_for_s: float = 240.0,
        external_url: str = "http://localhost:8501",
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._timeout_s = timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._max_attempts = max_attempts
        self._max_age_s = max_age_s
        self._max_payload_bytes = max_payload_bytes
        self._max_alerts = max_alerts_per_payload
        self._resend_interval_s = resend_interval_s
        self._resolved_retention_s = resolved_retention_s
        self._valid_for_s = alertmanager_valid_for_s
        self._external_url = external_url
        self._redact = redact if redact is not None else Redactor()
        # The outbox names a receiver by its URL without user:password (the store, the page and /metrics
        # never hold the password); the real URL is only used to post.
        self._endpoints: dict[str, str] = {safe_url(url): url for url in webhook_urls}
        self.receivers: dict[str, str] = dict.fromkeys(self._endpoints, "webhook")
        self.alertmanager_receiver: str | None = None
        if alertmanager_url:
            real = alertmanager_url.rstrip("/") + "/api/v2/alerts"
            self.alertmanager_receiver = safe_url(real)
            self._endpoints[self.alertmanager_receiver] = real
            self.receivers[self.alertmanager_receiver] = "alertmanager"
        self._stop = threading.Event()
        self._wake = {url: threading.Event() for url in self.receivers}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._local: dict[str, dict[int, _Local]] = {url: {} for url in self.receivers}
        self._store_problem: dict[str, str | None] = dict.fromkeys(self.receivers)
        self._pass_failed: dict[str, bool] = dict.fromkeys(self.receivers, False)

    @classmethod
    def from_settings(
        cls,
        store: AlertStateStore,
        delivery: DeliverySettings,
        **kwargs: Any,
    ) -> Notifier:
        """A notifier with the config's delivery contract (``alerts.delivery``)."""
        return cls(
            store,
            timeout_s=delivery.timeout_s,
            backoff_initial_s=delivery.backoff_initial_s,
            backoff_max_s=delivery.backoff_max_s,
            max_attempts=delivery.max_attempts,
            max_age_s=delivery.max_age_s,
            max_payload_bytes=delivery.max_payload_bytes,
            max_alerts_per_payload=delivery.max_alerts_per_payload,
            **kwargs,
        )

    def start(self) -> Notifier:
        self._rename_old_receivers()
        self._drop_orphans()
        for url, kind in self.receivers.items():
            thread = threading.Thread(
                target=self._run, args=(url, kind), name=f"specwatch-notify-{kind}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def wake(self) -> None:
        """New rows were queued: deliver them now rather than at the next poll."""
        for event in self._wake.values():
            event.set()

    def _pending(self, url: str) -> int:
        with self._lock:
            done = sum(1 for entry in self._local[url].values() if entry.final is not None)
        return max(0, self._store.queued_count(url) - done)

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the queue to drain (delivered or refused); True if it did."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                left = sum(self._pending(url) for url in self.receivers)
            except StoreError as exc:
                log.warning("cannot read the outbox to flush it: %s", exc)
                return False
            if left == 0:
                return True
            if time.monotonic() >= deadline:
                log.warning("%d notifications still queued; they are delivered after the next start", left)
                return False
            self.wake()
            time.sleep(0.05)

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        if self._threads and flush_timeout_s > 0:
            self.flush(flush_timeout_s)
        self._stop.set()
        self.wake()
        # A thread inside a hanging POST is not waited for (daemon threads): its notification stays queued
        # and goes out, identical, after the next start. SIGTERM is honoured within seconds.
        deadline = time.monotonic() + _JOIN_S
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def status(self) -> list[ReceiverStatus]:
        """Each receiver's outbox counts (StoreError when the store cannot be read)."""
        counts = self._store.outbox_counts()
        now = self._clock()
        out = []
        for url in self.receivers:
            with self._lock:
                local = list(self._local[url].values())
            delivered_here = sum(1 for e in local if e.final == "delivered")
            failed_here = sum(1 for e in local if e.final == "failed")
            oldest = self._store.oldest_queued_ts(url)
            out.append(
                ReceiverStatus(
                    receiver=self._redact(url),
                    queued=max(0, counts.get((url, "queued"), 0) - delivered_here - failed_here),
                    delivered=counts.get((url, "delivered"), 0) + delivered_here,
                    failed=counts.get((url, "failed"), 0) + failed_here,
                    split=counts.get((url, "split"), 0),
                    oldest_queued_age_s=None if oldest is None else max(0.0, now - oldest),
                    unsaved_marks=sum(1 for e in local if e.final is not None),
                )
            )
        return out

    # -- one receiver
    # ------------------------------------------------------------------------------------------
    def _run(self, url: str, kind: str) -> None:
        wake = self._wake[url]
        next_resend = self._clock() + self._resend_interval_s
        failing = False
        while not self._stop.is_set():
            wait_s = 1.0
            self._pass_failed[url] = False
            try:
                self._save_marks(url)
                wait_s, failing = self._deliver_due(url, failing)
                now = self._clock()
                if kind == "alertmanager":
                    if now >= next_resend:
                        next_resend = now + self._resend_interval_s
                        self._resend(url, now)
                    wait_s = min(wait_s, next_resend - self._clock())
                if not self._pass_failed[url]:
                    self._store_ok(url)
            except StoreError as exc:
                self._store_failed(url, str(exc))
            if wait_s > 0:
                wake.wait(timeout=max(0.01, min(wait_s, 5.0)))
                wake.clear()

    def _store_ok(self, url: str) -> None:
        if self._store_problem[url] is not None:
            log.warning("notifier for %s: the outbox is readable and writable again", self._redact(url))
            self._store_problem[url] = None

    def _store_failed(self, url: str, message: str) -> None:
        self._pass_failed[url] = True
        # Once per change of the problem, not once a second: the state is on the page and on /metrics.
        if self._store_problem[url] != message:
            log.error(
                "notifier for %s: the outbox store fails (delivered notifications are remembered in memory "
                "and not sent again): %s",
                self._redact(url),
                message,
            )
            self._store_problem[url] = message

    def _deliver_due(self, url: str, failing: bool) -> tuple[float, bool]:
        """One attempt at the head of each group that is due; returns (seconds until the next due head, and
        whether the receiver is failing)."""
        local = self._local[url]
        with self._lock:
            done = [i for i, e in local.items() if e.final is not None]
        heads = self._store.group_heads(url, done)
        now = self._clock()
        wait_s = 5.0
        attempted = False
        for delivery in heads:
            if self._stop.is_set():
                break
            entry = local.get(delivery.id)
            due_ts = max(delivery.next_attempt_ts, entry.next_attempt_ts if entry else 0.0)
            if due_ts > now:
                wait_s = min(wait_s, due_ts - now)
                continue
            failing = self._attempt(delivery, failing)
            attempted = True
            now = self._clock()
        return (0.0 if attempted else wait_s), failing

    def _attempt(self, delivery: Delivery, failing: bool) -> bool:
        """One delivery attempt; returns whether the receiver is failing now."""
        url = delivery.receiver
        local = self._local[url]
        entry = local.get(delivery.id)
        attempts = max(delivery.attempts, entry.attempts if entry else 0) + 1
        now = self._clock()
        try:
            self._post(url, delivery.payload)
        except TooLargeError as exc:
            self._split(delivery, attempts, str(exc))
            return failing
        except RefusedError as exc:
            log.error("%s refused notification %d for good: %s", self._redact(url), delivery.id, exc)
            self._finish(delivery.id, url, "failed", now, attempts, str(exc))
            return failing
        except UnreachableError as exc:
            age_s = now - delivery.created_ts
            if attempts >= self._max_attempts or age_s >= self._max_age_s:
                error = f"gave up after {attempts} attempts over {age_s:.0f} s; last: {exc}"
                log.error("%s: notification %d failed: %s", self._redact(url), delivery.id, error)
                self._finish(delivery.id, url, "failed", now, attempts, error)
                return True
            delay_s = min(self._backoff_max_s, self._backoff_initial_s * 2 ** min(attempts - 1, 30))
            if not failing:
                log.warning("%s unreachable, retrying with backoff: %s", self._redact(url), exc)
            with self._lock:
                local[delivery.id] = _Local(attempts, now + delay_s)
            try:
                self._store.mark_retry(delivery.id, now + delay_s, str(exc), attempts)
            except StoreError as store_exc:
                self._store_failed(url, str(store_exc))
            return True
        if failing:
            log.warning("%s reachable again; delivering its queue", self._redact(url))
        self._finish(delivery.id, url, "delivered", self._clock(), attempts, "")
        return False

    def _finish(self, delivery_id: int, url: str, final: str, ts: float, attempts: int, error: str) -> None:
        """Remember the outcome first (in memory), then write it: a store that refuses the write can delay
        the mark, never cause a second send."""
        with self._lock:
            self._local[url][delivery_id] = _Local(attempts, float("inf"), final, ts, error)
        self._save_marks(url, only=delivery_id)

    def _save_marks(self, url: str, only: int | None = None) -> None:
        with self._lock:
            todo = [
                (i, e)
                for i, e in self._local[url].items()
                if e.final is not None and (only is None or i == only)
            ]
        for delivery_id, entry in todo:
            try:
                if entry.final == "delivered":
                    self._store.mark_delivered(delivery_id, entry.ts, entry.attempts)
                else:
                    self._store.mark_failed(delivery_id, entry.error, entry.attempts)
            except StoreError as exc:
                self._store_failed(url, str(exc))
                return
            with self._lock:
                self._local[url].pop(delivery_id, None)

    def _split(self, delivery: Delivery, attempts: int, error: str) -> None:
        parts = split_payload(delivery.kind, delivery.payload)
        url = delivery.receiver
        if parts is None:
            message = f"{error}; a single alert is already too large for this receiver"
            log.error("%s: notification %d failed: %s", self._redact(url), delivery.id, message)
            self._finish(delivery.id, url, "failed", self._clock(), attempts, message)
            return
        log.warning(
            "%s refused notification %d as too large; sending its alerts in two halves",
            self._redact(url),
            delivery.id,
        )
        try:
            self._store.split(delivery.id, parts, f"{error}; split in two")
            with self._lock:
                self._local[url].pop(delivery.id, None)
        except StoreError as exc:  # nothing was delivered: trying the same body again later is harmless
            self._store_failed(url, str(exc))
            with self._lock:
                self._local[url][delivery.id] = _Local(attempts, self._clock() + self._backoff_initial_s)

    def _post(self, url: str, payload: str) -> None:
        post_notification(self._endpoints.get(url, url), payload, self._timeout_s, self._redact)

    def _resend(self, url: str, now: float) -> None:
        """Prometheus's contract with Alertmanager: keep re-sending what fires and recent resolutions."""
        alerts = self.alertmanager_snapshot(now)
        if not alerts:
            return
        try:
            for body in split_to_fit(
                alerts, json.dumps, max_bytes=self._max_payload_bytes, max_alerts=self._max_alerts
            ):
                self._post(url, body)
        except (RefusedError, UnreachableError, TooLargeError) as exc:
            log.warning(
                "re-sending %d alerts to %s failed (next try in %g s): %s",
                len(alerts),
                self._redact(url),
                self._resend_interval_s,
                exc,
            )

    def alertmanager_snapshot(self, now: float) -> list[dict[str, Any]]:
        """Every firing alert (endsAt in the future) and every resolution of the retention window."""
        return resend_snapshot(
            self._store.active(),
            self._store.transitions(now - self._resolved_retention_s - 86400.0, now),
            now=now,
            valid_for_s=self._valid_for_s,
            resolved_retention_s=self._resolved_retention_s,
            external_url=self._external_url,
        )

    def _rename_old_receivers(self) -> None:
        """Rows queued by an older specwatch name the receiver with its password: rename them."""
        try:
            for key, real in self._endpoints.items():
                if key != real:
                    self._store.rename_receiver(real, key)
        except StoreError as exc:
            log.warning("could not rename old outbox rows: %s", exc)

    def _drop_orphans(self) -> None:
        """Rows queued for a receiver no longer configured would wait forever: mark them failed, say so."""
        try:
            for receiver in self._store.receivers_with_queue():
                if receiver in self.receivers:
                    continue
                while (delivery := self._store.next_delivery(receiver)) is not None:
                    self._store.mark_failed(delivery.id, "receiver no longer configured")
                log.warning(
                    "dropped notifications queued for %s: it is no longer configured", self._redact(receiver)
                )
        except StoreError as exc:
            log.warning("could not check the outbox for old receivers: %s", exc)
