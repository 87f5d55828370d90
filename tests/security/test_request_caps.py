"""Every outbound request has a size cap and a whole-answer time cap: /metrics, /server_info, PromQL queries
and notification deliveries, each against a real loopback server that sends forever or trickles one byte at a
time (so no single socket read ever times out).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from collectors.errors import QueryError
from collectors.prometheus.client import PromClient
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import parse_config
from tests.collectors.bodies import Load, render
from tests.collectors.servers import Handler, LoopbackServer, drip, endless, send
from tests.security.hostile import PostableServer

TIMEOUT_S = 1.0
SLACK_S = 1.0  # thread scheduling on a busy 2-core machine
HUGE = 256 * 1024 * 1024  # far beyond any cap: a cap that does not hold would take minutes here


def metrics(handler: Handler) -> None:
    body, content_type = render(Load(), handler.headers.get("Accept") or "*/*")
    send(handler, body, content_type=content_type)


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Callable[[Handler], None]]], LoopbackServer]]:
    started: list[LoopbackServer] = []

    def start(routes: dict[str, Callable[[Handler], None]]) -> LoopbackServer:
        server = PostableServer(routes)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def one_cycle(tmp_path: Path, url: str) -> tuple[bool, str, float]:
    config = parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": TIMEOUT_S, "max_body_bytes": 4 * 1024 * 1024},
            "targets": [{"name": "k3", "url": url}],
            "store": {"path": str(tmp_path / "h.sqlite")},
        }
    )
    store = SqliteStore(config.store.path)
    try:
        with Collector(config, store) as collector:
            started = time.monotonic()
            (snapshot,) = collector.run_cycle()
            return snapshot.up, snapshot.error or "", time.monotonic() - started
    finally:
        store.close()


@pytest.mark.parametrize(
    ("path", "route", "says"),
    [
        ("/metrics", endless(HUGE, declare_length=False), "body too large"),
        ("/metrics", endless(HUGE, declare_length=True), "body too large"),
        ("/metrics", drip(b"sglang:num_running_reqs 1\n" * 100, 0.05), "timeout"),
        ("/server_info", endless(HUGE, declare_length=False), "body too large"),
        ("/server_info", drip(b'{"version": "0.5.23"}' * 100, 0.05), "timeout"),
    ],
    ids=["metrics-endless", "metrics-huge-length", "metrics-trickle", "info-endless", "info-trickle"],
)
def test_scrapes_are_capped_in_size_and_time(
    tmp_path: Path,
    serve: Callable[[dict[str, Callable[[Handler], None]]], LoopbackServer],
    path: str,
    route: Callable[[Handler], None],
    says: str,
) -> None:
    routes = {"/metrics": metrics, path: route}
    server = serve(routes)
    up, error, took_s = one_cycle(tmp_path, server.url)
    assert says in error
    assert took_s < TIMEOUT_S + SLACK_S  # /metrics and /server_info share one deadline per target
    assert server.bytes_sent < 64 * 1024 * 1024  # stopped reading long before the end
    if path == "/server_info":
        assert up  # the metrics were fine: only the recipe is unknown, and says why
        assert "recipe unknown" in error


def test_promql_answers_are_capped_in_size(
    serve: Callable[[dict[str, Callable[[Handler], None]]], LoopbackServer],
) -> None:
    server = serve({"/api/v1/query": endless(HUGE, declare_length=False)})
    client = PromClient(server.url, timeout_s=5.0, max_body_bytes=1024 * 1024)
    try:
        started = time.monotonic()
        with pytest.raises(QueryError, match="MiB"):
            client.query("up")
        assert time.monotonic() - started < 5.0
    finally:
        client.close()
    assert server.bytes_sent < 64 * 1024 * 1024


def test_promql_answers_are_capped_in_time(
    serve: Callable[[dict[str, Callable[[Handler], None]]], LoopbackServer],
) -> None:
    server = serve({"/api/v1/query": drip(b'{"data":{}}', 0.3)})  # 3 s of trickle
    client = PromClient(server.url, timeout_s=TIMEOUT_S)
    try:
        started = time.monotonic()
        with pytest.raises(QueryError):
            client.query("up")
        took_s = time.monotonic() - started
    finally:
        client.close()
    assert took_s < TIMEOUT_S + SLACK_S, f"the query took {took_s:.1f} s with a {TIMEOUT_S} s timeout"


def _webhook_post(url: str, store: Path) -> float:
    """One delivery attempt exactly as the notifier makes it; returns how long it took."""
    from alerts.notify import Notifier
    from alerts.state_store import AlertStateStore

    alerts = AlertStateStore(store)
    notifier = Notifier(alerts, webhook_urls=[url], timeout_s=TIMEOUT_S)
    started = time.monotonic()
    try:
        notifier._post(url, '{"alerts": []}')
    except Exception:  # noqa: S110 - refused or unreachable are both fine here; only the time counts
        pass
    finally:
        alerts.close()
    return time.monotonic() - started


def test_notification_deliveries_are_capped_in_time(
    serve: Callable[[dict[str, Callable[[Handler], None]]], LoopbackServer], tmp_path: Path
) -> None:
    server = serve({"/hook": drip(b"x" * 15, 0.2)})  # accepts the POST, then 3 s of trickle
    took_s = _webhook_post(f"{server.url}/hook", tmp_path / "alerts.sqlite")
    assert took_s < TIMEOUT_S + SLACK_S, (
        f"one delivery attempt took {took_s:.1f} s with a {TIMEOUT_S} s timeout"
    )


def test_a_notification_refusal_is_read_only_up_to_a_cap(
    serve: Callable[[dict[str, Callable[[Handler], None]]], LoopbackServer], tmp_path: Path
) -> None:
    """A receiver refusing with an endless body: the refusal is recorded, the body is not read."""
    server = serve({"/hook": _refuse_forever})
    took_s = _webhook_post(f"{server.url}/hook", tmp_path / "alerts.sqlite")
    assert took_s < TIMEOUT_S + SLACK_S
    assert server.bytes_sent < 64 * 1024 * 1024


def _refuse_forever(handler: Handler) -> None:
    """400 with a body that never ends (what was really sent is counted in bytes_sent)."""
    owner = handler.server.owner
    handler.close_connection = True
    handler.send_response(400)
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Connection", "close")
    handler.end_headers()
    chunk = b"no " * 100_000
    with suppress(OSError):
        while not owner.stopping.is_set():
            handler.wfile.write(chunk)
            with owner.lock:
                owner.bytes_sent += len(chunk)
