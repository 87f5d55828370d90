"""Credentials that a Prometheus auth proxy or a webhook receiver echo back never come out of specwatch.

The fleet's Prometheus sits behind a proxy that answers every query 401 with the Authorization header it got
(bearer token from the environment) in its body; ``prometheus.url`` carries a password in its userinfo. The
webhook receiver's URL carries a password too, and the receiver answers 500 echoing the Basic credentials it
received, decoded. A real ``python -m alerts run`` works against both for a few seconds; then every channel
is searched: the daemon's DEBUG log, the store (events and outbox included), what the receiver got, the
daemon's /metrics, the Alerts page, and the exported rule files.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from alerts.model import OutboxItem
from alerts.state_store import AlertStateStore
from tests.collectors.servers import Handler, send, wait_for
from tests.loopback import free_port, start_module
from tests.security.hostile import PostableServer, auth_of
from tests.security.pages import page_text
from tests.views.conftest import page_test

ROOT = Path(__file__).resolve().parents[2]
TOKEN_ENV = "SPECWATCH_TEST_PROM_TOKEN"

pytestmark = pytest.mark.slow


@dataclass
class Case:
    token: str
    prom_password: str
    hook_password: str
    config: Path
    store: Path
    env: dict[str, str]
    daemon_log: str
    metrics: str
    receiver: PostableServer
    received: list[bytes]


def drain(handler: Handler) -> bytes:
    """The POST body (read, or keep-alive would parse it as the next request)."""
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def empty_matrix(handler: Handler) -> None:
    drain(handler)
    send(
        handler,
        b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
        content_type="application/json",
    )


def echoing_proxy(handler: Handler) -> None:
    """An auth proxy's 401: the Authorization header it was sent, in the JSON error."""
    drain(handler)
    body = f'{{"status":"error","errorType":"unauthorized","error":"rejected {auth_of(handler)}"}}'
    send(handler, body.encode(), status=401, content_type="application/json")


def echoing_receiver(received: list[bytes]) -> object:
    def route(handler: Handler) -> None:
        received.append(drain(handler))
        auth = auth_of(handler)
        decoded = ""
        if auth.startswith("Basic "):
            decoded = base64.b64decode(auth.split()[1]).decode()
        send(handler, f"upstream said no to {auth} ({decoded})".encode(), status=500)

    return route


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    folder = tmp_path_factory.mktemp("echoed")
    token = "promtoken-" + secrets.token_hex(12)
    prom_password = "prompass-" + secrets.token_hex(8)
    hook_password = "hookpass-" + secrets.token_hex(8)
    # History (range queries, read at start) passes; every cycle's instant queries are refused and echoed.
    proxy = PostableServer({"/api/v1/query": echoing_proxy, "/api/v1/query_range": empty_matrix})
    received: list[bytes] = []
    receiver = PostableServer({"/hook": echoing_receiver(received)})  # type: ignore[dict-item]
    hook_url = receiver.url.replace("http://", f"http://hooks:{hook_password}@") + "/hook"
    store = folder / "history.sqlite"
    metrics_port = free_port()
    document = {
        "source": "prometheus",
        "prometheus": {
            "url": proxy.url.replace("http://", f"http://ops:{prom_password}@"),
            "bearer_token_env": TOKEN_ENV,
            "timeout_s": 1,
        },
        "scrape": {"interval_s": 0.5, "timeout_s": 0.5},
        "store": {"path": str(store)},
        "exporter": {"listen": f"127.0.0.1:{metrics_port}"},
        "alerts": {
            "webhook_urls": [hook_url],
            "delivery": {"backoff_initial_s": 0.1, "backoff_max_s": 0.2, "max_attempts": 3},
        },
    }
    config = folder / "fleet.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    # A notification already queued (as the engine would have written it), so the daemon must deliver it.
    alerts = AlertStateStore(store)
    alerts.commit(
        [],
        [],
        [],
        [OutboxItem(hook_url.replace(f"hooks:{hook_password}@", ""), "webhook", '{"alerts": []}', "g")],
        time.time(),
    )
    alerts.close()
    env = {**os.environ, TOKEN_ENV: token}
    daemon = start_module(
        "alerts",
        "--log-level",
        "DEBUG",
        "run",
        "--config",
        str(config),
        env=env,
        output="merged",
    )
    metrics = ""
    try:
        assert wait_for(lambda: len(received) >= 3, timeout_s=30), "the receiver got no retries"
        assert wait_for(lambda: proxy.hits("/api/v1/query") >= 2, 30), "no cycle queried Prometheus"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon_log, _ = daemon.communicate(timeout=30)
    try:
        yield Case(
            token, prom_password, hook_password, config, store, env, daemon_log, metrics, receiver, received
        )
    finally:
        proxy.stop()
        receiver.stop()


def assert_clean(what: str, text: str, case: Case) -> None:
    for name, secret in (
        ("the bearer token", case.token),
        ("the Prometheus URL password", case.prom_password),
        ("the receiver URL password", case.hook_password),
    ):
        assert secret not in text, f"{name} leaked into {what}"
    found = re.search(r"(Bearer|Basic)\s+(?!<redacted>)[A-Za-z0-9+/=._-]{6,}", text)
    assert not found, f"a credential leaked into {what}: {text[max(found.start() - 100, 0) : found.end()]!r}"


def test_the_daemon_log_names_the_failures_without_their_credentials(case: Case) -> None:
    assert "401" in case.daemon_log  # Prometheus refused, and the log says so
    assert "HTTP 500" in case.daemon_log  # the receiver refused
    assert_clean("the daemon's DEBUG log", case.daemon_log, case)


def test_the_store_events_and_outbox_hold_no_credentials(case: Case) -> None:
    with sqlite3.connect(case.store) as db:
        dump = "\n".join(db.iterdump())
        (error,) = db.execute("SELECT last_error FROM alert_outbox").fetchone()
    assert "HTTP 500" in error
    assert "<redacted>" in error
    assert_clean("the store", dump, case)
    for sidecar in case.store.parent.glob("history.sqlite*"):
        data = sidecar.read_bytes()
        assert case.token.encode() not in data, f"token bytes in {sidecar.name}"
        assert case.hook_password.encode() not in data, f"receiver password bytes in {sidecar.name}"


def test_the_webhook_bodies_carry_no_credentials(case: Case) -> None:
    bodies = b"\n".join(case.received).decode()
    assert len(set(case.received)) == 1  # retries are the same body
    assert_clean("the webhook bodies", bodies, case)


def test_the_daemons_metrics_name_the_receiver_without_its_password(case: Case) -> None:
    assert "specwatch_notifications{" in case.metrics
    assert_clean("/metrics", case.metrics, case)


@pytest.mark.parametrize("page", ["alerts", "fleet"])
def test_the_pages_show_no_credentials(case: Case, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, case.token)
    at = page_test(case.config, page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert_clean(f"the {page} page", page_text(at), case)


@pytest.mark.parametrize("command", ["export-rules"])
def test_exported_files_hold_no_credentials(case: Case, command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "alerts", command, "--config", str(case.config)],
        cwd=ROOT,
        env=case.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "TargetDown" in done.stdout
    assert_clean(f"`alerts {command}`", done.stdout + done.stderr, case)
