"""The simulator answers ``/metrics?name[]=…`` as prometheus_client does, for SGLang's registry and for one
that resolves names: the same bytes."""

from __future__ import annotations

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from collectors.direct.scrape import METRICS_ACCEPT, METRICS_PATH
from sim.fleet import SimFleet
from sim.names import requested_names
from sim.server import SimServer
from tests.sim.helpers import PROMETHEUS_ACCEPT

NAMES = frozenset(
    {
        "sglang:num_running_reqs",
        "sglang:spec_accept_length",
        "sglang:generation_tokens_total",
        "sglang:inter_token_latency_seconds_sum",
        "sglang:inter_token_latency_seconds_count",
        "sglang:no_such_metric",
    }
)


def _registry_resolving_names(server: SimServer) -> CollectorRegistry:
    registry = CollectorRegistry(support_collectors_without_names=True)
    for collector in server._registry._collector_to_names:
        registry.register(collector)
    return registry


@pytest.mark.parametrize("accept", ["text/plain", PROMETHEUS_ACCEPT])
def test_a_filtered_body_is_what_prometheus_client_renders(accept: str) -> None:
    fleet = SimFleet("demo")
    encoder, _ = choose_encoder(accept)
    query = "&".join(f"name[]={n}" for n in sorted(NAMES))
    for server in fleet.servers:
        server.advance(900.0)
        # SGLang's own registry (a MultiProcessCollector has no names): prometheus_client sends nothing.
        sglang = server.handle("GET", f"/metrics?{query}", {"accept": accept}).body
        assert sglang == bytes(encoder(server._registry.restricted_registry(NAMES)))
        assert b"sglang" not in sglang
        server.honours_name_filter = True
        ours = server.handle("GET", f"/metrics?{query}", {"accept": accept}).body
        theirs = bytes(encoder(_registry_resolving_names(server).restricted_registry(NAMES)))
        assert ours == theirs, server.name
        assert b"_bucket" not in ours  # the histogram's buckets stay home
        assert b"sglang:inter_token_latency_seconds_sum" in ours or b"sglang_inter_token" in ours


def test_the_collectors_filter_over_http_keeps_every_signal_sample() -> None:
    fleet = SimFleet("demo", servers=1).start()
    try:
        url = fleet.targets[0].url
        server = fleet.servers[0]
        server.honours_name_filter = True
        full = requests.get(f"{url}/metrics", headers={"Accept": METRICS_ACCEPT}, timeout=10)
        lean = requests.get(f"{url}{METRICS_PATH}", headers={"Accept": METRICS_ACCEPT}, timeout=10)
    finally:
        fleet.stop()
    assert full.status_code == lean.status_code == 200
    assert len(lean.content) * 5 < len(full.content)  # a fifth of the bytes, or less
    wanted = requested_names(METRICS_PATH.partition("?")[2]) or frozenset()
    kept = {line.split("{")[0].split(" ")[0] for line in lean.text.splitlines() if not line.startswith("#")}
    assert kept <= wanted
    assert server.name  # the fleet served it
    full_lines = [line for line in full.text.splitlines() if line.split("{")[0].split(" ")[0] in wanted]
    assert len([line for line in lean.text.splitlines() if not line.startswith("#")]) == len(full_lines)
