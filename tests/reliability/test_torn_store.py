"""A torn store (a power loss or a full disk mid-checkpoint): the file cut short, garbage over a page, a WAL
from another database, found at start or by a cycle's write. The file is moved aside under its documented
name (never deleted), a new store starts at the path and works, the loud log line and the health the sidebar
shows name the moved file, and the alert state that survived comes over: a firing alert is not paged again,
a queued notification is still delivered once. A read-only folder stops the daemon with one message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from alerts.model import AlertState
from alerts.service import Service
from collectors.model import TargetSnapshot
from collectors.store.integrity import stamp_store_id
from collectors.store.sqlite_store import SqliteStore
from config import Config, load_config, parse_config
from tests.collectors.servers import FakeSGLang, wait_for
from tests.loopback import reaped, start_module
from tests.reliability.harness import Receiver, fake_fleet, integrity, samples_by_target, tmpfs
from tests.reliability.test_sigkill import ROOT, firing_pages
from tests.reliability.test_store_faults import StepClock, cycles

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow

MOVED_NAME = re.compile(r"^history\.sqlite\.corrupt-\d{8}T\d{6}Z$")
PAGE_BYTES = 4096  # SQLite's default page size, the one specwatch's stores use


@pytest.fixture
def servers() -> Iterator[dict[str, FakeSGLang]]:
    with fake_fleet("k3-a", "k3-b") as fleet:
        fleet["k3-b"].metrics_status = 503  # down from the start: TargetDown (for_s 0) fires at once
        yield fleet


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver()
    yield hook
    hook.down()


def make_config(store: Path, servers: dict[str, FakeSGLang], receiver: Receiver) -> Config:
    return parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": 1},
            "targets": [{"name": name, "url": s.url} for name, s in servers.items()],
            "store": {"path": str(store)},
            "alerts": {"webhook_urls": [receiver.url], "rules": {"TargetDown": {"for_s": 0}}},
        }
    )


@contextmanager
def started(
    config: Config, clock: StepClock, *, stop_flush_s: float = 5.0, **options: float
) -> Iterator[Service]:
    """A service as the daemon runs it (its notifier started), stopped on the way out."""
    service = Service(config, clock=clock, **options)
    service.notifier.start()
    try:
        yield service
    finally:
        service.stop(flush_timeout_s=stop_flush_s)


def paged(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver, *, delivered: bool = True
) -> tuple[Path, Config, StepClock]:
    """A store in ``tmp_path`` left by ``run_until_paged``, its config and clock."""
    store, clock = tmp_path / "history.sqlite", StepClock()
    config = make_config(store, servers, receiver)
    run_until_paged(store, config, clock, receiver, delivered=delivered)
    return store, config, clock


def run_until_paged(
    store: Path, config: Config, clock: StepClock, receiver: Receiver, *, delivered: bool = True
) -> None:
    """A store as a daemon leaves it: two cycles, TargetDown on k3-b firing and paged once (or, not
    ``delivered``, the page still queued: the receiver is down); then an hour of older history written last
    (the last pages of the file are history rows, as after a long run)."""
    if not delivered:
        receiver.down()
    with started(config, clock, stop_flush_s=5 if delivered else 0) as service:
        cycles(service, clock, 2)
        assert service.notifier.flush(10 if delivered else 0) == delivered
        latest = service.collector.latest()
    assert firing_pages(receiver, "k3-b") == int(delivered)
    receiver.up()
    older = [dataclasses.replace(s, ts=s.ts - 3600 + second) for second in range(0, 3600, 5) for s in latest]
    history = SqliteStore(store)
    try:
        history.append(older)
    finally:
        history.close()
    assert integrity(store) == "ok"


def root_page(store: Path, table: str) -> int:
    with closing(sqlite3.connect(store)) as db:
        return int(db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0])


def foreign_wal(folder: Path) -> bytes:
    """The WAL of another specwatch store (a restore that copied the files of two hosts into one folder)."""
    stamp_store_id(str(folder / "other.sqlite"))  # a store of its own, with its own id
    other = SqliteStore(folder / "other.sqlite")
    try:
        rows = [TargetSnapshot(target=f"elsewhere-{i}", ts=1.0e9 + i, up=True) for i in range(400)]
        other.append(rows)  # under the WAL's autocheckpoint: every page still in the WAL
        return Path(f"{other.path}-wal").read_bytes()
    finally:
        other.close()


def damage(store: Path, how: str) -> None:
    if how == "truncated":  # a checkpoint cut short: its last pages never reached the file
        with store.open("r+b") as f:
            f.truncate(store.stat().st_size - 8 * PAGE_BYTES)
    elif how == "garbage over a page":  # a torn page write: the raw samples' root page is noise
        page = root_page(store, "samples")
        with store.open("r+b") as f:
            f.seek((page - 1) * PAGE_BYTES)
            f.write(random.Random(23).randbytes(PAGE_BYTES))
    elif how == "a WAL from another database":
        Path(f"{store}-wal").write_bytes(foreign_wal(store.parent / "elsewhere"))
    else:
        raise AssertionError(how)


def moved_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if MOVED_NAME.match(p.name))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def loud_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "HISTORY STORE CORRUPT" in r.getMessage()]


FAULTS = ["truncated", "garbage over a page", "a WAL from another database"]


@pytest.mark.parametrize("how", FAULTS)
def test_a_torn_store_at_start_is_moved_aside_and_the_firing_alert_is_not_paged_again(
    tmp_path: Path,
    servers: dict[str, FakeSGLang],
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    store, config, clock = paged(tmp_path, servers, receiver)
    damage(store, how)
    torn = {
        suffix: digest(Path(f"{store}{suffix}"))
        for suffix in ("", "-wal")
        if Path(f"{store}{suffix}").exists()
    }

    caplog.set_level(logging.WARNING)
    with started(config, clock) as service:
        [moved] = moved_files(tmp_path)
        # Kept byte for byte under the documented name, with its WAL beside it under the matching name.
        assert {suffix: digest(Path(f"{moved}{suffix}")) for suffix in torn} == torn
        [line] = loud_lines(caplog)
        assert str(moved) in line
        health = service.collector.health()
        assert health.store_notice is not None
        assert str(moved) in health.store_notice
        assert "1 active alert(s)" in health.store_notice
        firing = [(i.rule, i.target, i.state) for i in service.alert_store.active()]
        assert firing == [("TargetDown", "k3-b", AlertState.FIRING)]

        assert cycles(service, clock, 3) == [1, 1, 1]  # the new store works
        assert service.collector.health().store_error is None
        assert service.notifier.flush(10)
    assert firing_pages(receiver, "k3-b") == 1  # still firing, carried over: not paged again
    assert integrity(store) == "ok"
    assert samples_by_target(store) == {"k3-a": 3, "k3-b": 3}
    assert not Path(f"{store}.corrupt").exists()


def test_with_the_alerts_table_torn_the_firing_alert_is_rebuilt_from_the_outbox_and_not_paged_again(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    store, config, clock = paged(tmp_path, servers, receiver)
    page = root_page(store, "alert_instances")
    with store.open("r+b") as f:
        f.seek((page - 1) * PAGE_BYTES)
        f.write(random.Random(3).randbytes(PAGE_BYTES))
    with started(config, clock) as service:
        notice = service.collector.health().store_notice
        assert notice is not None
        assert "1 of the alerts rebuilt from the outbox's notifications" in notice
        firing = [(i.rule, i.target, i.state) for i in service.alert_store.active()]
        assert firing == [("TargetDown", "k3-b", AlertState.FIRING)]
        cycles(service, clock, 2)
        servers["k3-b"].metrics_status = 200  # and it recovers: the rebuilt alert resolves, notified
        cycles(service, clock, 2)
        assert service.notifier.flush(10)
    assert firing_pages(receiver, "k3-b") == 1
    statuses = [a["status"] for body in receiver.bodies for a in body["alerts"]]
    assert statuses == ["firing", "resolved"]


def test_a_page_queued_in_a_torn_store_is_delivered_once_from_the_new_one(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    store, config, clock = paged(tmp_path, servers, receiver, delivered=False)
    damage(store, "garbage over a page")
    with started(config, clock) as service:
        notice = service.collector.health().store_notice
        assert notice is not None
        assert "1 active alert(s) and 1 queued notification(s) recovered" in notice
        cycles(service, clock, 2)  # past the retry time the failed attempt set (kept with the row)
        assert service.notifier.flush(10)
    assert firing_pages(receiver, "k3-b") == 1


def test_a_torn_header_page_loses_the_alert_state_so_the_firing_alert_is_paged_once_more(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    """The documented bound: with page 1 (the schema) gone nothing of the file can be read, so the alert
    that was firing starts over: paged once more, at the first evaluation of the new store."""
    store, config, clock = paged(tmp_path, servers, receiver)
    with store.open("r+b") as f:
        f.write(random.Random(1).randbytes(PAGE_BYTES))
    with started(config, clock) as service:
        notice = service.collector.health().store_notice
        assert notice is not None
        assert "0 active alert(s) and 0 queued notification(s) recovered" in notice
        assert "not readable: alert_instances: file is not a database" in notice
        assert cycles(service, clock, 2) == [1, 1]
        assert service.notifier.flush(10)
    assert len(moved_files(tmp_path)) == 1
    assert firing_pages(receiver, "k3-b") == 2


def tear_while_running(store: Path) -> None:
    """Garbage over the raw samples' root page of a store in use, as a torn checkpoint write leaves it."""
    with closing(sqlite3.connect(store)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file, so the damage is seen
    damage(store, "garbage over a page")


def test_a_store_torn_while_running_is_moved_aside_within_the_cycle_and_its_queue_delivered_once(
    tmp_path: Path,
    servers: dict[str, FakeSGLang],
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = tmp_path / "history.sqlite"
    clock = StepClock()
    receiver.down()  # the page for k3-b waits in the outbox when the store tears
    service = Service(make_config(store, servers, receiver), clock=clock)
    service.notifier.start()
    caplog.set_level(logging.WARNING)
    try:
        cycles(service, clock, 2)
        assert service.alert_store.queued_count() == 1
        tear_while_running(store)

        assert cycles(service, clock, 1) == [1]  # the write fails, the file goes aside, the rows go in
        [moved] = moved_files(tmp_path)
        health = service.collector.health()
        assert health.store_notice is not None
        assert str(moved) in health.store_notice
        assert "1 queued notification(s)" in health.store_notice
        assert health.store_error is None
        assert health.pending_rows == 0
        assert samples_by_target(store) == {"k3-a": 1, "k3-b": 1}  # the torn cycle's rows, in the new file
        assert [line for line in loud_lines(caplog) if str(moved) in line] == loud_lines(caplog)
        assert len(loud_lines(caplog)) == 1
        firing = [(i.rule, i.target) for i in service.alert_store.active()]
        assert firing == [("TargetDown", "k3-b")]  # rewritten by the engine from memory

        # Torn again at once: not moved aside again (no loop); rows wait in memory, scraping goes on.
        tear_while_running(store)
        assert cycles(service, clock, 2) == [1, 1]
        assert moved_files(tmp_path) == [moved]
        health = service.collector.health()
        assert health.store_error is not None
        assert "malformed" in health.store_error
        assert health.pending_rows == 4
        assert sum("checked or moved aside less than" in r.getMessage() for r in caplog.records) == 1

        receiver.up()
        assert service.notifier.flush(15)
    finally:
        service.stop()
    assert firing_pages(receiver, "k3-b") == 1  # the queued page survived the move, and went out once


class WallClock(StepClock):
    """Real time, for a store a real daemon carries on (``cycles`` steps its clock; this one runs itself)."""

    def __call__(self) -> float:
        return time.time()

    def step(self) -> None:
        pass


def write_config(path: Path, store: Path, servers: dict[str, FakeSGLang], receiver: Receiver) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "scrape": {"interval_s": 0.5, "timeout_s": 0.4},
                "targets": [{"name": name, "url": s.url} for name, s in servers.items()],
                "store": {"path": str(store)},
                "alerts": {"webhook_urls": [receiver.url], "rules": {"TargetDown": {"for_s": 0}}},
                "exporter": {"listen": None},
            }
        ),
        encoding="utf-8",
    )
    return path


def new_rows(folder: Path, store: Path) -> int:
    """Rows in the store started after the torn one was moved aside (0 until then)."""
    if not moved_files(folder):
        return 0
    try:
        return sum(samples_by_target(store).values())
    except sqlite3.Error:  # not created yet
        return 0


def test_the_daemon_starts_on_a_torn_store_says_so_once_and_does_not_page_again(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    store = tmp_path / "history.sqlite"
    config = write_config(tmp_path / "fleet.yaml", store, servers, receiver)
    run_until_paged(store, load_config(config), WallClock(), receiver)
    damage(store, "garbage over a page")

    with reaped(
        start_module(
            "alerts",
            "run",
            "--config",
            str(config),
            output="stderr",
        )
    ) as process:
        assert wait_for(lambda: new_rows(tmp_path, store) >= 6, timeout_s=20)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    [moved] = moved_files(tmp_path)
    [line] = [line for line in stderr.splitlines() if "HISTORY STORE CORRUPT" in line]
    assert str(moved) in line
    assert "Traceback" not in stderr
    assert firing_pages(receiver, "k3-b") == 1  # the restored firing alert was not paged again
    assert integrity(store) == "ok"


@contextmanager
def read_only_folder(folder: Path, contents: dict[str, bytes]) -> Iterator[None]:
    """``folder`` holding ``contents``, read-only: a read-only mount as root (root ignores permissions),
    else mode 0555."""
    with tmpfs(folder, "4m") as mounted:
        if not mounted and os.geteuid() == 0:
            pytest.skip("mount -t tmpfs is not permitted here: root cannot be refused a write otherwise")
        for name, data in contents.items():
            (folder / name).write_bytes(data)
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        else:
            folder.chmod(0o555)
        try:
            yield
        finally:
            if mounted:
                subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=False)
            else:
                folder.chmod(0o755)


@pytest.mark.parametrize("holding", ["a torn store", "nothing yet"])
def test_a_read_only_folder_stops_the_daemon_with_one_message_naming_it(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver, holding: str
) -> None:
    folder = tmp_path / "ro"
    contents = {}
    if holding == "a torn store":
        contents["history.sqlite"] = b"SQLite format 3\0" + random.Random(5).randbytes(PAGE_BYTES * 4 - 16)
    config = write_config(tmp_path / "fleet.yaml", folder / "history.sqlite", servers, receiver)
    with read_only_folder(folder, contents):
        done = subprocess.run(
            [sys.executable, "-m", "alerts", "run", "--config", str(config)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert sorted(p.name for p in folder.iterdir()) == sorted(contents)  # nothing moved, nothing made
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: the store's folder {folder} is read-only")
    assert servers["k3-a"].hits("/metrics") == 0  # it stopped before scraping anything


def dashboard(tmp_path: Path, store: Path, servers: dict[str, FakeSGLang], receiver: Receiver) -> AppTest:
    from tests.views.conftest import page_test

    return page_test(write_config(tmp_path / "dash.yaml", store, servers, receiver), "fleet", collector=True)


def test_the_dashboard_names_the_moved_file_in_its_sidebar(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    import app

    store = tmp_path / "history.sqlite"
    store.write_bytes(b"SQLite format 3\0" + random.Random(7).randbytes(PAGE_BYTES * 4 - 16))  # header torn
    at = dashboard(tmp_path, store, servers, receiver)
    try:
        at.run()
        [moved] = moved_files(tmp_path)
        # as shown: the markdown escapes (views.formatting.plain) taken out
        warnings = "\n".join(str(w.value) for w in at.sidebar.warning).replace("\\", "")
        assert "History store moved aside as corrupt" in warnings
        assert str(moved) in warnings
        assert not at.sidebar.error  # the collector runs, on the new store
    finally:
        app.start_runtime.clear()


def test_the_dashboard_says_the_folder_is_read_only_in_its_sidebar(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    import app

    folder = tmp_path / "ro"
    with read_only_folder(folder, {}):
        at = dashboard(tmp_path, folder / "history.sqlite", servers, receiver)
        try:
            errors = "\n".join(str(e.value) for e in at.run().sidebar.error).replace("\\", "")
        finally:
            app.start_runtime.clear()
    assert "The collector did not start" in errors
    assert f"the store's folder {folder} is read-only" in errors


def test_the_demo_dashboard_starts_its_collector_on_a_torn_store(tmp_path: Path) -> None:
    """The default config (a simulated fleet with a day of made-up past, probes, SLOs) on a torn store: the
    collector starts on a new store (no past is made up over the torn one), and the banner says why."""
    import app
    from tests.views.conftest import page_test

    store = tmp_path / "history.sqlite"
    store.write_bytes(b"SQLite format 3\0" + random.Random(9).randbytes(PAGE_BYTES * 4 - 16))
    config = tmp_path / "demo.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "scrape": {"interval_s": 1, "timeout_s": 1},
                "sim": {"scenario": "demo", "servers": 3, "history_h": 1},
                "store": {"path": str(store)},
                "probes": {"enabled": True},
                "slos": [{"name": "ttft-4s", "sli": {"kind": "ttft", "threshold_s": 4}, "objective": 0.99}],
                "exporter": {"listen": None},
            }
        ),
        encoding="utf-8",
    )
    at = page_test(config, "fleet", collector=True)
    try:
        at.run()
        assert not at.sidebar.error
        [moved] = moved_files(tmp_path)
        warnings = "\n".join(str(w.value) for w in at.sidebar.warning).replace("\\", "")
        assert str(moved) in warnings
        assert wait_for(lambda: new_rows(tmp_path, store) >= 3, timeout_s=20)  # the new store fills
    finally:
        app.start_runtime.clear()


def test_a_store_too_large_to_check_in_time_is_moved_aside_by_the_first_write_that_hits_the_damage(
    tmp_path: Path, servers: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    """No time for quick_check (a 0 s budget stands for a store of many GB): the start uses the store
    unchecked; the first write into the torn page says "malformed", and that is taken as the word."""
    store, config, clock = paged(tmp_path, servers, receiver)
    damage(store, "garbage over a page")
    with started(config, clock, store_check_timeout_s=0.0) as service:
        assert moved_files(tmp_path) == []  # not checked in time: used as it is
        assert cycles(service, clock, 2) == [1, 1]
        [moved] = moved_files(tmp_path)
        health = service.collector.health()
        assert health.store_notice is not None
        assert "quick_check did not finish within 0 s" in health.store_notice
        assert health.store_error is None
        assert health.pending_rows == 0
        assert service.notifier.flush(10)
    assert samples_by_target(store) == {"k3-a": 2, "k3-b": 2}
    assert firing_pages(receiver, "k3-b") == 1  # restored from the torn file at start, as it was readable
    assert moved.exists()
