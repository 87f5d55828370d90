"""The history store's disk fills up, another process locks the database, a reader holds a transaction open:
the error is clear, scraping and alerting go on, writes resume, and nothing already stored (or scraped
meanwhile) is lost.

The full disk is a real one when the tests run as root (a 6 MB tmpfs mounted over the store's folder, filled
with a file); otherwise SQLite's ``max_page_count`` stands in for it (the same SQLITE_FULL error).
"""

from __future__ import annotations

import errno
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path

import pytest
import yaml

from alerts.service import Service
from collectors.store.sqlite_store import SqliteStore
from config import Config, parse_config
from tests.collectors.servers import FakeSGLang
from tests.reliability.harness import integrity, samples_by_target, tmpfs

pytestmark = pytest.mark.slow

STEP_S = 5.0


class StepClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now

    def step(self) -> None:
        self.now += STEP_S


@pytest.fixture
def servers() -> Iterator[dict[str, FakeSGLang]]:
    fleet = {"k3-a": FakeSGLang(), "k3-b": FakeSGLang()}
    yield fleet
    for server in fleet.values():
        server.stop()


def make_config(store: Path, servers: dict[str, FakeSGLang]) -> Config:
    return parse_config(
        {
            "scrape": {"interval_s": STEP_S, "timeout_s": 1},
            "targets": [{"name": name, "url": s.url} for name, s in servers.items()],
            "store": {"path": str(store)},
            "alerts": {"rules": {"TargetDown": {"for_s": 0}}},
        }
    )


def cycles(service: Service, clock: StepClock, count: int) -> list[int]:
    """Run ``count`` cycles; returns how many targets were up in each (scraping goes on)."""
    up = []
    for _ in range(count):
        clock.step()
        up.append(sum(s.up for s in service.run_cycle()))
    return up


def stored_ts(store: Path) -> list[float]:
    with closing(sqlite3.connect(store)) as db:
        return [row[0] for row in db.execute("SELECT ts FROM samples ORDER BY rowid")]


def fill(folder: Path) -> Path:
    """Write a file until the filesystem is full (ENOSPC)."""
    filler = folder / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb") as out:
        try:
            while True:
                out.write(chunk)
                out.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


def test_a_full_disk_is_reported_scraping_goes_on_and_nothing_is_lost(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    disk = tmp_path / "disk"
    with tmpfs(disk, "6m") as real_disk:
        store = disk / "history.sqlite"
        clock = StepClock()
        service = Service(make_config(store, servers), clock=clock)
        try:
            assert cycles(service, clock, 5) == [2] * 5
            before = stored_ts(store)
            if real_disk:
                filler = fill(disk)
            else:  # not root: cap the file at its current size instead
                connection = service.store._connect()  # type: ignore[attr-defined]
                pages = connection.execute("PRAGMA page_count").fetchone()[0]
                connection.execute(f"PRAGMA max_page_count = {pages}")

            assert cycles(service, clock, 6) == [2] * 6  # scraping goes on
            health = service.collector.health()
            assert health.store_error is not None
            assert "full" in health.store_error  # "database or disk is full"
            assert health.pending_rows == 12  # every scrape kept in memory, none dropped
            assert health.dropped_rows == 0
            assert service.collector.latest()[0].ts > before[-1]  # the live view is current

            if real_disk:
                filler.unlink()
            else:
                connection.execute("PRAGMA max_page_count = 1073741823")
            cycles(service, clock, 2)
            health = service.collector.health()
            assert health.store_error is None
            assert health.pending_rows == 0
        finally:
            service.stop()
        assert integrity(store) == "ok"
        after = stored_ts(store)
        assert after[: len(before)] == before  # nothing already stored was lost
        assert samples_by_target(store) == {"k3-a": 13, "k3-b": 13}  # nor anything scraped meanwhile
        with closing(sqlite3.connect(store)) as db:  # and the rows kept in memory went in in scrape order
            for (target,) in db.execute("SELECT DISTINCT target FROM samples").fetchall():
                series = [
                    r[0]
                    for r in db.execute("SELECT ts FROM samples WHERE target = ? ORDER BY rowid", (target,))
                ]
                assert series == sorted(series)


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute(sys.argv[2])
db.execute("SELECT COUNT(*) FROM samples").fetchone()
print("holding", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def hold(store: Path, statement: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(store), statement],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "holding"
    return process


def release(process: subprocess.Popen[str]) -> None:
    with suppress(OSError):
        assert process.stdin is not None
        process.stdin.close()
    process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()


def test_another_process_locking_the_database_delays_writes_but_loses_nothing(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    store = tmp_path / "history.sqlite"
    clock = StepClock()
    config = make_config(store, servers)
    # The production busy timeout is 5 s per store (history, alerts): 0.3 s keeps this test short.
    service = Service(config, clock=clock, store=SqliteStore(store, busy_timeout_s=0.3))
    service.alert_store._connect().execute("PRAGMA busy_timeout = 300")  # type: ignore[attr-defined]
    try:
        cycles(service, clock, 3)
        before = stored_ts(store)
        servers["k3-b"].metrics_status = 503  # and a target dies while the store is locked
        locker = hold(store, "BEGIN EXCLUSIVE")  # e.g. a maintenance script, or VACUUM from the sqlite3 shell
        try:
            started = time.monotonic()
            up = cycles(service, clock, 3)
            per_cycle_s = (time.monotonic() - started) / 3
            health = service.collector.health()
            assert up == [1, 1, 1]  # scraping goes on, and sees the dead target
            assert health.store_error is not None
            assert "locked" in health.store_error
            assert health.pending_rows == 6
            assert per_cycle_s < 2.0  # bounded by the busy timeouts, never stuck
        finally:
            release(locker)
        cycles(service, clock, 1)
        assert service.collector.health().store_error is None
        firing = {(i.rule, i.target) for i in service.alert_store.active()}
        assert ("TargetDown", "k3-b") in firing  # the alert state caught up too
    finally:
        service.stop()
    assert integrity(store) == "ok"
    assert stored_ts(store)[: len(before)] == before
    assert samples_by_target(store) == {"k3-a": 7, "k3-b": 7}


def test_a_reader_holding_a_transaction_never_blocks_writes(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    """WAL: a dashboard, a backup or an analyst's sqlite3 shell reading for minutes does not stop history."""
    store = tmp_path / "history.sqlite"
    clock = StepClock()
    service = Service(make_config(store, servers), clock=clock)
    try:
        cycles(service, clock, 2)
        reader = hold(store, "BEGIN")  # a read transaction (the SELECT in LOCKER starts it)
        try:
            started = time.monotonic()
            cycles(service, clock, 4)
            assert time.monotonic() - started < 4.0  # no busy waits
            assert service.collector.health().store_error is None
            assert service.collector.health().pending_rows == 0
        finally:
            release(reader)
    finally:
        service.stop()
    assert samples_by_target(store) == {"k3-a": 6, "k3-b": 6}
    assert integrity(store) == "ok"


def test_the_dashboard_says_when_history_is_not_being_written(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    """The dashboard's own collector hits a full disk: the sidebar says so, and stops saying it once the
    writes succeed again."""
    import app
    from tests.views.conftest import page_test

    disk = tmp_path / "disk"
    with tmpfs(disk, "6m") as real_disk:
        config = tmp_path / "specwatch.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "scrape": {"interval_s": 0.5, "timeout_s": 0.4},
                    "targets": [{"name": n, "url": s.url} for n, s in servers.items()],
                    "store": {"path": str(disk / "history.sqlite")},
                }
            ),
            encoding="utf-8",
        )
        at = page_test(config, "fleet", collector=True)

        def sidebar_errors() -> str:
            return "\n".join(str(e.value) for e in at.run().sidebar.error)

        try:
            assert sidebar_errors() == ""
            # a full disk (as root), else another process holding the write lock (the 5 s busy timeout)
            blocker = fill(disk) if real_disk else hold(disk / "history.sqlite", "BEGIN EXCLUSIVE")
            deadline = time.monotonic() + 20
            while "History is not being written" not in (shown := sidebar_errors()):
                assert time.monotonic() < deadline, shown
                time.sleep(0.3)
            assert ("full" if real_disk else "locked") in shown
            if isinstance(blocker, Path):
                blocker.unlink()
            else:
                release(blocker)
            deadline = time.monotonic() + 20
            while sidebar_errors():
                assert time.monotonic() < deadline
                time.sleep(0.3)
        finally:
            app.start_runtime.clear()  # stops the dashboard's collector before the disk goes away
