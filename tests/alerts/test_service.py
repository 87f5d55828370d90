"""The production runtime against real loopback SGLang fakes: Service cycles, the background loop, restart,
CLI.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.model import AlertState
from alerts.service import Service
from config import ConfigError, parse_config
from tests.alerts.conftest import Receiver
from tests.collectors.bodies import Load
from tests.collectors.servers import FakeSGLang
from tests.loopback import reaped, run_module, start_module

FAST_RULES = {
    "StatePoolSaturation": {"for_s": 0, "keep_firing_for_s": 0, "window_s": 0.1},
    "TargetDown": {"for_s": 0},
    "KVPoolSaturation": {"for_s": 0, "window_s": 0.1},
}


def saturated() -> Load:
    return Load(mamba_usage=0.98, queued=12, full_token_usage=0.29, token_usage=0.98, running=48)


def healthy() -> Load:
    return Load(mamba_usage=0.5, queued=0, full_token_usage=0.3, token_usage=0.5, running=20)


@pytest.fixture
def fleet() -> Any:
    servers = {"k3-1": FakeSGLang(saturated()), "k3-2": FakeSGLang(healthy())}
    yield servers
    for server in servers.values():
        server.stop()


def config_dict(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver, **scrape: float
) -> dict[str, Any]:
    return {
        "scrape": {"interval_s": 0.3, "timeout_s": 0.25, **scrape},
        "targets": [{"name": n, "url": s.url, "labels": {"deployment": "east"}} for n, s in fleet.items()],
        "store": {"path": str(tmp_path / "history.sqlite")},
        "alerts": {"webhook_urls": [receiver.url], "rules": FAST_RULES},
        "exporter": {"listen": None},
    }


def firing_rules(service: Service, target: str) -> set[str]:
    return {
        i.rule for i in service.alert_store.active() if i.target == target and i.state is AlertState.FIRING
    }


def test_run_cycle_evaluates_once_per_cycle_and_queues_the_webhook(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    with Service(parse_config(config_dict(tmp_path, fleet, receiver))) as service:
        service.run_cycle()
        time.sleep(0.15)
        snapshots = service.run_cycle()
        assert {s.target for s in snapshots} == {"k3-1", "k3-2"}
        assert firing_rules(service, "k3-1") == {"StatePoolSaturation"}  # KV at 29% does not fire
        assert firing_rules(service, "k3-2") == set()
        (queued,) = service.alert_store.deliveries()
        body = json.loads(queued.payload)
        assert body["alerts"][0]["labels"]["target"] == "k3-1"
        assert queued.status == "queued"


def test_background_loop_notifies_suspends_on_down_and_stops_cleanly(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    service = Service(parse_config(config_dict(tmp_path, fleet, receiver))).start()
    try:
        (first,) = receiver.wait_for(1, timeout_s=15)
        assert first["alerts"][0]["labels"]["alertname"] == "StatePoolSaturation"
        fleet["k3-1"].metrics_status = 503  # the server dies
        deadline = time.monotonic() + 15
        while "TargetDown" not in firing_rules(service, "k3-1") and time.monotonic() < deadline:
            time.sleep(0.1)
        by_rule = {i.rule: i for i in service.alert_store.active() if i.target == "k3-1"}
        assert by_rule["TargetDown"].state is AlertState.FIRING
        assert by_rule["StatePoolSaturation"].state is AlertState.FIRING
        assert by_rule["StatePoolSaturation"].suspended
        assert firing_rules(service, "k3-2") == set()
        bodies = receiver.wait_for(2, timeout_s=15)
        assert [b["alerts"][0]["labels"]["alertname"] for b in bodies] == [
            "StatePoolSaturation",
            "TargetDown",
        ]
    finally:
        service.stop()
    mine = ("specwatch-collector", "specwatch-notify")
    assert not [t for t in threading.enumerate() if t.name.startswith(mine)]


def test_a_hanging_receiver_does_not_slow_the_scrape_loop(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    receiver.delay_s = 3.0
    service = Service(parse_config(config_dict(tmp_path, fleet, receiver))).start()
    try:
        time.sleep(2.0)
        cycles = service.collector.health().cycles
    finally:
        service.stop(flush_timeout_s=0)
    assert cycles >= 5  # 0.3 s interval: still cycling while the only receiver hangs for 3 s per message


def test_restart_resumes_without_renotifying(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    config = parse_config(config_dict(tmp_path, fleet, receiver))
    with Service(config) as first:
        first.run_cycle()
        queued = len(first.alert_store.deliveries())
    with Service(config) as second:
        assert firing_rules(second, "k3-1") == {"StatePoolSaturation"}  # restored before any cycle
        second.run_cycle()
        second.run_cycle()
        assert len(second.alert_store.deliveries()) == queued


def test_invalid_rule_settings_fail_before_anything_starts(tmp_path: Path) -> None:
    config = parse_config({"store": {"path": str(tmp_path / "h.sqlite")}, "alerts": {"rules": {"Nope": {}}}})
    with pytest.raises(ConfigError, match=r"alerts\.rules\.Nope"):
        Service(config)
    assert not (tmp_path / "h.sqlite").exists()


cli = functools.partial(run_module, "alerts")  # python -m alerts ARGS, to its end


def test_cli_export_rules_and_check(tmp_path: Path) -> None:
    exported = cli("export-rules")
    assert exported.returncode == 0
    groups = yaml.safe_load(exported.stdout)["groups"]
    assert "AcceptanceDecayWithContext" in [r.get("alert") for r in groups[-1]["rules"]]
    bad = tmp_path / "bad.yaml"
    bad.write_text("alerts:\n  rules:\n    StatePoolSaturation: {fire_at: lots}\n", encoding="utf-8")
    for command in ("check", "export-rules"):
        result = cli(command, "--config", str(bad))
        assert result.returncode == 2
        assert "alerts.rules.StatePoolSaturation.fire_at: expected a number, found 'lots'" in result.stderr
        assert "Traceback" not in result.stderr


def test_cli_daemon_runs_until_sigterm(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, fleet, receiver)), encoding="utf-8")
    with reaped(
        start_module(
            "alerts",
            "run",
            "--config",
            str(path),
            output="merged",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    ) as process:
        (body,) = receiver.wait_for(1, timeout_s=30)
        assert body["alerts"][0]["labels"]["target"] == "k3-1"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "watching 2 targets" in output


def _other_threads(pid: int) -> list[int]:
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to name a thread")
def test_sigterm_given_to_another_thread_still_stops_the_daemon(
    tmp_path: Path, fleet: dict[str, FakeSGLang], receiver: Receiver
) -> None:
    # The kernel may hand a process's SIGTERM to any of its threads; Python runs the handler only when the
    # main thread wakes. tgkill delivers it to a non-main thread on purpose: an untimed wait never stopped.
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, fleet, receiver)), encoding="utf-8")
    with start_module(
        "alerts",
        "run",
        "--config",
        str(path),
        output="merged",
    ) as process:
        try:
            receiver.wait_for(1, timeout_s=30)  # running: scrape loop, collector and notifier threads exist
            libc = ctypes.CDLL(None, use_errno=True)
            (thread, *_) = _other_threads(process.pid)
            assert libc.tgkill(process.pid, thread, signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())
            output, _ = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 0, output
    assert f"signal {signal.SIGTERM.value}: stopping" in output
