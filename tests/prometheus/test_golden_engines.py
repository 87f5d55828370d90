"""The Prometheus source on real Prometheus and VictoriaMetrics scraping SGLang 0.5.23's golden /metrics body.

The golden body is text format 0.0.4 (colon names kept in storage), so these tests cover the ``sglang:``
spelling; the simulated fleet (OpenMetrics, ``sglang_`` in storage) is covered in test_versus_direct.py.
"""

from __future__ import annotations

import json
import time

import pytest

from collectors.model import Recipe, TargetSnapshot
from collectors.prometheus.promql_source import PrometheusSource
from tests.prometheus.engines import Engine, StaticServer, source_config, wait_scraped
from tests.prometheus.golden import SERVER_INFO

pytestmark = pytest.mark.engines


def _collect(engine: Engine, labelled: StaticServer) -> tuple[dict[str, TargetSnapshot], dict[str, Recipe]]:
    """One collection of a source naming ``labelled`` "golden": snapshots by target, and its recipes."""
    source = PrometheusSource(source_config(engine.url, [("golden", labelled.url)]))
    try:
        return {s.target: s for s in source.collect(time.time())}, source.recipes
    finally:
        source.close()


def test_gauges_and_fallbacks_read_like_the_golden_file(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    labelled, flaky = golden_servers
    snapshots, _ = _collect(golden_engine, labelled)
    # The configured target keeps its name; an unconfigured instance is named by its host:port.
    assert set(snapshots) == {"golden", flaky.netloc}
    golden = snapshots["golden"]
    assert golden.up
    assert golden.error is None
    signals = golden.signals
    assert signals.running == 41
    assert signals.queued == 7
    assert signals.accept_length == pytest.approx(2.91)
    assert signals.spec_accept_rate == pytest.approx(0.6367)
    assert signals.state_pool_usage == pytest.approx(0.7314)
    # KV usage is the full-attention pool, not SGLang's token_usage (max over pools = the state pool here).
    assert signals.kv_usage == pytest.approx(0.2419)
    assert signals.token_usage == pytest.approx(0.73)
    assert signals.avg_context_tokens == pytest.approx(377904 / 41)
    # Counters do not move on a static body, so means are unknown; but 41 requests are running, so decode
    # throughput is never 0: the decode counter stood still, so it is the server's gen_throughput gauge.
    assert signals.output_tok_s == pytest.approx(3127.55)
    assert signals.tpot_s is None
    assert signals.step_latency_s is None
    assert signals.per_request_tok_s is None
    assert (
        signals.cache_hit_rate is None
    )  # no prompt finished: unknown (the last-prefill gauge is not mixed in)
    assert signals.retractions_per_s == 0
    assert golden.scrape_duration_s is not None
    assert 0 < golden.scrape_duration_s < 1


def test_recipes_come_from_server_info_else_from_extra_metric_labels(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    labelled, flaky = golden_servers
    snapshots, recipes = _collect(golden_engine, labelled)
    # /server_info answers 404 on "golden": its flags come from --extra-metric-labels.
    golden = snapshots["golden"]
    assert golden.recipe_id is not None
    from_labels = recipes[golden.recipe_id]
    assert from_labels.get("model") == "Qwen/Qwen3-Next-80B-A3B-Instruct"
    assert from_labels.get("speculative_algorithm") == "DSPARK"
    assert from_labels.get("speculative_dspark_block_size") == 3
    assert from_labels.get("mem_fraction_static") == 0.92
    assert from_labels.get("disable_radix_cache") is True
    assert golden.signals.max_running == 48
    assert golden.deployment == "east"
    assert golden.error is None  # labels are the documented fallback, not a fault
    # The other server answers /server_info (the source found its URL from the instance label).
    other = snapshots[flaky.netloc]
    assert other.recipe_id is not None
    from_info = recipes[other.recipe_id]
    assert from_info.get("model") == "kimi-k3"
    assert from_info.get("version") == "0.5.23"
    assert from_info.get("chunked_prefill_size") == 16384
    assert other.signals.max_running == 48
    assert ("GET", "/server_info") in {(method, path) for method, path, _ in flaky.requests}


def test_without_labels_or_server_info_the_recipe_is_unknown_not_default(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    labelled, flaky = golden_servers
    flaky.routes["/server_info"] = (404, b"", "text/plain")
    try:
        plain = _collect(golden_engine, labelled)[0][flaky.netloc]
    finally:
        flaky.routes["/server_info"] = (200, json.dumps(SERVER_INFO).encode(), "application/json")
    assert plain.recipe_id is None
    assert plain.signals.max_running is None
    # Unknown is not "speculation off": the accept length stays the server's gauge, not plain decoding's 1.0.
    assert plain.signals.accept_length == pytest.approx(2.91)
    assert plain.error is not None
    assert "recipe unknown" in plain.error


def test_a_target_prometheus_cannot_scrape_is_down_with_the_reason(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    labelled, flaky = golden_servers
    flaky.status = 503
    try:
        wait_scraped(golden_engine, flaky.netloc, up=False)
        snapshots, _ = _collect(golden_engine, labelled)
    finally:
        flaky.status = 200
        wait_scraped(golden_engine, flaky.netloc)  # the next test sees both servers up again
    down = snapshots[flaky.netloc]
    assert not down.up
    assert down.error is not None
    assert "up == 0" in down.error
    assert all(value is None for name, value in down.signals.as_dict().items())
    assert snapshots["golden"].up
