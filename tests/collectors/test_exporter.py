"""The collector's own /metrics, scraped over HTTP and read back with prometheus_client's parser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from collectors.exporter import MetricsExporter, parse_listen
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import ConfigError, parse_config
from tests.collectors.servers import FakeSGLang, refused_url


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = requests.get(url, timeout=5).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_signals_are_served_as_gauges(sglang: Callable[..., FakeSGLang], tmp_path: Path) -> None:
    server = sglang()
    config = parse_config(
        {
            "scrape": {"interval_s": 5, "timeout_s": 1},
            "targets": [
                {"name": "east-0", "url": server.url, "labels": {"deployment": "east"}},
                {"name": "gone", "url": refused_url()},
            ],
        }
    )
    store = SqliteStore(tmp_path / "h.sqlite")
    with Collector(config, store) as collector:
        exporter = MetricsExporter(collector, "127.0.0.1:0")
        try:
            assert scrape(exporter.url)[("specwatch_cycles_total", ())] == 0.0
            snapshot = collector.run_cycle()[0]
            samples = scrape(exporter.url)
        finally:
            exporter.close()
    store.close()
    east = (("deployment", "east"), ("recipe_id", snapshot.recipe_id or ""), ("target", "east-0"))
    gone = (("deployment", ""), ("recipe_id", ""), ("target", "gone"))
    assert samples[("specwatch_accept_length", east)] == 2.91
    assert samples[("specwatch_kv_usage", east)] == 0.2419
    assert samples[("specwatch_max_running", east)] == 48.0
    assert samples[("specwatch_target_up", east)] == 1.0
    assert samples[("specwatch_target_up", gone)] == 0.0
    assert ("specwatch_tpot_s", east) not in samples  # unknown is absent, never 0
    assert ("specwatch_accept_length", gone) not in samples
    assert samples[("specwatch_cycles_total", ())] == 1.0
    assert samples[("specwatch_store_ok", ())] == 1.0
    assert samples[("specwatch_scrape_duration_seconds", east)] > 0


@pytest.mark.parametrize("listen", ["9464", "localhost:", ":abc", "host:99999"])
def test_a_bad_listen_address_is_a_config_error(listen: str) -> None:
    with pytest.raises(ConfigError, match=r"exporter\.listen"):
        parse_listen(listen)


def test_a_busy_port_is_a_config_error(tmp_path: Path) -> None:
    config = parse_config({"targets": []})
    store = SqliteStore(tmp_path / "h.sqlite")
    with Collector(config, store) as collector:
        first = MetricsExporter(collector, "127.0.0.1:0")
        try:
            with pytest.raises(ConfigError, match="a free address"):
                MetricsExporter(collector, f"127.0.0.1:{first.port}")
        finally:
            first.close()
    store.close()
