"""Every way a query fails becomes a QueryError in words: unreachable, timeout, bad query, refused, not JSON.

Stand-in answers come from real HTTP servers on 127.0.0.1; bad queries go to the real engines.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from collectors.errors import QueryError
from collectors.prometheus.client import PromClient
from collectors.prometheus.promql_source import PrometheusSource
from config import parse_config
from tests.prometheus.engines import Engine, StaticServer, free_port, source_config


@pytest.fixture
def api() -> Iterator[StaticServer]:
    server = StaticServer(b"", content_type="application/json")
    yield server
    server.stop()


def _answer(server: StaticServer, status: int, payload: object) -> None:
    server.status = status
    server.body = json.dumps(payload).encode()


def test_unreachable_prometheus_names_the_url_and_what_to_check() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(QueryError, match="connection refused; check the server is running") as caught:
        PromClient(url, timeout_s=2).query("up")
    assert url in str(caught.value)
    assert "prometheus.url" in str(caught.value)


def test_a_slow_prometheus_times_out_within_the_configured_time(api: StaticServer) -> None:
    api.delay_s = 3.0
    _answer(api, 200, {"status": "success", "data": {"resultType": "vector", "result": []}})
    started = time.monotonic()
    with pytest.raises(QueryError, match=r"no complete answer from .* within 0\.5 s \(timeout\)") as caught:
        PromClient(api.url, timeout_s=0.5).query("up")
    assert time.monotonic() - started < 2.5
    assert "prometheus.timeout_s" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "payload", "words"),
    [
        (503, {"status": "error", "errorType": "timeout", "error": "query timed out in evaluation"},
         "timed out or aborted the query (HTTP 503): query timed out"),
        (401, {"status": "error", "error": "unauthorized"}, "access refused (HTTP 401)"),
        (404, {"status": "error", "error": "page not found"}, "nothing serves /api/v1/query there"),
        (500, {"status": "error", "errorType": "internal", "error": "disk full"},
         "failed the query (HTTP 500"),
        (200, {"status": "success", "data": {"resultType": "string", "result": [1, "x"]}},
         "expected an instant vector, got resultType 'string'"),
        (200, {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
         "a vector entry is malformed"),
    ],
)  # fmt: skip
def test_error_answers_become_words(api: StaticServer, status: int, payload: object, words: str) -> None:
    _answer(api, status, payload)
    with pytest.raises(QueryError, match=r"^Prometheus at ") as caught:
        PromClient(api.url, timeout_s=2).query("up")
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("content_type", "body", "words"),
    [
        ("text/html", b"<html><body>Grafana login</body></html>", "text/html: <html><body>Grafana login"),
        ("text/plain", b"", "an empty body"),
        ("application/json", b'["not", "an", "object"]', "not Prometheus API JSON"),
    ],
)
def test_non_json_answers_become_words(api: StaticServer, content_type: str, body: bytes, words: str) -> None:
    api.content_type, api.body = content_type, body
    with pytest.raises(QueryError, match="not Prometheus API JSON") as caught:
        PromClient(api.url, timeout_s=2).query("up")
    assert words in str(caught.value)


def test_bearer_token_comes_from_the_named_variable_and_never_shows(
    api: StaticServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECWATCH_TEST_PROM_TOKEN", "s3cret-token")
    settings = {
        "url": api.url,
        "bearer_token_env": "SPECWATCH_TEST_PROM_TOKEN",
        "headers": {"X-Scope-OrgID": "k3"},
    }
    config = parse_config({"source": "prometheus", "prometheus": settings})
    assert config.prometheus is not None
    client = PromClient.from_settings(config.prometheus)
    _answer(api, 401, {"status": "error", "error": "bad token"})
    with pytest.raises(QueryError) as caught:
        client.query("up")
    _, _, headers = api.requests[-1]
    assert headers["Authorization"] == "Bearer s3cret-token"
    assert headers["X-Scope-OrgID"] == "k3"  # e.g. Mimir's tenant header
    assert "s3cret" not in str(caught.value)


def test_a_missing_token_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECWATCH_TEST_UNSET_TOKEN", raising=False)
    settings = {"url": "http://127.0.0.1:9", "bearer_token_env": "SPECWATCH_TEST_UNSET_TOKEN"}
    config = parse_config({"source": "prometheus", "prometheus": settings})
    assert config.prometheus is not None
    with pytest.raises(QueryError, match="SPECWATCH_TEST_UNSET_TOKEN, which is not set"):
        PromClient.from_settings(config.prometheus)


@pytest.mark.engines
def test_bad_queries_are_rejected_with_the_engines_words(golden_engine: Engine) -> None:
    client = PromClient(golden_engine.url, timeout_s=5)
    with pytest.raises(QueryError, match="rejected a bad query") as caught:
        client.query('max by (instance (up{job="sglang"})')
    # Prometheus answers 400, VictoriaMetrics 422: both read as a bad query, quoting the query.
    status = "HTTP 400" if golden_engine.name == "prometheus" else "HTTP 422"
    assert status in str(caught.value)
    assert 'query: max by (instance (up{job="sglang"})' in str(caught.value)


@pytest.mark.engines
def test_when_prometheus_goes_away_every_known_target_is_unknown_with_the_reason(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    labelled, flaky = golden_servers
    source = PrometheusSource(source_config(golden_engine.url, [("golden", labelled.url)]))
    try:
        assert {s.target for s in source.collect(time.time()) if s.up} >= {"golden"}
        # The same source, its Prometheus now gone (the client is injected the way the source uses it).
        source.client = PromClient(f"http://127.0.0.1:{free_port()}", timeout_s=1)
        snapshots = source.collect(time.time())
    finally:
        source.close()
    assert {s.target for s in snapshots} == {"golden", flaky.netloc}
    assert not source.health().answered
    assert "connection refused" in (source.health().error or "")
    for snapshot in snapshots:
        assert snapshot.unknown  # not down: Prometheus said nothing about it
        assert not snapshot.up
        assert snapshot.error is not None
        assert "cannot read it from Prometheus" in snapshot.error
        assert "connection refused" in snapshot.error
        assert all(value is None for value in snapshot.signals.as_dict().values())
