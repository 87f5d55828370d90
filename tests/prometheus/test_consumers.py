"""With source: prometheus, the dashboard's reads and the alert service's history both come from Prometheus.

Nothing above the collectors knows which source fed it: the views read range history through the same calls,
and the in-app collector does not copy Prometheus's samples into the SQLite file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from alerts.service import Service
from collectors.prometheus.promql_source import PrometheusSource
from collectors.store.sqlite_store import SqliteStore
from config import Config
from tests.prometheus.engines import Engine, StaticServer, source_config
from views import data

pytestmark = pytest.mark.engines


def _config(engine_url: str, labelled: StaticServer, tmp_path: Path) -> Config:
    config = source_config(engine_url, [("golden", labelled.url)])
    return config.model_copy(
        update={"store": config.store.model_copy(update={"path": str(tmp_path / "meta.db")})}
    )


def test_dashboard_reads_range_history_from_prometheus(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer], tmp_path: Path
) -> None:
    config = _config(golden_engine.url, golden_servers[0], tmp_path)
    reader = data.StoreReader(config)  # the backend chosen from config: no store path, no global
    try:
        end = time.time()
        frame = data.samples(reader, end - 3, end, ("golden",), 1500)
        assert len(frame) >= 2
        assert (frame["running"] == 41).all()  # the served gauge, as Prometheus stored it
        assert frame["kv_usage"].to_list() == pytest.approx([0.2419] * len(frame))  # not token_usage (0.73)
    finally:
        reader.close()
    assert SqliteStore(config.store.path).count_samples() == 0  # the SQLite file was never the source


def test_alert_service_keeps_samples_in_prometheus_not_sqlite(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer], tmp_path: Path
) -> None:
    config = _config(golden_engine.url, golden_servers[0], tmp_path)
    built: list[PrometheusSource] = []
    original = PrometheusSource.__init__

    def counting(self: PrometheusSource, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PrometheusSource, "__init__", counting)
        service = Service(config)
    try:
        snapshots = {s.target: s for s in service.run_cycle()}
        latest = {s.target: s for s in service.store.latest()}  # the history reads through the same source
    finally:
        service.stop()
    assert len(built) == 1  # one Prometheus source for the collector and the history store
    assert latest["golden"].signals.running == 41
    assert snapshots["golden"].up
    assert snapshots["golden"].signals.running == 41
    assert SqliteStore(config.store.path).count_samples() == 0  # no duplicate rows beside Prometheus
