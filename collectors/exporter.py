"""The collector's own /metrics: derived signals as gauges, so an existing Prometheus and Grafana can use
them.

Built at scrape time from the collector's last cycle (a custom prometheus_client collector on its own
registry), so a target that left the fleet disappears instead of lingering, and an unknown signal is absent
rather than 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from collectors.model import CollectorHealth, SourceHealth, TargetSnapshot
from collectors.signals import SIGNALS
from config import ConfigError


class _Readable(Protocol):
    def latest(self) -> tuple[TargetSnapshot, ...]: ...
    def health(self) -> CollectorHealth: ...


class SignalsCollector:
    """A prometheus_client collector reading a ``runner.Collector``'s last cycle at scrape time."""

    def __init__(self, collector: _Readable) -> None:
        self._collector = collector

    def collect(self) -> Iterator[Metric]:
        snapshots = self._collector.latest()
        health = self._collector.health()
        labels = ["target", "deployment", "recipe_id"]
        for signal in SIGNALS:
            # The catalogue's help and unit, so this /metrics, the recording rules and the docs say one thing.
            family = GaugeMetricFamily(
                f"specwatch_{signal.name}",
                f"{signal.help} Unit: {signal.unit}. Absent when unknown: {signal.unknown}.",
                labels=labels,
            )
            for snap in snapshots:
                value = getattr(snap.signals, signal.name)
                if value is not None:
                    family.add_metric([snap.target, snap.deployment, snap.recipe_id or ""], value)
            yield family

        up = GaugeMetricFamily(
            "specwatch_target_up", "1 if the last scrape of the target succeeded.", labels=labels
        )
        duration = GaugeMetricFamily(
            "specwatch_scrape_duration_seconds", "Duration of the last scrape of the target.", labels=labels
        )
        staleness = GaugeMetricFamily(
            "specwatch_target_staleness_seconds",
            "Seconds since the last successful scrape of the target.",
            labels=["target"],
        )
        for snap in snapshots:
            values = [snap.target, snap.deployment, snap.recipe_id or ""]
            if not snap.unknown:  # the source could not say: absent, never 0 (down)
                up.add_metric(values, 1.0 if snap.up else 0.0)
            if snap.scrape_duration_s is not None:
                duration.add_metric(values, snap.scrape_duration_s)
        for target in health.targets:
            if target.staleness_s is not None:
                staleness.add_metric([target.target], target.staleness_s)
        yield up
        yield duration
        yield staleness

        cycles = CounterMetricFamily("specwatch_cycles", "Collector cycles run.")
        cycles.add_metric([], float(health.cycles))
        yield cycles
        failures = CounterMetricFamily(
            "specwatch_store_dropped_rows", "Snapshots dropped because the history store failed for too long."
        )
        failures.add_metric([], float(health.dropped_rows))
        yield failures
        pending = GaugeMetricFamily(
            "specwatch_store_pending_rows", "Snapshots waiting in memory for the store."
        )
        pending.add_metric([], float(health.pending_rows))
        yield pending
        store_ok = GaugeMetricFamily("specwatch_store_ok", "1 if the last history store write succeeded.")
        store_ok.add_metric([], 0.0 if health.store_error else 1.0)
        yield store_ok
        yield from _source_metrics(health.source)
        if health.last_cycle_duration_s is not None:
            cycle = GaugeMetricFamily(
                "specwatch_cycle_duration_seconds", "Wall time of the last collector cycle."
            )
            cycle.add_metric([], health.last_cycle_duration_s)
            yield cycle


def _source_metrics(source: SourceHealth) -> Iterator[Metric]:
    """Whether the source (direct, or the fleet's Prometheus) answered the last cycle, and how partially."""
    labels = ["source", "url"]
    up = GaugeMetricFamily(
        "specwatch_source_up",
        "1 if the source answered the last cycle; 0 when it could not (every target unknown, not down).",
        labels=labels,
    )
    up.add_metric([source.source, source.url], 1.0 if source.answered else 0.0)
    yield up
    warnings = GaugeMetricFamily(
        "specwatch_source_warnings",
        "Warnings of the source's last answer (partial: what they lack is unknown); see the collector log.",
        labels=labels,
    )
    warnings.add_metric([source.source, source.url], float(len(source.warnings)))
    yield warnings


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) → (host, port); ConfigError naming exporter.listen otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError("<config>", "exporter.listen", "host:port, e.g. 127.0.0.1:9464", listen)
    return host.strip("[]"), int(port)


class MetricsExporter:
    """Serves ``SignalsCollector`` on ``host:port`` from a background thread until ``close()``."""

    def __init__(self, collector: _Readable, listen: str) -> None:
        host, port = parse_listen(listen)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SignalsCollector(collector))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                "<config>",
                "exporter.listen",
                "a free address to serve /metrics on",
                listen,
                exc.strerror or str(exc),
            ) from exc
        self.host = host
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
