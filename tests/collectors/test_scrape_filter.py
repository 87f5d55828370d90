"""The collector asks /metrics for the signal samples only (``name[]``) and copes with any answer to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from collectors.direct.metrics_reader import parse_exposition
from collectors.direct.scrape import METRICS_ACCEPT, Fetcher, scrape_metrics
from sim.fleet import SimFleet
from tests.collectors.conftest import scrape_settings, target
from tests.collectors.servers import FakeSGLang


@pytest.fixture
def fleet() -> Iterator[SimFleet]:
    started = SimFleet("demo", servers=1).start()
    yield started
    started.stop()


def _metrics_requests(fleet: SimFleet) -> int:
    return fleet.servers[0]._http_requests[("/metrics", "GET")]


@pytest.mark.parametrize("honoured", [True, False], ids=["registry-resolves-names", "sglang-0.5.23-empty"])
def test_signals_are_the_same_whatever_the_server_does_with_the_filter(
    fleet: SimFleet, honoured: bool
) -> None:
    server = fleet.servers[0]
    server.honours_name_filter = honoured
    fetcher = Fetcher(scrape_settings())
    spec = target("k3", fleet.targets[0].url)
    first, fetched = scrape_metrics(fetcher, spec)
    full = parse_exposition(server.render_body(METRICS_ACCEPT))
    assert first.values == full.values  # every signal sample, from the filtered or the whole body
    second, _ = scrape_metrics(fetcher, spec)
    assert second.values.keys() == full.values.keys()
    # Honoured: one small answer per scrape. SGLang's empty answer: asked again whole, then only whole.
    assert _metrics_requests(fleet) == (2 if honoured else 3)
    whole_lines = server.render_body(METRICS_ACCEPT).count(b"\n")  # ~560 lines
    assert (fetched.body.count(b"\n") < whole_lines / 4) == honoured


def test_a_server_that_ignores_the_filter_is_read_from_its_whole_body(
    sglang: Callable[..., FakeSGLang],
) -> None:
    server = sglang()
    exposition, _ = scrape_metrics(Fetcher(scrape_settings()), target("k3", server.url))
    assert exposition.values["sglang:spec_accept_length"] == 2.91
    assert server.hits("/metrics") == 1  # no second request: the first answer had the samples
