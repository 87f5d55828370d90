"""Scrape /metrics: what to ask an SGLang server for (only the signals' samples, plain text), and reading the
answer. The request itself goes through the HTTP edge (``collectors.http.targets``): its deadline, size cap,
bearer token, TLS and error words are the same for every request to a target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlencode

from collectors.direct.metrics_reader import SIGNAL_SAMPLES, Exposition, SamplePlan, parse_exposition
from collectors.errors import BadExposition
from collectors.http.loop import HTTP_LOOP, HttpLoop
from collectors.http.targets import Fetched, TargetClient
from config import ScrapeSettings, Target

# Plain text only: prometheus_client (which serves SGLang's /metrics) picks OpenMetrics whenever the header
# merely mentions it, whatever the q-values, and ≥ 0.23 then renames sglang:* to sglang_*. The parser reads
# both anyway.
METRICS_ACCEPT = "text/plain;version=0.0.4,*/*;q=0.1"


# prometheus_client (SGLang's /metrics) honours name[]: only these samples come back (histograms as _sum and
# _count, no buckets), ~25 lines instead of ~560. A server that ignores the filter sends the whole body, which
# parses the same. Both spellings are asked for (a newer prometheus_client writes sglang_ sample names), so
# either kind of server answers with its samples.
def metrics_path(names: Iterable[str] = ()) -> str:
    """/metrics filtered to the signals' samples plus ``names`` (kept sample keys: a bucket key asks for its
    histogram's ``_bucket`` lines), both spellings."""
    wanted = dict.fromkeys([*SIGNAL_SAMPLES, *(name.partition("{")[0] for name in names)])
    return "/metrics?" + urlencode(
        [
            ("name[]", spelling)
            for name in wanted
            for spelling in (name, name.replace("sglang:", "sglang_", 1))
        ]
    )


METRICS_PATH = metrics_path()


class Fetcher(TargetClient):
    """The edge's client for targets, plus what scraping /metrics remembers between cycles."""

    def __init__(
        self,
        settings: ScrapeSettings,
        *,
        loop: HttpLoop = HTTP_LOOP,
        monotonic: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(settings, loop=loop, monotonic=monotonic, environ=environ)
        self.max_samples = settings.max_samples
        self.unfiltered: set[str] = set()  # target URLs whose name[]-filtered /metrics held no signal


def scrape_metrics(
    fetcher: Fetcher, target: Target, *, deadline: float | None = None
) -> tuple[Exposition, Fetched]:
    """``scrape_metrics_async`` from a thread other than the HTTP loop's."""
    return fetcher.loop.run(scrape_metrics_async(fetcher, target, deadline=deadline))


async def scrape_metrics_async(
    fetcher: Fetcher,
    target: Target,
    *,
    deadline: float | None = None,
    plan: SamplePlan | None = None,
    path: str = METRICS_PATH,
) -> tuple[Exposition, Fetched]:
    """GET /metrics (only the samples the signals need) and read them; ``BadExposition`` names the target.

    A filtered answer without a single sglang sample — SGLang 0.5.23's own answer: its MultiProcessCollector
    has no names, so prometheus_client's restricted registry sends nothing — is fetched again whole, and that
    target is asked for the whole body from then on (one wasted request per target per collector run).
    """
    filtered = target.url not in fetcher.unfiltered
    path = path if filtered else "/metrics"
    fetched = await fetcher.fetch(target, path, deadline=deadline, accept=METRICS_ACCEPT)
    if filtered and b"sglang" not in fetched.body:  # SGLang 0.5.23 answers name[] with an empty body
        fetcher.unfiltered.add(target.url)
        fetched = await fetcher.fetch(target, "/metrics", deadline=deadline, accept=METRICS_ACCEPT)
    try:
        exposition = parse_exposition(
            fetched.body, content_type=fetched.content_type, max_samples=fetcher.max_samples, plan=plan
        )
    except BadExposition as exc:
        raise BadExposition(f"{target.name}: {fetched.url} is not Prometheus text: {exc}") from None
    return exposition, fetched
