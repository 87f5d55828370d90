"""The dashboard cannot keep up: collection and alerting keep their pace, live panels slow down and say so.

One process as `make run` runs it: app.py with its own collector and alert engine (started by the first
session), scraping simulated servers that run in another process (a real fleet is elsewhere) and a canary
target (Python's own static file server in a process of its own, serving the golden body as /metrics).
The overload: busy-loop processes hold every core, and page sessions (AppTest, the script a browser tab
runs) rerun the Fleet page back to back, each a session of its own, so page renders compete with the
collector for the CPU and the GIL. They take turns on the test's thread: AppTest runs share one stand-in
for Streamlit's Runtime and cannot overlap (overlapping runs raised "Runtime hasn't been created!"), which
the render slot would serialise anyway. Busy is judged at lowered limits (a fifth of a core of rendering, the
slot held a fifth of the time): what a machine counts as too much is RenderPace's own test
(tests/views/test_refresh_pace.py); here, whether the dashboard acts on it without the collector and the
alert engine losing their pace. Midway the canary is killed.

Checked: every cycle stored every target and none was skipped (no gap of two intervals between a target's
rows), the canary's TargetDown fired within two cycles of the first cycle that saw it down, some page said
it refreshes less often ("refreshing every N s: busy", N above the interval), no page run raised, and once
the load is gone the panel says it refreshes every interval again.
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from tests.loopback import free_port
from tests.views.conftest import page_test
from views import refresh

pytestmark = [pytest.mark.slow, pytest.mark.box_loading]

INTERVAL_S = 1.0
SERVERS = 4
SESSIONS = 4  # page sessions rerunning the Fleet page in turn
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
BUSY = re.compile(r"refreshing every (\d+(?:\.\d+)?) s: busy")


@pytest.fixture
def busy_cpu() -> Iterator[None]:
    """A busy loop per core, in processes of their own (what other work on the machine does)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[dict[str, object]]:
    """Simulated servers in a child process, and the config that scrapes them (targets only)."""
    written = tmp_path / "fleet.yaml"
    sim = subprocess.Popen(
        [sys.executable, "-m", "sim", "--servers", str(SERVERS), "--write-config", str(written)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert sim.stdout is not None
        for line in sim.stdout:  # "serving N simulated SGLang servers …" once they listen
            if line.startswith("serving"):
                break
        assert written.exists(), "python -m sim did not start"
        yield yaml.safe_load(written.read_text())
    finally:
        sim.terminate()
        sim.communicate(timeout=30)


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A target answering the golden body: ``python -m http.server`` serving a folder with a metrics file."""
    folder = tmp_path / "canary"
    folder.mkdir()
    (folder / "metrics").write_bytes(GOLDEN.read_bytes())
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.kill()
        server.wait()


def rows(store: Path, start_ts: float, end_ts: float) -> dict[str, list[float]]:
    """Per target, the timestamps of its rows in [start, end], in order."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    try:
        found = db.execute(
            "SELECT target, ts FROM samples WHERE ts >= ? AND ts <= ? ORDER BY ts", (start_ts, end_ts)
        ).fetchall()
    finally:
        db.close()
    out: dict[str, list[float]] = {}
    for target, ts in found:
        out.setdefault(str(target), []).append(float(ts))
    return out


def first(store: Path, sql: str, *args: object) -> float | None:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    try:
        row = db.execute(sql, args).fetchone()
    finally:
        db.close()
    return None if row is None or row[0] is None else float(row[0])


def captions(at: AppTest) -> str:
    return "\n".join(str(c.value) for c in at.caption)


def test_an_overloaded_dashboard_slows_its_panels_and_never_the_collector(
    tmp_path: Path,
    fleet: dict[str, object],
    canary: tuple[str, subprocess.Popen[bytes]],
    busy_cpu: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app

    monkeypatch.setattr(refresh, "BUSY_CPU", 0.2)
    monkeypatch.setattr(refresh, "BUSY_HELD", 0.2)
    monkeypatch.setattr(refresh, "CALM_CPU", 0.05)
    monkeypatch.setattr(refresh, "CALM_HELD", 0.05)

    canary_url, canary_server = canary
    store = tmp_path / "history.sqlite"
    config = tmp_path / "dashboard.yaml"
    targets = [*fleet["targets"], {"name": "canary", "url": canary_url}]  # type: ignore[misc]
    config.write_text(
        yaml.safe_dump(
            {
                "targets": targets,
                "scrape": {"interval_s": INTERVAL_S, "timeout_s": 0.8},
                "store": {"path": str(store)},
                "alerts": {"rules": {"TargetDown": {"for_s": 0}}},
                "exporter": {"listen": None},
            }
        )
    )
    refresh.PACE.reset()
    first_session = page_test(config, "fleet", collector=True)
    try:
        first_session.run()  # starts the runtime: the collector and the alert engine, in this process
        assert not first_session.exception, [e.value for e in first_session.exception]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(rows(store, 0, time.time() + 60).get("canary", [])) < 2:
            time.sleep(0.2)
        # The overload: sessions rerunning the page in turn, until one says it is busy and a few intervals
        # have passed with the canary down.
        seen: list[str] = []  # the busy statements shown
        failures: list[str] = []
        runs = itertools.count()
        sessions = [page_test(config, "fleet", collector=True) for _ in range(SESSIONS)]

        def rerun_all() -> None:
            for at in sessions:
                at.run()
                next(runs)
                failures.extend(str(e.value) for e in at.exception)
                seen.extend(m.group(0) for m in BUSY.finditer(captions(at)))

        started = time.time()
        while time.time() - started < 3 * INTERVAL_S:
            rerun_all()
        killed_at = time.time()
        canary_server.kill()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (seen and time.time() - killed_at > 4 * INTERVAL_S):
            rerun_all()
        ended = time.time()

        assert not failures, failures[:3]
        assert seen, f"no page said it refreshes less often in {ended - started:.0f} s ({next(runs)} runs)"
        slowed_to_s = max(float(BUSY.search(text).group(1)) for text in seen)  # type: ignore[union-attr]
        assert slowed_to_s > INTERVAL_S
        # Collection kept its pace: every target in every cycle, no cycle skipped.
        stored = rows(store, started + INTERVAL_S, ended - INTERVAL_S)
        assert set(stored) == {str(t["name"]) for t in targets}  # type: ignore[index]
        intervals = int((ended - started - 2 * INTERVAL_S) / INTERVAL_S)
        for target, stamps in stored.items():
            gaps = [b - a for a, b in itertools.pairwise(stamps)]
            assert max(gaps) < 2 * INTERVAL_S, (target, max(gaps))
            assert len(stamps) >= intervals - 1, (target, len(stamps), intervals)
        # Alerting kept its pace: TargetDown (for_s 0) fired within two cycles of the first down cycle.
        down = first(
            store, "SELECT MIN(ts) FROM samples WHERE target = 'canary' AND up = 0 AND ts >= ?", killed_at
        )
        fired = first(
            store,
            "SELECT MIN(ts) FROM alert_transitions WHERE rule = 'TargetDown' AND target = 'canary' "
            "AND to_state = 'firing'",
        )
        assert down is not None, "the canary was never stored down"
        assert fired is not None, "TargetDown never fired for the canary"
        assert fired - down <= 2 * INTERVAL_S + 0.5, fired - down
        # The load gone, the next window's first render says it refreshes every interval again.
        time.sleep(refresh.WINDOW_INTERVALS * INTERVAL_S + 0.5)
        shown = captions(first_session.run())
        assert f"Refreshes every {INTERVAL_S:g} s" in shown, shown
        assert not first_session.exception
    finally:
        app.start_runtime.clear()  # stops the collector thread
        refresh.PACE.reset()
