"""``python -m collectors`` as a user runs it: a subprocess scraping loopback; JSON, SIGTERM, bad config."""

from __future__ import annotations

import functools
import json
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.collectors.servers import FakeSGLang, refused_url, wait_for
from tests.loopback import reaped, run_module, start_module

REQUIRED_KEYS = {
    "target", "up", "error", "accept_length", "tpot_s", "step_latency_s", "output_tok_s", "per_request_tok_s",
    "running", "queued", "max_running", "state_pool_usage", "kv_usage", "avg_context_tokens",
    "cache_hit_rate", "recipe", "recipe_id",
    "gpu_count", "gpu_power_w", "tokens_per_joule", "output_tok_s_per_gpu", "usd_per_million_tokens",
}  # fmt: skip


collectors_cli = functools.partial(run_module, "collectors")  # python -m collectors ARGS, to its end


def write_config(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def test_cycles_json_prints_one_object_per_target(sglang: Callable[..., FakeSGLang], tmp_path: Path) -> None:
    server = sglang()
    config = write_config(
        tmp_path / "fleet.yaml",
        f"""
scrape: {{interval_s: 0.3, timeout_s: 0.3}}
targets:
  - {{name: k3-east-0, url: "{server.url}", labels: {{deployment: east}}}}
  - {{name: k3-gone, url: "{refused_url()}"}}
store: {{path: {tmp_path / "history.sqlite"}, retention_h: 1}}
cost: {{gpu_hour_usd: 2.5}}
""",
    )
    done = collectors_cli("--config", str(config), "--cycles", "2", "--json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["target"] for r in records] == ["k3-east-0", "k3-gone"]
    live, gone = records
    assert set(live) >= REQUIRED_KEYS
    assert live["up"] is True
    assert live["error"] is None
    assert live["accept_length"] == 2.91
    assert live["kv_usage"] == 0.2419
    assert live["max_running"] == 48
    # Two cycles with no decode counted in between while 41 requests run: the server's gauge, never 0.
    assert live["output_tok_s"] == 3127.55
    assert live["tpot_s"] is None  # no tokens in the window: unknown, not 0
    assert live["recipe"]["speculative_dspark_block_size"] == 3
    assert live["recipe_id"].startswith("r-")
    # GPUs from /server_info (tp_size 8), no exporter configured: no power, but tok/s per GPU and the cost.
    assert live["gpu_count"] == 8
    assert live["gpu_power_w"] is None
    assert live["tokens_per_joule"] is None
    assert live["output_tok_s_per_gpu"] == pytest.approx(3127.55 / 8)
    assert live["usd_per_million_tokens"] == pytest.approx(2.5 * 8 / (3127.55 * 3600) * 1e6)
    assert gone["up"] is False
    assert "connection refused" in gone["error"]
    assert gone["accept_length"] is None
    assert server.hits("/metrics") == 2
    with sqlite3.connect(tmp_path / "history.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 4


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path / "fleet.yaml", "scrape: {interval_s: 5, timout_s: 3}\n")
    done = collectors_cli("--config", str(config), "--cycles", "1")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(config) in lines[0]
    assert "scrape.timout_s" in lines[0]

    missing = collectors_cli("--config", str(tmp_path / "nope.yaml"), "--cycles", "1")
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr
    assert "nope.yaml" in missing.stderr


def daemon_config(tmp_path: Path, server: FakeSGLang, history: Path, *, listen: str) -> Path:
    """A config scraping ``server`` every 0.2 s into ``history``; ``listen``: the exporter's (YAML)."""
    return write_config(
        tmp_path / "fleet.yaml",
        f"""
scrape: {{interval_s: 0.2, timeout_s: 0.2}}
targets: [{{name: k3, url: "{server.url}"}}]
store: {{path: {history}}}
exporter: {{listen: {listen}}}
""",
    )


def test_runs_until_sigterm_then_flushes_and_exits_0(
    sglang: Callable[..., FakeSGLang], tmp_path: Path
) -> None:
    server = sglang()
    history = tmp_path / "history.sqlite"
    config = daemon_config(tmp_path, server, history, listen='"127.0.0.1:0"')
    with reaped(
        start_module(
            "collectors",
            "--config",
            str(config),
            output="both",
        )
    ) as process:
        assert wait_for(lambda: server.hits("/metrics") >= 3, timeout_s=20)
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert time.monotonic() - started < 5
    assert "Traceback" not in stderr
    assert "serving the collector's own metrics on http://127.0.0.1:" in stderr
    with sqlite3.connect(history) as db:
        rows = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert rows >= 3
    assert rows == server.hits("/metrics")  # every finished cycle reached the store


def test_sigkill_loses_at_most_the_cycle_in_flight(sglang: Callable[..., FakeSGLang], tmp_path: Path) -> None:
    server = sglang()
    history = tmp_path / "history.sqlite"
    config = daemon_config(tmp_path, server, history, listen="null")
    with reaped(
        start_module(
            "collectors",
            "--config",
            str(config),
            output="none",
        )
    ) as process:
        assert wait_for(lambda: server.hits("/metrics") >= 4, timeout_s=20)
        process.kill()
        process.wait(timeout=10)
    scraped = server.hits("/metrics")
    with sqlite3.connect(history) as db:
        kept = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert scraped - 1 <= kept <= scraped

    again = collectors_cli(
        "--config", str(config), "--cycles", "1", "--json"
    )  # restarts cleanly on the same file
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["up"] is True
    with sqlite3.connect(history) as db:
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == kept + 1
