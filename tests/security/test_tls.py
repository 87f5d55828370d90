"""TLS verification is on by default: a self-signed HTTPS target is refused until its CA bundle is given.

Real HTTPS on 127.0.0.1 with certificates made in the test; the collector runs its production path
(``Collector`` → ``DirectSource`` → the deadline session).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import ConfigError, parse_config
from tests.security.tls import HTTPSFakeSGLang, make_cert


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("tls")
    return {
        "server": make_cert(folder, "k3-server"),
        "other": make_cert(folder, "someone-else"),
        "wrong-host": make_cert(folder, "wrong-host", san="DNS:k3.example.internal"),
    }


@pytest.fixture(scope="module")
def https_server(certs: dict[str, tuple[Path, Path]]) -> Iterator[HTTPSFakeSGLang]:
    server = HTTPSFakeSGLang(*certs["server"])
    yield server
    server.stop()


def scrape_once(tmp_path: Path, url: str, **scrape: Any) -> tuple[bool, str | None]:
    config = parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": 2, **scrape},
            "targets": [{"name": "k3-tls", "url": url}],
            "store": {"path": str(tmp_path / "history.sqlite")},
        }
    )
    store = SqliteStore(config.store.path)
    try:
        with Collector(config, store) as collector:
            (snapshot,) = collector.run_cycle()
    finally:
        store.close()
    return snapshot.up, snapshot.error


def test_a_self_signed_target_is_refused_by_default(tmp_path: Path, https_server: HTTPSFakeSGLang) -> None:
    up, error = scrape_once(tmp_path, https_server.url)
    assert not up
    assert error is not None
    assert "TLS handshake" in error
    assert "scrape.ca_bundle" in error  # says what to do about it
    assert https_server.hits("/metrics") == 0  # nothing was sent over the unverified connection


def test_the_ca_bundle_makes_it_trusted(
    tmp_path: Path, https_server: HTTPSFakeSGLang, certs: dict[str, tuple[Path, Path]]
) -> None:
    up, error = scrape_once(tmp_path, https_server.url, ca_bundle=str(certs["server"][0]))
    assert up, error
    assert https_server.hits("/metrics") >= 1


def test_another_ca_or_another_host_name_is_still_refused(
    tmp_path: Path, certs: dict[str, tuple[Path, Path]]
) -> None:
    server = HTTPSFakeSGLang(*certs["wrong-host"])
    try:
        # right CA, wrong name: the certificate is for k3.example.internal, the URL says 127.0.0.1
        up, error = scrape_once(tmp_path, server.url, ca_bundle=str(certs["wrong-host"][0]))
        assert not up
        assert "TLS handshake" in (error or "")
    finally:
        server.stop()
    pinned = HTTPSFakeSGLang(*certs["server"])
    try:
        up, error = scrape_once(tmp_path, pinned.url, ca_bundle=str(certs["other"][0]))
        assert not up
        assert "TLS handshake" in (error or "")
    finally:
        pinned.stop()


def test_verification_can_only_be_turned_off_explicitly(
    tmp_path: Path, https_server: HTTPSFakeSGLang
) -> None:
    assert parse_config({}).scrape.verify_tls is True
    up, error = scrape_once(tmp_path, https_server.url, verify_tls=False)
    assert up, error


def test_a_missing_ca_bundle_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"scrape": {"ca_bundle": str(tmp_path / "nope.pem")}})
    assert caught.value.key == "scrape.ca_bundle"
