"""High availability the way Prometheus users run it: two ``specwatch alerts`` daemons on one fleet, each with
its own store, both evaluating and both posting to one Alertmanager, which deduplicates them.

Everything is real: three loopback SGLang servers, Debian's Prometheus scraping them, two Alertmanagers, four
daemons as subprocesses — a pair reading the fleet through Prometheus (``source: prometheus``) and a pair
scraping it directly, each pair behind its own Alertmanager and webhook receiver — run side by side so the
scenario costs one run's wall time. One server goes down: each Alertmanager sends its receiver exactly one
firing notification although two daemons posted the alert; one daemon of each pair is SIGKILLed and, past
the moment its last post would have expired in Alertmanager, the alert is still firing because the other
goes on re-posting it; the server comes back and exactly one resolved notification follows.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from tests.collectors.servers import FakeSGLang
from tests.prometheus.engines import (
    ALERTMANAGER,
    PROMETHEUS,
    Engine,
    scrape_config,
    start_alertmanager,
    start_prometheus,
)
from tests.reliability.harness import Receiver

pytestmark = [
    pytest.mark.engines,
    pytest.mark.slow,
    pytest.mark.skipif(ALERTMANAGER is None, reason="prometheus-alertmanager not on PATH (Debian package)"),
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not on PATH (Debian package)"),
]

ROOT = Path(__file__).resolve().parents[2]
INTERVAL_S = 1.0
RESEND_S = 1.0  # --resend-interval-s: a firing alert is posted again every second ...
VALID_FOR_S = 4 * max(
    INTERVAL_S, RESEND_S
)  # ... with endsAt this far ahead (Prometheus's rule, the engine's)
DOWN = "k3-1"
# What a specwatch alert is identified by: nothing about the daemon that evaluated it.
IDENTITY = {"alertname": "TargetDown", "target": DOWN, "deployment": "east", "severity": "critical"}


@dataclass
class Pair:
    """Two daemons of one source behind one Alertmanager; ``hook`` also gets each daemon's own webhook."""

    source: str
    alertmanager: Engine
    paged: Receiver  # behind Alertmanager: what the on-call engineer gets
    hook: Receiver  # each daemon's direct webhook, for comparing what the two daemons said
    daemons: list[subprocess.Popen[bytes]]
    stores: list[Path]
    logs: list[Path]

    def notifications(self) -> Counter[tuple[str, str]]:
        """(alertname/target, status) of each alert in each notification Alertmanager delivered."""
        with self.paged.lock:
            bodies = list(self.paged.bodies)
        return Counter(
            (f"{a['labels']['alertname']}/{a['labels'].get('target', '')}", a["status"])
            for body in bodies
            for a in body["alerts"]
        )

    def active(self) -> list[dict[str, Any]]:
        """Alertmanager's own view: the TargetDown alerts it holds, active or not."""
        answer = requests.get(f"{self.alertmanager.url}/api/v2/alerts", timeout=5)
        answer.raise_for_status()
        return [a for a in answer.json() if a["labels"].get("alertname") == "TargetDown"]

    def posted(self, index: int) -> list[dict[str, Any]]:
        """Every alert daemon ``index`` delivered to Alertmanager (its outbox), oldest first."""
        with closing(sqlite3.connect(self.stores[index])) as db:
            rows = db.execute(
                "SELECT payload FROM alert_outbox WHERE kind = 'alertmanager' AND status = 'delivered' "
                "ORDER BY id"
            ).fetchall()
        return [alert for (payload,) in rows for alert in json.loads(payload)]

    def hooked(self) -> list[tuple[str, str, str]]:
        """(groupKey, fingerprint, status) of every alert in every webhook a daemon sent."""
        with self.hook.lock:
            bodies = list(self.hook.bodies)
        return [(b["groupKey"], a["fingerprint"], a["status"]) for b in bodies for a in b["alerts"]]


def _wait(what: str, predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not happen within {timeout_s:g} s")


def _config(
    tmp_path: Path, name: str, source: str, servers: list[FakeSGLang], prometheus: str, pair: Pair
) -> Path:
    config: dict[str, Any] = {
        "source": source,
        "scrape": {"interval_s": INTERVAL_S, "timeout_s": 0.8},
        "targets": [
            {"name": f"k3-{i}", "url": s.url, "labels": {"deployment": "east"}} for i, s in enumerate(servers)
        ],
        "store": {"path": str(tmp_path / f"{name}.sqlite")},
        "exporter": {"listen": None},
        "alerts": {
            "alertmanager_url": pair.alertmanager.url,
            "webhook_urls": [pair.hook.url],
            "rules": {"TargetDown": {"for_s": 0}},
        },
    }
    if source == "prometheus":
        config["prometheus"] = {"url": prometheus, "selector": 'job="sglang"', "rate_window_s": 4}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    pair.stores.append(Path(config["store"]["path"]))
    return path


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:  # a file, not a pipe nobody reads
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alerts",
                "run",
                "--config",
                str(config),
                "--resend-interval-s",
                str(RESEND_S),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def pairs(tmp_path: Path) -> Iterator[tuple[list[FakeSGLang], list[Pair]]]:
    with ExitStack() as stack:
        servers = [FakeSGLang() for _ in range(3)]
        for server in servers:
            stack.callback(server.stop)
        jobs = {"sglang": [urlsplit(s.url).netloc for s in servers]}
        prometheus = start_prometheus(tmp_path / "prometheus", scrape_config(jobs, interval_s=INTERVAL_S))
        stack.callback(prometheus.stop)
        made: list[Pair] = []
        for source in ("prometheus", "direct"):
            paged, hook = Receiver(), Receiver()
            stack.callback(paged.down)
            stack.callback(hook.down)
            alertmanager = start_alertmanager(tmp_path / f"am-{source}", paged.url, group_wait="500ms")
            stack.callback(alertmanager.stop)
            made.append(Pair(source, alertmanager, paged, hook, [], [], []))
        for pair in made:
            for name in ("a", "b"):
                label = f"{pair.source}-{name}"
                config = _config(tmp_path, label, pair.source, servers, prometheus.url, pair)
                pair.logs.append(tmp_path / f"{label}.log")
                daemon = _start(config, pair.logs[-1])
                pair.daemons.append(daemon)
                stack.callback(_kill, daemon)
        yield servers, made


def _kill(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.kill()
        daemon.wait(timeout=10)


def _logs(pair: Pair) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-1500:] for p in pair.logs)


def test_two_daemons_page_once_and_the_survivor_keeps_paging(
    pairs: tuple[list[FakeSGLang], list[Pair]],
) -> None:
    servers, made = pairs
    for pair in made:
        for log in pair.logs:
            _wait(f"{log.name}'s start", lambda log=log: "watching" in log.read_text(errors="replace"), 60)
    time.sleep(3 * INTERVAL_S)  # every daemon has evaluated the healthy fleet a few times

    servers[1].metrics_status = 503
    for pair in made:
        # Both daemons fired and both posted to Alertmanager (their outboxes), and the page went out.
        _wait(
            f"{pair.source}: both daemons posting TargetDown",
            lambda pair=pair: all(pair.posted(i) for i in (0, 1)),
            30,
        )
        _wait(f"{pair.source}: the page", lambda pair=pair: pair.notifications() != Counter(), 15)
    time.sleep(3.0)  # three group intervals: a second notification, if any, would have come
    for pair in made:
        assert pair.notifications() == Counter({(f"TargetDown/{DOWN}", "firing"): 1}), (
            pair.source,
            pair.notifications(),
            _logs(pair),
        )
        (alert,) = pair.active()  # one alert in Alertmanager for two daemons' posts
        assert alert["labels"] == IDENTITY, pair.source
        for index in (0, 1):  # label-identical posts, no label naming the daemon, one link base
            assert {json.dumps(a["labels"], sort_keys=True) for a in pair.posted(index)} == {
                json.dumps(IDENTITY, sort_keys=True)
            }, (pair.source, index)
        assert {a["generatorURL"] for a in pair.posted(0)} == {a["generatorURL"] for a in pair.posted(1)}
        # Each daemon's own webhook: the same group key and fingerprint, so a receiver can dedupe them too.
        assert Counter(pair.hooked()) == Counter({(*pair.hooked()[0][:2], "firing"): 2}), pair.source

    killed_at = time.time()
    for pair in made:
        pair.daemons[0].send_signal(signal.SIGKILL)
        pair.daemons[0].wait(timeout=10)
    # The killed daemon's last post expires VALID_FOR_S after the kill: past that (and a few group
    # intervals), only the survivor's re-posts keep the alert active.
    time.sleep(VALID_FOR_S + 3.0)
    for pair in made:
        assert pair.notifications() == Counter({(f"TargetDown/{DOWN}", "firing"): 1}), (
            pair.source,
            _logs(pair),
        )
        (alert,) = pair.active()
        assert alert["status"]["state"] == "active", (pair.source, alert)
        assert _ts(alert["endsAt"]) > killed_at + VALID_FOR_S, (pair.source, alert)

    servers[1].metrics_status = 200
    for pair in made:
        _wait(
            f"{pair.source}: the resolved notification",
            lambda pair=pair: pair.notifications()[(f"TargetDown/{DOWN}", "resolved")] >= 1,
            30,
        )
    time.sleep(3.0)
    for pair in made:
        pair.daemons[1].send_signal(signal.SIGTERM)
    for pair in made:
        assert pair.daemons[1].wait(timeout=20) == 0, _logs(pair)
        assert pair.notifications() == Counter(
            {(f"TargetDown/{DOWN}", "firing"): 1, (f"TargetDown/{DOWN}", "resolved"): 1}
        ), (pair.source, pair.notifications(), _logs(pair))
        # Webhooks: both daemons said firing, only the survivor lived to say resolved.
        statuses = Counter(status for _, _, status in pair.hooked())
        assert statuses == Counter({"firing": 2, "resolved": 1}), (pair.source, pair.hooked())
