"""The capacity verdict: which pool binds, and the advice the seed supports (and the advice it refutes)."""

from __future__ import annotations

import pandas as pd
import pytest

from views.capacity_verdict import fleet_verdict, server_capacity

RADIX_ON = {"disable_radix_cache": False}
RADIX_OFF = {"disable_radix_cache": True}


def row(**values: object) -> dict[str, object]:
    base: dict[str, object] = {
        "server": "s",
        "status": "up",
        "state_pool_usage": 0.5,
        "kv_usage": 0.3,
        "running": 20.0,
        "cap": 48.0,
        "queued": 0.0,
        "cache_hit_rate": None,
        "recipe": "r-a",
    }
    return {**base, **values}


@pytest.mark.parametrize(
    ("values", "binding", "says"),
    [
        ({"state_pool_usage": 0.98, "kv_usage": 0.29, "running": 48.0, "queued": 7.0}, "state pool", "98%"),
        ({"state_pool_usage": 0.40, "kv_usage": 0.95}, "KV cache", "95% KV"),
        ({"running": 48.0, "queued": 5.0}, "request cap", "48/48"),
        ({"queued": 3.0}, "admission", "3 waiting"),
        ({}, "none", "Headroom"),
        ({"status": "down"}, "unknown", "No current data"),
    ],
)
def test_what_binds(values: dict[str, object], binding: str, says: str) -> None:
    judged = server_capacity(row(**values), RADIX_OFF)
    assert judged.binding == binding
    assert says in judged.headline
    assert judged.headline in judged.verdict


def test_state_pool_verdict_refutes_raising_the_cap() -> None:
    judged = server_capacity(row(state_pool_usage=0.98, kv_usage=0.29, running=48.0, queued=7.0), RADIX_OFF)
    assert "--max-running-requests` would not help" in judged.verdict
    assert "token budget" in judged.verdict


def test_radix_cache_on_random_prefixes_is_called_out() -> None:
    wasteful = server_capacity(row(state_pool_usage=0.99, cache_hit_rate=0.03), RADIX_ON)
    assert wasteful.radix_waste
    assert "--disable-radix-cache" in wasteful.headline
    paying = server_capacity(row(state_pool_usage=0.99, cache_hit_rate=0.68), RADIX_ON)
    assert not paying.radix_waste  # seed: a shared-prefix workload at 68% hits is where radix wins
    assert not server_capacity(row(cache_hit_rate=0.03), RADIX_OFF).radix_waste


def test_fleet_verdict_counts_servers_and_names_the_recipe() -> None:
    rows = [
        row(server="a", state_pool_usage=0.98, kv_usage=0.29, queued=7.0),
        row(server="b", state_pool_usage=0.97, kv_usage=0.31),
        row(server="c", recipe="r-radix", state_pool_usage=0.99, cache_hit_rate=0.03),
        row(server="d"),
        row(server="e", status="down"),
    ]
    flags = {"r-a": RADIX_OFF, "r-radix": RADIX_ON}
    judged = [server_capacity(r, flags[str(r["recipe"])]) for r in rows]
    frame = pd.DataFrame(rows).assign(
        binding=[j.binding for j in judged], radix_waste=[j.radix_waste for j in judged]
    )
    lines = fleet_verdict(frame)
    assert lines[0].startswith("**The state pool binds on 3 of 4 servers up**")
    assert "1 of them queue" in lines[0]
    assert any("`r-radix`" in line and "3% prefix hit rate" in line for line in lines)
    assert any(line.startswith("1 of 4 servers up have headroom") for line in lines)


def test_fleet_verdict_with_nothing_up() -> None:
    frame = pd.DataFrame([row(status="down")]).assign(binding=["unknown"], radix_waste=[False])
    assert fleet_verdict(frame) == ["No server is up: there is no current capacity to judge."]
