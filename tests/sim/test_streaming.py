"""Per-batch and per-chunk families move while a decode-log window is still running, as SGLang's do.

``realtime_tokens_total{mode="decode"}`` (per batch) and the inter-token-latency histogram (per streamed
chunk) advance through the window being decoded; gauges still change once per window.
"""

from __future__ import annotations

from typing import Any

from sim.recipes import resolve_server_args
from sim.server_engine import ServerEngine
from sim.values import metric_values
from sim.workload import Load, Workload

SHIPPED = resolve_server_args({"speculative_dspark_block_size": 3})


def _values(engine: ServerEngine, t: float) -> dict[str, Any]:
    engine.advance_to(t)
    return metric_values(
        engine,
        SHIPPED,
        http_requests={},
        http_responses={},
        in_flight_http={},
        streamed_share=engine.streamed_share(t),
    )


def test_decode_tokens_and_itl_stream_through_the_pending_window() -> None:
    engine = ServerEngine(SHIPPED, Workload(osl_jitter=0.3), Load(concurrency=48), seed=0)
    engine.advance_to(120.0)  # saturated, steady
    start = engine.published.at_s
    end = engine.next_refresh_s()
    early, late = start + 0.2 * (end - start), start + 0.9 * (end - start)
    first, second = _values(engine, early), _values(engine, late)
    assert engine.published.at_s == start  # still inside the same decode-log window
    assert second["gen_throughput"] == first["gen_throughput"]  # gauges: once per window
    decode = second["realtime_tokens"][("decode",)] - first["realtime_tokens"][("decode",)]
    assert decode > 0  # the decode counter moved within the window
    itl_first, itl_second = first["inter_token_latency_seconds"], second["inter_token_latency_seconds"]
    assert itl_second.sum > itl_first.sum  # chunks were streamed within the window
    # Through the whole window the streamed part adds up to what the window publishes at its end.
    done = _values(engine, end)["realtime_tokens"][("decode",)]
    assert done >= second["realtime_tokens"][("decode",)]
