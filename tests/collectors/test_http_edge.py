"""One HTTP edge: a scrape, a PromQL query, a probe and a notification that fail the same way say the same
words — each naming its own setting — and none follows a redirect. Real loopback servers."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alerts.delivery_http import RefusedError, UnreachableError, post_notification
from collectors.direct.scrape import Fetcher
from collectors.errors import CollectorError, HTTPStatusError
from collectors.probes.sender import Prober
from collectors.prometheus.client import PromClient
from config import parse_config
from tests.collectors.conftest import scrape_settings, target
from tests.collectors.servers import Handler, LoopbackServer, refused_url, send, silent_listener
from tests.security.hostile import PostableServer

TIMEOUT_S = 0.3


def _every_caller(url: str) -> dict[str, str]:
    """What a scrape, a PromQL query, a probe and a notification to ``url`` end with (the error's words)."""
    said: dict[str, str] = {}
    with pytest.raises(CollectorError) as scraped:
        Fetcher(scrape_settings(timeout_s=TIMEOUT_S)).get(target("k3", url), "/metrics")
    said["scrape"] = str(scraped.value)
    with pytest.raises(CollectorError) as queried:
        PromClient(url, timeout_s=TIMEOUT_S).query("up")
    said["promql"] = str(queried.value)
    config = parse_config(
        {
            "targets": [{"name": "k3", "url": url, "probe": True}],
            "probes": {"enabled": True, "context_tokens": [1024], "timeout_s": TIMEOUT_S},
        }
    )
    (probe,) = Prober(config).sweep(config.targets[0], None, None)
    said["probe"] = probe.error or ""
    with pytest.raises((UnreachableError, RefusedError)) as posted:
        post_notification(f"{url}/hook", "{}", TIMEOUT_S, lambda text: text)
    said["notification"] = str(posted.value)
    return said


def test_a_refused_connection_reads_the_same_from_every_caller() -> None:
    said = _every_caller(refused_url())
    settings = {
        "scrape": "the target's url",
        "promql": "prometheus.url",
        "probe": "the target's url",
        "notification": "the receiver's URL",
    }
    for caller, setting in settings.items():
        words = f"connection refused; check the server is running and the port in {setting} is right"
        assert words in said[caller], (caller, said[caller])
    assert said["scrape"].startswith("k3: ")
    assert said["probe"].startswith("k3: ")
    assert said["promql"].startswith("Prometheus at ")


def test_a_silent_server_times_out_naming_each_callers_own_setting() -> None:
    with silent_listener() as url:
        said = _every_caller(url)
    settings = {
        "scrape": "scrape.timeout_s",
        "promql": "prometheus.timeout_s",
        "probe": "probes.timeout_s",
        "notification": "alerts.delivery.timeout_s",
    }
    for caller, setting in settings.items():
        assert f"within {TIMEOUT_S:g} s (timeout)" in said[caller], (caller, said[caller])
        assert said[caller].endswith(f"or raise {setting}"), (caller, said[caller])
    assert "(query: up)" in said["promql"]  # which query was too slow


def _redirect(handler: Handler) -> None:
    """302 to another path of the same server, the URL carrying a password."""
    handler.close_connection = True
    where = f"http://user:pw-secret@127.0.0.1:{handler.server.server_address[1]}/elsewhere"
    send(handler, b"", status=302, content_type=None, headers={"Location": where, "Connection": "close"})


@pytest.fixture
def redirecting() -> Iterator[LoopbackServer]:
    routes: dict[str, Callable[[Handler], None]] = {
        path: _redirect for path in ("/metrics", "/api/v1/query", "/generate", "/hook", "/elsewhere")
    }
    server = PostableServer(routes)
    yield server
    server.stop()


def test_no_caller_follows_a_redirect(redirecting: LoopbackServer, tmp_path: Path) -> None:
    url = redirecting.url
    with pytest.raises(HTTPStatusError, match="redirects are not followed") as scraped:
        Fetcher(scrape_settings()).get(target("k3", url), "/metrics")
    assert f"(it points to {url}/elsewhere)" in str(scraped.value)  # without its password
    with pytest.raises(CollectorError, match=r"redirects are not followed: set prometheus\.url"):
        PromClient(url, timeout_s=2).query("up")
    config = parse_config(
        {
            "targets": [{"name": "k3", "url": url, "probe": True}],
            "probes": {"enabled": True, "context_tokens": [1024]},
        }
    )
    (probe,) = Prober(config).sweep(config.targets[0], None, None)
    assert "answered HTTP 302" in (probe.error or "")
    with pytest.raises(RefusedError, match="redirects are not followed"):
        post_notification(f"{url}/hook", "{}", 2.0, lambda text: text)
    assert redirecting.hits("/elsewhere") == 0
    assert sorted(seen.path for seen in redirecting.seen) == [
        "/api/v1/query",
        "/generate",
        "/hook",
        "/metrics",
    ]


def _empty_vector(handler: Handler) -> None:
    handler.rfile.read(int(handler.headers.get("Content-Length") or 0))  # the POST body: keep-alive
    answer = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    send(handler, answer, content_type="application/json")


def test_a_configured_token_wins_over_a_password_in_the_url() -> None:
    """aiohttp refuses a request with both: the token is sent; without one, the URL's password is."""
    server = PostableServer({"/api/v1/query": _empty_vector})
    try:
        url = server.url.replace("http://", "http://ops:pw-1234@")
        assert PromClient(url, bearer_token="tok-5678").query("up") == []
        assert server.seen[-1].headers["authorization"] == "Bearer tok-5678"
        assert PromClient(url).query("up") == []
        basic = base64.b64encode(b"ops:pw-1234").decode()
        assert server.seen[-1].headers["authorization"] == f"Basic {basic}"
    finally:
        server.stop()


def test_prometheus_is_reached_through_the_environments_proxy_with_its_netrc_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Services (Prometheus, receivers) honour HTTP_PROXY, NO_PROXY and ~/.netrc as aiohttp's trust_env does
    (read once per host, not per request); targets never do (test_server_info)."""
    behind = "prometheus.invalid:9090"  # a name only the proxy can reach
    proxy = PostableServer({f"http://{behind}/api/v1/query": _empty_vector})
    direct = PostableServer({"/api/v1/query": _empty_vector})
    netrc = tmp_path / ".netrc"
    netrc.write_text(
        "machine prometheus.invalid login ops password pw-1\nmachine 127.0.0.1 login a password b\n"
    )
    monkeypatch.setenv("NETRC", str(netrc))
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1")  # the direct server: exempt
    try:
        for _ in range(2):
            assert PromClient(f"http://{behind}", timeout_s=2.0).query("up") == []
        assert [seen.path for seen in proxy.seen] == [f"http://{behind}/api/v1/query"] * 2
        basic = base64.b64encode(b"ops:pw-1").decode()
        assert {seen.headers["authorization"] for seen in proxy.seen} == {f"Basic {basic}"}
        assert PromClient(direct.url, bearer_token="tok-5678").query("up") == []
        assert direct.seen[-1].headers["authorization"] == "Bearer tok-5678"  # a token wins over ~/.netrc
    finally:
        proxy.stop()
        direct.stop()
