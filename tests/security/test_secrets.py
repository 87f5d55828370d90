"""Secrets come only from environment variables and never come back out.

A bearer token is set in the environment; targets then fail in every way a scrape can fail — refused, hanging,
401/500, redirects, HTML, bad TLS, a missing variable — and six of them echo the Authorization header back
(in the status line, the Content-Type, the body, a redirect, /server_info). The token must not appear in the
collector's logs (DEBUG), its ``--json`` output, its own /metrics, the history store, the alert daemon's logs
and webhooks, or any page of the dashboard.
"""

from __future__ import annotations

import json
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

from tests.collectors.servers import FakeSGLang, LoopbackServer, hang, refused_url, wait_for
from tests.loopback import start_module
from tests.security.hostile import Canary, canary, reflecting_servers
from tests.security.pages import page_text
from tests.views.conftest import page_test
from views.menu import PAGES

ROOT = Path(__file__).resolve().parents[2]
TOKEN_ENV = "SPECWATCH_TEST_FLEET_TOKEN"
UNSET_ENV = "SPECWATCH_TEST_TOKEN_NOBODY_SET"

pytestmark = pytest.mark.slow


@dataclass
class Setup:
    secret: str
    url_password: str
    config: Path
    store: Path
    env: dict[str, str]
    receiver: Canary
    targets: list[str]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("secrets")
    secret = "swsecret-" + secrets.token_hex(16)
    url_password = "swpass-" + secrets.token_hex(8)
    servers: dict[str, LoopbackServer] = {
        **reflecting_servers(),
        "healthy": FakeSGLang(),
        "hanging": LoopbackServer({"/metrics": hang}),
    }
    targets = [
        {"name": name, "url": server.url, "bearer_token_env": TOKEN_ENV} for name, server in servers.items()
    ]
    targets += [
        {"name": "refused", "url": refused_url(), "bearer_token_env": TOKEN_ENV},
        {
            "name": "tls-wrong",
            "url": servers["healthy"].url.replace("http://", "https://"),
            "bearer_token_env": TOKEN_ENV,
        },
        {"name": "unset-variable", "url": servers["healthy"].url, "bearer_token_env": UNSET_ENV},
        # a password in the URL (in the file, so not a secret we endorse, but still never shown)
        {"name": "userinfo", "url": refused_url().replace("http://", f"http://ops:{url_password}@")},
    ]
    with canary() as receiver:
        document = {
            "scrape": {"interval_s": 0.5, "timeout_s": 0.4},
            "targets": targets,
            "store": {"path": str(folder / "history.sqlite")},
            "exporter": {"listen": "127.0.0.1:0"},
            "alerts": {"webhook_urls": [receiver.url], "rules": {"TargetDown": {"for_s": 0}}},
        }
        config = folder / "fleet.yaml"
        config.write_text(yaml.safe_dump(document), encoding="utf-8")
        env = {**os.environ, TOKEN_ENV: secret}
        env.pop(UNSET_ENV, None)
        try:
            yield Setup(
                secret,
                url_password,
                config,
                folder / "history.sqlite",
                env,
                receiver,
                [t["name"] for t in targets],
            )
        finally:
            for server in servers.values():
                server.stop()


def assert_clean(what: str, text: str, setup: Setup) -> None:
    assert setup.secret not in text, f"the bearer token leaked into {what}"
    assert setup.url_password not in text, f"the URL password leaked into {what}"
    # the header the token travels in, in any spelling the servers could echo it back
    found = re.search(r"Bearer\s+swsecret", text)
    context = text[max(found.start() - 200, 0) : found.end() + 50] if found else ""
    assert not found, f"the Authorization header leaked into {what}: {context!r}"


def run_cli(setup: Setup, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args, "--config", str(setup.config)],
        cwd=ROOT,
        env=setup.env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_collector_logs_and_json_never_show_the_token(setup: Setup) -> None:
    done = run_cli(setup, "collectors", "--cycles", "2", "--json", "--log-level", "DEBUG")
    assert done.returncode == 0, done.stderr[-2000:]
    records = {r["target"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(records) == set(setup.targets)
    # every way of failing was exercised (and said so in words)
    assert "401" in records["echo-401"]["error"]
    assert "500" in records["echo-500"]["error"]
    assert "Content-Type" in records["echo-type"]["error"]
    assert "is not a number" in records["echo-body"]["error"]
    assert "302" in records["echo-redirect"]["error"]
    assert "timeout" in records["hanging"]["error"]
    assert "refused" in records["refused"]["error"]
    assert "TLS" in records["tls-wrong"]["error"]
    assert UNSET_ENV in records["unset-variable"]["error"]
    assert records["healthy"]["up"] is True
    assert records["echo-info"]["up"] is True
    assert records["echo-info"]["recipe"] is not None
    assert_clean("the --json output", done.stdout, setup)
    assert_clean("the collector's DEBUG log", done.stderr, setup)


def test_daemon_logs_webhooks_and_the_collectors_own_metrics_never_show_the_token(setup: Setup) -> None:
    daemon = start_module(
        "alerts",
        "--log-level",
        "DEBUG",
        "run",
        "--config",
        str(setup.config),
        env=setup.env,
        output="merged",
    )
    try:
        # TargetDown (for_s 0) fires for every failing target and is delivered to the webhook
        assert wait_for(lambda: len(setup.receiver.bodies) >= 1, timeout_s=30), "no webhook delivered"
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon_log, _ = daemon.communicate(timeout=30)
    webhooks = b"\n".join(setup.receiver.bodies).decode()
    assert "TargetDown" in webhooks
    assert "echo-401" in webhooks
    assert_clean("the webhook payloads", webhooks, setup)
    assert_clean("the alert daemon's DEBUG log", daemon_log, setup)

    collector = start_module(
        "collectors",
        "--log-level",
        "DEBUG",
        "--config",
        str(setup.config),
        env=setup.env,
        output="stderr",
    )
    try:
        assert collector.stderr is not None
        line = ""
        deadline = time.monotonic() + 30
        while "serving the collector's own metrics on" not in line and time.monotonic() < deadline:
            line = collector.stderr.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+/metrics)", line)
        assert found, f"exporter address not logged: {line!r}"
        time.sleep(1.5)  # a few cycles over the hostile targets
        with urllib.request.urlopen(found.group(1), timeout=5) as answer:  # noqa: S310 (loopback)
            exported = answer.read().decode()
    finally:
        collector.send_signal(signal.SIGTERM)
        _, rest = collector.communicate(timeout=30)
    assert 'specwatch_target_up{deployment="",recipe_id="",target="echo-401"} 0.0' in exported
    assert_clean("the collector's /metrics", exported, setup)
    assert_clean("the collector's long-running DEBUG log", line + rest, setup)


def test_the_store_never_holds_the_token(setup: Setup) -> None:
    if not setup.store.exists():
        run_cli(setup, "collectors", "--cycles", "1")
    with sqlite3.connect(setup.store) as db:
        dump = "\n".join(db.iterdump())
        errors = db.execute("SELECT COUNT(*) FROM samples WHERE error IS NOT NULL").fetchone()[0]
    assert errors > 0
    assert "echo-401" in dump
    assert_clean("the history store", dump, setup)
    for sidecar in setup.store.parent.glob("history.sqlite*"):
        assert setup.secret.encode() not in sidecar.read_bytes(), f"token bytes in {sidecar.name}"


@pytest.mark.parametrize("page", [p.url_path for p in PAGES])
def test_no_page_shows_the_token(setup: Setup, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not setup.store.exists():
        run_cli(setup, "collectors", "--cycles", "1")
    monkeypatch.setenv(TOKEN_ENV, setup.secret)  # as the dashboard would have it
    at = page_test(setup.config, page).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = page_text(at)
    assert_clean(f"the {page} page", shown, setup)
    if page == "server":  # every server's own page, errors and recipe included
        for name in setup.targets:
            at.selectbox(key="server").set_value(name).run()
            assert not at.exception
            shown = page_text(at)
            assert name in shown
            assert_clean(f"the server page of {name}", shown, setup)
