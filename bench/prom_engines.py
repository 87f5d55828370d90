"""Debian's Prometheus, VictoriaMetrics and vmalert as the Prometheus benchmark runs them: on 127.0.0.1, on
kept data directories, each stopped by its own handle; CPU read from /proc (they share the box with the
dashboard being measured).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


@dataclass
class Engine:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def cpu_s(self) -> float:
        return cpu_seconds(self.process.pid)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def get(self, path: str, **params: str) -> requests.Response:
        answer = requests.get(self.url + path, params=params, timeout=120)
        answer.raise_for_status()
        return answer


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (apt-get install prometheus victoria-metrics)")
    return found


class _PortTaken(RuntimeError):
    """Another process bound the free port first (the box is shared): start again on another."""


def _started(start: Callable[[int], Engine], tries: int = 5) -> Engine:
    for _ in range(tries - 1):
        try:
            return start(free_port())
        except _PortTaken:
            continue
    return start(free_port())


def _wait_ready(engine: Engine, path: str, timeout_s: float = 600.0) -> Engine:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            if "address already in use" in engine.log():
                raise _PortTaken(engine.log())
            raise RuntimeError(f"{engine.name} exited at start: {engine.log()}")
        try:
            if requests.get(engine.url + path, timeout=2).status_code == 200:
                return engine
        except requests.RequestException:
            pass
        time.sleep(0.2)
    engine.stop()
    raise TimeoutError(f"{engine.name} not ready within {timeout_s:.0f} s: {engine.log()}")


def live_scrape(targets: Sequence[str], interval_s: float) -> dict[str, Any]:
    """A scrape config for the live exporter: its series keep their own instance/job (``honor_labels``)."""
    interval = f"{int(interval_s)}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": "specwatch-bench-live",
                "honor_labels": True,
                "static_configs": [{"targets": list(targets)}],
            }
        ],
    }


def start_prometheus(
    workdir: Path,
    tsdb: Path,
    *,
    scrape_interval_s: float,
    scrape: dict[str, Any] | None = None,
    rule_files: Sequence[Path] = (),
    retention: str = "3650d",
) -> Engine:
    """Prometheus 2.42 on ``tsdb`` (blocks loaded at start), scraping and evaluating ``rule_files`` every
    ``scrape_interval_s`` when given."""
    workdir.mkdir(parents=True, exist_ok=True)
    interval = f"{int(scrape_interval_s)}s"
    config: dict[str, Any] = dict(scrape or {"global": {"scrape_interval": interval}, "scrape_configs": []})
    config["global"] = {**config["global"], "evaluation_interval": interval}
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = workdir / "prometheus.log"

    def start(port: int) -> Engine:
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [_binary("prometheus"), f"--config.file={config_path}", f"--storage.tsdb.path={tsdb}",
                 f"--web.listen-address=127.0.0.1:{port}", f"--storage.tsdb.retention.time={retention}"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        return _wait_ready(Engine("prometheus", f"http://127.0.0.1:{port}", process, log_path), "/-/ready")

    return _started(start)


def start_victoria(data_dir: Path, log_path: Path, *, scrape: dict[str, Any] | None = None) -> Engine:
    """VictoriaMetrics 1.79 single-node on ``data_dir`` (scraping as ``scrape`` says, if given)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    config_args: list[str] = []
    if scrape is not None:
        config_path = log_path.with_suffix(".scrape.yml")
        config_path.write_text(yaml.safe_dump(scrape))
        config_args.append(f"-promscrape.config={config_path}")

    def start(port: int) -> Engine:
        args = [_binary("victoria-metrics"), f"-storageDataPath={data_dir}",
                f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1y", "-loggerLevel=ERROR",
                *config_args]  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        return _wait_ready(
            Engine("victoria-metrics", f"http://127.0.0.1:{port}", process, log_path), "/health"
        )

    return _started(start)


def start_vmalert(workdir: Path, victoria: Engine, rule_files: Sequence[Path], interval_s: float) -> Engine:
    """vmalert evaluating ``rule_files`` on VictoriaMetrics and writing the recorded series back to it."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "vmalert.log"

    def start(port: int) -> Engine:
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [_binary("vmalert"), f"-datasource.url={victoria.url}", f"-remoteWrite.url={victoria.url}",
                 *(f"-rule={p}" for p in rule_files), f"-evaluationInterval={int(interval_s)}s",
                 f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=ERROR"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        return _wait_ready(Engine("vmalert", f"http://127.0.0.1:{port}", process, log_path), "/health")

    return _started(start)
