"""SLOs end to end on real loopback servers: the buckets read, the events counted per scope, attainment and
budget against the requests the servers served, the attribution against the mechanism, restarts."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from alerts.slo_cli import run as run_slo_cli
from analysis.slo_report import slo_status
from collectors.direct.metrics_reader import parse_exposition, sample_plan
from collectors.direct.slo_backfill import SloBackfill
from collectors.model import TargetSnapshot
from collectors.slo import EventCounts, Scope, Sli, build_slos, event_counts, kept_samples
from collectors.slo_ledger import SloLedger
from collectors.store.slo_counts import SloCountStore
from config import ConfigError, parse_config
from config.settings import DEFAULT_BOUNDARIES_S
from tests.collectors.mechanism_server import MechanismServer
from tests.collectors.slo_service import (
    AVAILABILITY,
    T0,
    TPOT_40MS,
    TTFT_1S,
    Clock,
    cycle,
    make_service,
    running_servers,
    truth,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"


# -- reading the buckets -------------------------------------------------------------------------------------
def _oracle_bucket(body: str, family: str, le: float) -> float:
    """The bucket summed over every series but other TP ranks, by prometheus_client's own parser."""
    total = 0.0
    for metric in text_string_to_metric_families(body):
        for sample in metric.samples:
            bucket = sample.name == f"sglang:{family}_bucket" and float(sample.labels["le"]) == le
            if bucket and sample.labels.get("tp_rank", "0") == "0":
                total += sample.value
    return total


@pytest.mark.parametrize(
    ("kind", "threshold_s", "family"),
    [
        ("ttft", 1.0, "time_to_first_token_seconds"),
        ("ttft", 0.4, "time_to_first_token_seconds"),
        ("tpot", 0.04, "request_time_per_output_token_seconds"),
        ("e2e", 10.0, "e2e_request_latency_seconds"),
    ],
)
def test_the_threshold_bucket_is_read_as_prometheus_client_reads_it(
    kind: str, threshold_s: float, family: str
) -> None:
    body = GOLDEN.read_text()
    sli = Sli(kind, threshold_s)
    exposition = parse_exposition(body, plan=sample_plan(sli.samples()))
    kept = exposition.values[f"sglang:{family}_bucket{{le={threshold_s:g}}}"]
    assert kept == _oracle_bucket(body, family, threshold_s)
    assert 0 < kept <= exposition.values[f"sglang:{family}_count"]


def test_a_threshold_between_boundaries_is_refused_at_load_naming_the_nearest() -> None:
    raw = {"slos": [{**TTFT_1S, "sli": {"kind": "ttft", "threshold_s": 0.9}}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "f.yaml")
    text = str(caught.value)
    assert text.startswith("f.yaml: slos.0: ")
    assert "sli.threshold_s 0.9 is not a bucket boundary of SGLang's default ttft buckets" in text
    assert "(nearest: 0.8 and 1)" in text


@pytest.mark.parametrize(
    ("kind", "family"),
    [
        ("ttft", "time_to_first_token_seconds"),
        ("tpot", "request_time_per_output_token_seconds"),
        ("e2e", "e2e_request_latency_seconds"),
    ],
)
def test_the_default_boundaries_are_the_golden_bodys(kind: str, family: str) -> None:
    found = {
        float(sample.labels["le"])
        for metric in text_string_to_metric_families(GOLDEN.read_text())
        for sample in metric.samples
        if sample.name == f"sglang:{family}_bucket"
    }
    assert sorted(found - {math.inf}) == sorted(DEFAULT_BOUNDARIES_S[kind])


def test_declared_server_buckets_make_their_boundaries_valid() -> None:
    raw = {**TTFT_1S, "sli": {"kind": "ttft", "threshold_s": 0.9}, "buckets": [0.5, 0.9, 1.5]}
    (slo,) = build_slos(parse_config({"slos": [raw]}, "f.yaml"))
    assert slo.sli.threshold_s == 0.9
    assert slo.sli.key == "ttft_le_0.9"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"slos": [TTFT_1S, TTFT_1S]}, "SLO names must be unique; repeated: ttft-1s"),
        ({"slos": [{**TTFT_1S, "sli": {"kind": "ttft"}}]}, "needs threshold_s"),
        ({"slos": [{**AVAILABILITY, "sli": {"kind": "availability", "threshold_s": 1}}]}, "no threshold_s"),
        ({"slos": [{**TTFT_1S, "objective": 1.0}]}, "objective"),
        ({"slos": [{**TTFT_1S, "window": "fortnight"}]}, "a duration such as 28d"),
    ],
)
def test_bad_slo_settings_name_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw, "f.yaml")


def test_the_workbook_conditions_scale_to_the_period() -> None:
    (slo,) = build_slos(parse_config({"slos": [{**TTFT_1S, "window": "28d"}]}, "f.yaml"))
    assert [(w.long_s, w.short_s, round(w.factor, 2)) for w in slo.page] == [
        (3600.0, 300.0, 13.44),
        (21600.0, 1800.0, 5.6),
    ]
    assert [(w.long_s, w.short_s, round(w.factor, 3)) for w in slo.ticket] == [(259200.0, 21600.0, 0.933)]
    (thirty,) = build_slos(parse_config({"slos": [{**TTFT_1S, "window": "30d"}]}, "f.yaml"))
    assert [w.factor for w in thirty.page] == [14.4, 6.0]


def test_counts_across_a_restart_are_unknown_not_negative() -> None:
    sli = Sli("ttft", 1.0)
    bucket, count = (
        "sglang:time_to_first_token_seconds_bucket{le=1}",
        "sglang:time_to_first_token_seconds_count",
    )
    before = {bucket: 90.0, count: 100.0}
    assert event_counts(sli, {bucket: 95.0, count: 110.0}, before) == EventCounts(5.0, 10.0)
    assert event_counts(sli, {bucket: 3.0, count: 4.0}, before) is None  # restarted: counters fell
    assert event_counts(sli, {bucket: 95.0, count: 110.0}, None) is None  # the first scrape


# -- end to end on loopback servers --------------------------------------------------------------------------
@pytest.fixture
def servers() -> Iterator[dict[str, MechanismServer]]:
    with running_servers() as made:
        yield made


def test_attainment_and_budget_match_the_requests_the_servers_served(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    clock = Clock()
    with make_service(tmp_path, servers, clock, TTFT_1S, TPOT_40MS, AVAILABILITY) as service:
        cycle(service, clock)  # the first scrape: a baseline, nothing counted
        for minute in range(30):
            for n, server in enumerate(servers.values()):
                # east-b's queue grows past the TTFT threshold half way; west-a runs long contexts.
                queue = 0.9 if n == 1 and minute >= 15 else 0.05
                context = 60_000.0 if n == 2 else 4096.0
                server.serve(40 + 5 * n, context_tokens=context, queue_s=queue, aborted=minute % 7 == n)
            cycle(service, clock)
        ledger, now = service.slo_ledger, clock.now
        for slo in service.slos:
            for scope, members in (
                (Scope(), list(servers.values())),
                (Scope((("deployment", "east"),)), [servers["east-a"], servers["east-b"]]),
                (Scope((("deployment", "west"),)), [servers["west-a"]]),
            ):
                served = [r for s in members for r in s.served]
                expected = truth(slo.sli, served)
                status = slo_status(ledger, slo, scope, now)
                assert status.period.total == pytest.approx(expected.total, rel=1e-9), (slo.name, scope)
                assert status.attainment == pytest.approx(expected.good / expected.total, abs=0.01)
                assert status.attainment == pytest.approx(expected.good / expected.total, rel=1e-9)
                expected_left = 1 - (expected.bad / expected.total) / (1 - slo.objective)
                assert status.budget_remaining == pytest.approx(expected_left, rel=1e-6)
        # The same numbers from the store a viewer (or the CLI) reads, not the collector's memory.
        stored = SloCountStore(str(tmp_path / "history.sqlite"), create=False)
        for slo in service.slos:
            assert (
                slo_status(stored, slo, Scope(), now).period == slo_status(ledger, slo, Scope(), now).period
            )
        stored.close()


def test_a_restart_keeps_the_budget_spent_and_the_windows_full(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    clock = Clock()
    service = make_service(tmp_path, servers, clock, TTFT_1S)
    cycle(service, clock)
    for _ in range(10):
        servers["east-b"].serve(50, context_tokens=4096, queue_s=1.5)
        cycle(service, clock)
    (slo,) = service.slos
    before = slo_status(service.slo_ledger, slo, Scope(), clock.now)
    service.stop()
    with make_service(tmp_path, servers, clock, TTFT_1S) as again:
        after = slo_status(again.slo_ledger, slo, Scope(), clock.now)
        assert after.period == before.period
        assert after.period.total == 500
        assert after.burn_rates == before.burn_rates
        assert after.burn_rates["5m"] == pytest.approx(100.0)


def test_a_server_without_the_threshold_bucket_is_unknown_and_says_why(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    clock = Clock()
    slo = {**TTFT_1S, "sli": {"kind": "ttft", "threshold_s": 0.9}, "buckets": [0.9]}
    with make_service(tmp_path, servers, clock, slo) as service:
        cycle(service, clock)
        servers["east-a"].serve(10, context_tokens=2048)
        cycle(service, clock)
        snapshot = next(s for s in service.collector.latest() if s.target == "east-a")
        assert snapshot.slo_events == ()
        assert snapshot.error is not None
        assert "no bucket le=0.9" in snapshot.error
        assert slo_status(service.slo_ledger, service.slos[0], Scope(), clock.now).attainment is None


def test_the_cli_prints_one_json_line_per_slo_and_scope_then_goodput(
    tmp_path: Path, servers: dict[str, MechanismServer], capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    service = make_service(tmp_path, servers, clock, TTFT_1S, AVAILABILITY)
    config = service.config
    cycle(service, clock)
    for _ in range(6):
        servers["east-a"].serve(40, context_tokens=2048, queue_s=1.5, aborted=1)
        servers["west-a"].serve(40, context_tokens=2048)
        cycle(service, clock)
    service.stop()
    assert run_slo_cli(config, json_lines=True, now=clock.now) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    statuses = [line for line in lines if "slo" in line]
    assert {(line["slo"], json.dumps(line["scope"])) for line in statuses} == {
        (name, scope)
        for name in ("ttft-1s", "availability")
        for scope in ("{}", '{"deployment": "east"}', '{"deployment": "west"}')
    }
    east = next(
        line for line in statuses if line["slo"] == "ttft-1s" and line["scope"] == {"deployment": "east"}
    )
    assert east["total"] == 240
    assert east["good"] == 0
    assert east["attainment"] == 0.0
    assert east["burn_rate"]["5m"] == pytest.approx(100.0)
    assert east["burn_rate"]["3d"] == pytest.approx(100.0)
    assert set(east["burn_rate"]) == {"5m", "30m", "1h", "6h", "1d", "3d"}
    assert east["error_budget_remaining"] == pytest.approx(-99.0)
    assert east["attribution"] is None
    assert east["attribution_reason"]
    west = next(
        line for line in statuses if line["slo"] == "ttft-1s" and line["scope"] == {"deployment": "west"}
    )
    assert west["attainment"] == 1.0
    assert west["burn_rate"]["1h"] == 0.0
    goodputs = [line for line in lines if "goodput_rps" in line]
    assert {json.dumps(g["scope"]) for g in goodputs} == {
        "{}",
        '{"deployment": "east"}',
        '{"deployment": "west"}',
    }


def test_a_ledger_without_a_store_counts_in_memory_only() -> None:
    (slo,) = build_slos(parse_config({"slos": [TTFT_1S]}, "t"))
    ledger = SloLedger([slo], None, clock=Clock())
    assert ledger.counts(slo.name, "", T0 - 60, T0 + 60) == EventCounts()
    assert kept_samples([slo]) == slo.sli.samples()


def _body(order: str, le_one: str) -> str:
    """A TTFT histogram of two series in SGLang's naming, its lines in ``order``."""
    series = {"true": (7.0, 10.0), "false": (2.0, 5.0)}
    buckets = {
        s: [
            f'sglang:time_to_first_token_seconds_bucket{{is_streaming="{s}",le="{le}"}} {value}'
            for le, value in (("0.8", good - 1), (le_one, good), ("+Inf", total))
        ]
        for s, (good, total) in series.items()
    }
    counts = {
        s: f'sglang:time_to_first_token_seconds_count{{is_streaming="{s}"}} {t}'
        for s, (_, t) in series.items()
    }
    if order == "per series":  # prometheus_client: each series' buckets right before its _count
        lines = [*buckets["true"], counts["true"], *buckets["false"], counts["false"]]
    else:  # every bucket first, then the counts: the search falls back to the whole stretch
        lines = [*buckets["true"], *buckets["false"], counts["true"], counts["false"]]
    return "\n".join(["sglang:num_running_reqs 3", *lines, ""])


@pytest.mark.parametrize("order", ["per series", "buckets first"])
@pytest.mark.parametrize("le_one", ["1.0", "1", "1e+00"])
def test_the_wanted_bucket_is_summed_over_series_in_any_line_order_and_spelling(
    order: str, le_one: str
) -> None:
    sli = Sli("ttft", 1.0)
    values = parse_exposition(_body(order, le_one), plan=sample_plan(sli.samples())).values
    assert values["sglang:time_to_first_token_seconds_bucket{le=1}"] == 9.0
    assert values["sglang:time_to_first_token_seconds_count"] == 15.0


def test_a_backfill_counts_bodies_as_the_live_collector_does(tmp_path: Path) -> None:
    (slo,) = build_slos(parse_config({"slos": [TTFT_1S]}, "t"))
    server = MechanismServer(seed=3)
    store = SloCountStore(str(tmp_path / "history.sqlite"))
    try:
        backfill = SloBackfill([slo], store)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(server)
        first = len(server.served)
        for n in range(12):  # an hour, a body every 5 minutes; the queue builds up half way
            backfill.body("east-a", {"deployment": "east"}, T0 + 300 * n, generate_latest(registry))
            if n == 0:
                first = len(server.served)
            server.serve(40, context_tokens=2048, queue_s=1.2 if n >= 6 else 0.05)
        backfill.flush()
        served = server.served[first : first + 11 * 40]  # the last serve() came after the last body
        expected = truth(slo.sli, list(served))
        for scope in (Scope(), Scope((("deployment", "east"),))):
            assert store.counts(slo.name, scope.key, T0 - 1, T0 + 3600) == expected
        assert store.by_target(slo.name, T0 - 1, T0 + 3600) == {"east-a": expected}
    finally:
        store.close()
        server.stop()


def test_a_reload_takes_in_a_past_written_beside_the_live_ledger_without_counting_twice(
    tmp_path: Path,
) -> None:
    (slo,) = build_slos(parse_config({"slos": [TTFT_1S]}, "t"))
    clock = Clock(T0 + 7200)
    store = SloCountStore(str(tmp_path / "history.sqlite"))
    live = SloLedger([slo], store, clock=clock)
    live.observe([TargetSnapshot("a", T0 + 7200, True, slo_events=(("ttft_le_1", 8.0, 10.0),))])
    past = SloLedger([slo], store, clock=clock, keep_sums=False)  # the demo's day, written meanwhile
    past.observe([TargetSnapshot("a", T0 + 60, True, slo_events=(("ttft_le_1", 1.0, 5.0),))])
    assert live.counts(slo.name, "", T0, T0 + 7261) == EventCounts(8.0, 10.0)  # not seen yet
    live.reload()
    assert live.counts(slo.name, "", T0, T0 + 7261) == EventCounts(9.0, 15.0)
    assert store.counts(slo.name, "", T0, T0 + 7261) == EventCounts(9.0, 15.0)
    store.close()
