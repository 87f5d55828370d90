"""Config reloads with a broken file: the last good config stays in force and the error is shown.

The collector re-reads ``targets_file`` while running (a half-saved file, an unsafe YAML tag, a deleted
file); the dashboard re-reads its config on every full rerun (a broken edit, then a good one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from alerts.service import Service
from config import parse_config
from tests.collectors.servers import FakeSGLang
from tests.reliability.harness import fake_fleet, samples_by_target
from tests.views.conftest import page_test

pytestmark = pytest.mark.slow


@pytest.fixture
def servers() -> Iterator[dict[str, FakeSGLang]]:
    with fake_fleet("k3-0", "k3-1", "k3-2") as fleet:
        yield fleet


def write_targets(path: Path, servers: dict[str, FakeSGLang], names: list[str]) -> None:
    path.write_text(yaml.safe_dump([{"name": n, "url": servers[n].url} for n in names]), encoding="utf-8")
    # mtime granularity: make sure the collector sees a new signature even within one clock tick
    stat = path.stat()
    path.touch()
    if path.stat().st_mtime_ns == stat.st_mtime_ns:
        time.sleep(0.01)
        path.touch()


def test_a_broken_targets_file_keeps_the_previous_targets(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    targets = tmp_path / "targets.yaml"
    write_targets(targets, servers, ["k3-0", "k3-1"])
    config = parse_config(
        {
            "scrape": {"interval_s": 1, "timeout_s": 0.5},
            "targets_file": str(targets),
            "store": {"path": str(tmp_path / "history.sqlite")},
        }
    )
    text = targets.read_text()
    broken = {
        "half-saved": text[: len(text) // 2] + "\n  - {name: k3-2, url: ",
        "unsafe tag": text + "- !!python/object/apply:os.system ['touch /tmp/specwatch-pwned']\n",
        "not a list": "targets: {name: k3-2}\n",
    }
    errors: dict[str, str | None] = {}
    with Service(config) as service:
        service.run_cycle()
        for case, body in broken.items():
            targets.write_text(body, encoding="utf-8")
            snapshots = service.run_cycle()
            assert [s.target for s in snapshots] == ["k3-0", "k3-1"], case  # the last good targets, scraped
            assert all(s.up for s in snapshots)
            errors[case] = service.collector.health().config_error
        targets.unlink()  # deleted by mistake
        assert [s.target for s in service.run_cycle()] == ["k3-0", "k3-1"]
        errors["deleted"] = service.collector.health().config_error
        write_targets(targets, servers, ["k3-0", "k3-1", "k3-2"])  # fixed, with one more server
        assert [s.target for s in service.run_cycle()] == ["k3-0", "k3-1", "k3-2"]
        assert service.collector.health().config_error is None
        events = [e.detail for e in service.store.read_events(0, time.time() + 60) if e.kind == "config"]
    for case, error in errors.items():
        assert error is not None, case
        assert str(targets) in error, case  # names the file...
    assert "valid YAML" in (errors["half-saved"] or "")  # ...and says what is wrong with it
    assert "python/object" in (errors["unsafe tag"] or "")
    assert "a list of targets" in (errors["not a list"] or "")
    assert "readable file" in (errors["deleted"] or "")
    assert not Path("/tmp/specwatch-pwned").exists()
    assert len([e for e in events if e.startswith("targets_file not reloaded")]) == 4  # one event per problem
    assert events[-1].startswith("targets_file reloaded: 3 targets (+1, -0)")
    assert samples_by_target(Path(config.store.path)) == {"k3-0": 6, "k3-1": 6, "k3-2": 1}


def collector_threads() -> int:
    return sum(t.name == "specwatch-collector" and t.is_alive() for t in threading.enumerate())


def test_the_dashboard_keeps_its_last_good_config_and_says_why(
    tmp_path: Path, servers: dict[str, FakeSGLang]
) -> None:
    import app

    path = tmp_path / "specwatch.yaml"

    def save(interval_s: float) -> None:
        path.write_text(
            yaml.safe_dump(
                {
                    "scrape": {"interval_s": interval_s, "timeout_s": 0.5},
                    "targets": [{"name": n, "url": s.url} for n, s in servers.items()],
                    "store": {"path": str(tmp_path / "history.sqlite")},
                }
            ),
            encoding="utf-8",
        )

    def sidebar(at: AppTest) -> str:
        parts = [*at.sidebar.caption, *at.sidebar.warning, *at.sidebar.error]
        return "\n".join(str(p.value) for p in parts)

    save(2)
    at = page_test(path, "fleet", collector=True)
    try:
        at.run()
        assert not at.exception
        assert "every 2 s" in sidebar(at)
        assert collector_threads() == 1
        deadline = time.monotonic() + 30  # the first cycle lands (slowly on a busy machine) before the edit
        while len(samples_by_target(tmp_path / "history.sqlite")) < len(servers):
            assert time.monotonic() < deadline, "the collector stored no cycle"
            time.sleep(0.1)
        # One scrape interval: the page's cached read of "now" (keyed by the interval tick) moves on.
        time.sleep(2.1)

        path.write_text(
            "scrape: {interval_s: 3, timeout_s: 0.5\ntargets: [", encoding="utf-8"
        )  # a broken save
        at.run()
        assert not at.exception
        assert not at.error, [e.value for e in at.error]  # no "cannot start": the dashboard goes on
        assert at.title[0].value == "Fleet"
        shown = sidebar(at)
        assert "The config file is broken; the last good configuration stays in force." in shown
        assert str(path) in shown
        assert "valid YAML" in shown  # the error itself, in words
        assert "every 2 s" in shown  # still the old config, still collecting
        assert collector_threads() == 1

        save(3)  # fixed
        at.run()
        shown = sidebar(at)
        assert "broken" not in shown
        assert "every 3 s" in shown  # the new config took over
        deadline = time.monotonic() + 10
        while collector_threads() != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert collector_threads() == 1  # the old runtime was stopped: never two collectors
    finally:
        app.start_runtime.clear()
        app._last_good_configs.clear()
    assert collector_threads() == 0
