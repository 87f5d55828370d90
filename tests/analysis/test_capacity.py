"""The capacity verdict: which pool binds, and the advice the seed supports (and the advice it refutes), at
the alert rules' own levels."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from alerts.rules import capacity_thresholds
from analysis.capacity import capacity_frame, fleet_verdict, server_capacity

RADIX_ON = {"disable_radix_cache": False}
RADIX_OFF = {"disable_radix_cache": True}
RULES = capacity_thresholds()  # the rules' defaults: what an unconfigured page and alert judge by
NEAR = round((RULES.state_pool_near_at + RULES.state_pool_binds_at) / 2, 2)  # between recovery and firing


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
        ({"state_pool_usage": 0.40, "kv_usage": 0.96}, "KV cache", "96% KV"),
        ({"running": 48.0, "queued": 5.0}, "request cap", "48/48"),
        (
            {"state_pool_usage": NEAR, "queued": 2.0},
            "near",
            f"state pool {NEAR:.0%} (binds at {RULES.state_pool_binds_at:.0%}), 2 queued",
        ),
        ({"queued": 3.0}, "admission", "3 waiting"),
        ({}, "none", "Headroom"),
        ({"status": "down"}, "unknown", "No current data"),
    ],
)
def test_what_binds(values: dict[str, object], binding: str, says: str) -> None:
    judged = server_capacity(row(**values), RADIX_OFF, RULES)
    assert judged.binding == binding
    assert says in judged.headline
    assert judged.headline in judged.verdict


def test_a_pool_binds_where_its_alert_fires_and_is_near_where_a_firing_one_recovers() -> None:
    """The levels are the rules' settings: the same usage binds, is near or has headroom as they move."""
    at = RULES.state_pool_binds_at
    assert server_capacity(row(state_pool_usage=at), RADIX_OFF, RULES).binding == "state pool"
    below = (at + RULES.state_pool_near_at) / 2
    assert server_capacity(row(state_pool_usage=below), RADIX_OFF, RULES).binding == "near"
    assert server_capacity(
        row(state_pool_usage=RULES.state_pool_near_at - 0.01), RADIX_OFF, RULES
    ).binding == ("none")
    stricter = dataclasses.replace(RULES, state_pool_binds_at=0.99, state_pool_near_at=0.97)
    assert server_capacity(row(state_pool_usage=at), RADIX_OFF, stricter).binding == "none"
    looser = dataclasses.replace(RULES, kv_binds_at=0.5, kv_near_at=0.4)
    assert server_capacity(row(kv_usage=0.55), RADIX_OFF, looser).binding == "KV cache"
    assert server_capacity(row(kv_usage=0.45), RADIX_OFF, looser).headline.startswith("Near binding: KV 45%")


def test_state_pool_verdict_refutes_raising_the_cap() -> None:
    judged = server_capacity(
        row(state_pool_usage=0.98, kv_usage=0.29, running=48.0, queued=7.0), RADIX_OFF, RULES
    )
    assert "--max-running-requests` would not help" in judged.verdict
    assert "token budget" in judged.verdict


def test_radix_cache_on_random_prefixes_is_called_out() -> None:
    wasteful = server_capacity(row(state_pool_usage=0.99, cache_hit_rate=0.03), RADIX_ON, RULES)
    assert wasteful.radix_waste
    assert "--disable-radix-cache" in wasteful.headline
    paying = server_capacity(row(state_pool_usage=0.99, cache_hit_rate=0.68), RADIX_ON, RULES)
    assert not paying.radix_waste  # seed: a shared-prefix workload at 68% hits is where radix wins
    assert not server_capacity(row(cache_hit_rate=0.03), RADIX_OFF, RULES).radix_waste


def test_radix_waste_is_the_rules_condition() -> None:
    """RadixCacheWaste fires below max_hit_rate with the state pool at state_pool_at: so does the page."""
    hit_below = RULES.radix_max_hit_rate / 2
    pressed = server_capacity(
        row(state_pool_usage=RULES.radix_state_pool_at, cache_hit_rate=hit_below), RADIX_ON, RULES
    )
    assert pressed.radix_waste
    idle_pool = server_capacity(
        row(state_pool_usage=RULES.radix_state_pool_at - 0.1, cache_hit_rate=hit_below), RADIX_ON, RULES
    )
    assert not idle_pool.radix_waste  # no state-pool pressure: the rule stays quiet, and so does the page
    at_the_limit = server_capacity(
        row(state_pool_usage=0.99, cache_hit_rate=RULES.radix_max_hit_rate), RADIX_ON, RULES
    )
    assert not at_the_limit.radix_waste


def test_fleet_verdict_counts_servers_and_names_the_recipe() -> None:
    rows = [
        row(server="a", state_pool_usage=0.98, kv_usage=0.29, queued=7.0),
        row(server="b", state_pool_usage=0.97, kv_usage=0.31),
        row(server="c", recipe="r-radix", state_pool_usage=0.99, cache_hit_rate=0.03),
        row(server="d"),
        row(server="e", status="down"),
        row(server="f", kv_usage=(RULES.kv_near_at + RULES.kv_binds_at) / 2),
    ]
    flags = {"r-a": RADIX_OFF, "r-radix": RADIX_ON}
    lines = fleet_verdict(capacity_frame(pd.DataFrame(rows), flags, RULES), RULES)
    assert lines[0].startswith("**The state pool binds on 3 of 5 servers up**")
    assert "1 of them queue" in lines[0]
    near = f"On 1 of 5 servers up a pool is near binding (state pool at {RULES.state_pool_near_at:.0%}+"
    assert any(line.startswith(near) for line in lines)
    assert any("`r-radix`" in line and "3% prefix hit rate" in line for line in lines)
    assert any(line.startswith("1 of 5 servers up have headroom") for line in lines)


def test_fleet_verdict_with_nothing_up() -> None:
    frame = pd.DataFrame([row(status="down")]).assign(binding=["unknown"], radix_waste=[False])
    assert fleet_verdict(frame, RULES) == ["No server is up: there is no current capacity to judge."]
