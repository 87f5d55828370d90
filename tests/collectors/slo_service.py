"""A collecting service over loopback SGLang-like servers with SLOs configured: what the SLO tests of the
collector (counting) and of the analyses (the report on those counts) both drive."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alerts.service import Service
from collectors.slo import EventCounts, Sli
from config import parse_config
from tests.collectors.mechanism_server import MechanismServer

T0 = 1_800_000_000.0  # a fixed wall clock: cycles a minute apart, however fast the test runs

TTFT_1S = {"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99}
TPOT_40MS = {"name": "tpot-40ms", "sli": {"kind": "tpot", "threshold_s": 0.04}, "objective": 0.99}
AVAILABILITY = {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999}


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextmanager
def running_servers() -> Iterator[dict[str, MechanismServer]]:
    """Three servers in two deployments (east-a, east-b, west-a), stopped on exit."""
    made = {name: MechanismServer(seed=n) for n, name in enumerate(("east-a", "east-b", "west-a"))}
    try:
        yield made
    finally:
        for server in made.values():
            server.stop()


def make_service(tmp_path: Path, servers: dict[str, MechanismServer], clock: Clock, *slos: object) -> Service:
    raw = {
        "targets": [
            {"name": name, "url": server.url, "labels": {"deployment": name.split("-")[0]}}
            for name, server in servers.items()
        ],
        "store": {"path": str(tmp_path / "history.sqlite")},
        "exporter": {"listen": None},
        "slos": list(slos),
    }
    return Service(parse_config(raw, "test"), clock=clock, source="test")


def cycle(service: Service, clock: Clock, step_s: float = 60.0) -> None:
    clock.now += step_s
    service.run_cycle()


def truth(sli: Sli, served: list[object]) -> EventCounts:
    """The good and total events of ``sli`` among the requests the servers say they served."""
    requests = [r for r in served if isinstance(r, object)]
    if sli.kind == "availability":
        total = float(len(requests))
        return EventCounts(total - sum(1 for r in requests if r.aborted), total)  # type: ignore[attr-defined]
    finished = [r for r in requests if not r.aborted]  # type: ignore[attr-defined]
    value = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}[sli.kind]
    assert sli.threshold_s is not None
    good = sum(1 for r in finished if getattr(r, value) <= sli.threshold_s)
    return EventCounts(float(good), float(len(finished)))
