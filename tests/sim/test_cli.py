"""``python -m sim``: serves until SIGTERM/SIGINT and exits 0; bad arguments are refused in words."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from config import load_config
from tests.loopback import run_module, start_module
from tests.sim.helpers import free_port_range


@contextmanager
def serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``python -m sim`` and yield once it says it is serving; the pipes are closed afterwards."""
    with start_module(
        "sim",
        *args,
        output="both",
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            output = ""
            for line in process.stdout:
                output += line
                if line.startswith("serving"):
                    break
            else:
                raise AssertionError(f"exited {process.wait()}: {output} {process.stderr.read()}")
            yield process, output
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serves_n_servers_on_consecutive_ports_until_stopped(tmp_path: Path, stop: signal.Signals) -> None:
    base = free_port_range(6)  # three servers and their GPU exporters
    config = tmp_path / "fleet.yaml"
    with serving(
        "--servers", "3", "--base-port", str(base), "--speed", "5", "--write-config", str(config)
    ) as (
        process,
        output,
    ):
        assert f"ports {base}–{base + 2}" in output
        assert f"GPU exporters (DCGM) on ports {base + 3}–{base + 5}" in output
        for port in range(base, base + 3):
            body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            assert "sglang:spec_accept_length" in body
            gpus = requests.get(f"http://127.0.0.1:{port + 3}/metrics", timeout=5).text
            assert gpus.count("\nDCGM_FI_DEV_POWER_USAGE{") == 2  # TP 2: one series per GPU
        assert [t.url for t in load_config(config).targets] == [
            f"http://127.0.0.1:{p}" for p in range(base, base + 3)
        ]
        process.send_signal(stop)
        assert process.wait(timeout=20) == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{base}/metrics", timeout=2)


def test_fleet_file_with_pinned_ports(tmp_path: Path) -> None:
    port = free_port_range(1)
    fleet = tmp_path / "incident.yaml"
    fleet.write_text(
        "description: replay\nrecipes: {shipped: {speculative_dspark_block_size: 3}}\n"
        f"servers: [{{name: k3-incident, deployment: east, recipe: shipped, port: {port}}}]\n"
    )
    with serving("--fleet", str(fleet)) as (process, _):
        info = requests.get(f"http://127.0.0.1:{port}/server_info", timeout=5).json()
        assert info["speculative_dspark_block_size"] == 3
        process.terminate()
        assert process.wait(timeout=20) == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scenario", "nope"], "a scenario name"),
        (["--servers", "0"], "servers must be"),
        (["--speed", "-1"], "speed must be"),
        (["--base-port", "80"], "base_port"),
        (["--fleet", "/nonexistent/fleet.yaml"], "readable"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args: list[str], words: str) -> None:
    done = run_module("sim", *args)
    assert done.returncode == 2
    assert words in done.stderr


def test_lists_the_scenarios() -> None:
    done = run_module("sim", "--list")
    assert done.returncode == 0
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert {"demo", "faults", "restart", "state_saturation"} <= set(names)
