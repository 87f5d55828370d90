"""Helpers shared by tests that start real processes on 127.0.0.1: free ports and Debian's chromium."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

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
