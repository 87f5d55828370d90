"""Scenario files: the shipped ones load; a bad file is refused naming the file, the key and what was
wrong."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from config import ConfigError
from sim.scenario import Action, Timeline, available_scenarios, expand_servers, load_scenario

REQUIRED = {
    "demo",
    "context_decay",
    "batch_noise",
    "state_saturation",
    "radix_random_vs_shared",
    "restart",
    "faults",
}


def test_every_required_scenario_ships_and_loads() -> None:
    assert set(available_scenarios()) >= REQUIRED
    for name in available_scenarios():
        scenario = load_scenario(name)
        servers = expand_servers(scenario)
        assert servers, name
        assert scenario.spec.description, name


def test_demo_has_the_fleet_the_issue_describes() -> None:
    servers = expand_servers(load_scenario("demo"))
    assert 6 <= len(servers) <= 12
    assert {s.deployment for s in servers} == {"east", "west"}
    # shipped, default window, plain, plain with the radix cache on
    assert len({tuple(sorted(s.recipe.items())) for s in servers}) == 4
    longctx = next(s for s in servers if s.name == "k3-east-longctx")
    first_ramp = [a.changes["isl"] for a in longctx.timeline.actions if "isl" in a.changes and a.at_s <= 2400]
    assert first_ramp == sorted(first_ramp)  # its prompts only grow: 1K → 64K
    assert (first_ramp[0], first_ramp[-1]) == (1024, 65536)
    restart = [a for s in servers for a in s.timeline.actions if a.kind == "restart"]
    assert len(restart) == 2
    assert any(a.kind == "fault" and a.fault == "down" for s in servers for a in s.timeline.actions)


def test_servers_override_cycles_the_templates() -> None:
    scenario = load_scenario("demo")
    servers = expand_servers(scenario, 20)
    assert [s.name for s in servers[:3]] == ["demo-000", "demo-001", "demo-002"]
    templates = [s.template for s in expand_servers(scenario)]
    assert [s.template for s in servers[: len(templates) + 1]] == [*templates, "k3-east-0"]
    # Phases aimed at a template reach every server built from it.
    ramps = [s.name for s in servers if any("isl" in a.changes for a in s.timeline.actions)]
    assert ramps == [f"demo-{i:03d}" for i in range(3, 20, len(templates))]


def test_restart_onto_a_recipe_replaces_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "switch.yaml"
    path.write_text(
        "recipes: {plain: {speculative_algorithm: null, mem_fraction_static: 0.93},"
        " shipped: {speculative_dspark_block_size: 3}}\n"
        "servers: [{name: a, recipe: plain}]\n"
        "phases: [{at_s: 10, restart: {recipe: shipped}},"
        " {at_s: 20, restart: {overrides: {mem_fraction_static: 0.9}}}, {at_s: 30, restart: true}]\n"
    )
    (server,) = expand_servers(load_scenario(path))
    restarts = [a.changes for a in server.timeline.actions]
    assert restarts == [
        {"speculative_dspark_block_size": 3},
        {"speculative_algorithm": None, "mem_fraction_static": 0.9},
        {"speculative_algorithm": None, "mem_fraction_static": 0.93},
    ]


def test_timeline_repeats_every_loop() -> None:
    timeline = Timeline((Action(10.0, "fault", fault="down"), Action(20.0, "fault")), loop_s=100.0)
    assert [a.at_s for a in timeline.between(0, 250)] == [10, 20, 110, 120, 210, 220]
    assert [a.at_s for a in timeline.between(110, 210)] == [120, 210]
    assert timeline.next_after(20) == 110
    assert timeline.next_after(-5) == 10
    assert Timeline().next_after(0) == math.inf
    once = Timeline((Action(10.0, "fault"),))
    assert once.next_after(10) == math.inf


# The invalid-input table: (scenario text, the key the error names, words the message must hold).
BAD_SCENARIOS = [
    ("servers: []", "servers", "at least 1"),
    ("servers: [{name: a}]\nwhatever: 1", "whatever", "Extra inputs"),
    ("servers: [{name: a, recipe: nope}]", "servers.0.recipe", "one of"),
    (
        "recipes: {r: {mem_fraction: 0.9}}\nservers: [{name: a, recipe: r}]",
        "mem_fraction",
        "mem_fraction_static",
    ),
    (
        "recipes: {r: {mem_fraction_static: 2}}\nservers: [{name: a, recipe: r}]",
        "mem_fraction_static",
        "[0.5",
    ),
    (
        "recipes: {r: {speculative_dspark_block_size: 3, speculative_num_draft_tokens: 8}}\n"
        "servers: [{name: a, recipe: r}]",
        "speculative_num_draft_tokens",
        "block size + 1",
    ),
    (
        "recipes: {r: {speculative_algorithm: MAGIC}}\nservers: [{name: a, recipe: r}]",
        "speculative_algorithm",
        "DSPARK",
    ),
    (
        "recipes: {r: {max_running_requests: 4000}}\nservers: [{name: a, recipe: r}]",
        "max_running_requests",
        "memory",
    ),
    ("servers: [{name: a, load: {concurrency: 4, rate_rps: 1}}]", "servers.0.load", "exactly one"),
    (
        "servers: [{name: a, workload: {isl: 100, shared_prefix_tokens: 200}}]",
        "servers.0.workload",
        "shared_prefix",
    ),
    ("servers: [{name: a, workload: missing}]", "servers.0.workload", "one of"),
    ("servers: [{name: a, workload: {isl: 300000}}]", "servers.0.workload", "context length"),
    (
        "servers: [{name: a}]\nphases: [{at_s: 0, ramp: {over_s: 60, isl: [1024, 400000]}}]",
        "phases.0",
        "context length",
    ),
    ("servers: [{name: a}, {name: a}]", "servers", "unique server names"),
    ("servers: [{name: a, port: 31000, count: 2}, {name: b, port: 31001}]", "servers", "unique server ports"),
    ("servers: [{name: a}]\nphases: [{at_s: 5, servers: [b], fault: down}]", "phases.0.servers", "b"),
    ("servers: [{name: a}]\nphases: [{at_s: 5, until_s: 5, fault: down}]", "phases.0", "after at_s"),
    ("servers: [{name: a}]\nphases: [{at_s: 5}]", "phases.0", "needs load"),
    ("servers: [{name: a}]\nphases: [{at_s: 5, fault: melt}]", "phases.0.fault", "down"),
    (
        "servers: [{name: a}]\nphases: [{at_s: 5, restart: {recipe: nope}}]",
        "phases.0.restart.recipe",
        "one of",
    ),
    ("- just a list", "", "mapping"),
    ("servers: [{name: a", "", "valid YAML"),
]


@pytest.mark.parametrize(("text", "key", "words"), BAD_SCENARIOS)
def test_bad_scenario_files_are_refused_in_words(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        expand_servers(load_scenario(path))
    message = str(caught.value)
    assert str(path) in message
    assert key in message
    assert words in message


def test_unknown_scenario_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="demo"):
        load_scenario("no_such_scenario")
