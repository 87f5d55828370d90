"""Background delivery of the notification outbox: one thread per receiver, in order, retried with backoff.

A down receiver only delays its own queue: scraping and evaluation never wait for HTTP. Rows stay queued in
SQLite until delivered (across restarts too); a receiver that refuses a body for good (HTTP 4xx) marks it
failed. The Alertmanager thread also re-sends every firing alert each ``resend_interval_s``, as Prometheus
does.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import requests

from alerts.model import AlertState, Delivery
from alerts.payloads import generator_url, rfc3339
from alerts.state_store import AlertStateStore
from collectors.errors import StoreError
from collectors.transport import WATCHDOG, make_service_session

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 425, 429})
_ERROR_BYTES = 200  # of a refusal's body, kept as the delivery's last error


class _RefusedError(Exception):
    """The receiver answered with a 4xx: retrying the same body cannot help."""


class _UnreachableError(Exception):
    """No answer, a timeout or a 5xx: try again later."""


class Notifier:
    """Delivers queued webhook and Alertmanager notifications in the background."""

    def __init__(
        self,
        store: AlertStateStore,
        *,
        webhook_urls: Sequence[str] = (),
        alertmanager_url: str | None = None,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 5.0,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        resend_interval_s: float = 60.0,
        resolved_retention_s: float = 900.0,
        alertmanager_valid_for_s: float = 240.0,
        external_url: str = "http://localhost:8501",
        session_factory: Callable[[], requests.Session] = make_service_session,
    ) -> None:
        self._store = store
        self._clock = clock
        self._timeout_s = timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._resend_interval_s = resend_interval_s
        self._resolved_retention_s = resolved_retention_s
        self._valid_for_s = alertmanager_valid_for_s
        self._external_url = external_url
        self._session_factory = session_factory
        self.receivers: dict[str, str] = {url: "webhook" for url in webhook_urls}
        self.alertmanager_receiver = (
            alertmanager_url.rstrip("/") + "/api/v2/alerts" if alertmanager_url else None
        )
        if self.alertmanager_receiver is not None:
            self.receivers[self.alertmanager_receiver] = "alertmanager"
        self._stop = threading.Event()
        self._wake = {url: threading.Event() for url in self.receivers}
        self._threads: list[threading.Thread] = []

    def start(self) -> Notifier:
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

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the queue to drain (delivered or refused); True if it did."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = sum(self._store.queued_count(url) for url in self.receivers)
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
        for thread in self._threads:
            thread.join(timeout=self._timeout_s + 1.0)
        self._threads.clear()

    # -- one receiver
    # ------------------------------------------------------------------------------------------
    def _run(self, url: str, kind: str) -> None:
        session = self._session_factory()
        wake = self._wake[url]
        next_resend = self._clock() + self._resend_interval_s
        failing = False
        try:
            while not self._stop.is_set():
                wait_s = 1.0
                try:
                    delivery = self._store.next_delivery(url)
                    now = self._clock()
                    if delivery is not None and delivery.next_attempt_ts <= now:
                        failing = self._attempt(session, delivery, failing)
                        continue
                    if delivery is not None:
                        wait_s = delivery.next_attempt_ts - now
                    elif kind == "alertmanager" and now >= next_resend:
                        next_resend = now + self._resend_interval_s
                        self._resend(session, url, now)
                        wait_s = self._resend_interval_s
                    elif kind == "alertmanager":
                        wait_s = next_resend - now
                except StoreError as exc:
                    log.warning("notifier for %s cannot read its queue (retrying): %s", url, exc)
                wake.wait(timeout=max(0.01, min(wait_s, 5.0)))
                wake.clear()
        finally:
            session.close()

    def _attempt(self, session: requests.Session, delivery: Delivery, failing: bool) -> bool:
        """One delivery attempt; returns whether the receiver is failing now."""
        now = self._clock()
        try:
            self._post(session, delivery.receiver, delivery.payload)
        except _RefusedError as exc:
            log.error("%s refused notification %d for good: %s", delivery.receiver, delivery.id, exc)
            self._store.mark_failed(delivery.id, str(exc))
            return failing
        except _UnreachableError as exc:
            delay_s = min(self._backoff_max_s, self._backoff_initial_s * 2 ** min(delivery.attempts, 30))
            if not failing:
                log.warning("%s unreachable, retrying with backoff: %s", delivery.receiver, exc)
            self._store.mark_retry(delivery.id, now + delay_s, str(exc))
            return True
        if failing:
            log.warning("%s reachable again; delivering its queue", delivery.receiver)
        self._store.mark_delivered(delivery.id, self._clock())
        return False

    def _post(self, session: requests.Session, url: str, payload: str) -> None:
        # One deadline for the whole exchange (a receiver trickling its answer is cut off), and at most a few
        # hundred bytes of the answer are read: only the status matters.
        try:
            with WATCHDOG.scope(time.monotonic() + self._timeout_s):
                response = session.post(
                    url,
                    data=payload.encode(),
                    headers={"Content-Type": "application/json", "User-Agent": "specwatch-alerts"},
                    timeout=self._timeout_s,
                    stream=True,
                )
                with response:
                    if response.ok:
                        return
                    head = next(response.iter_content(_ERROR_BYTES), b"")
        except requests.RequestException as exc:
            raise _UnreachableError(f"{type(exc).__name__}: {exc}") from exc
        text = f"HTTP {response.status_code}: {head[:_ERROR_BYTES].decode('utf-8', 'replace')}"
        if 400 <= response.status_code < 500 and response.status_code not in _RETRYABLE_STATUS:
            raise _RefusedError(text)
        raise _UnreachableError(text)

    def _resend(self, session: requests.Session, url: str, now: float) -> None:
        """Prometheus's contract with Alertmanager: keep re-sending what fires and recent resolutions."""
        alerts = self.alertmanager_snapshot(now)
        if not alerts:
            return
        try:
            self._post(session, url, json.dumps(alerts))
        except (_RefusedError, _UnreachableError) as exc:
            log.warning(
                "re-sending %d alerts to %s failed (next try in %g s): %s",
                len(alerts),
                url,
                self._resend_interval_s,
                exc,
            )

    def alertmanager_snapshot(self, now: float) -> list[dict[str, Any]]:
        """Every firing alert (endsAt in the future) and every resolution of the retention window."""
        firing = [i for i in self._store.active() if i.state is AlertState.FIRING]
        active = {i.fingerprint for i in firing}
        alerts: list[dict[str, Any]] = [
            {
                "labels": i.labels_dict,
                "annotations": i.annotations_dict,
                "startsAt": rfc3339(i.fired_at if i.fired_at is not None else i.since),
                "endsAt": rfc3339(now + self._valid_for_s),
                "generatorURL": generator_url(self._external_url, i.rule, i.target),
            }
            for i in firing
        ]
        recent = self._store.transitions(now - self._resolved_retention_s - 86400.0, now)
        started = {t.fingerprint: t.ts for t in recent if t.to_state is AlertState.FIRING}
        for t in recent:
            resolved = t.from_state is AlertState.FIRING and t.to_state is AlertState.INACTIVE
            if not resolved or t.ts < now - self._resolved_retention_s or t.fingerprint in active:
                continue
            alerts.append(
                {
                    "labels": t.labels_dict,
                    "annotations": dict(t.annotations),
                    "startsAt": rfc3339(min(started.get(t.fingerprint, t.ts), t.ts)),
                    "endsAt": rfc3339(t.ts),
                    "generatorURL": generator_url(self._external_url, t.rule, t.target),
                }
            )
        return alerts

    def _drop_orphans(self) -> None:
        """Rows queued for a receiver no longer configured would wait forever: mark them failed, say so."""
        try:
            for receiver in self._store.receivers_with_queue():
                if receiver in self.receivers:
                    continue
                while (delivery := self._store.next_delivery(receiver)) is not None:
                    self._store.mark_failed(delivery.id, "receiver no longer configured")
                log.warning("dropped notifications queued for %s: it is no longer configured", receiver)
        except StoreError as exc:
            log.warning("could not check the outbox for old receivers: %s", exc)
