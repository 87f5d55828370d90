"""``specwatch capacity --config F [--json]``: one line per deployment (JSON with the documented keys, null
for unknown), exit 0; a clear sentence and exit 1 for a store that is missing or empty, exit 2 for a bad
config — on a filled store, and on a live loopback fleet a collector has scraped for a few seconds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import capacity_cli
from analysis.advice_inputs import advice_now
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import load_config, parse_config
from sim.fleet import SimFleet
from tests.analysis import advice_fleet as af

# The keys the README documents, in order, before the extra ones.
KEYS = [
    "deployment",
    "servers_up",
    "binding",
    "knee_running",
    "tok_s_per_server_at_knee",
    "demand_tok_s",
    "forecast_peak_tok_s",
    "forecast_method",
    "servers_needed_now",
    "servers_needed_peak",
    "reason",
]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fleet_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return af.fleet_config(tmp_path_factory.mktemp("capacity-cli"))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specwatch_cli", "capacity", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


def test_json_lines_one_per_deployment_with_the_documented_keys(fleet_config: Path) -> None:
    for _ in range(2):  # the advice is for a minute: run again if the minute turned while it ran
        minute = advice_now(time.time())
        done = run_cli("--config", str(fleet_config), "--json")
        if advice_now(time.time()) == minute:
            break
    assert done.returncode == 0, done.stderr
    lines: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["deployment"] for line in lines] == ["gone", "hot", "idle", "lab", ""]
    for line in lines:
        assert list(line)[: len(KEYS)] == KEYS
    # The same advice the page and the analysis compute for this minute, number for number.
    expected = [a.record() for a in capacity_cli.advise(load_config(fleet_config), now=minute)]
    assert lines == expected
    by = {line["deployment"]: line for line in lines}
    assert by["hot"]["servers_needed_now"] > by["hot"]["servers_up"]
    assert by["idle"]["servers_needed_now"] < by["idle"]["servers_up"]
    # Unknown is null, never 0: gone has no server up and no demand now.
    assert by["gone"]["servers_up"] == 0
    assert by["gone"]["demand_tok_s"] is None
    assert by["gone"]["servers_needed_now"] is None
    assert by[""]["reason"].startswith("(no deployment label): no server up (all 1: 1 no data)")


def test_text_is_the_reason_of_each_deployment(
    fleet_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    assert capacity_cli.run(load_config(fleet_config), json_lines=False, now=now) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [a.reason for a in capacity_cli.advise(load_config(fleet_config), now=now)]
    assert printed[1].startswith("hot: 2 of 2 servers up; the state pool binds at 48 running")


def test_no_store_and_an_empty_store_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = af.write_config(tmp_path / "missing.yaml", tmp_path / "nothing-here.sqlite")
    assert capacity_cli.main(["--config", str(missing)]) == 1
    assert "nothing-here.sqlite: no store yet (start the collector" in capsys.readouterr().err
    assert not (tmp_path / "nothing-here.sqlite").exists()  # reading never creates a store
    SqliteStore(tmp_path / "empty.sqlite").close()
    empty = af.write_config(tmp_path / "empty.yaml", tmp_path / "empty.sqlite")
    assert capacity_cli.main(["--config", str(empty), "--json"]) == 1
    err = capsys.readouterr()
    assert "the store holds no samples yet: nothing to advise on" in err.err
    assert err.out == ""


def test_a_bad_config_is_exit_2_with_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "store": {"path": str(tmp_path / "h.sqlite")},
                "alerts": {"rules": {"StatePoolSaturation": {"fire_at": "high"}}},
            }
        ),
        encoding="utf-8",
    )
    assert capacity_cli.main(["--config", str(path)]) == 2  # before the store is looked at
    err = capsys.readouterr().err
    assert err.startswith("configuration error")
    assert "StatePoolSaturation" in err
    assert "Traceback" not in err


LIVE: dict[str, Any] = {
    "warmup_s": 60,
    "recipes": af.RECIPES,
    "workloads": {"chat": {"isl": 1024, "osl": 1024}},
    "servers": [
        {"name": "live-0", "deployment": "live", "recipe": "shipped", "workload": "chat"},
        {"name": "live-1", "deployment": "live", "recipe": "shipped", "workload": "chat"},
        {"name": "dark-0", "deployment": "dark", "recipe": "shipped", "workload": "chat"},
    ],
}


def test_a_live_fleet_scraped_for_seconds_is_unknown_with_the_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "live.yaml"
    scenario.write_text(yaml.safe_dump(LIVE), encoding="utf-8")
    store_path = tmp_path / "live.sqlite"
    with SimFleet(scenario, speed=10) as fleet:
        fleet.server("dark-0").set_fault("down")
        path = fleet.write_config(
            tmp_path / "live-config.yaml",
            scrape={"interval_s": 1, "timeout_s": 1},
            store={"path": str(store_path)},
        )
        config = load_config(path)
        with Collector(
            parse_config(yaml.safe_load(path.read_text()), str(path)), SqliteStore(store_path)
        ) as c:
            for _ in range(4):
                c.run_cycle()
                time.sleep(0.3)
        assert capacity_cli.run(config, json_lines=True) == 0
    by = {line["deployment"]: line for line in map(json.loads, capsys.readouterr().out.splitlines())}
    live, dark = by["live"], by["dark"]
    assert live["servers_up"] == 2
    assert live["demand_tok_s"] is not None
    assert live["demand_tok_s"] > 0
    # Seconds of history: no knee, no forecast, so no number of servers — and the reason says why.
    for key in (
        "tok_s_per_server_at_knee",
        "forecast_peak_tok_s",
        "servers_needed_now",
        "servers_needed_peak",
    ):
        assert live[key] is None
    assert re.search(
        r"forecast unknown: history too short: [01] min stored \(a trend needs 1 h", live["reason"]
    )
    assert "concurrency level(s)" in live["reason"]
    assert live["reason"].endswith("→ servers needed unknown.")
    assert dark["servers_up"] == 0
    assert "no server up (all 1: 1 down)" in dark["reason"]
