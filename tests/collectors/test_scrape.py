"""Fetching /metrics from real loopback servers: every bad input becomes a clear per-target error, in time."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable

import pytest

from collectors.direct.direct_source import DirectSource
from collectors.direct.scrape import Fetcher, scrape_metrics
from collectors.errors import (
    BadExposition,
    HTTPStatusError,
    Oversize,
    ScrapeError,
    ScrapeTimeout,
    Unreachable,
)
from collectors.secrets import safe_url
from tests.collectors.bodies import OPENMETRICS_ACCEPT, Load, render
from tests.collectors.conftest import scrape_settings, target
from tests.collectors.servers import (
    FakeSGLang,
    LoopbackServer,
    Route,
    drip,
    endless,
    hang,
    refused_url,
    reply,
    silent_listener,
    slow_status_line,
    truncated,
)

Start = Callable[[dict[str, Route]], LoopbackServer]


def fetcher(**settings: float) -> Fetcher:
    return Fetcher(scrape_settings(**settings), environ={"K3_TOKEN": "s3cr3t-token"})


def test_scrapes_a_real_sglang_layout(sglang: Callable[..., FakeSGLang]) -> None:
    server = sglang()
    exposition, fetched = scrape_metrics(fetcher(), target("k3-east-0", server.url))
    assert exposition.values["sglang:spec_accept_length"] == 2.91
    assert exposition.dialect == "text"  # we ask for plain text first, so the sglang: spelling comes back
    assert fetched.status == 200
    assert "gzip" in server.seen[0].headers["accept-encoding"]  # compressed on the wire, read transparently


def test_a_server_that_only_speaks_openmetrics(loopback: Start) -> None:
    body, content_type = render(Load(), OPENMETRICS_ACCEPT)
    server = loopback({"/metrics": reply(body, content_type=content_type)})
    exposition, _ = scrape_metrics(fetcher(), target("om", server.url))
    assert exposition.dialect == "openmetrics"
    assert exposition.values["sglang:num_running_reqs"] == 41.0


def test_keep_alive_reuses_one_connection(sglang: Callable[..., FakeSGLang]) -> None:
    server = sglang()
    scraper = fetcher()
    for _ in range(3):
        scrape_metrics(scraper, target("k", server.url))
    assert len({seen.client_port for seen in server.seen}) == 1


def test_connection_refused() -> None:
    url = refused_url()
    with pytest.raises(Unreachable, match=r"k3-east-0: .*connection refused; check the server is running"):
        fetcher().get(target("k3-east-0", url), "/metrics")


@pytest.mark.parametrize("timeout_s", [0.4])
def test_a_server_that_accepts_and_never_answers_times_out(timeout_s: float) -> None:
    with silent_listener() as url:
        started = time.monotonic()
        with pytest.raises(ScrapeTimeout, match=r"k: no complete answer .* within 0.4 s \(timeout\)"):
            fetcher(timeout_s=timeout_s).get(target("k", url), "/metrics")
        assert time.monotonic() - started < timeout_s + 0.5


def test_a_trickling_body_hits_the_whole_request_deadline(loopback: Start) -> None:
    # One byte every 50 ms: no single read waits 0.5 s, so only a whole-request deadline stops it.
    server = loopback({"/metrics": drip(render(Load())[0], every_s=0.05)})
    started = time.monotonic()
    with pytest.raises(ScrapeTimeout, match="timeout"):
        fetcher(timeout_s=0.5).get(target("drip", server.url), "/metrics")
    assert time.monotonic() - started < 1.0


def test_a_trickling_status_line_hits_the_deadline_too(loopback: Start) -> None:
    server = loopback({"/metrics": slow_status_line(every_s=0.05)})
    started = time.monotonic()
    with pytest.raises(ScrapeTimeout, match="timeout"):
        fetcher(timeout_s=0.5).get(target("slow", server.url), "/metrics")
    assert time.monotonic() - started < 1.0


def test_a_hung_handler_times_out(loopback: Start) -> None:
    server = loopback({"/metrics": hang})
    with pytest.raises(ScrapeTimeout):
        fetcher(timeout_s=0.3).get(target("hung", server.url), "/metrics")


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (500, "HTTP 500 Internal Server Error; the server is failing"),
        (503, "HTTP 503 Service Unavailable; the server is starting"),
        (404, "HTTP 404 Not Found; is the server started with --enable-metrics?"),
    ],
)
def test_http_status_errors_say_what_to_check(loopback: Start, status: int, hint: str) -> None:
    server = loopback({} if status == 404 else {"/metrics": reply("oops", status=status)})
    with pytest.raises(HTTPStatusError, match=hint) as caught:
        fetcher().get(target("k", server.url), "/metrics")
    assert caught.value.status == status


def test_the_bearer_token_is_sent_and_never_shown(loopback: Start) -> None:
    server = loopback({"/metrics": reply("denied", status=401)})
    with pytest.raises(HTTPStatusError, match=r"check the bearer token in \$K3_TOKEN") as caught:
        fetcher().get(target("k", server.url, bearer_token_env="K3_TOKEN"), "/metrics")
    assert server.seen[0].headers["authorization"] == "Bearer s3cr3t-token"
    assert "s3cr3t" not in str(caught.value)


def test_a_missing_token_variable_is_an_error_before_any_request(loopback: Start) -> None:
    server = loopback({"/metrics": reply("x")})
    with pytest.raises(ScrapeError, match=r"environment variable K3_MISSING .* is not set"):
        fetcher().get(target("k", server.url, bearer_token_env="K3_MISSING"), "/metrics")
    assert server.seen == []


BAD_ANSWERS: list[tuple[str, Route, str]] = [
    (
        "html error page",
        reply("<!DOCTYPE html><html><h1>502 Bad Gateway</h1></html>\n", content_type="text/html"),
        "is not Prometheus text: an HTML/XML page",
    ),
    ("json where text belongs", reply(render(Load())[0], content_type="application/json"), "Content-Type"),
    ("binary garbage", reply(bytes(range(256)) * 8, content_type="application/octet-stream"), "binary data"),
    ("truncated with length", truncated(render(Load())[0], 4000), "truncated body"),
    ("truncated, no length", truncated(render(Load())[0], 4000, declare_length=False), "truncated body"),
    (
        "duplicate and NaN samples still parse",
        reply('sglang:num_running_reqs{tp_rank="0"} NaN\nsglang:num_running_reqs{tp_rank="0"} NaN\n'),
        "",
    ),
]


@pytest.mark.parametrize(("case", "route", "words"), BAD_ANSWERS, ids=[case for case, _, _ in BAD_ANSWERS])
def test_bad_answers_become_clear_errors(loopback: Start, case: str, route: Route, words: str) -> None:
    server = loopback({"/metrics": route})
    if not words:
        exposition, _ = scrape_metrics(fetcher(), target("k", server.url))
        assert exposition.values == {}
        assert any("duplicate" in note for note in exposition.notes)
        return
    with pytest.raises(BadExposition, match=words) as caught:
        scrape_metrics(fetcher(), target("k", server.url))
    assert str(caught.value).startswith("k: ")
    assert f"{server.url}/metrics" in str(caught.value)


@pytest.mark.parametrize("declare_length", [False, True])
def test_a_50_mb_body_is_cut_at_the_cap(loopback: Start, declare_length: bool) -> None:
    total = 50 * 1024 * 1024
    server = loopback({"/metrics": endless(total, declare_length=declare_length)})
    started = time.monotonic()
    with pytest.raises(Oversize, match="body too large"):
        fetcher(timeout_s=5.0).get(target("big", server.url), "/metrics")
    assert time.monotonic() - started < 3.0
    # The default cap is 16 MiB: reading stops there (the kernel buffers a little more), or never starts.
    assert server.bytes_sent < 30 * 1024 * 1024


def test_urls_in_messages_lose_their_credentials() -> None:
    assert safe_url("http://user:pw@10.0.0.5:30000/metrics") == "http://10.0.0.5:30000/metrics"
    assert safe_url("http://10.0.0.5:30000/metrics") == "http://10.0.0.5:30000/metrics"


def test_cookies_a_target_sets_are_never_sent_back(loopback: Start) -> None:
    # A target (or a proxy in front of it) setting a cookie must not get it back, nor any other target.
    body = render(Load())[0]
    server = loopback({"/metrics": reply(body, headers={"Set-Cookie": "session=abc; Path=/"})})
    other = loopback({"/metrics": reply(body)})
    for url in (server.url, server.url, other.url):
        fetcher().get(target("k", url), "/metrics")
    assert all("cookie" not in seen.headers for seen in server.seen + other.seen)


def test_a_cycle_of_many_targets_starts_no_thread_per_target(loopback: Start) -> None:
    body = render(Load())[0]
    servers = [loopback({"/metrics": reply(body), "/server_info": reply(b"{}")}) for _ in range(20)]
    before = _client_threads()
    source = DirectSource(scrape_settings(), [target(f"k{i}", s.url) for i, s in enumerate(servers)])
    snapshots = source.collect(time.time())
    assert all(snapshot.up for snapshot in snapshots), [s.error for s in snapshots if not s.up][:2]
    # The scrape loop's one thread (and a resolver thread) at most: the old pool kept 20 here.
    assert len(_client_threads() - before) <= 2


def _client_threads() -> set[threading.Thread]:
    """This process's threads but the loopback servers' (one per connection)."""
    return {t for t in threading.enumerate() if "process_request" not in t.name}


# -- gzip through ISA-L (aiohttp's zlib backend, collectors/http/loop.py) ------------------------------------
def test_gzip_bodies_read_through_isal_the_same_as_plain(loopback: Start) -> None:
    body, _ = render(Load())
    for level in (1, 6, 9):  # the sim compresses at 1, prometheus_client at 9
        server = loopback(
            {"/metrics": reply(gzip.compress(body, level), headers={"Content-Encoding": "gzip"})}
        )
        exposition, fetched = scrape_metrics(fetcher(), target("gz", server.url))
        assert fetched.body == body
        assert exposition.values["sglang:num_running_reqs"] == 41.0


def test_a_body_that_does_not_gunzip_is_refused_in_words(loopback: Start) -> None:
    server = loopback(
        {"/metrics": reply(b"\x1f\x8b\x08\x00not gzip at all", headers={"Content-Encoding": "gzip"})}
    )
    with pytest.raises(BadExposition, match="does not decompress"):
        scrape_metrics(fetcher(), target("badgz", server.url))


def test_the_size_cap_counts_gunzipped_bytes(loopback: Start) -> None:
    bomb = gzip.compress(b"sglang:num_running_reqs 1\n" + b"#" * 4_000_000 + b"\n", 9)  # ~4 KB on the wire
    server = loopback({"/metrics": reply(bomb, headers={"Content-Encoding": "gzip"})})
    with pytest.raises(Oversize, match="max_body_bytes"):
        scrape_metrics(fetcher(max_body_bytes=1_000_000), target("bomb", server.url))
