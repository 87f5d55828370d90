"""The engine's bookkeeping: determinism, the idle path, overload, retraction, restarts."""

from __future__ import annotations

import itertools

import pytest

from sim.fleet import SimFleet
from sim.recipes import resolve_server_args
from sim.server_engine import ServerEngine
from sim.workload import Load, Workload

SHIPPED = resolve_server_args({"speculative_dspark_block_size": 3})


def engine(
    load: Load, workload: Workload | None = None, *, seed: int = 0, args: dict | None = None
) -> ServerEngine:
    return ServerEngine(args or SHIPPED, workload or Workload(osl_jitter=0.3), load, seed=seed)


def test_windows_do_not_depend_on_when_anyone_looks() -> None:
    """Scraped every second or every 37 s, a server publishes the same windows (a scrape changes nothing)."""
    often, rarely = engine(Load(concurrency=24)), engine(Load(concurrency=24))
    for t in range(1, 1851):
        often.advance_to(float(t))
    for t in range(37, 1851, 37):
        rarely.advance_to(float(t))
    rarely.advance_to(1850.0)
    assert often.published.counts == rarely.published.counts
    assert often.published.gauges == rarely.published.gauges
    other = engine(Load(concurrency=24), seed=1)
    other.advance_to(1850.0)
    assert other.published.counts != often.published.counts


def test_idle_path_zeroes_throughput_and_keeps_spec_gauges() -> None:
    server = engine(Load(concurrency=16))
    server.advance_to(600.0)
    assert server.published.gauges.gen_throughput > 0
    server.set_load(Load(concurrency=0))  # the clients stop; what is running drains
    last_busy = server.published.gauges
    for t in range(601, 1201):
        server.advance_to(float(t))
        if server.published.gauges.decode_tokens:  # a window that decoded (its end may see nobody left)
            last_busy = server.published.gauges
    idle = server.published.gauges
    assert (idle.running, idle.queued, idle.gen_throughput) == (0, 0, 0.0)
    assert idle.spec_accept_length == last_busy.spec_accept_length > 1  # SGLang's idle path leaves them alone
    assert server.published.count("scheduler_idle_seconds") > 300


def test_open_loop_overload_builds_a_queue_and_first_tokens_wait() -> None:
    light, heavy = engine(Load(rate_rps=0.5)), engine(Load(rate_rps=6.0))
    for server in (light, heavy):
        server.advance_to(1800.0)
    assert light.published.gauges.queued < 3
    assert heavy.published.gauges.running == 48
    assert heavy.published.gauges.queued > 1000
    ttft = {s: s.published.histograms["ttft:true"] for s in (light, heavy)}
    assert ttft[heavy].sum / ttft[heavy].count > 50 * ttft[light].sum / ttft[light].count


def test_outgrowing_the_kv_pool_retracts_requests() -> None:
    """Long outputs grow past the KV budget the admission reserved: SGLang retracts, and counts it."""
    args = resolve_server_args({"speculative_dspark_block_size": 3, "mem_fraction_static": 0.7})
    long_outputs = Workload(isl=16384, osl=65536)
    server = engine(Load(concurrency=48), long_outputs, args=args)
    server.advance_to(4 * 3600.0)
    p = server.published
    assert p.count("retracted_requests") > 0
    assert p.count("retracted_output_tokens") > 0
    assert p.gauges.full_token_usage <= 1.0
    assert p.gauges.running < 48  # KV, not the state pool, limits this one


def test_restart_resets_counters_and_boots() -> None:
    fleet = SimFleet("restart")
    server = fleet.server("rs-periodic")
    server.advance(590.0)
    before = server.engine.published.count("generation_tokens:true")
    assert before > 0
    server.advance(600.0)  # the scenario restarts it at 600 s; it boots for 120 s
    assert server.restarts == 1
    assert server.booting_until == pytest.approx(720.0)
    assert server.engine.published.count("generation_tokens:true") == 0
    server.advance(900.0)
    assert 0 < server.engine.published.count("generation_tokens:true") < before
    assert [e.kind for e in server.events] == ["restart"]  # same recipe: no recipe_change
    other = fleet.server("rs-recipe")
    other.advance(601.0)
    assert [e.kind for e in other.events] == ["restart", "recipe_change"]
    assert other.args["speculative_dspark_block_size"] == 3


def test_phases_with_until_revert_and_ramps_step_geometrically() -> None:
    fleet = SimFleet("demo")
    burst = fleet.server("k3-east-1")
    burst.advance(1199.0)
    assert burst.load.concurrency == 32
    burst.advance(1201.0)
    assert burst.load.concurrency == 48
    burst.advance(1801.0)
    assert burst.load.concurrency == 32  # until_s restored the template's load
    outage = fleet.server("k3-east-2")
    outage.advance(3600.0 + 650.0)  # the hourly loop: down at minute 10 for two minutes
    assert (outage.fault, outage.listening) == ("down", False)
    longctx = fleet.server("k3-east-longctx")
    seen = []
    for t in range(0, 2401, 300):
        longctx.advance(float(t))
        seen.append(longctx.workload.isl)
    assert seen[0] == 1024
    assert seen[-1] == 65536
    ratios = [b / a for a, b in itertools.pairwise(seen)]
    assert max(ratios) / min(ratios) < 1.1  # equal factors per equal time: context grows by octaves
