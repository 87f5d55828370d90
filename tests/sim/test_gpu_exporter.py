"""Each simulated server's GPUs, served as NVIDIA's dcgm-exporter serves them: its format, label names and
counters, one series per GPU (tp_size × dp_size), power following the load, energy the integral of power."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from sim import gpu
from sim.fleet import SimFleet
from sim.scenario import expand_servers, load_scenario
from sim.server import SimServer

FLEET = """
description: GPUs at three loads, and one that restarts
recipes:
  shipped: {speculative_dspark_block_size: 3}
  wide: {speculative_dspark_block_size: 3, tp_size: 4, dp_size: 2}
servers:
  - {name: idle, recipe: shipped, load: {concurrency: 0}}
  - {name: one-stream, recipe: shipped, load: {concurrency: 1}}
  - {name: full, recipe: shipped, load: {concurrency: 48}}
  - {name: wide, recipe: wide, load: {concurrency: 8}}
  - {name: restarting, recipe: shipped, load: {concurrency: 24}}
phases:
  - {at_s: 100, servers: [restarting], load: {concurrency: 48}}
  - {at_s: 200, servers: [restarting], restart: {}}
  - {at_s: 330, servers: [restarting], load: {concurrency: 4}}
"""


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu") / "fleet.yaml"
    path.write_text(FLEET)
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def servers(fleet_file: Path, clock: Clock) -> dict[str, SimServer]:
    scenario = load_scenario(fleet_file)
    return {
        spec.name: SimServer(spec, index=i, seed=0, clock=clock, boot_s=60.0)
        for i, spec in enumerate(expand_servers(scenario))
    }


def scrape(server: SimServer) -> dict[str, dict[str, tuple[float, dict[str, str]]]]:
    """{family: {gpu: (value, labels)}} of one exporter answer, read with prometheus_client's own parser."""
    reply = server.handle_gpu_exporter("GET", "/metrics", {})
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    families: dict[str, dict[str, tuple[float, dict[str, str]]]] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            families.setdefault(family.name, {})[sample.labels["gpu"]] = (sample.value, dict(sample.labels))
    return families


def mean(family: dict[str, tuple[float, dict[str, str]]]) -> float:
    return math.fsum(v for v, _ in family.values()) / len(family)


def test_dcgm_format_one_series_per_gpu_with_dcgm_labels(fleet_file: Path) -> None:
    clock = Clock()
    fleet = servers(fleet_file, clock)
    clock.now = 60.0
    shipped, wide = scrape(fleet["full"]), scrape(fleet["wide"])
    assert set(shipped) == {name for name, _, _ in gpu.FIELDS}
    assert set(shipped["DCGM_FI_DEV_POWER_USAGE"]) == {"0", "1"}  # TP 2 × DP 1
    assert set(wide["DCGM_FI_DEV_POWER_USAGE"]) == {str(i) for i in range(8)}  # TP 4 × DP 2
    labels = [labels for _, labels in wide["DCGM_FI_DEV_GPU_UTIL"].values()]
    assert {tuple(sorted(lab)) for lab in labels} == {
        ("Hostname", "UUID", "device", "gpu", "modelName", "pci_bus_id")
    }
    assert {lab["Hostname"] for lab in labels} == {"wide"}
    assert len({lab["UUID"] for lab in labels}) == 8
    assert all(lab["UUID"].startswith("GPU-") for lab in labels)
    assert [lab["device"] for lab in sorted(labels, key=lambda x: int(x["gpu"]))] == [
        f"nvidia{i}" for i in range(8)
    ]
    body = fleet["full"].handle_gpu_exporter("GET", "/metrics", {}).body.decode()
    # The text dcgm-exporter writes: its help texts, types, and the energy counter without a _total suffix.
    assert "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n" in body
    assert (
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in body
    )
    # Memory: SGLang reserved mem_fraction_static of each GPU at boot.
    used = shipped["DCGM_FI_DEV_FB_USED"]["0"][0]
    free = shipped["DCGM_FI_DEV_FB_FREE"]["0"][0]
    assert used + free == gpu.FB_TOTAL_MIB
    assert used == pytest.approx(gpu.FB_TOTAL_MIB * fleet["full"].args["mem_fraction_static"], rel=0.02)
    gzipped = fleet["full"].handle_gpu_exporter("GET", "/metrics", {"accept-encoding": "gzip"})
    assert gzipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(gzipped.body).startswith(b"# HELP")
    assert fleet["full"].handle_gpu_exporter("GET", "/other", {}).status == 404


def test_power_follows_the_load(fleet_file: Path) -> None:
    clock = Clock()
    fleet = servers(fleet_file, clock)
    clock.now = 90.0
    power = {
        name: mean(scrape(fleet[name])["DCGM_FI_DEV_POWER_USAGE"]) for name in ("idle", "one-stream", "full")
    }
    util = {
        name: mean(scrape(fleet[name])["DCGM_FI_DEV_GPU_UTIL"]) for name in ("idle", "one-stream", "full")
    }
    idle_w = gpu.IDLE_FRACTION * gpu.TDP_W
    assert power["idle"] == pytest.approx(idle_w, rel=0.03)  # a fraction of TDP with nothing to run
    assert util["idle"] == 0
    assert idle_w * 1.5 < power["one-stream"] < 0.85 * gpu.TDP_W  # one stream clocks the GPUs up
    assert power["full"] > 0.93 * gpu.TDP_W  # a full batch runs at the power cap
    assert util["one-stream"] > 90
    assert util["full"] > 90


@pytest.mark.slow
def test_energy_counter_is_the_integral_of_power_across_a_restart(fleet_file: Path) -> None:
    """What a collector computes, rate(energy) / 1000, equals the mean of the power it reads, over every
    minute — through a load change, a restart (the GPUs idle while SGLang boots; the counter does not reset)
    and another load change."""
    clock = Clock()
    server = servers(fleet_file, clock)["restarting"]
    step_s = 0.25
    times, energy_mj, power_w = [], [], []
    for i in range(int(450 / step_s) + 1):
        clock.now = i * step_s
        sample = scrape(server)
        times.append(clock.now)
        energy_mj.append(math.fsum(v for v, _ in sample["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].values()))
        power_w.append(math.fsum(v for v, _ in sample["DCGM_FI_DEV_POWER_USAGE"].values()))
    assert server.restarts == 1
    assert all(b >= a for a, b in itertools.pairwise(energy_mj))  # never resets
    per_minute = int(60 / step_s)
    for start in range(0, len(times) - per_minute, per_minute):
        end = start + per_minute
        rate_w = (energy_mj[end] - energy_mj[start]) / 1000 / (times[end] - times[start])
        sampled_w = math.fsum(power_w[start:end]) / per_minute
        assert rate_w == pytest.approx(sampled_w, rel=0.005), f"minute from {times[start]:.0f} s"
    booting = [
        p for t, p in zip(times, power_w, strict=True) if 205 <= t <= 255
    ]  # restarted at 200, boots 60 s
    assert max(booting) < 1.03 * 2 * gpu.IDLE_FRACTION * gpu.TDP_W
    loaded = [p for t, p in zip(times, power_w, strict=True) if 150 <= t <= 195]
    assert min(loaded) > 0.9 * 2 * gpu.TDP_W


def test_the_exporter_has_its_own_port_up_while_sglang_is_down(fleet_file: Path) -> None:
    with SimFleet(fleet_file, speed=20) as fleet:
        server = fleet.server("full")
        assert server.gpu_exporter_port not in (0, server.port)
        url = f"{server.gpu_exporter_url}/metrics"
        assert "DCGM_FI_DEV_POWER_USAGE{" in requests.get(url, timeout=5).text
        server.set_fault("down")
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{server.url}/metrics", timeout=2)
        assert requests.get(url, timeout=5).status_code == 200  # another process: the GPUs still report
        server.set_gpu_exporter_up(False)
        with pytest.raises(requests.ConnectionError):
            requests.get(url, timeout=2)
        server.set_gpu_exporter_up(True)
        assert requests.get(url, timeout=5).status_code == 200
