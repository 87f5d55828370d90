"""The fleet's Prometheus goes away for ~16 s — eight times TargetDown's ``for_s`` — under the production
daemon (``python -m alerts run`` with ``source: prometheus``), then comes back on the same port and data.

Everything is real: Prometheus scraping the simulated fleet, the daemon as a subprocess, a webhook receiver
on 127.0.0.1 counting what arrives. Exact counts: one SourceDown firing, one SourceDown resolved, and not a
single notification about any target (the gap is unknown, not down).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from sim.fleet import SimFleet
from tests.loopback import start_module
from tests.prometheus.conftest import skip_without
from tests.prometheus.engines import PROMETHEUS, scrape_config, start_prometheus
from tests.reliability.harness import Receiver

pytestmark = [pytest.mark.engines, pytest.mark.slow]

FOR_S = 2.0  # two scrape intervals: one late scrape or query pages nothing
OUTAGE_S = 8 * FOR_S


def _wait(what: str, predicate: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not happen within {timeout_s:g} s")


def _notifications(receiver: Receiver) -> Counter[tuple[str, str]]:
    """(alertname, firing|resolved) of every alert in every webhook message received."""
    with receiver.lock:
        bodies = list(receiver.bodies)
    return Counter(
        (alert["labels"]["alertname"], alert["status"]) for body in bodies for alert in body["alerts"]
    )


def test_a_prometheus_outage_pages_once_about_prometheus_and_never_about_targets(
    sim_fleet: SimFleet, tmp_path: Path
) -> None:
    skip_without(PROMETHEUS, "prometheus")
    jobs = {"sim": [urlsplit(t.url).netloc for t in sim_fleet.targets]}
    workdir = tmp_path / "prometheus"
    engine = start_prometheus(workdir, scrape_config(jobs))
    port = int(urlsplit(engine.url).port or 0)
    receiver = Receiver()
    config = tmp_path / "specwatch.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": "prometheus",
                "scrape": {"interval_s": 1.0, "timeout_s": 1.0},
                "targets": [{"name": t.name, "url": t.url} for t in sim_fleet.targets],
                "prometheus": {
                    "url": engine.url,
                    "selector": 'job="sim"',
                    "rate_window_s": 4,
                    "timeout_s": 2,
                },
                "store": {"path": str(tmp_path / "specwatch.db")},
                "alerts": {"webhook_urls": [receiver.url], "rules": {"TargetDown": {"for_s": FOR_S}}},
            }
        )
    )
    log_path = tmp_path / "daemon.log"
    daemon: subprocess.Popen[bytes] | None = None
    try:
        engine.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "3", 30)
        engine.wait_for(
            "min(count_over_time(up[4s]))", lambda r: bool(r) and float(r[0]["value"][1]) >= 3, 30
        )
        with log_path.open("wb") as log:
            daemon = start_module(
                "alerts",
                "run",
                "--config",
                str(config),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        _wait("the daemon's start", lambda: "watching" in log_path.read_text(errors="replace"), 30)
        time.sleep(FOR_S + 2)  # healthy for longer than for_s: whatever would page, has
        before = _notifications(receiver)

        engine.stop()
        stopped = time.monotonic()
        _wait("SourceDown firing", lambda: _notifications(receiver)["SourceDown", "firing"] >= 1, OUTAGE_S)
        time.sleep(max(0.0, stopped + OUTAGE_S - time.monotonic()))
        during = _notifications(receiver)

        engine = start_prometheus(workdir, scrape_config(jobs), port=port)  # same port, same TSDB
        _wait("SourceDown resolved", lambda: _notifications(receiver)["SourceDown", "resolved"] >= 1, 30)
        time.sleep(2 * FOR_S)  # any page the gap would cause has had time to arrive
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=20)
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=10)
        engine.stop()
        receiver.down()

    log = log_path.read_text(errors="replace")
    assert code == 0, log[-3000:]
    assert before == Counter(), f"the healthy fleet paged before the outage: {before}"
    assert during == Counter({("SourceDown", "firing"): 1}), during
    assert _notifications(receiver) == Counter({("SourceDown", "firing"): 1, ("SourceDown", "resolved"): 1})
    [firing] = [
        alert
        for body in receiver.bodies
        for alert in body["alerts"]
        if alert["status"] == "firing" and alert["labels"]["alertname"] == "SourceDown"
    ]
    assert firing["labels"]["target"] == f"http://127.0.0.1:{port}"
    assert "connection refused" in firing["annotations"]["description"]
    # Logged once when Prometheus went away and once when it came back, not once per cycle.
    assert log.count("every target is unknown (not down)") == 1, log[-3000:]
    assert log.count("answers completely again") == 1, log[-3000:]
