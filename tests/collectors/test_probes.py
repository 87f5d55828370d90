"""Active probes against the simulator's real /generate on loopback: accuracy, opt-in, budget, bad servers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from alerts.service import Service
from collectors.probe_result import ProbeResult
from collectors.probes.prober import PROBE_HEADER, RID_PREFIX
from collectors.probes.scheduler import ProbeScheduler
from collectors.probes.sender import Prober
from collectors.runner import Collector
from collectors.store.probes import ProbeStore
from collectors.store.sqlite_store import SqliteStore
from config import Config, ConfigError, load_config, parse_config
from sim import mechanism as mech
from sim.fleet import SimFleet

SPEED = 8.0
CONTEXTS = [1024, 8192, 32768]
MAX_NEW = 128


def _server(name: str, recipe: str, *, workload: str = "chat", concurrency: int = 8) -> dict[str, Any]:
    """One scenario server of deployment ``p``."""
    load = {"concurrency": concurrency}
    return {"name": name, "deployment": "p", "recipe": recipe, "workload": workload, "load": load}


SCENARIO = {
    "description": "probe targets: two recipes, one saturated server, one server for faults",
    "warmup_s": 300,
    "recipes": {"narrow": {"speculative_dspark_block_size": 3}, "wide": {"speculative_dspark_block_size": 7}},
    "workloads": {"chat": {"isl": 1024, "osl": 512}, "rag": {"isl": 8192, "osl": 1024}},
    "servers": [
        _server("narrow", "narrow"),
        _server("wide", "wide"),
        _server("optout", "narrow"),
        _server("full", "wide", workload="rag", concurrency=80),
        _server("faulty", "narrow", concurrency=4),
    ],
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    path = tmp_path_factory.mktemp("probes") / "probes.yaml"
    path.write_text(yaml.safe_dump(SCENARIO), encoding="utf-8")
    with SimFleet(path, speed=SPEED) as fleet:
        yield fleet


def probe_config(fleet: SimFleet, tmp_path: Path, names: list[str], **probes: Any) -> Config:
    targets = [{**t.model_dump(), "probe": t.name != "optout"} for t in fleet.targets if t.name in names]
    settings = {"enabled": True, "context_tokens": CONTEXTS, "max_new_tokens": MAX_NEW, "timeout_s": 20}
    return parse_config(
        {
            "targets": targets,
            "scrape": {"interval_s": 5, "timeout_s": 3},
            "store": {"path": str(tmp_path / "history.sqlite")},
            "exporter": {"listen": None},
            "probes": {**settings, **probes},
        }
    )


def sweep(config: Config) -> tuple[list[ProbeResult], ProbeScheduler]:
    history = SqliteStore(config.store.path)
    collector = Collector(config, history)
    collector.run_cycle()
    scheduler = ProbeScheduler(config, collector, ProbeStore(config.store.path), own_store=True)
    try:
        return scheduler.run_due(force=True), scheduler
    finally:
        scheduler.stop()
        collector.close()
        history.close()


def test_probes_recover_the_mechanism_accept_length_at_each_context(fleet: SimFleet, tmp_path: Path) -> None:
    results, _ = sweep(probe_config(fleet, tmp_path, ["narrow", "wide"]))
    assert [r.error for r in results] == [None] * 6
    for result in results:
        server = fleet.server(result.target)
        window = mech.verify_window(server.args)
        assert result.prompt_tokens is not None
        assert result.accept_length is not None
        truth = mech.accept_length(result.prompt_tokens + MAX_NEW / 2, window, "text")
        assert result.accept_length == pytest.approx(truth, rel=0.05), result
        assert result.completion_tokens == MAX_NEW
        assert result.request_id.startswith(RID_PREFIX)
        assert result.recipe_id == server.recipe.recipe_id
    by_target = {t: [r for r in results if r.target == t] for t in ("narrow", "wide")}
    for rows in by_target.values():
        # Calibrated from prompt_tokens: the simulated tokenizer is not the prober's first guess, so the
        # first probe misses its length and the later ones land on theirs.
        assert abs(rows[0].prompt_tokens / 1024 - 1) > 0.05  # type: ignore[operator]
        for row in rows[1:]:
            assert row.prompt_tokens == pytest.approx(row.context_tokens, rel=0.03)
        # Acceptance decays with context; the prefill (TTFT) grows with it. (Step latency grows only ~25%
        # here, within wall-clock jitter on a loaded machine: its value has a test of its own.)
        accept = [r.accept_length for r in rows]
        assert accept == sorted(accept, reverse=True)  # type: ignore[type-var]
        assert rows[2].ttft_s > 3 * rows[0].ttft_s  # type: ignore[operator]
    # The wider window accepts more per step at every context: the recipes are told apart.
    for narrow, wide in zip(by_target["narrow"], by_target["wide"], strict=True):
        assert wide.accept_length > narrow.accept_length  # type: ignore[operator]


def test_step_latency_is_the_mechanism_step_scaled_by_sim_speed(fleet: SimFleet, tmp_path: Path) -> None:
    results, _ = sweep(probe_config(fleet, tmp_path, ["narrow"], context_tokens=[8192]))
    (result,) = results
    server = fleet.server("narrow")
    gauges = server.engine.published.gauges
    expected = mech.step_latency_s(
        gauges.running + 1,
        (gauges.decode_sum_seq_lens + 8192 + MAX_NEW / 2) / (gauges.running + 1),
        server.engine.scheduled,
    )
    assert result.step_latency_s is not None
    assert result.tpot_s is not None
    assert result.step_latency_s * SPEED == pytest.approx(expected, rel=0.35)
    # step latency = accept length × TPOT, the seed's identity, holds per probe too.
    assert result.step_latency_s == pytest.approx(result.accept_length * result.tpot_s, rel=0.1)  # type: ignore[operator]


def test_only_opted_in_targets_are_probed_and_the_budget_holds(fleet: SimFleet, tmp_path: Path) -> None:
    narrow, optout = fleet.server("narrow"), fleet.server("optout")
    before_narrow, before_optout = narrow.generate_requests, optout.generate_requests
    sweep_tokens = sum(CONTEXTS) + MAX_NEW * len(CONTEXTS)
    config = probe_config(fleet, tmp_path, ["narrow", "optout"], max_tokens_per_hour=int(sweep_tokens * 1.5))
    results, _ = sweep(config)
    assert {r.target for r in results} == {"narrow"}  # probe: false is never even considered
    assert narrow.generate_requests - before_narrow == len(CONTEXTS)
    assert optout.generate_requests == before_optout
    # A second sweep would pass the hourly budget: skipped, in words, and nothing reaches the server — also
    # after a restart of the prober, which reads the hour's spend back from the store.
    again, _ = sweep(config)
    assert narrow.generate_requests - before_narrow == len(CONTEXTS)
    assert all("max_tokens_per_hour" in (r.error or "") for r in again)
    assert all(r.accept_length is None for r in again)
    stored = ProbeStore(config.store.path).read(0, 2e9)
    assert len(stored) == 2 * len(CONTEXTS)


def test_a_queueing_server_is_not_probed(fleet: SimFleet, tmp_path: Path) -> None:
    full = fleet.server("full")
    before = full.generate_requests
    results, _ = sweep(probe_config(fleet, tmp_path, ["full"]))
    assert full.engine.published.gauges.queued > 0
    assert all("queued" in (r.error or "") and "backing off" in (r.error or "") for r in results)
    assert full.generate_requests == before


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("garbage", "did not answer with an event stream"),
        ("hang", "within 1 s (timeout); the server may be hung or overloaded, or raise probes.timeout_s"),
        ("down", "connection refused"),
    ],
)
def test_a_failing_server_gives_a_clear_error_per_probe(
    fleet: SimFleet, tmp_path: Path, fault: str, words: str
) -> None:
    server = fleet.server("faulty")
    server.set_fault(fault)
    try:
        results, _ = sweep(probe_config(fleet, tmp_path, ["faulty"], context_tokens=[1024], timeout_s=1))
    finally:
        server.set_fault(None)
    (result,) = results
    assert result.error is not None
    assert words in result.error
    assert result.error.startswith("faulty: ")
    assert result.accept_length is None
    assert result.step_latency_s is None


def test_cli_prints_one_json_object_per_target_and_context(fleet: SimFleet, tmp_path: Path) -> None:
    config = probe_config(fleet, tmp_path, ["narrow", "wide"], context_tokens=[1024, 4096])
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "collectors", "probe", "--config", str(path), "--once", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted((r["target"], r["context_tokens"]) for r in rows) == [
        ("narrow", 1024),
        ("narrow", 4096),
        ("wide", 1024),
        ("wide", 4096),
    ]
    for row in rows:
        for key in ("recipe_id", "accept_length", "step_latency_s", "ttft_s", "tpot_s"):
            assert row[key] is not None, (key, row)
        assert row["error"] is None


def test_cli_refuses_when_probes_are_off(fleet: SimFleet, tmp_path: Path) -> None:
    config = probe_config(fleet, tmp_path, ["narrow"], enabled=False)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "collectors", "probe", "--config", str(path), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "probes.enabled is false" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_prompt_past_the_models_context_is_the_servers_words(fleet: SimFleet, tmp_path: Path) -> None:
    results, _ = sweep(probe_config(fleet, tmp_path, ["narrow"], context_tokens=[400_000]))
    (result,) = results
    assert result.error is not None
    assert "answered HTTP 400" in result.error
    assert "maximum context length of 262144 tokens" in result.error


class _Recorder(BaseHTTPRequestHandler):
    """A minimal SGLang-shaped /generate: records what the probe sent, streams three SSE chunks."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[dict[str, str], dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        prompt_tokens = len(body["text"]) // 4
        events = [
            {"meta_info": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "spec_verify_ct": n // 2}}
            for n in (2, 40, 64)
        ]
        payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_probe_requests_identify_themselves_and_ask_for_greedy_fixed_length_output(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        config = parse_config(
            {
                "targets": [{"name": "real", "url": url, "probe": True}],
                "store": {"path": str(tmp_path / "h.sqlite")},
                "probes": {"enabled": True, "context_tokens": [2048], "max_new_tokens": 64},
            }
        )
        (result,) = Prober(config).sweep(config.targets[0], "r-1", None)
    finally:
        server.shutdown()
        server.server_close()
    ((headers, body),) = _Recorder.seen
    assert headers[PROBE_HEADER.lower()] == "1"
    assert body["rid"].startswith(RID_PREFIX)
    assert body["rid"] == result.request_id
    assert body["rid"] in body["text"][:80]  # a unique first line: no prefix-cache hit on an earlier probe
    assert body["sampling_params"] == {"max_new_tokens": 64, "temperature": 0, "ignore_eos": True}
    assert body["stream"] is True
    assert result.accept_length == pytest.approx(64 / 32)
    assert result.error is None


def test_the_running_service_sweeps_on_its_interval_and_stores_the_results(
    fleet: SimFleet, tmp_path: Path
) -> None:
    config = probe_config(fleet, tmp_path, ["narrow"], context_tokens=[1024, 4096], interval_s=10)
    config = config.model_copy(
        update={"scrape": config.scrape.model_copy(update={"interval_s": 0.5, "timeout_s": 0.4})}
    )
    before = fleet.server("narrow").generate_requests
    service = Service(config).start()
    try:
        store = ProbeStore(config.store.path)
        deadline = time.monotonic() + 60
        rows = store.read(0, 2e9)
        while len(rows) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            rows = store.read(0, 2e9)
        store.close()
    finally:
        service.stop()
    assert list(rows["context_tokens"]) == [1024, 4096]
    assert rows["error"].isna().all()
    assert (
        rows["recipe_id"].iloc[0] == fleet.server("narrow").recipe.recipe_id
    )  # the collector's first cycle ran
    assert fleet.server("narrow").generate_requests - before == 2  # one sweep: the next is 10 s away


def test_the_demo_probes_its_simulated_servers_out_of_the_box() -> None:
    config = load_config(Path(__file__).parents[2] / "config" / "default.yaml")
    assert config.probes.enabled
    targets = SimFleet("demo").targets  # not started: only the targets app.py would add
    assert targets
    assert all(t.probe for t in targets)


@pytest.mark.parametrize(
    ("probes", "key"),
    [
        ({"context_tokens": [8]}, "probes.context_tokens"),
        ({"max_new_tokens": "lots"}, "probes.max_new_tokens"),
        ({"interval_s": 1}, "probes.interval_s"),
        ({"enabled": True, "budget": 5}, "probes.budget"),
    ],
)
def test_bad_probe_settings_name_the_key(probes: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"probes": probes}, "fleet.yaml")
    assert f"fleet.yaml: {key}" in str(caught.value)


def test_probe_lengths_are_swept_shortest_first_once_each() -> None:
    config = parse_config({"probes": {"context_tokens": [65536, 1024, 8192, 1024]}})
    assert config.probes.context_tokens == (1024, 8192, 65536)  # the 1K probe calibrates the long ones


class _Endless(BaseHTTPRequestHandler):
    """A /generate that keeps decoding: one SSE event every 0.1 s for a minute (a long probe in flight), one
    HTTP chunk each, as SGLang's streaming response sends them."""

    protocol_version = "HTTP/1.1"
    requests: ClassVar[int] = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        meta = {"meta_info": {"prompt_tokens": 512, "completion_tokens": 1, "spec_verify_ct": 1}}
        event = b"data: " + json.dumps(meta).encode() + b"\n\n"
        try:
            for _ in range(600):
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass  # the probe hung up

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_stopping_cuts_the_probe_in_flight_and_sends_no_more(tmp_path: Path) -> None:
    """Ctrl-C on the dashboard: a sweep of long contexts must not keep the process alive for minutes."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = parse_config(
            {
                "targets": [
                    {"name": "busy", "url": f"http://127.0.0.1:{server.server_address[1]}", "probe": True}
                ],
                "store": {"path": str(tmp_path / "h.sqlite")},
                "probes": {"enabled": True, "context_tokens": [1024, 2048, 4096], "timeout_s": 60},
            }
        )
        stopping = threading.Event()
        found: list[list[ProbeResult]] = []
        prober = Prober(config, stopping=stopping)
        sweep = threading.Thread(target=lambda: found.append(prober.sweep(config.targets[0], None, None)))
        sweep.start()
        time.sleep(0.5)  # the first probe is streaming
        stopped_at = time.monotonic()
        stopping.set()
        sweep.join(timeout=10)
        took_s = time.monotonic() - stopped_at
    finally:
        server.shutdown()
        server.server_close()
    assert not sweep.is_alive()
    assert took_s < 2.0  # one chunk's wait, not the minute the answer would take
    assert found == [[]]  # the cut probe is no measurement of the server: nothing to store or show
    assert _Endless.requests == 1  # the 2,048 and 4,096 probes were never sent
