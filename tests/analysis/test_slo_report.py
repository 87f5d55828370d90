"""The SLO report on counts a real collector made from loopback servers: which half of the fraction burned
the budget (TPOT: step vs accept; TTFT: queue vs prefill), goodput bounds, the probes' own goodput."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.service import Service
from analysis.slo_attribution import attribute
from analysis.slo_report import goodput, probe_goodput, slo_status
from collectors.probe_result import ProbeResult
from collectors.slo import Scope, build_slos
from collectors.store.probes import ProbeStore
from config import parse_config
from tests.collectors.mechanism_server import MechanismServer, accept_length, step_latency_s
from tests.collectors.slo_service import (
    AVAILABILITY,
    T0,
    TPOT_40MS,
    TTFT_1S,
    Clock,
    cycle,
    make_service,
    running_servers,
)


@pytest.fixture
def servers() -> Iterator[dict[str, MechanismServer]]:
    with running_servers() as made:
        yield made


def _burn_after_baseline(
    tmp_path: Path,
    servers: dict[str, MechanismServer],
    slo: dict[str, object],
    *,
    healthy: dict[str, float],
    burning: dict[str, float],
) -> tuple[Service, Clock]:
    """Two hours of east-a healthy, then an hour of it burning; the other servers stay healthy."""
    clock = Clock()
    service = make_service(tmp_path, servers, clock, slo)
    cycle(service, clock)
    for minute in range(180):
        for name, server in servers.items():
            shape = burning if name == "east-a" and minute >= 120 else healthy
            server.serve(30, **shape)  # type: ignore[arg-type]
        cycle(service, clock)
    return service, clock


def test_a_tpot_burn_is_split_as_the_mechanism_implies(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    service, clock = _burn_after_baseline(
        tmp_path,
        servers,
        TPOT_40MS,
        healthy={"context_tokens": 2048.0},
        burning={"context_tokens": 58_000.0},
    )
    try:
        (slo,) = service.slos
        result = attribute(
            service.slo_ledger, slo, Scope((("deployment", "east"),)), clock.now, history=service.store
        )
        step = step_latency_s(58_000) / step_latency_s(2048)
        accept = accept_length(58_000) / accept_length(2048)
        implied = math.log(step) / (math.log(step) - math.log(accept))
        assert result.shares is not None, result.reason
        assert result.shares["step_latency"] == pytest.approx(implied, abs=0.05)
        assert result.shares["step_latency"] + result.shares["accept_length"] == pytest.approx(1.0)
        assert re.search(r"TPOT 10 → 5\d ms: 7\d% step latency \(context 2\.0K → 5\dK\)", result.sentence)
    finally:
        service.stop()


def test_a_ttft_burn_is_split_into_queueing_and_prefill(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    service, clock = _burn_after_baseline(
        tmp_path,
        servers,
        TTFT_1S,
        healthy={"context_tokens": 4096.0, "queue_s": 0.05, "prefill_s": 0.3},
        burning={"context_tokens": 4096.0, "queue_s": 1.2, "prefill_s": 0.5},
    )
    try:
        (slo,) = service.slos
        result = attribute(service.slo_ledger, slo, Scope(), clock.now, history=service.store)
        assert result.shares is not None, result.reason
        # Queue +1.15 s, prefill +0.2 s: the queue is 85 % of the rise.
        assert result.shares["queue"] == pytest.approx(1.15 / 1.35, abs=0.05)
        status = slo_status(service.slo_ledger, slo, Scope(), clock.now)
        assert status.worst_targets
        assert status.worst_targets[0][0] == "east-a"
        assert all(target == "east-a" for target, _ in status.worst_targets)
    finally:
        service.stop()


def test_no_baseline_means_no_attribution_and_says_why(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    clock = Clock()
    with make_service(tmp_path, servers, clock, TTFT_1S) as service:
        cycle(service, clock)
        for _ in range(20):
            servers["east-a"].serve(30, context_tokens=4096, queue_s=2.0)
            cycle(service, clock)
        result = attribute(service.slo_ledger, service.slos[0], Scope(), clock.now, history=service.store)
        assert result.shares is None
        assert "did not burn" in result.reason


def test_goodput_bounds_bracket_the_requests_that_met_every_slo(
    tmp_path: Path, servers: dict[str, MechanismServer]
) -> None:
    clock = Clock()
    with make_service(tmp_path, servers, clock, TTFT_1S, TPOT_40MS) as service:
        cycle(service, clock)
        for _minute in range(5):
            for n, server in enumerate(servers.values()):
                server.serve(60, context_tokens=50_000.0 if n == 2 else 2048.0, queue_s=0.8 if n else 0.05)
            cycle(service, clock)
        (whole, *_) = goodput(service.slo_ledger, service.slos, clock.now)
        served = [r for s in servers.values() for r in s.served]
        met = sum(1 for r in served if r.ttft_s <= 1.0 and r.tpot_s <= 0.04) / 300.0
        assert whole.scope == Scope()
        assert whole.lower_rps is not None
        assert whole.upper_rps is not None
        assert whole.lower_rps <= met + 1e-9 <= whole.upper_rps + 2e-9
        assert whole.lower_rps < whole.upper_rps  # the two SLOs failed different requests


def test_probe_goodput_counts_the_probe_requests_that_met_every_latency_slo(tmp_path: Path) -> None:
    slos = build_slos(parse_config({"slos": [TTFT_1S, TPOT_40MS, AVAILABILITY]}, "t"))
    store = ProbeStore(str(tmp_path / "history.sqlite"))
    store.append(
        [
            ProbeResult(T0, "east-a", "r-1", 1024, ttft_s=0.3, tpot_s=0.012),  # met both
            ProbeResult(T0, "east-a", "r-1", 65536, ttft_s=0.9, tpot_s=0.055),  # TPOT missed at 64K
            ProbeResult(T0, "west-a", "r-1", 1024, ttft_s=1.4, tpot_s=0.011),  # TTFT missed
            ProbeResult(T0, "west-a", "r-1", 8192, error="skipped: 3 requests queued"),  # not sent
        ]
    )
    frame = store.read(T0 - 10, T0 + 10)
    store.close()
    found = {
        p.scope.key: (p.met, p.sent) for p in probe_goodput(slos, frame, {"east-a": "east", "west-a": "west"})
    }
    assert found == {"": (1, 3), "deployment=east": (1, 2), "deployment=west": (0, 1)}
