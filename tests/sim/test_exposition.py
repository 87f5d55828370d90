"""/metrics bodies: the golden body's families, both encodings parse, the OpenMetrics rewrite is
prometheus_client's."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from sim.fleet import SimFleet
from sim.scenario import available_scenarios
from sim.server import SimServer
from tests.sim.helpers import PROMETHEUS_ACCEPT

Signature = dict[str, tuple[str, frozenset[tuple[str, ...]], tuple[str, ...]]]


def signature(text: str) -> Signature:
    """Per family: type, label-name sets (without le), bucket bounds."""
    out: Signature = {}
    for family in parse_text(text):
        labels = frozenset(tuple(sorted(k for k in s.labels if k != "le")) for s in family.samples)
        bounds = tuple(dict.fromkeys(s.labels["le"] for s in family.samples if s.name.endswith("_bucket")))
        out[family.name] = (family.type, labels, bounds)
    return out


def by_rank(family: Metric, rank: str) -> dict[tuple[str, ...], float]:
    """A family's samples of one TP rank, keyed by sample name and the other labels."""
    return {
        (s.name, *(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "tp_rank")): s.value
        for s in family.samples
        if s.labels["tp_rank"] == rank
    }


def servers_at(scenario: str, *times: float) -> Iterator[tuple[SimServer, float]]:
    fleet = SimFleet(scenario)
    for server in fleet.servers:
        for t in times:
            server.advance(t)
            yield server, t


@pytest.fixture(scope="module")
def demo() -> list[SimServer]:
    servers = list(SimFleet("demo").servers)
    for server in servers:
        server.advance(120.0)
    return servers


def test_every_family_matches_the_golden_body(demo: list[SimServer], golden_text: str) -> None:
    golden = signature(golden_text)
    assert len(golden) == 89
    for server in demo:
        assert signature(server.render_body().decode()) == golden, server.name


@pytest.mark.parametrize("scenario", available_scenarios())
def test_every_body_of_every_scenario_parses_in_both_encodings(scenario: str) -> None:
    for server, t in servers_at(scenario, 0.0, 400.0, 1900.0):
        text = server.render_body().decode()
        families = list(parse_text(text))
        assert len(families) == 89, (server.name, t)
        openmetrics = server.render_body(PROMETHEUS_ACCEPT).decode()
        # The rewritten body keeps every sample; restoring the colon gives a strict OpenMetrics document.
        restored = list(parse_openmetrics(re.sub(r"^sglang_", "sglang:", openmetrics, flags=re.MULTILINE)))
        assert {f.name: len(f.samples) for f in restored} == {f.name: len(f.samples) for f in families}


def test_openmetrics_spelling_is_the_one_prometheus_client_writes(demo: list[SimServer]) -> None:
    """Prometheus 2.x's Accept header gets OpenMetrics: sample lines say sglang_…, # TYPE/# HELP keep
    sglang:."""
    server = demo[0]
    reply = server.handle("GET", "/metrics", {"accept": PROMETHEUS_ACCEPT})
    assert reply.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert "escaping=underscores" in reply.headers["Content-Type"]
    lines = reply.body.decode().splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    assert samples
    assert all(line.startswith("sglang_") for line in samples)
    assert all(
        line.split()[2].startswith("sglang:") for line in lines if line.startswith(("# TYPE", "# HELP"))
    )
    assert "# TYPE sglang:generation_tokens counter" in lines  # OpenMetrics: the family name drops _total
    assert any(line.startswith("sglang_generation_tokens_total{") for line in lines)
    assert lines[-1] == "# EOF"
    # A plain scrape (curl, requests) gets text 0.0.4 with the colon everywhere.
    plain = server.handle("GET", "/metrics", {})
    assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE sglang:generation_tokens_total counter" in plain.body.decode()
    # prometheus_client's strict OpenMetrics parser rejects the rewritten body: the trap a scraper must
    # handle.
    with pytest.raises(ValueError, match="Clashing name"):
        list(parse_openmetrics(reply.body.decode()))


@pytest.mark.parametrize("accept", ["", "text/plain", PROMETHEUS_ACCEPT, "application/openmetrics-text"])
def test_fast_bodies_equal_prometheus_client_renders(accept: str) -> None:
    for server, _ in servers_at("demo", 30.0, 700.0, 2500.0, 4300.0):
        assert server.render_body(accept) == server.render_direct(accept), server.name


def test_tp_rank_one_carries_only_constants_and_zeros(demo: list[SimServer]) -> None:
    families = {f.name: f for f in parse_text(demo[0].render_body().decode())}
    both_ranks = {
        name for name, f in families.items() if any(s.labels.get("tp_rank") == "1" for s in f.samples)
    }
    assert both_ranks == {
        "sglang:max_total_num_tokens",
        "sglang:prefill_effective_tokens",
        "sglang:context_len",
        "sglang:dp_attention_pairs",
        "sglang:dp_attention_steps",
        "sglang:dp_attention_sync_wait_seconds",
        "sglang:dp_attention_token_imbalance_ratio",
        "sglang:dp_attention_tokens",
        "sglang:graph_memory_usage_gb",
        "sglang:kv_cache_memory_usage_gb",
        "sglang:num_pages",
        "sglang:page_size",
        "sglang:scheduler_idle_seconds",
        "sglang:scheduler_process_cpu_seconds",
        "sglang:scheduler_stage_seconds",
        "sglang:startup_available_gpu_memory_gb",
        "sglang:weight_memory_usage_gb",
    }
    for name in both_ranks:
        family = families[name]
        rank1, rank0 = by_rank(family, "1"), by_rank(family, "0")
        if family.type == "gauge":
            assert rank1 == rank0, name  # constants: every rank reports them
        else:
            assert set(rank1.values()) == {0.0}, name  # pre-seeded counters of the non-logging rank
    assert any(v > 0 for s in families["sglang:prefill_effective_tokens"].samples for v in [s.value])


def test_gauges_refresh_once_per_decode_log_window() -> None:
    server = SimFleet("demo").server("k3-east-0")
    server.advance(100.0)
    window_end, next_end = server.engine.published.at_s, server.engine.next_refresh_s()
    assert window_end <= 100.0 < next_end
    inside = (window_end + next_end) / 2
    first = server.render_body()
    server.advance(inside)
    assert server.render_body() == first  # mid-window: nothing the scheduler logs has changed
    server.advance(next_end)
    assert server.render_body() != first


def test_plain_server_reports_zero_speculative_gauges(demo: list[SimServer]) -> None:
    plain = next(s for s in demo if s.name == "k3-west-plain")
    families = {f.name: f for f in parse_text(plain.render_body().decode())}
    for name in ("spec_accept_length", "spec_accept_rate", "spec_num_steps", "spec_num_draft_tokens"):
        assert families[f"sglang:{name}"].samples[0].value == 0.0
    assert families["sglang:spec_verify_calls"].samples[0].value == 0.0
    assert families["sglang:num_running_reqs"].samples[0].value == 64.0
