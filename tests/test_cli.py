"""The ``specwatch`` console script as a user runs it: the installed entry point, in its own process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.loopback import free_port

SCRIPT = shutil.which("specwatch", path=str(Path(sys.executable).parent))
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(SCRIPT is None, reason="the specwatch script is not installed (make setup)")


def specwatch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ((), "COMMAND"),
        (("run",), "--port"),
        (("collect",), "--cycles"),  # the collector's own help: = python -m collectors
        (("alerts",), "--external-url"),  # = python -m alerts run
        (("sim",), "--servers"),
        (("export",), "recording-rules"),
        (("export", "rules"), "--without-recordings"),
        (("export", "recording-rules"), "--config"),
        (("export", "grafana"), "--check"),
    ],
)
def test_every_subcommand_has_help(command: tuple[str, ...], says: str) -> None:
    result = specwatch(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert says in result.stdout


def test_run_starts_the_dashboard_with_the_makefiles_flags(tmp_path: Path) -> None:
    dry = specwatch("run", "--dry-run", "--config", "fleet.yaml", "--", "--no-collector")
    assert dry.returncode == 0, dry.stderr
    for flag in ("streamlit run", "app.py", "--server.address 127.0.0.1", "--server.headless true"):
        assert flag in dry.stdout
    assert dry.stdout.rstrip().endswith("-- --config fleet.yaml --no-collector")
    port = free_port()
    assert SCRIPT is not None
    env = {**os.environ, "HOME": str(tmp_path)}  # streamlit writes its machine id under ~
    process = subprocess.Popen(
        [SCRIPT, "run", "--port", str(port), "--", "--no-collector"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 90  # streamlit starts slowly on a busy 2-core machine
        healthy = False
        while time.monotonic() < deadline and process.poll() is None:
            try:
                healthy = requests.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).ok
            except requests.RequestException:
                healthy = False
            if healthy:
                break
            time.sleep(0.5)
        assert healthy, f"the dashboard never answered on port {port} (exit code {process.poll()})"
    finally:
        process.terminate()
        process.wait(timeout=30)
    with pytest.raises(requests.ConnectionError):  # no orphaned dashboard left holding the port
        requests.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)


def test_export_rules_and_recording_rules(tmp_path: Path) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump({"scrape": {"interval_s": 15}}), encoding="utf-8")
    rules = specwatch("export", "rules", "--config", str(config))
    recording = specwatch("export", "recording-rules", "--config", str(config))
    assert rules.returncode == 0, rules.stderr
    assert recording.returncode == 0, recording.stderr
    groups = yaml.safe_load(rules.stdout)["groups"]
    # The same recording groups in both exports: the alerts read what Grafana and the dashboard read.
    recorded = yaml.safe_load(recording.stdout)["groups"]
    assert [g["rules"] for g in groups[:2]] == [g["rules"] for g in recorded]
    # Every group at the evaluation interval but the downsampled recordings, once per their resolution.
    assert [g["interval"] for g in groups] == ["15s", "5m", "15s"]
    same = subprocess.run(
        [sys.executable, "-m", "alerts", "export-rules", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert same.stdout == rules.stdout  # the python -m form keeps working, with the same output
    if PROMTOOL is not None:
        (tmp_path / "rules.yml").write_text(rules.stdout, encoding="utf-8")
        checked = subprocess.run(
            [PROMTOOL, "check", "rules", "rules.yml"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_export_grafana_and_its_check(tmp_path: Path) -> None:
    exported = specwatch("export", "grafana")
    assert exported.returncode == 0, exported.stderr
    board = json.loads(exported.stdout)
    assert board["uid"] == "specwatch-fleet"
    assert specwatch("export", "grafana", "--check").returncode == 0
    good = tmp_path / "dashboard.json"
    good.write_text(exported.stdout, encoding="utf-8")
    assert specwatch("export", "grafana", "--check", str(good)).returncode == 0
    ttft = next(p for p in board["panels"] if p.get("title") == "TTFT")
    ttft["targets"][0]["expr"] = ttft["targets"][0]["expr"].replace("ttft_seconds:mean1m", "ttft_seconds:p99")
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(board), encoding="utf-8")
    failed = specwatch("export", "grafana", "--check", str(stale))
    assert failed.returncode == 1
    assert (
        f"{stale}: panel 'TTFT' (query A) names instance_job:sglang_ttft_seconds:p99, which the recording "
        "rules do not record" in failed.stderr
    )
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json", encoding="utf-8")
    broken = specwatch("export", "grafana", "--check", str(garbage))
    assert broken.returncode == 1
    assert "not JSON" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_bad_input_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"prometheus": {"url": "http://p:9090", "selector": "job=sglang"}}))
    for command in (("export", "grafana"), ("export", "recording-rules"), ("export", "rules")):
        result = specwatch(*command, "--config", str(bad))
        assert result.returncode == 2, (command, result.stderr)
        assert "prometheus.selector" in result.stderr
        assert "Traceback" not in result.stderr
    label = specwatch("export", "grafana", "--recipe-label", "colour")
    assert label.returncode == 2
    assert "expected a recipe flag label: model, model_name" in label.stderr
    assert "found 'colour'" in label.stderr
    missing = specwatch("export", "grafana", "--check", str(tmp_path / "nowhere.json"))
    assert missing.returncode == 1
    assert "nowhere.json" in missing.stderr
    assert "Traceback" not in missing.stderr
