"""/generate as a benchmark client sees it (without the client): token-id prompts, its own requests joining
the batch, the lifetime accept length they make, the speculative meta_info, and /flush_cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.scenario import expand_servers, load_scenario
from sim.server import SimServer

FLEET = """
description: idle servers
recipes:
  shipped: {speculative_dspark_block_size: 3}
  plain: {speculative_algorithm: null, mem_fraction_static: 0.93}
servers:
  - {name: idle, recipe: shipped, load: {concurrency: 0}}
  - {name: plain, recipe: plain, load: {concurrency: 0}}
  - {name: busy, recipe: shipped, load: {concurrency: 8}}
"""


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[dict[str, SimServer], Clock]:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    clock = Clock()
    servers = {
        spec.name: SimServer(spec, index=i, seed=0, clock=clock)
        for i, spec in enumerate(expand_servers(load_scenario(path)))
    }
    return servers, clock


def post(server: SimServer, payload: dict[str, object]) -> tuple[int, list[dict[str, object]]]:
    reply = server.handle("POST", "/generate", {}, json.dumps(payload).encode())
    if reply.stream:
        chunks = [piece for _, piece in reply.stream if piece != b"data: [DONE]\n\n"]
        return reply.status, [json.loads(piece.removeprefix(b"data: ")) for piece in chunks]
    return reply.status, [json.loads(reply.body)]


def stream_time_s(server: SimServer, payload: dict[str, object]) -> float:
    reply = server.handle("POST", "/generate", {}, json.dumps(payload).encode())
    return sum(delay for delay, _ in reply.stream)


def request(new_tokens: int = 64, **prompt: object) -> dict[str, object]:
    return {
        **(prompt or {"text": "lorem " * 200}),
        "sampling_params": {"max_new_tokens": new_tokens},
        "stream": True,
    }


def test_token_id_prompts_are_counted_as_tokens(fleet: tuple[dict[str, SimServer], Clock]) -> None:
    servers, _ = fleet
    status, chunks = post(servers["idle"], request(input_ids=list(range(300))))
    assert status == 200
    assert chunks[-1]["meta_info"]["prompt_tokens"] == 300  # type: ignore[index]
    bad = servers["idle"].handle("POST", "/generate", {}, json.dumps({"input_ids": ["a"]}).encode())
    assert bad.status == 400
    assert b"input_ids" in bad.body


def test_a_clients_own_requests_join_the_batch(fleet: tuple[dict[str, SimServer], Clock]) -> None:
    """The 8th request in flight decodes in a batch of 8: its steps are slower than the first's."""
    servers, clock = fleet
    server = servers["idle"]
    alone = stream_time_s(server, request())
    clock.now += 1000.0  # that one is long finished
    times = [stream_time_s(server, request()) for _ in range(8)]
    assert times[0] == pytest.approx(alone, rel=0.05)
    assert times[-1] > 1.2 * times[0]


def test_finished_requests_make_the_lifetime_accept_length(fleet: tuple[dict[str, SimServer], Clock]) -> None:
    servers, clock = fleet
    server = servers["idle"]
    info = json.loads(server.handle("GET", "/server_info", {}).body)
    assert "avg_spec_accept_length" not in info["internal_states"][0]  # nothing decoded yet: SGLang omits it
    _, chunks = post(server, request(128))
    meta = chunks[-1]["meta_info"]
    assert isinstance(meta, dict)
    clock.now += 100.0
    info = json.loads(server.handle("GET", "/server_info", {}).body)
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(meta["spec_accept_length"])
    # meta_info as SGLang >= 0.5.12 names it; the per-step histograms with the last chunk.
    assert meta["completion_tokens"] == 128
    assert meta["spec_accept_length"] == pytest.approx(128 / meta["spec_verify_ct"])
    assert meta["spec_num_correct_drafts"] == 128 - meta["spec_verify_ct"]
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 3  # block size 3
    histogram = meta["spec_correct_drafts_histogram"]
    assert sum(histogram) == meta["spec_verify_ct"]
    assert sum(k * n for k, n in enumerate(histogram)) == meta["spec_num_correct_drafts"]
    assert sum(meta["spec_cap_lens_histogram"]) == meta["spec_verify_ct"]
    assert "spec_correct_drafts_histogram" not in chunks[0]["meta_info"]  # type: ignore[operator]
    _, plain = post(servers["plain"], request())
    assert not any(key.startswith("spec_") for key in plain[-1]["meta_info"])  # type: ignore[union-attr]


def test_flush_cache_only_when_idle(fleet: tuple[dict[str, SimServer], Clock]) -> None:
    servers, clock = fleet
    clock.now = 60.0
    idle, busy = servers["idle"], servers["busy"]
    answer = idle.handle("POST", "/flush_cache", {})
    assert answer.status == 200
    assert answer.body.startswith(b"Cache flushed.")
    assert busy.handle("POST", "/flush_cache", {}).status == 400  # its own requests are running
    post(idle, request())
    assert idle.handle("POST", "/flush_cache", {}).status == 400  # a client's request is in flight
    clock.now += 600.0
    assert idle.handle("POST", "/flush_cache", {}).status == 200
