"""Start real Prometheus / VictoriaMetrics / Alertmanager binaries and small HTTP servers on 127.0.0.1 for the
tests.

Every process is started by a test, bound to an ephemeral port and stopped (by its own handle) at teardown.
"""

from __future__ import annotations

import http.server
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from collectors.model import TargetSnapshot
from collectors.source import Source
from config import Config, Target, parse_config
from tests.loopback import free_port

PROMETHEUS = shutil.which("prometheus")
VICTORIA = shutil.which("victoria-metrics")
PROMTOOL = shutil.which("promtool")
ALERTMANAGER = shutil.which("prometheus-alertmanager")


def scrape_config(
    jobs: dict[str, Sequence[str]],
    *,
    interval_s: float = 1.0,
    labels: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A scrape config both engines accept (VictoriaMetrics rejects unknown keys such as rule_files);
    ``jobs`` maps a job name to its targets (host:port); ``labels`` gives a target labels of its own (the
    node its GPUs are on, as a fleet's service discovery would)."""
    interval = f"{int(interval_s * 1000)}ms"
    labels = labels or {}

    def static(targets: Sequence[str]) -> list[dict[str, Any]]:
        plain = [t for t in targets if t not in labels]
        groups: list[dict[str, Any]] = [{"targets": plain}] if plain else []
        return groups + [{"targets": [t], "labels": labels[t]} for t in targets if t in labels]

    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": static(targets)} for job, targets in jobs.items()
        ],
    }


@dataclass
class Engine:
    """A running time-series engine: its query URL, process handle and log file."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        answer.raise_for_status()
        result: list[dict[str, Any]] = answer.json()["data"]["result"]
        return result

    def wait_for(
        self, expr: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout_s: float
    ) -> None:
        """Poll ``expr`` until ``predicate`` holds on its result (first scrapes take a few seconds)."""
        deadline = time.monotonic() + timeout_s
        last: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log()}")
            try:
                last = self.query(expr)
                if predicate(last):
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError(
            f"{self.name}: {expr!r} never satisfied the wait (last: {last!r}); log: {self.log()}"
        )


def every_group_at(rules: str, interval: str) -> str:
    """An exported rule file with every group evaluated at ``interval``: in production the SLOs' long windows
    run once a minute and their period every 5 minutes, which a test cannot wait for."""
    exported = yaml.safe_load(rules)
    for group in exported["groups"]:
        group["interval"] = interval
    return yaml.safe_dump(exported, sort_keys=False, width=10_000)


def wait_scraped(engine: Engine, instance: str, *, up: bool = True, timeout_s: float = 15.0) -> None:
    """Wait until the engine's latest scrape of ``instance`` succeeded (or failed, with ``up=False``)."""
    wanted = "1" if up else "0"
    engine.wait_for(
        f'up{{instance="{instance}"}}', lambda r: bool(r) and r[0]["value"][1] == wanted, timeout_s
    )
    if up:
        engine.wait_for(f'{{__name__=~"sglang[:_]num_running_reqs", instance="{instance}"}}', bool, timeout_s)


def _wait_ready(engine: Engine, path: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            raise RuntimeError(f"{engine.name} exited at start: {engine.log()}")
        try:
            if requests.get(engine.url + path, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    engine.stop()
    raise TimeoutError(f"{engine.name} not ready within {timeout_s} s: {engine.log()}")


def start_prometheus(
    workdir: Path,
    config: dict[str, Any],
    *,
    rule_files: Sequence[Path] = (),
    extra_args: Sequence[str] = (),
    port: int | None = None,
) -> Engine:
    """Prometheus on ``port`` (default: a free one); the same ``workdir`` and port again is a restart."""
    assert PROMETHEUS is not None
    workdir.mkdir(parents=True, exist_ok=True)
    config = dict(config)
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
        config["global"] = {**config["global"], "evaluation_interval": config["global"]["scrape_interval"]}
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = port or free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    engine = Engine("prometheus", f"http://127.0.0.1:{port}", process, log_path)
    _wait_ready(engine, "/-/ready")
    return engine


def start_victoria(workdir: Path, config: dict[str, Any]) -> Engine:
    assert VICTORIA is not None
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "scrape.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = workdir / "victoria.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                VICTORIA,
                f"-storageDataPath={workdir / 'vmdata'}",
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-promscrape.config={config_path}",
                "-search.latencyOffset=0s",
                "-loggerLevel=ERROR",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    engine = Engine("victoria-metrics", f"http://127.0.0.1:{port}", process, log_path)
    _wait_ready(engine, "/health")
    return engine


def start_alertmanager(
    workdir: Path,
    receiver_url: str,
    *,
    group_by: Sequence[str] = ("alertname", "target"),
    group_wait: str = "1s",
    group_interval: str = "1s",
    repeat_interval: str = "1h",
) -> Engine:
    """Alertmanager routing every alert to one webhook receiver (resolved notifications on), no cluster.

    The intervals are short so a test sees a group's notification within seconds; a repeat_interval longer
    than the test means every notification the receiver counts is a new one, never a reminder."""
    assert ALERTMANAGER is not None
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "route": {
            "receiver": "specwatch-test",
            "group_by": list(group_by),
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
        },
        "receivers": [
            {"name": "specwatch-test", "webhook_configs": [{"url": receiver_url, "send_resolved": True}]}
        ],
    }
    config_path = workdir / "alertmanager.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = workdir / "alertmanager.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={config_path}",
                f"--storage.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    engine = Engine("alertmanager", f"http://127.0.0.1:{port}", process, log_path)
    _wait_ready(engine, "/-/ready")
    return engine


class StaticServer:
    """Serves one mutable body at every path on 127.0.0.1 (a stand-in SGLang /metrics, or a broken API).

    ``status``, ``content_type``, ``delay_s`` and ``body`` may be changed while it runs; ``requests`` records
    (method, path, headers) of every request.
    """

    def __init__(
        self, body: bytes, *, content_type: str = "text/plain; version=0.0.4; charset=utf-8"
    ) -> None:
        self.body = body
        self.content_type = content_type
        self.status = 200
        self.delay_s = 0.0
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.routes: dict[str, tuple[int, bytes, str]] = {}  # path -> (status, body, content type)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.requests.append((self.command, self.path, dict(self.headers)))
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                status, body, content_type = outer.routes.get(
                    self.path.split("?")[0], (outer.status, outer.body, outer.content_type)
                )
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = _answer  # noqa: N815 (http.server's naming)
            do_POST = _answer  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.netloc = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="static-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def source_config(
    prometheus_url: str,
    targets: Sequence[tuple[str, str] | Target] = (),
    *,
    selector: str = 'job="sglang"',
    rate_window_s: float = 4.0,
    interval_s: float = 1.0,
    timeout_s: float = 5.0,
    gpus: dict[str, str] | None = None,
    gpu_hour_usd: float | None = None,
    downsample_s: float = 2.0,
) -> Config:
    """A ``source: prometheus`` config; ``targets`` (name/url pairs or Targets) name discovered instances;
    ``gpus`` the GPU join (``prometheus.gpu_selector``, ``node_label``, ``gpu_node_label``). The downsampled
    recordings are at 2 s (the session's Prometheus loads its rules from this config)."""
    return parse_config(
        {
            "source": "prometheus",
            "scrape": {"interval_s": interval_s, "timeout_s": min(timeout_s, interval_s)},
            "targets": [
                t.model_dump() if isinstance(t, Target) else {"name": t[0], "url": t[1]} for t in targets
            ],
            "prometheus": {
                "url": prometheus_url,
                "selector": selector,
                "rate_window_s": rate_window_s,
                "timeout_s": timeout_s,
                "downsample_s": downsample_s,
                **(gpus or {}),
            },
            "cost": {"gpu_hour_usd": gpu_hour_usd},
        }
    )


def side_by_side(
    direct: Source, prometheus: Source, window_s: float
) -> tuple[dict[str, TargetSnapshot], dict[str, TargetSnapshot]]:
    """Both sources' snapshots by target at one moment, the direct source's rates over the ``window_s`` just
    waited; both sources are closed after."""
    try:
        direct.collect(time.time())
        time.sleep(window_s)
        now = time.time()
        return {s.target: s for s in direct.collect(now)}, {s.target: s for s in prometheus.collect(now)}
    finally:
        direct.close()
        prometheus.close()


QUERY_LOG = "collectors.prometheus.client"  # logs each query it sends at DEBUG


def collect_sending(
    source: Source, caplog: pytest.LogCaptureFixture
) -> tuple[list[TargetSnapshot], list[str]]:
    """One cycle of ``source`` and the queries it sent (the client's log lines)."""
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=QUERY_LOG)
    try:
        snapshots = source.collect(time.time())
    finally:
        caplog.set_level(logging.WARNING, logger=QUERY_LOG)
    return snapshots, [r.getMessage() for r in caplog.records if r.name == QUERY_LOG]
