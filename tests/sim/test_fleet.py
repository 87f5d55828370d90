"""The fleet over real HTTP on 127.0.0.1: endpoints, negotiation, faults, restarts, the collector config."""

from __future__ import annotations

import gzip
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families as parse_text

from config import load_config
from sim.fleet import SimFleet
from sim.recipes import BASE_SERVER_ARGS
from sim.server import SimServer
from tests.sim.helpers import PROMETHEUS_ACCEPT, free_port_range


@pytest.fixture(scope="module")
def fleet() -> Iterator[SimFleet]:
    """The faults scenario at 5× speed: its own outages start 300 simulated seconds (a wall minute) in, after
    these tests; the tests inject theirs by hand."""
    with SimFleet("faults", speed=5, seed=3) as running:
        yield running


@pytest.fixture
def server(fleet: SimFleet) -> Iterator[SimServer]:
    """f-healthy, returned to health afterwards whatever a test did to it."""
    server = fleet.server("f-healthy")
    yield server
    server.set_fault(None)


def sample(text: str, name: str, **labels: str) -> float:
    for family in parse_text(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name} {labels}")


def generated(text: str) -> float:
    return sum(sample(text, "sglang:generation_tokens_total", is_streaming=s) for s in ("true", "false"))


def test_metrics_negotiates_like_sglang(server: SimServer) -> None:
    plain = requests.get(server.url + "/metrics", timeout=5)
    assert plain.status_code == 200
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert plain.headers["content-encoding"] == "gzip"  # requests asks for gzip, as prometheus_client honours
    assert sample(plain.text, "sglang:num_running_reqs", tp_rank="0") == 24
    openmetrics = requests.get(server.url + "/metrics", headers={"Accept": PROMETHEUS_ACCEPT}, timeout=5)
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert "\nsglang_num_running_reqs{" in openmetrics.text
    raw = requests.get(
        server.url + "/metrics", headers={"Accept-Encoding": "identity"}, timeout=5, stream=True
    )
    assert "content-encoding" not in raw.headers
    assert raw.raw.read().startswith(b"# HELP sglang:num_running_reqs")


def test_gzip_body_is_the_same_document(server: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head
    assert gzip.decompress(body).startswith(b"# HELP sglang:num_running_reqs")


def test_server_info_is_the_flat_server_args_object(server: SimServer) -> None:
    for path in ("/server_info", "/get_server_info"):
        info = requests.get(server.url + path, timeout=5).json()
        assert info["speculative_algorithm"] == "DSPARK"
        assert info["speculative_dspark_block_size"] == 3
        assert info["speculative_num_draft_tokens"] == 4  # γ + 1
        assert info["max_running_requests"] == 48
        assert info["port"] == server.port
        assert info["version"] == "0.5.23"
        for key in (
            "mem_fraction_static",
            "disable_radix_cache",
            "cuda_graph_max_bs_decode",
            "chunked_prefill_size",
            "mamba_ssm_dtype",
            "schedule_conservativeness",
            "served_model_name",
            "model_path",
        ):
            assert key in info, key
        assert "cuda_graph_max_bs" not in info  # renamed in 0.5.14
        state = info["internal_states"][0]
        assert state["speculative_dspark_block_size"] == 3
        assert state["avg_spec_accept_length"] > 1
        assert state["memory_usage"]["token_capacity"] == info["max_total_num_tokens"]
        assert set(BASE_SERVER_ARGS) <= set(info)


def test_health_models_and_unknown_routes(server: SimServer) -> None:
    health = requests.get(server.url + "/health", timeout=5)
    assert (health.status_code, health.content) == (200, b"")
    models = requests.get(server.url + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "kimi-k3"
    assert models["data"][0]["max_model_len"] == 262144
    assert requests.get(server.url + "/nope", timeout=5).status_code == 404
    assert requests.post(server.url + "/metrics", data=b"x", timeout=5).status_code == 405
    assert requests.head(server.url + "/metrics", timeout=5).content == b""


def test_keep_alive_serves_many_requests_on_one_connection(server: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3)  # pipelined
        time.sleep(0.3)
        data = sock.recv(65536)
    assert data.count(b"HTTP/1.1 200 OK") == 3


def test_bad_requests_get_400_not_a_dead_loop(server: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 400")
    assert requests.get(server.url + "/health", timeout=5).status_code == 200


def test_down_refuses_connections_then_recovers(server: SimServer) -> None:
    before = generated(requests.get(server.url + "/metrics", timeout=5).text)
    server.set_fault("down")
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/metrics", timeout=2)
    server.set_fault(None)
    after = generated(requests.get(server.url + "/metrics", timeout=5).text)
    assert after >= before  # an outage of the port, not of the process: counters carry on


def test_slow_answers_late(server: SimServer) -> None:
    server.set_fault("slow", delay_s=1.0)
    with pytest.raises(requests.Timeout):
        requests.get(server.url + "/metrics", timeout=0.4)
    started = time.monotonic()
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
    assert time.monotonic() - started >= 1.0


def test_hang_never_answers(server: SimServer) -> None:
    server.set_fault("hang")
    with pytest.raises(requests.Timeout):
        requests.get(server.url + "/metrics", timeout=0.5)


def test_garbage_bodies(server: SimServer) -> None:
    server.set_fault("garbage")
    metrics = requests.get(server.url + "/metrics", timeout=5)
    assert metrics.status_code == 200
    assert metrics.text.startswith("<html>")
    with pytest.raises(json.JSONDecodeError):
        json.loads(requests.get(server.url + "/server_info", timeout=5).text)


def test_unknown_fault_is_refused_in_words(server: SimServer) -> None:
    with pytest.raises(ValueError, match="fault must be one of"):
        server.set_fault("melting")


def test_restart_resets_counters_and_may_change_the_recipe(fleet: SimFleet) -> None:
    server = fleet.server("f-slow")
    before = generated(requests.get(server.url + "/metrics", timeout=5).text)
    assert before > 0
    server.restart({"speculative_dspark_block_size": 7}, boot_s=4)  # 0.8 wall s at speed 5
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/metrics", timeout=2)  # booting: nothing listens
    deadline = time.monotonic() + 10
    while True:
        try:
            text = requests.get(server.url + "/metrics", timeout=2).text
            break
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "the server never came back"
            time.sleep(0.1)
    assert generated(text) < before
    info = requests.get(server.url + "/server_info", timeout=5).json()
    assert (info["speculative_dspark_block_size"], info["speculative_num_draft_tokens"]) == (7, 8)
    assert [e.kind for e in server.events][-2:] == ["restart", "recipe_change"]


def test_set_load_changes_what_the_server_reports(fleet: SimFleet) -> None:
    server = fleet.server("f-garbage")
    server.set_load(concurrency=6)
    deadline = time.monotonic() + 10
    while sample(requests.get(server.url + "/metrics", timeout=5).text, "sglang:num_running_reqs") != 6:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(ValueError, match="concurrency"):
        server.set_load(concurrency=-1)
    with pytest.raises(ValueError, match="unknown"):
        server.set_load(colour="red")


def test_targets_and_collector_config(fleet: SimFleet, tmp_path: Path) -> None:
    path = fleet.write_config(tmp_path / "fleet.yaml", scrape={"interval_s": 1, "timeout_s": 0.5})
    config = load_config(path)
    assert config.targets == fleet.targets
    assert [t.name for t in config.targets] == ["f-healthy", "f-down", "f-slow", "f-garbage", "f-hang"]
    assert {t.deployment for t in config.targets} == {"control", "faulty"}
    assert config.scrape.interval_s == 1
    with pytest.raises(ValueError, match="timeout_s"):
        fleet.write_config(tmp_path / "bad.yaml", scrape={"interval_s": 1, "timeout_s": 5})


def test_scenario_faults_happen_on_the_simulated_clock(tmp_path: Path) -> None:
    scenario = tmp_path / "outage.yaml"
    scenario.write_text(
        "servers: [{name: a}, {name: b}, {name: c}]\n"
        "phases: [{at_s: 30, servers: [a], fault: down}, {at_s: 30, servers: [b], fault: garbage}]\n"
    )
    with SimFleet(scenario, speed=100) as fast:  # the faults start 0.3 wall seconds in, and last
        assert requests.get(fast.server("a").url + "/metrics", timeout=5).status_code == 200
        while fast.sim_time_s() < 45:
            time.sleep(0.05)
        with pytest.raises(requests.ConnectionError):
            requests.get(fast.server("a").url + "/metrics", timeout=2)
        assert requests.get(fast.server("b").url + "/metrics", timeout=5).text.startswith("<html>")
        assert requests.get(fast.server("c").url + "/metrics", timeout=5).status_code == 200
        assert [e.kind for e in fast.server("a").events] == ["down"]


def test_base_port_and_port_in_use() -> None:
    base = free_port_range(6)  # three servers and their GPU exporters
    with SimFleet("restart", base_port=base) as fleet:
        assert [s.port for s in fleet.servers] == [base, base + 1, base + 2]
        assert fleet.targets[0].url == f"http://127.0.0.1:{base}"
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{base}"):
            SimFleet("restart", base_port=base).start()


def test_bad_fleet_arguments_are_refused_in_words() -> None:
    with pytest.raises(ValueError, match="speed"):
        SimFleet("demo", speed=0)
    with pytest.raises(ValueError, match="servers"):
        SimFleet("demo", servers=0)
    with pytest.raises(KeyError, match="no simulated server named"):
        SimFleet("demo").server("nope")
