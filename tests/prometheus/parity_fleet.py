"""The parity fleet: loopback SGLang servers both sources read, served by a process of its own, and the
engines that scrape it.

Each server is a ``FakeSGLang`` (real HTTP, SGLang 0.5.23's families, two TP ranks with rank 1 reporting
zeros, ``sglang:`` or ``sglang_`` as the scraper's Accept negotiates) whose gauges hold still and whose
counters move as SGLang's do: the tokenizer's per-request counters (tokens, verify calls, TTFT and queue
histograms) only when a request completes, ``REQUESTS_PER_S`` a second, and the scheduler's per-batch counters
(``realtime_tokens``, inter-token latency per streamed chunk, retractions) smoothly. So the two sources can
differ only where the catalogue says they may (``PROMQL_APPROXIMATION``) and where the parity table says why.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import Target
from tests.collectors.bodies import SERVER_INFO, Load, render
from tests.collectors.servers import FakeSGLang, Handler, LoopbackServer, send
from tests.loopback import reaped, start_module
from tests.prometheus.conftest import GPU_JOIN, netloc, start_engine
from tests.prometheus.engines import Engine

JOB = "parity"
GPU_JOB = "dcgm"
REQUESTS_PER_S = 20.0
# Added to a counter field of ``Load`` by every completed request (SGLang counts these at completion).
PER_REQUEST: dict[str, float] = {
    "generation_tokens": 30.0,
    "verify_calls": 12.0,
    "prompt_tokens": 100.0,
    "cached_tokens": 25.0,
    "ttft_sum": 0.3,
    "ttft_count": 1.0,
    "queue_sum": 0.1,
    "queue_count": 1.0,
}
# Per-second growth of the counters SGLang moves per batch or per streamed chunk (a server's own decode rate
# and inter-token latency: ``ServerSpec.decode_tok_s``, ``itl_s``).
DECODE_TOK_S = 640.0
ITL_S = 0.01
SMOOTH: dict[str, float] = {
    "realtime_decode": DECODE_TOK_S,
    "itl_sum": DECODE_TOK_S * ITL_S,
    "itl_count": DECODE_TOK_S,
    "retracted": 2.0,
}
# What each counter field gains per second, either way.
RATES: dict[str, float] = {**{k: v * REQUESTS_PER_S for k, v in PER_REQUEST.items()}, **SMOOTH}


class CompletingSGLang(FakeSGLang):
    """``FakeSGLang`` whose counters move with wall time as above (``moving=False``: frozen, an idle server);
    ``metrics_status`` other than 200 makes /metrics fail (a server that is down to every scraper)."""

    def __init__(
        self,
        load: Load,
        info: dict[str, Any],
        *,
        moving: bool = True,
        decode_tok_s: float = DECODE_TOK_S,
        itl_s: float = ITL_S,
    ) -> None:
        self.t0 = time.time()
        self.moving = moving
        self.smooth = dict(
            SMOOTH, realtime_decode=decode_tok_s, itl_count=decode_tok_s, itl_sum=decode_tok_s * itl_s
        )
        super().__init__(load, info)

    def counters_at(self, now: float) -> Load:
        elapsed_s = now - self.t0 if self.moving else 0.0
        completed = math.floor(elapsed_s * REQUESTS_PER_S)
        deltas = {name: per * completed for name, per in PER_REQUEST.items()}
        deltas.update({name: rate * elapsed_s for name, rate in self.smooth.items()})
        return self.load.advanced(**{k: v for k, v in deltas.items() if getattr(self.load, k) is not None})

    def _metrics(self, handler: Handler) -> None:
        if self.metrics_status != 200:
            send(handler, b"unavailable\n", status=self.metrics_status, content_type="text/plain")
            return
        body, content_type = render(self.counters_at(time.time()), handler.headers.get("Accept") or "*/*")
        send(handler, body, content_type=content_type)


GPU_WATTS = 700.0  # each GPU's steady draw: its energy counter grows by 700 J (700,000 mJ) a second
GPU_HOUR_USD = 2.5


class LinearDCGM(LoopbackServer):
    """A node's dcgm-exporter under one server: 8 GPUs (the servers' tp_size) drawing GPU_WATTS each, their
    energy counters growing linearly with wall time, labelled with the server's name as ``Hostname``."""

    def __init__(self, hostname: str) -> None:
        self.t0 = time.time()
        self.hostname = hostname
        super().__init__({"/metrics": self._metrics})

    def _metrics(self, handler: Handler) -> None:
        energy_mj = 5e11 + GPU_WATTS * 1000.0 * (time.time() - self.t0)
        lines = []
        for gpu in range(int(SERVER_INFO["tp_size"])):
            labels = f'gpu="{gpu}",UUID="GPU-{self.hostname}-{gpu}",Hostname="{self.hostname}"'
            lines += [
                f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {GPU_WATTS:f}",
                f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {energy_mj:.0f}",
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 87",
            ]
        send(handler, ("\n".join(lines) + "\n").encode())


@dataclass(frozen=True)
class Fleet:
    """The running fleet: each server's URL and its node's DCGM exporter's, by server name."""

    servers: dict[str, str]
    gpus: dict[str, str]


@dataclass(frozen=True)
class ServerSpec:
    load: Load
    info: dict[str, Any] = field(default_factory=lambda: dict(SERVER_INFO))
    moving: bool = True
    metrics_status: int = 200
    decode_tok_s: float = DECODE_TOK_S
    itl_s: float = ITL_S


PLAIN_INFO = dict(SERVER_INFO, speculative_algorithm=None, max_running_requests=570)
NO_MAMBA = {
    "mamba_usage": 0.0,
    "mamba_used_tokens": 0.0,
    "mamba_available_tokens": 0.0,
    "mamba_evictable_tokens": 0.0,
}
OLD_SGLANG = {
    "full_token_usage": None,
    "kv_used_tokens": None,
    "verify_calls": None,
    "mamba_used_tokens": None,
    "mamba_available_tokens": None,
    "mamba_evictable_tokens": None,
}
PLAIN = ServerSpec(  # a token per step: half the per-request rate of steady's
    Load(spec_accept_length=0.0, spec_accept_rate=0.0, verify_calls=None),
    PLAIN_INFO,
    decode_tok_s=DECODE_TOK_S / 2,
    itl_s=ITL_S * 2,
)
SATURATED = ServerSpec(
    Load(
        queued=12.0,
        mamba_usage=0.97,
        decode_sum_seq_lens=41 * 40_000.0,  # 40K tokens a request: another context bin than steady's
        spec_accept_length=2.2,
    ),
    itl_s=0.015,  # a slower step at the longer context
)
# Every kind of server a catalogue signal or a page treats apart: priority scheduling, a model without a Mamba
# pool, an idle server, an older SGLang, plain decoding, a long-context server whose state pool is saturated
# with requests queueing (StatePoolSaturation), and one whose /metrics fails (TargetDown). Two of the plain
# and of the long-context ones: the analysis pages compare ≥ MIN_SAMPLES samples a side, two servers reach
# them in half the time.
SERVERS: dict[str, ServerSpec] = {
    "steady": ServerSpec(Load()),
    "priorities": ServerSpec(Load(priorities=("0", "3"))),
    "no-mamba-pool": ServerSpec(Load(**NO_MAMBA)),  # type: ignore[arg-type]
    "idle": ServerSpec(Load(running=0.0, queued=0.0, gen_throughput=0.0), moving=False),
    "sglang-0.5.9": ServerSpec(Load(**OLD_SGLANG)),  # type: ignore[arg-type]
    "plain": PLAIN,
    "plain-b": PLAIN,
    "saturated": SATURATED,
    "saturated-b": SATURATED,
    "broken": ServerSpec(Load(), metrics_status=503),
}


def _serve() -> None:
    """``python -m tests.prometheus.parity_fleet``: serve the fleet, print {"servers": {name: url}, "gpus":
    {name: exporter url}} as one JSON line, and stop when standard input closes (the test's end, or its
    crash)."""
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        gpus: dict[str, str] = {}
        for name, spec in SERVERS.items():
            exporter = LinearDCGM(name)
            stack.callback(exporter.stop)
            gpus[name] = exporter.url
            server = CompletingSGLang(
                spec.load, spec.info, moving=spec.moving, decode_tok_s=spec.decode_tok_s, itl_s=spec.itl_s
            )
            server.metrics_status = spec.metrics_status
            stack.callback(server.stop)
            urls[name] = server.url
        print(json.dumps({"servers": urls, "gpus": gpus}), flush=True)
        sys.stdin.read()


@contextmanager
def running_fleet() -> Iterator[Fleet]:
    """Every server of ``SERVERS`` and its DCGM exporter listening, in a process of its own. Its own process,
    because a server sharing the test's interpreter answered late whenever AppTest held the GIL (scrapes
    timed out and one-interval rates jumped). Stopped after."""
    with reaped(
        start_module(
            "tests.prometheus.parity_fleet", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, "the parity fleet did not start"
        try:
            yield Fleet(**json.loads(line))
        finally:
            process.stdin.close()
            process.wait(timeout=10)
            process.stdout.close()


def fleet_targets(fleet: Fleet) -> list[Target]:
    return [
        Target(name=name, url=url, gpu_exporter_url=fleet.gpus[name]) for name, url in fleet.servers.items()
    ]


def scraping_engine(kind: str, workdir: Path, fleet: Fleet) -> Engine:
    """``kind`` ("prometheus" or "victoria-metrics") scraping the fleet (job ``JOB``, each target labelled
    with its ``node`` as service discovery would) and its DCGM exporters (job ``GPU_JOB``) every second."""
    targets = fleet_targets(fleet)
    exporters = [netloc(Target(name=t.name, url=fleet.gpus[t.name])) for t in targets]
    nodes = {netloc(t): {GPU_JOIN["node_label"]: t.name} for t in targets}
    return start_engine(kind, workdir, {JOB: [netloc(t) for t in targets], GPU_JOB: exporters}, nodes)


def wait_fleet_scraped(engine: Engine, fleet: Fleet, window_s: float) -> None:
    """Until every server has been scraped for ``window_s`` (so a rate over the window has it full)."""
    everyone = str(len(fleet.servers))
    engine.wait_for(f'count(up{{job="{JOB}"}})', lambda r: bool(r) and r[0]["value"][1] == everyone, 30)
    engine.wait_for(
        f'min(count_over_time(up{{job="{JOB}"}}[{int(window_s)}s]))',
        lambda r: bool(r) and float(r[0]["value"][1]) >= window_s - 1,
        40,
    )


# The SLO every scope burns (half the requests answer their first token after 10 ms: the stand-ins' bucket),
# so ErrorBudgetBurn pages on the whole fleet and on each deployment, from either source.
SLOS = [
    {
        "name": "ttft-10ms",
        "sli": {"kind": "ttft", "threshold_s": 0.01},
        "objective": 0.99,
        "buckets": [0.01, 0.1],
        # The traffic floor: a specwatch on Prometheus starts with the engines' first seconds of the fleet
        # (windows of an hour or more are then re-read once a minute).
        "alerting": {"min_events": 10},
    }
]
PROBED = ("steady", "idle", "saturated")  # probes: one queueing (skipped), two sent


def fleet_config(
    fleet: Fleet, store: Path, engine: Engine | None = None, *, probes: bool = False
) -> dict[str, Any]:
    """The config both sources read the fleet with: targets (deployments only here, not in the engines'
    scrape config), alert rules that fire within seconds (TargetDown after 3 s: one scrape timing out on a
    busy machine is not a server down), the burning SLO; ``engine``: ``source: prometheus``."""
    targets = []
    for target in fleet_targets(fleet):
        labels = {"deployment": "long" if target.name.startswith("saturated") else "chat"}
        targets.append(target.model_dump(mode="json") | {"labels": labels, "probe": target.name in PROBED})
    raw: dict[str, Any] = {
        "scrape": {"interval_s": 1, "timeout_s": 1},
        "targets": targets,
        "store": {"path": str(store)},
        "exporter": {"listen": None},
        "slos": SLOS,
        "alerts": {"rules": {"TargetDown": {"for_s": 3}, "StatePoolSaturation": {"for_s": 0, "window_s": 3}}},
        "probes": {"enabled": probes, "context_tokens": [1024], "timeout_s": 5},
        "cost": {"gpu_hour_usd": GPU_HOUR_USD},
    }
    if engine is not None:
        raw["source"] = "prometheus"
        raw["prometheus"] = {
            "url": engine.url,
            "selector": f'job="{JOB}"',
            "rate_window_s": 6,
            "timeout_s": 5,
            **GPU_JOIN,
        }
    return raw


if __name__ == "__main__":
    _serve()
