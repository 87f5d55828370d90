"""Fixtures of the Prometheus-source tests: stand-in SGLang servers and the engines scraping them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from collectors.prometheus.recording_rules import render_rules
from config import Target
from sim.fleet import SimFleet
from tests.prometheus.engines import (
    PROMETHEUS,
    VICTORIA,
    Engine,
    StaticServer,
    scrape_config,
    source_config,
    start_prometheus,
    start_victoria,
)
from tests.prometheus.golden import EXTRA_LABELS, SERVER_INFO, STEADY_SCENARIO, with_extra_labels

OLD_SAMPLES = "old_samples"  # the marker of a test that waits for the session engine to hold old samples


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{OLD_SAMPLES}: needs golden_engine to hold samples tens of seconds old (runs last on it)"
    )


@pytest.hookimpl(trylast=True)  # after pytest has grouped the tests by golden_engine's parameter
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``old_samples`` runs last among the tests of its engine: the engine has aged while the
    others ran, so the test's wait for old samples (a deadline, still there when it runs alone) is short."""
    for kind in ("prometheus", "victoria-metrics"):
        group = [item for item in items if _engine_of(item) == kind]
        waiting = [item for item in group if item.get_closest_marker(OLD_SAMPLES)]
        if not waiting or len(waiting) == len(group):
            continue
        for item in waiting:
            items.remove(item)
        at = items.index(next(item for item in reversed(group) if item not in waiting)) + 1
        items[at:at] = waiting


def _engine_of(item: pytest.Item) -> object:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("golden_engine")


def skip_without(binary: str | None, name: str) -> None:
    if binary is None:
        pytest.skip(f"{name} is not installed (apt-get install {name}); .ci/run installs it")


def start_engine(
    kind: str, workdir: Path, jobs: dict[str, list[str]], labels: dict[str, dict[str, str]] | None = None
) -> Engine:
    """Prometheus or VictoriaMetrics scraping ``jobs`` (job -> host:port targets) every second, ``labels``
    added to the targets named there.

    Prometheus also evaluates specwatch's recording rules (for job "sglang" and the tests' 4 s window) every
    second; VictoriaMetrics needs vmalert for rules, so it has none.
    """
    config = scrape_config(jobs, labels=labels)
    if kind == "prometheus":
        skip_without(PROMETHEUS, "prometheus")
        workdir.mkdir(parents=True, exist_ok=True)
        rules = workdir / "specwatch-rules.yml"
        rules.write_text(render_rules(source_config("http://127.0.0.1:9")))
        return start_prometheus(workdir, config, rule_files=[rules])
    skip_without(VICTORIA, "victoria-metrics")
    return start_victoria(workdir, config)


# How the tests' engines join the simulated GPUs to their servers: each server's target carries the label
# ``node`` (as service discovery would set it), each exporter's series its ``Hostname`` (the server's name in
# the simulator), and only the ``dcgm`` job's series are GPU series.
GPU_JOIN = {"gpu_selector": 'job="dcgm"', "node_label": "node", "gpu_node_label": "Hostname"}


def gpu_jobs(fleet: SimFleet) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The fleet's DCGM exporters (host:port) and the ``node`` label of each server's target."""
    exporters = [urlsplit(s.gpu_exporter_url).netloc for s in fleet.servers]
    return exporters, {netloc(s.target): {"node": s.name} for s in fleet.servers}


@pytest.fixture(scope="session")
def golden_servers(golden_text: str) -> Iterator[tuple[StaticServer, StaticServer]]:
    """Two stand-ins: ``labelled`` (extra labels, no /server_info) and ``flaky`` (/server_info; toggled)."""
    labelled = StaticServer(with_extra_labels(golden_text, EXTRA_LABELS).encode())
    for path in ("/server_info", "/get_server_info"):  # unreachable /server_info: labels are the fallback
        labelled.routes[path] = (404, b"not found", "text/plain")
    flaky = StaticServer(golden_text.encode())
    flaky.routes["/server_info"] = (200, json.dumps(SERVER_INFO).encode(), "application/json")
    yield labelled, flaky
    labelled.stop()
    flaky.stop()


@pytest.fixture(scope="session")
def sim_fleet() -> Iterator[SimFleet]:
    """Three simulated K3 servers at steady load, 20 simulated seconds per wall second (job "sim")."""
    fleet = SimFleet(STEADY_SCENARIO, speed=20).start()
    yield fleet
    fleet.stop()


def netloc(target: Target) -> str:
    return urlsplit(target.url).netloc


@pytest.fixture(scope="session", params=["prometheus", "victoria-metrics"])
def golden_engine(
    request: pytest.FixtureRequest,
    golden_servers: tuple[StaticServer, StaticServer],
    sim_fleet: SimFleet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    """An engine scraping the golden stand-ins (job "sglang") and the simulated fleet (job "sim") every
    second, waited on until every target has been scraped a few times."""
    labelled, flaky = golden_servers
    sim = [netloc(t) for t in sim_fleet.targets]
    exporters, nodes = gpu_jobs(sim_fleet)
    workdir = tmp_path_factory.mktemp(request.param)
    jobs = {"sglang": [labelled.netloc, flaky.netloc], "sim": sim, "dcgm": exporters}
    engine = start_engine(request.param, workdir, jobs, nodes)
    everyone = str(2 + len(sim))
    try:
        engine.wait_for('count(up{job!="dcgm"} == 1)', lambda r: bool(r) and r[0]["value"][1] == everyone, 30)
        engine.wait_for(
            "count(DCGM_FI_DEV_POWER_USAGE)", lambda r: bool(r) and r[0]["value"][1] == str(2 * len(sim)), 30
        )
        engine.wait_for(
            'count({__name__=~"sglang[:_]num_running_reqs"})',
            lambda r: bool(r) and r[0]["value"][1] == everyone,
            30,
        )
        # rate() over the 4 s test window needs at least two samples of every target.
        engine.wait_for(
            "min(count_over_time(up[4s]))",
            lambda r: bool(r) and float(r[0]["value"][1]) >= 3,
            30,
        )
        yield engine
    finally:
        engine.stop()
