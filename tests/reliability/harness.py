"""Pieces the fault tests share: tiny misbehaving servers the simulator does not offer (connection resets), a
settable clock, store checks, and a simulated fleet from a scenario written inline. The webhook receiver that
can go down and come back on the same port is ``sim.receiver`` (the soak benchmark drives it too).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import struct
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any

import yaml

from sim.fleet import SimFleet
from sim.receiver import Receiver as Receiver  # re-exported: the fault tests import it from here
from sim.receiver import notification_key
from tests.collectors.servers import FakeSGLang, Handler, LoopbackServer


def expected_notifications(store_path: Path, receiver_url: str) -> Counter[tuple[str, str, str]]:
    """Every notification specwatch queued for ``receiver_url`` (the outbox), whatever became of it."""
    with closing(sqlite3.connect(store_path)) as db:
        rows = db.execute("SELECT payload FROM alert_outbox WHERE receiver = ? ORDER BY id", (receiver_url,))
        payloads = [json.loads(row[0]) for row in rows]
    return Counter(notification_key(alert) for payload in payloads for alert in payload["alerts"])


def transitions_notified(store_path: Path) -> Counter[tuple[str, str]]:
    """(fingerprint, firing|resolved) for each firing and each resolution the engine recorded."""
    with closing(sqlite3.connect(store_path)) as db:
        rows = db.execute("SELECT fingerprint, from_state, to_state FROM alert_transitions").fetchall()
    out: Counter[tuple[str, str]] = Counter()
    for fingerprint, before, after in rows:
        if after == "firing":
            out[(fingerprint, "firing")] += 1
        elif before == "firing" and after == "inactive":
            out[(fingerprint, "resolved")] += 1
    return out


class Clock:
    """Wall time plus an offset the test moves (a clock stepped by NTP, a VM resumed)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


def reset_route(handler: Handler) -> None:
    """Read the request, then reset the connection (RST, not FIN): 'connection reset by peer'."""
    handler.close_connection = True
    with suppress(OSError):
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()


def resetting_server() -> LoopbackServer:
    return LoopbackServer({"/metrics": reset_route, "/server_info": reset_route})


def integrity(store_path: Path) -> str:
    with closing(sqlite3.connect(store_path)) as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def samples_by_target(store_path: Path) -> Counter[str]:
    with closing(sqlite3.connect(store_path)) as db:
        return Counter(dict(db.execute("SELECT target, COUNT(*) FROM samples GROUP BY target").fetchall()))


def rss_mb() -> float:
    """This process's resident memory now (not the peak), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def tmpfs(folder: Path, size: str = "2m") -> Iterator[bool]:
    """Mount a tiny tmpfs on ``folder`` (root only); yields whether it worked (False: use a plain folder)."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, check=False
    )
    try:
        yield done.returncode == 0
    finally:
        if done.returncode == 0:
            for _ in range(20):
                if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode == 0:
                    break
                time.sleep(0.1)
            else:  # something still has a file open there: detach it now, the kernel frees it when closed
                subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


@contextmanager
def fake_fleet(*names: str) -> Iterator[dict[str, FakeSGLang]]:
    """Loopback SGLang servers by name, stopped on the way out."""
    fleet = {name: FakeSGLang() for name in names}
    try:
        yield fleet
    finally:
        for server in fleet.values():
            server.stop()


@contextmanager
def scenario_fleet(path: Path, scenario: dict[str, Any]) -> Iterator[SimFleet]:
    """The simulated fleet of ``scenario``, written to ``path`` (YAML) first; stopped on exit."""
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    with SimFleet(path) as fleet:
        yield fleet
