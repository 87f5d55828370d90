"""The delivery contract against hostile receivers on 127.0.0.1: every notification arrives, and arrives once
(or is marked failed, kept and shown); retries are byte-identical; nothing follows a redirect; a 413 splits;
one failing receiver or group never holds up another. Counts are exact."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from alerts.engine import AlertEngine
from alerts.model import AlertState, AlertTransition
from alerts.notify import Notifier
from alerts.payloads import outbox_items
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from config import DeliverySettings
from tests.alerts.conftest import snap
from tests.alerts.hostile_receivers import (
    HostileReceiver,
    Post,
    always,
    fail_first,
    hostile_receiver,
    ok,
    refuse_over,
)

FAST = {"backoff_initial_s": 0.05, "backoff_max_s": 0.2}
T0 = 1_800_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AlertStateStore]:
    s = AlertStateStore(tmp_path / "alerts.sqlite")
    yield s
    s.close()


def transition(
    target: str, kind: str = "firing", rule: str = "TargetDown", deployment: str = "east"
) -> AlertTransition:
    labels = {"alertname": rule, "target": target, "deployment": deployment, "severity": "critical"}
    firing = kind == "firing"
    return AlertTransition(
        ts=T0 + (0 if firing else 60),
        rule=rule,
        target=target,
        fingerprint=target,
        from_state=AlertState.PENDING if firing else AlertState.FIRING,
        to_state=AlertState.FIRING if firing else AlertState.INACTIVE,
        value=1.0,
        labels=tuple(sorted(labels.items())),
        annotations=(("summary", f"{target} is down " + "x" * 300),),
    )


def queue(store: AlertStateStore, urls: list[str], changes: list[AlertTransition], **limits: int) -> int:
    """Queue the notifications of ``changes`` the way the engine does; returns how many bodies."""
    items = outbox_items(
        [(t, T0) for t in changes],
        webhook_urls=urls,
        alertmanager_receiver=None,
        external_url="http://localhost:8501",
        alertmanager_ends_at=T0 + 240,
        **limits,  # type: ignore[arg-type]
    )
    store.commit([], [], [], items, time.time())
    return len(items)


def alerts_of(posts: list[Post]) -> Counter[tuple[str, str]]:
    return Counter((a["labels"]["target"], a["status"]) for p in posts for a in p.json["alerts"])


@contextmanager
def notifying(
    store: AlertStateStore, urls: Sequence[str], *, stop_flush_s: float = 5.0, **options: float
) -> Iterator[Notifier]:
    """A started notifier to ``urls`` (FAST backoff unless ``options`` say otherwise), stopped after."""
    notifier = Notifier(store, webhook_urls=list(urls), **(FAST | options)).start()  # type: ignore[arg-type]
    try:
        yield notifier
    finally:
        notifier.stop(flush_timeout_s=stop_flush_s)


def settle(store: AlertStateStore, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while store.queued_count() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.queued_count() == 0, [d.last_error for d in store.deliveries()]


def test_defaults_suit_webhooks() -> None:
    delivery = DeliverySettings()
    assert delivery.timeout_s >= 30
    assert delivery.max_payload_bytes == 256 * 1024
    assert delivery.group_by == ("alertname", "deployment")


def test_a_receiver_slower_than_the_old_timeout_gets_each_notification_once(store: AlertStateStore) -> None:
    # 7 s per answer: the old 5 s timeout re-POSTed the firing forever and the resolution never came.
    with hostile_receiver(ok, delay_s=7.0) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        queue(store, [receiver.url], [transition("gpu-1", "resolved")])
        with notifying(store, [receiver.url]):  # default timeout
            receiver.wait_accepted(2, timeout_s=30)
            settle(store)
            time.sleep(0.5)
        assert [p.json["status"] for p in receiver.posts] == ["firing", "resolved"]
    assert [d.status for d in store.deliveries()] == ["delivered", "delivered"]


@pytest.mark.parametrize("action", ["hang", "close"])
def test_a_receiver_that_never_answers_gets_bounded_identical_retries_then_failed(
    store: AlertStateStore, action: str
) -> None:
    with hostile_receiver(always(action)) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        notifier = Notifier(store, webhook_urls=[receiver.url], timeout_s=0.5, max_attempts=3, **FAST)
        notifier.start()
        try:
            settle(store)
            time.sleep(0.5)  # nothing more comes once it is failed
        finally:
            notifier.stop()
        posts = list(receiver.posts)
    assert len(posts) == 3  # exactly max_attempts
    assert len({p.body for p in posts}) == 1  # the same content every time ...
    assert len({p.headers["Idempotency-Key"] for p in posts}) == 1  # ... and the same identity
    (failed,) = store.deliveries()
    assert failed.status == "failed"
    assert failed.attempts == 3
    assert "gave up after 3 attempts" in failed.last_error


def test_a_notification_older_than_max_age_fails_instead_of_retrying_forever(store: AlertStateStore) -> None:
    with hostile_receiver(always(503)) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        with notifying(store, [receiver.url], max_age_s=0.5):
            settle(store)
        assert 1 <= receiver.count() <= 12
    (failed,) = store.deliveries()
    assert failed.status == "failed"
    assert "HTTP 503" in failed.last_error


def test_500_then_200_is_delivered_once_with_the_same_body(store: AlertStateStore) -> None:
    with hostile_receiver(fail_first(2, 500)) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        with notifying(store, [receiver.url]):
            receiver.wait_accepted(1)
            settle(store)
            time.sleep(1.0)  # a delivered notification is never sent again
        posts = list(receiver.posts)
    assert len(posts) == 3
    assert len({p.body for p in posts}) == 1
    (delivered,) = store.deliveries()
    assert (delivered.status, delivered.attempts) == ("delivered", 3)


def test_a_redirect_is_not_followed_and_not_called_delivered(store: AlertStateStore) -> None:
    with hostile_receiver(always("redirect")) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        with notifying(store, [receiver.url]):
            settle(store)
            time.sleep(0.3)
        assert receiver.requests == ["POST /hook"]  # nothing went to /elsewhere
    (failed,) = store.deliveries()
    assert failed.status == "failed"
    assert "redirects to" in failed.last_error
    assert "not followed" in failed.last_error


def test_413_splits_until_every_alert_arrives_exactly_once(store: AlertStateStore) -> None:
    # The config allows 1 MiB bodies, but a proxy in front of the receiver refuses more than 64 KiB.
    with hostile_receiver(refuse_over(64 * 1024)) as receiver:
        count = queue(
            store,
            [receiver.url],
            [transition(f"gpu-{i}") for i in range(600)],
            max_payload_bytes=1024 * 1024,
        )
        assert count == 1
        with notifying(store, [receiver.url]):
            settle(store)
        accepted = receiver.accepted()
    assert alerts_of(accepted) == Counter({(f"gpu-{i}", "firing"): 1 for i in range(600)})
    assert all(len(p.body) <= 64 * 1024 for p in accepted)
    assert len({p.json["groupKey"] for p in accepted}) == 1  # the parts keep their group's identity
    statuses = Counter(d.status for d in store.deliveries(limit=1000))
    assert statuses["failed"] == 0
    assert statuses["split"] >= 1


def test_a_single_alert_too_large_for_the_receiver_is_failed_in_words(store: AlertStateStore) -> None:
    with hostile_receiver(always(413)) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        with notifying(store, [receiver.url]):
            settle(store)
        assert receiver.count() == 1
    (failed,) = store.deliveries()
    assert failed.status == "failed"
    assert "single alert is already too large" in failed.last_error


def test_one_failing_group_never_holds_up_the_receivers_other_groups(store: AlertStateStore) -> None:
    def refuse_west(receiver: HostileReceiver, post: Post, before: int) -> str | int:
        return 503 if post.json["groupLabels"].get("deployment") == "west" else "ok"

    with hostile_receiver(refuse_west) as receiver:
        queue(store, [receiver.url], [transition("w-1", deployment="west")])
        queue(store, [receiver.url], [transition("e-1", deployment="east")])
        queue(store, [receiver.url], [transition("e-1", "resolved", deployment="east")])
        with notifying(store, [receiver.url], stop_flush_s=0):
            accepted = receiver.wait_accepted(2, timeout_s=5)
    assert [(p.json["groupLabels"]["deployment"], p.json["status"]) for p in accepted] == [
        ("east", "firing"),
        ("east", "resolved"),
    ]
    assert store.queued_count(receiver.url) == 1  # the west group is still being retried


def test_a_hanging_receiver_never_holds_up_another_receiver(store: AlertStateStore) -> None:
    with hostile_receiver(always("hang")) as stuck, hostile_receiver(ok) as healthy:
        queue(store, [stuck.url, healthy.url], [transition("gpu-1")])
        queue(store, [stuck.url, healthy.url], [transition("gpu-1", "resolved")])
        notifier = Notifier(store, webhook_urls=[stuck.url, healthy.url], timeout_s=20, **FAST).start()
        started = time.monotonic()
        try:
            accepted = healthy.wait_accepted(2, timeout_s=5)
            took_s = time.monotonic() - started
        finally:
            notifier.stop(flush_timeout_s=0)
    assert [p.json["status"] for p in accepted] == ["firing", "resolved"]
    assert took_s < 5  # not after the stuck receiver's 20 s timeout


def test_2000_targets_down_at_once_all_reach_the_receiver(tmp_path: Path) -> None:
    store = AlertStateStore(tmp_path / "alerts.sqlite")
    # nginx's default client_max_body_size: the old single 1.24 MB POST was refused and lost.
    with hostile_receiver(refuse_over(1024 * 1024)) as receiver:
        notifier = Notifier(store, webhook_urls=[receiver.url], **FAST).start()
        engine = AlertEngine(
            build_rules({"TargetDown": {"for_s": 0}}),
            store,
            webhook_urls=[receiver.url],
            on_notify=notifier.wake,
        )
        names = [f"gpu-{i:04d}" for i in range(2000)]
        try:
            now = time.time()
            engine.observe([snap(n, now, up=True, kv_usage=0.1) for n in names], now=now)
            engine.observe([snap(n, now + 5, up=False) for n in names], now=now + 5)
            settle(store, timeout_s=60)
        finally:
            notifier.stop()
            store.close()
        accepted = receiver.accepted()
    assert alerts_of(accepted) == Counter({(n, "firing"): 1 for n in names})
    assert all(len(p.body) <= 256 * 1024 for p in accepted)
    assert all(len(p.json["alerts"]) <= 1000 for p in accepted)
    assert receiver.count() == len(accepted)  # pre-split: no 413 was needed


def test_the_status_counts_what_the_outbox_holds(store: AlertStateStore) -> None:
    with hostile_receiver(always(400)) as receiver:
        queue(store, [receiver.url], [transition("gpu-1")])
        with notifying(store, [receiver.url]) as notifier:
            settle(store)
    (status,) = notifier.status()
    assert (status.queued, status.failed, status.delivered) == (0, 1, 0)
    assert json.loads(store.deliveries()[0].payload)["alerts"][0]["labels"]["target"] == "gpu-1"


def test_a_version_1_outbox_is_migrated_and_its_queue_delivered_in_order(tmp_path: Path) -> None:
    import sqlite3
    from contextlib import closing

    path = tmp_path / "old.sqlite"
    with hostile_receiver(ok) as receiver:
        with closing(sqlite3.connect(path)) as db, db:
            # the version-1 table, as an older specwatch left it, with a firing and its resolution queued
            db.executescript(
                "CREATE TABLE alert_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                "INSERT INTO alert_meta VALUES ('schema_version', '1');"
                "CREATE TABLE alert_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, receiver TEXT NOT NULL, "
                "kind TEXT NOT NULL, created_ts REAL NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL "
                "DEFAULT 'queued', attempts INTEGER NOT NULL DEFAULT 0, next_attempt_ts REAL NOT NULL, "
                "delivered_ts REAL, last_error TEXT NOT NULL DEFAULT '');"
            )
            for status in ("firing", "resolved"):
                db.execute(
                    "INSERT INTO alert_outbox (receiver, kind, created_ts, payload, next_attempt_ts) "
                    "VALUES (?, 'webhook', 1, ?, 1)",
                    (receiver.url, json.dumps({"status": status, "alerts": []})),
                )
        store = AlertStateStore(path)
        notifier = Notifier(store, webhook_urls=[receiver.url], **FAST).start()
        try:
            settle(store)
        finally:
            notifier.stop()
            store.close()
        assert [p.json["status"] for p in receiver.posts] == ["firing", "resolved"]
