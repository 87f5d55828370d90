"""The store fails loudly: its file deleted or replaced, or its file system turned read-only, shows within one
cycle on /metrics (``specwatch_store_ok 0``), in the health the page reads and once in the log; a full disk
under the outbox never makes a delivered notification go out twice.

Read-only and disk-full use a real tmpfs (root); the tests skip, saying so, where mount is not permitted.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from alerts.model import OutboxItem
from alerts.notify import Notifier
from alerts.state_store import AlertStateStore
from collectors.exporter import MetricsExporter
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import parse_config
from tests.alerts.hostile_receivers import hostile_receiver, ok
from tests.collectors.servers import FakeSGLang
from tests.reliability.harness import tmpfs
from tests.reliability.test_store_faults import fill


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    s = FakeSGLang()
    yield s
    s.stop()


def collector_on(path: Path, server: FakeSGLang) -> tuple[Collector, SqliteStore]:
    config = parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": 1},
            "targets": [{"name": "k3-a", "url": server.url}],
            "store": {"path": str(path)},
            "exporter": {"listen": "127.0.0.1:0"},
        }
    )
    store = SqliteStore(path)
    return Collector(config, store), store


def store_ok(exporter: MetricsExporter) -> float:
    for line in requests.get(exporter.url, timeout=5).text.splitlines():
        if line.startswith("specwatch_store_ok "):
            return float(line.split()[1])
    raise AssertionError("no specwatch_store_ok on /metrics")


def logged(caplog: pytest.LogCaptureFixture, words: str) -> int:
    return sum(words in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_file_deleted_or_replaced_is_reported_within_a_cycle_and_logged_once(
    tmp_path: Path, server: FakeSGLang, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    path = tmp_path / "history.sqlite"
    collector, store = collector_on(path, server)
    exporter = MetricsExporter(collector, "127.0.0.1:0")
    try:
        collector.run_cycle()
        assert store_ok(exporter) == 1.0
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        if how == "replaced":
            path.write_bytes(b"")
        caplog.set_level(logging.WARNING)
        for _ in range(3):
            collector.run_cycle()
        error = collector.health().store_error
        assert error is not None
        assert f"was {how}" in error
        assert store_ok(exporter) == 0.0
        assert logged(caplog, f"was {how}") == 1  # once per state change, not once a cycle
    finally:
        exporter.close()
        collector.close()
        store.close()


def test_a_read_only_store_is_reported_and_its_recovery_too(
    tmp_path: Path, server: FakeSGLang, caplog: pytest.LogCaptureFixture
) -> None:
    disk = tmp_path / "disk"
    with tmpfs(disk, "4m") as real:
        if not real:
            pytest.skip("mount -t tmpfs is not permitted here (needs root): no real read-only file system")
        collector, store = collector_on(disk / "history.sqlite", server)
        try:
            collector.run_cycle()
            assert collector.health().store_error is None
            # The kernel turns a failing disk read-only under its writers (errors=remount-ro); mount(8)
            # refuses that while files are open for writing, so the store's connections are closed first
            # (it reopens them at the next write, as after any error).
            store.close()
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
            caplog.set_level(logging.WARNING)
            collector.run_cycle()
            error = collector.health().store_error
            assert error is not None
            assert "read-only" in error
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
            collector.run_cycle()
            assert collector.health().store_error is None
            assert logged(caplog, "writable again") == 1
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=False)
            collector.close()
            store.close()


def test_a_full_disk_never_makes_a_delivered_notification_go_out_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = tmp_path / "disk"
    with tmpfs(disk, "1m") as real:
        if not real:
            pytest.skip("mount -t tmpfs is not permitted here (needs root): no real full disk")
        store = AlertStateStore(disk / "history.sqlite")
        with hostile_receiver(ok) as receiver:
            store.commit(
                [], [], [], [OutboxItem(receiver.url, "webhook", '{"alerts": []}', "g")], time.time()
            )
            filler = fill(disk)
            caplog.set_level(logging.WARNING)
            notifier = Notifier(store, webhook_urls=[receiver.url], backoff_initial_s=0.05).start()
            try:
                receiver.wait_accepted(1)
                time.sleep(3.0)  # the old notifier re-POSTed once a second here
                assert receiver.count() == 1
                (status,) = notifier.status()
                assert status.unsaved_marks == 1  # the mark waits in memory ...
                assert status.queued == 0  # ... and the notification does not count as queued
                assert logged(caplog, "outbox store fails") == 1
                filler.unlink()
                deadline = time.monotonic() + 10
                while store.queued_count() and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert [d.status for d in store.deliveries()] == ["delivered"]  # written once there is room
                assert receiver.count() == 1
            finally:
                notifier.stop()
                store.close()
