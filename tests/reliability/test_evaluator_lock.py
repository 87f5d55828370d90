"""Real ``python -m alerts run`` processes on one store: the second refuses to start (in words) or stands by
and takes over; SIGTERM ends a daemon within seconds even while a receiver hangs; the daemon's /metrics shows
its outbox."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from tests.alerts.hostile_receivers import always, hostile_receiver
from tests.collectors.servers import FakeSGLang
from tests.loopback import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    s = FakeSGLang()
    yield s
    s.stop()


def write_config(tmp_path: Path, server_url: str, webhook: str | None = None, name: str = "c") -> Path:
    config = {
        "scrape": {"interval_s": 0.5, "timeout_s": 0.5},
        "targets": [{"name": "k3-a", "url": server_url}],
        "store": {"path": str(tmp_path / "history.sqlite")},
        "exporter": {"listen": f"127.0.0.1:{free_port()}"},
        "alerts": {
            "webhook_urls": [webhook] if webhook else [],
            "rules": {"TargetDown": {"for_s": 0}},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start(config: Path, *extra: str) -> subprocess.Popen[str]:
    """The daemon, its log in ``<config>.log`` (a file: a pipe nobody reads would fill and block it)."""
    with config.with_suffix(".log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "alerts", "run", "--config", str(config), *extra],
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )


def log_of(config: Path) -> str:
    return config.with_suffix(".log").read_text()


def wait_until(check: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def cycles_stored(store: Path) -> int:
    import sqlite3
    from contextlib import closing

    if not store.exists():
        return 0
    with closing(sqlite3.connect(store)) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
        except sqlite3.Error:
            return 0


def stop(process: subprocess.Popen[str]) -> float:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError("SIGTERM was not honoured within 20 s") from None
    return time.monotonic() - started


def test_a_second_daemon_on_the_same_store_refuses_to_start_in_words(
    tmp_path: Path, server: FakeSGLang
) -> None:
    first = start(write_config(tmp_path, server.url, name="first"))
    try:
        wait_until(lambda: cycles_stored(tmp_path / "history.sqlite") > 0)
        second_config = write_config(tmp_path, server.url, name="second")
        second = start(second_config)
        second.wait(timeout=30)
        err = log_of(second_config)
        assert second.returncode == 1
        assert "another specwatch evaluator" in err
        assert f"pid {first.pid}" in err
        assert "Traceback" not in err
        assert first.poll() is None  # the first one carries on
    finally:
        stop(first)


def test_a_standby_daemon_takes_over_when_the_first_stops(tmp_path: Path, server: FakeSGLang) -> None:
    store = tmp_path / "history.sqlite"
    first = start(write_config(tmp_path, server.url, name="first"))
    standby = None
    try:
        wait_until(lambda: cycles_stored(store) > 0)
        standby_config = write_config(tmp_path, server.url, name="second")
        standby = start(standby_config, "--standby")
        # Until it says so (a fixed wait let a slow start on a busy box find the lock already free).
        wait_until(lambda: "standing by" in log_of(standby_config))
        assert standby.poll() is None  # waiting, not refused
        stop(first)
        before = cycles_stored(store)
        wait_until(lambda: cycles_stored(store) > before + 2)  # the standby scrapes now
    finally:
        if first.poll() is None:
            stop(first)
        if standby is not None:
            stop(standby)
            assert "standing by" in log_of(standby_config)
            assert "takes over" in log_of(standby_config)


def test_sigterm_is_honoured_within_seconds_while_a_receiver_hangs(
    tmp_path: Path, server: FakeSGLang
) -> None:
    server.stop()  # the target is down: TargetDown fires at once and goes to the hanging receiver
    with hostile_receiver(always("hang")) as receiver:
        config = write_config(tmp_path, "http://127.0.0.1:9", receiver.url)
        daemon = start(config)
        try:
            receiver.wait_posts(1, timeout_s=30)
            metrics_port = yaml.safe_load(config.read_text())["exporter"]["listen"].rsplit(":", 1)[1]
            text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            assert f'specwatch_notifications{{receiver="{receiver.url}",status="queued"}} 1.0' in text
            assert "specwatch_notifications_store_ok 1.0" in text
        finally:
            took_s = stop(daemon)
        assert took_s < 10
        assert daemon.returncode == 0


def test_a_dashboard_beside_a_daemon_on_one_store_only_reads(tmp_path: Path, server: FakeSGLang) -> None:
    import app
    from tests.views.conftest import page_test

    config = write_config(tmp_path, server.url)
    daemon = start(config)
    try:
        wait_until(lambda: cycles_stored(tmp_path / "history.sqlite") > 0)
        at = page_test(config, "fleet", collector=True)
        try:
            at.run(timeout=30)
            assert not at.exception
            shown = "\n".join(str(p.value) for p in [*at.sidebar.caption, *at.sidebar.warning])
            assert "viewer only: another evaluator (pid" in shown
            assert str(daemon.pid) in shown
            threads = [t.name for t in threading.enumerate()]
            assert "specwatch-collector" not in threads  # nothing scraped or evaluated twice
        finally:
            app.start_runtime.clear()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=15)
