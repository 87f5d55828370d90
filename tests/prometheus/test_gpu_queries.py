"""The GPU join as PromQL: which labels meet, what a bad selector says, and the price as a literal."""

from __future__ import annotations

import pytest

from collectors.prometheus.queries import NODE, signal_queries
from config import ConfigError, parse_config


def _queries(prometheus: dict[str, object], price: float | None = None):  # type: ignore[no-untyped-def]
    config = parse_config(
        {
            "source": "prometheus",
            "prometheus": {"url": "http://prometheus:9090", **prometheus},
            "cost": {"gpu_hour_usd": price},
        }
    )
    return signal_queries(config, source="fleet.yaml")


def test_a_bad_gpu_selector_names_its_key() -> None:
    with pytest.raises(ConfigError) as caught:
        _queries({"gpu_selector": "job=dcgm"})
    assert "prometheus.gpu_selector" in str(caught.value)
    assert "fleet.yaml" in str(caught.value)


def test_by_default_a_servers_instance_host_meets_the_exporters_hostname() -> None:
    power = _queries({"selector": 'job="sglang"', "gpu_selector": 'job="dcgm"'}).signals()["gpu_power_w"]
    assert (
        f'"{NODE}", "$1", "instance", "\\\\[?(.+?)\\\\]?(?::[0-9]+)?"' in power
    )  # 10.0.0.5:30000 → 10.0.0.5
    assert f'"{NODE}", "$1", "Hostname", "(.+)"' in power
    assert 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{job="dcgm", Hostname!=""}' in power  # no node: no join
    assert f"* on ({NODE}) group_left ()" in power
    assert "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in power  # the counter's rate first, then the gauge
    assert power.index("TOTAL_ENERGY") < power.index("DCGM_FI_DEV_POWER_USAGE")


def test_a_pod_label_on_both_sides_tells_servers_on_one_node_apart() -> None:
    count = _queries({"node_label": "pod", "gpu_node_label": "pod"}).signals()["gpu_count"]
    assert "group by (instance, job, pod)" in count
    assert 'pod!=""' in count
    assert f"count by ({NODE})" in count


def test_the_price_is_a_literal_and_without_it_there_is_no_cost_query() -> None:
    assert "usd_per_million_tokens" not in _queries({}).signals()
    priced = _queries({}, price=2.5)
    assert "(2.5) * " in priced.signals()["usd_per_million_tokens"]
    assert [r.signal for r in priced.recordings()][-1] == "usd_per_million_tokens"
