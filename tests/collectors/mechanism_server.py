"""A loopback SGLang server whose latency histograms follow the mechanism, for the SLO tests.

The test serves requests (``serve``) between scrapes: each has TTFT = queue + prefill and TPOT = step latency
÷ accept length at its context, with a little jitter, and is remembered (``served``) so a test can compute
the truth from the requests themselves. /metrics is rendered by prometheus_client with SGLang's families,
labels and default buckets: scheduler series per TP rank (rank 1 carries zeros), tokenizer histograms split
by ``is_streaming`` and counted per request (inter-token latency per token), both spellings negotiated on
Accept as SGLang's prometheus_client does.
"""

from __future__ import annotations

import bisect
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from collectors.slo import E2E_BOUNDARIES_S, TPOT_BOUNDARIES_S, TTFT_BOUNDARIES_S
from tests.collectors.bodies import MODEL
from tests.collectors.servers import Handler, LoopbackServer, send

QUEUE_BOUNDARIES_S = (0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 60, 120)
SCHEDULER = ("engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank")
TOKENIZER = ("engine_type", "model_name")


def step_latency_s(context_tokens: float) -> float:
    """One verify step grows with context (attention over the KV), as the seed measured."""
    return 0.022 * (1 + context_tokens / 20_000)


def accept_length(context_tokens: float) -> float:
    """The draft agrees less as context grows."""
    return 1.0 + 1.5 / (1 + context_tokens / 30_000)


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)  # per bucket, non-cumulative; the last is +Inf
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.total += value * weight

    def family(self, name: str, labels: Sequence[str], series: Sequence[tuple[list[str], float]]) -> Metric:
        """The histogram split over ``series`` (label values, share of every bucket)."""
        metric = HistogramMetricFamily(f"sglang:{name}", name, labels=list(labels))
        for values, share in series:
            running, buckets = 0.0, []
            for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
                running += count * share
                buckets.append((floatToGoString(bound), running))
            metric.add_metric(values, buckets, sum_value=self.total * share)
        return metric


@dataclass(frozen=True, slots=True)
class Served:
    ttft_s: float
    tpot_s: float
    e2e_s: float
    aborted: bool


class MechanismServer(LoopbackServer):
    """SGLang's /metrics and /server_info for a server the test drives request by request."""

    def __init__(self, *, seed: int = 0, info: dict[str, object] | None = None) -> None:
        self._rng = random.Random(seed)
        self._state = threading.Lock()
        self.served: list[Served] = []
        self.ttft = _Histogram(TTFT_BOUNDARIES_S)
        self.tpot = _Histogram(TPOT_BOUNDARIES_S)
        self.e2e = _Histogram(E2E_BOUNDARIES_S)
        self.itl = _Histogram(TPOT_BOUNDARIES_S)
        self.queue = _Histogram(QUEUE_BOUNDARIES_S)
        self.requests = self.aborted = self.generated = self.retracted = 0.0
        self.context_tokens = 2048.0
        self.running = 0.0
        self.info = info or {
            "version": "0.5.23",
            "speculative_algorithm": "DSPARK",
            "speculative_dspark_block_size": 3,
            "max_running_requests": 48,
        }
        super().__init__({"/metrics": self._metrics, "/server_info": self._server_info})

    def serve(
        self,
        count: int,
        *,
        context_tokens: float,
        queue_s: float = 0.05,
        prefill_s: float = 0.3,
        output_tokens: int = 256,
        aborted: int = 0,
        retracted: int = 0,
        running: float = 16.0,
    ) -> None:
        """``count`` requests finish (and ``aborted`` more are aborted) at this context and queue."""
        with self._state:
            self.context_tokens, self.running = context_tokens, running
            step, accept = step_latency_s(context_tokens), accept_length(context_tokens)
            for _ in range(count):
                queue = queue_s * self._rng.uniform(0.7, 1.3)
                ttft = queue + prefill_s * self._rng.uniform(0.8, 1.2)
                tpot = step / accept * self._rng.uniform(0.9, 1.1)
                e2e = ttft + tpot * (output_tokens - 1)
                self.queue.observe(queue)
                self.ttft.observe(ttft)
                self.tpot.observe(tpot)
                self.e2e.observe(e2e)
                self.itl.observe(tpot, output_tokens)  # SGLang counts inter-token latency per token
                self.generated += output_tokens
                self.served.append(Served(ttft, tpot, e2e, False))
            self.served.extend(Served(0.0, 0.0, 0.0, True) for _ in range(aborted))
            self.requests += count + aborted
            self.aborted += aborted
            self.retracted += retracted

    # -- HTTP ------------------------------------------------------------------------------------------------
    def _metrics(self, handler: Handler) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        encoder, content_type = choose_encoder(handler.headers.get("Accept") or "*/*")
        with self._state:
            body = encoder(registry)
        send(handler, body, content_type=content_type)

    def _server_info(self, handler: Handler) -> None:
        import json

        send(handler, json.dumps(self.info).encode(), content_type="application/json")

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's collector protocol: the families as SGLang exposes them."""
        rank = {r: ["unified", MODEL, "0", "0", r] for r in ("0", "1")}
        accept = accept_length(self.context_tokens)
        for name, value in (
            ("num_running_reqs", self.running),
            ("num_queue_reqs", 0.0),
            ("spec_accept_length", accept),
            ("decode_sum_seq_lens", self.context_tokens * self.running),
            ("max_total_num_tokens", 1_000_000.0),
        ):
            gauge = GaugeMetricFamily(f"sglang:{name}", name, labels=list(SCHEDULER))
            gauge.add_metric(rank["0"], value)
            gauge.add_metric(rank["1"], 0.0)
            yield gauge
        tokenizer = ["unified", MODEL]
        for name, value in (
            ("num_requests", self.requests),
            ("num_aborted_requests", self.aborted),
            ("generation_tokens", self.generated),
        ):
            counter = CounterMetricFamily(f"sglang:{name}", name, labels=list(TOKENIZER))
            counter.add_metric(tokenizer, value)
            yield counter
        retracted = CounterMetricFamily("sglang:num_retracted_requests", "retracted", labels=list(SCHEDULER))
        retracted.add_metric(rank["0"], self.retracted)
        retracted.add_metric(rank["1"], 0.0)
        yield retracted
        streams = [([*tokenizer, "true"], 0.75), ([*tokenizer, "false"], 0.25)]
        split = [*TOKENIZER, "is_streaming"]
        yield self.ttft.family("time_to_first_token_seconds", split, streams)
        yield self.tpot.family("request_time_per_output_token_seconds", split, streams)
        yield self.e2e.family("e2e_request_latency_seconds", split, streams)
        yield self.itl.family("inter_token_latency_seconds", TOKENIZER, [(tokenizer, 1.0)])
        yield self.queue.family("queue_time_seconds", SCHEDULER, [(rank["0"], 1.0), (rank["1"], 0.0)])
