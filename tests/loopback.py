"""Helpers shared by tests (and the dashboard benchmark) that start real processes on 127.0.0.1: free ports,
Debian's chromium, a Streamlit server's health, a module's run and a process's or process group's end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# Launch flags that work on these machines: no sandbox as root, and no background traffic to a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (.ci/run installs it)"
    ),
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0) -> None:
    """Until the Streamlit server at ``url`` answers its health check; its log's tail if it exits or never
    does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"streamlit exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:  # noqa: S310 (loopback)
                if answer.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"streamlit not healthy within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group started with ``start_new_session=True``; SIGKILL after 20 s."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def run_module(module: str, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from the repository's root, to its end; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@contextmanager
def reaped(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """``process``; killed on the way out if still running (a failed assertion), and reaped with its pipes
    closed (no zombie, no ResourceWarning in a later test)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# What a started module's output goes to, as (stdout, stderr), read as text: the ways the tests read daemons.
OUTPUTS = {
    "merged": (subprocess.PIPE, subprocess.STDOUT),  # one stream, read with communicate()
    "both": (subprocess.PIPE, subprocess.PIPE),
    "stderr": (subprocess.DEVNULL, subprocess.PIPE),  # the log only
    "none": (subprocess.DEVNULL, subprocess.DEVNULL),
}


def start_module(module: str, *args: str, output: str | None = None, **popen: Any) -> subprocess.Popen[Any]:
    """``python -m module args`` started from the repository's root; ``output`` one of ``OUTPUTS`` (read as
    text), or ``popen`` says where it goes."""
    if output is not None:
        stdout, stderr = OUTPUTS[output]
        popen = {"stdout": stdout, "stderr": stderr, "text": output != "none", **popen}
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, **popen)
