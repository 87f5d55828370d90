"""SIGKILL of the headless collector (``python -m collectors``) and of the production daemon
(``python -m alerts run``: collector + alert engine + notifier) in the middle of a cycle, then a restart on
the same files.

One target hangs until the scrape timeout, so a cycle is in flight most of the time and the kill lands inside
one. The SQLite file must pass its integrity check, hold every cycle but (at most) the one in flight, with all
targets of a cycle or none; the restarted daemon carries on, keeps the firing alert without paging it again,
and exits 0 on SIGTERM with nothing lost.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from tests.collectors.servers import FakeSGLang, LoopbackServer, hang, refused_url, wait_for
from tests.reliability.harness import Receiver, integrity, samples_by_target

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fleet() -> Iterator[tuple[FakeSGLang, LoopbackServer]]:
    live, stuck = FakeSGLang(), LoopbackServer({"/metrics": hang})
    yield live, stuck
    live.stop()
    stuck.stop()


COMMANDS = {"collectors": ["-m", "collectors"], "alerts": ["-m", "alerts", "run"]}


def daemon(command: str, config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *COMMANDS[command], "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def firing_pages(receiver: Receiver, target: str) -> int:
    return sum(
        1
        for body in list(receiver.bodies)
        for alert in body["alerts"]
        if alert["status"] == "firing" and alert["labels"]["target"] == target
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_sigkill_mid_cycle_loses_at_most_that_cycle(
    tmp_path: Path, fleet: tuple[FakeSGLang, LoopbackServer], command: str
) -> None:
    alerting = command == "alerts"
    live, stuck = fleet
    receiver = Receiver()
    store = tmp_path / "history.sqlite"
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "scrape": {"interval_s": 0.6, "timeout_s": 0.5},
                "targets": [
                    {"name": "live", "url": live.url},
                    {"name": "stuck", "url": stuck.url},
                    {"name": "gone", "url": refused_url()},
                ],
                "store": {"path": str(store)},
                "alerts": {"webhook_urls": [receiver.url], "rules": {"TargetDown": {"for_s": 0}}},
                "exporter": {"listen": None},
            }
        ),
        encoding="utf-8",
    )

    def ready() -> bool:
        return live.hits("/metrics") >= 5 and (firing_pages(receiver, "gone") >= 1 or not alerting)

    first = daemon(command, config)
    try:
        assert wait_for(ready, timeout_s=30)
        # Kill right after a cycle began: it now waits on the hanging target.
        started = live.hits("/metrics")
        assert wait_for(lambda: live.hits("/metrics") > started, timeout_s=5)
        time.sleep(0.1)
        first.kill()
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if first.stderr is not None:
            first.stderr.close()
    cycles_begun = live.hits("/metrics")

    assert integrity(store) == "ok"
    kept = samples_by_target(store)
    assert len(set(kept.values())) == 1  # every cycle has all its targets, or none
    assert cycles_begun - 1 <= kept["live"] <= cycles_begun  # at most the cycle in flight is lost
    assert firing_pages(receiver, "gone") == (1 if alerting else 0)

    second = daemon(command, config)
    try:
        resumed_from = live.hits("/metrics")
        assert wait_for(lambda: live.hits("/metrics") >= resumed_from + 4, timeout_s=20)
        second.send_signal(signal.SIGTERM)
        _, stderr = second.communicate(timeout=30)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
        receiver.down()
    assert second.returncode == 0, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr
    assert integrity(store) == "ok"
    after = samples_by_target(store)
    assert after["live"] - kept["live"] == live.hits("/metrics") - resumed_from  # every new cycle stored
    if not alerting:
        return
    assert firing_pages(receiver, "gone") == 1  # still firing after the restart, not paged again
    with closing(sqlite3.connect(store)) as db:
        state = db.execute("SELECT state FROM alert_instances WHERE rule = 'TargetDown' AND target = 'gone'")
        assert state.fetchone()[0] == "firing"
        queued = db.execute("SELECT COUNT(*) FROM alert_outbox WHERE status = 'queued'").fetchone()[0]
    assert queued == 0
