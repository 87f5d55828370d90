"""SGLang's own benchmark client, unchanged and installed from PyPI, against a simulated server: every request
completes, and ``specwatch import bench`` stores its result line field for field.

The client's environment is built on first use (about two minutes on a fresh machine) and cached for later
runs on the same machine with the tokenizer it builds (``sim/bench_client.py``): nothing from a model hub.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from collectors.bench_cli import main as import_main
from collectors.store.offline_runs import OfflineRunStore
from sim.bench_client import ClientEnv, ensure_client, run_client
from sim.fleet import SimFleet
from tests.sim.bench_fields import assert_run_matches

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the first run on a machine installs the client

FLEET = """
description: one server with nothing else to do, for a benchmark client
recipes:
  shipped: {speculative_dspark_block_size: 3}
servers:
  - {name: bench-0, deployment: lab, recipe: shipped, load: {concurrency: 0}}
"""
PROMPTS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 16, 4, 512, 64


@pytest.fixture(scope="module")
def client() -> ClientEnv:
    started = time.monotonic()
    env = ensure_client()
    print(f"benchmark client environment ready in {time.monotonic() - started:.1f} s ({env.python})")
    return env


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    path = tmp_path_factory.mktemp("bench-fleet") / "fleet.yaml"
    path.write_text(FLEET)
    with SimFleet(path, speed=10.0) as running:
        yield running


def test_real_client_completes_every_request_and_its_result_imports(
    client: ClientEnv, fleet: SimFleet, tmp_path: Path
) -> None:
    server = fleet.server("bench-0")
    result_file = tmp_path / "results.jsonl"
    done = run_client(
        client,
        server.url,
        result_file,
        num_prompts=PROMPTS,
        max_concurrency=CONCURRENCY,
        input_len=INPUT_LEN,
        output_len=OUTPUT_LEN,
        # Goodput fields in the result; the cache flushed after warm-up (POST /flush_cache) as in SGLang's CI.
        extra=["--goodput", "ttft:5000", "tpot:100", "--flush-cache", "--tag", "ci"],
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    assert f"Successful requests:                     {PROMPTS}" in output
    (line,) = result_file.read_text().splitlines()
    result = json.loads(line)
    assert result["completed"] == PROMPTS  # every request completed
    assert result["max_concurrency"] == CONCURRENCY
    assert result["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    assert result["total_output_tokens_retokenized"] == PROMPTS * OUTPUT_LEN  # its tokenizer reads our text
    assert result["slo_attainment"] == 1.0  # 64 tokens at speed 10 meet a 5 s TTFT and 100 ms TPOT
    # The accept length the client reports is the server's lifetime figure, which its requests made.
    info = requests.get(f"{server.url}/server_info", timeout=5).json()
    window = info["speculative_num_draft_tokens"]
    assert result["accept_length"] == info["internal_states"][0]["avg_spec_accept_length"]
    assert 1.5 < result["accept_length"] < window
    assert result["server_info"]["speculative_dspark_block_size"] == 3
    assert 0 < result["mean_tpot_ms"] < result["mean_ttft_ms"]  # a 512-token prefill outlasts one step

    store = tmp_path / "history.sqlite"
    config = tmp_path / "specwatch.yaml"
    config.write_text(f"source: direct\nstore: {{path: {store}}}\n")
    for stored in (True, False):  # the same file twice: the second time nothing new
        lines = _import_json(config, result_file)
        assert [(r["line"], r["stored"], r["error"]) for r in lines] == [(1, stored, None)]
    (record,) = lines
    assert record["recipe_id"] == server.recipe.recipe_id  # the live server's recipe id
    assert record["output_throughput"] == result["output_throughput"]
    (run,) = OfflineRunStore(str(store), create=False).runs()
    assert_run_matches(run, result)
    assert run.gpu_count == 2  # TP 2
    assert run.goodput_slos_ms is not None
    assert json.loads(run.goodput_slos_ms) == {"ttft": 5000.0, "tpot": 100.0}


def _import_json(config: Path, *files: Path) -> list[dict[str, object]]:
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        status = import_main(["bench", *map(str, files), "--config", str(config), "--json"])
    assert status == 0, out.getvalue()
    return [json.loads(line) for line in out.getvalue().splitlines()]
