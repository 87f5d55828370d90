"""Parse benchmark: samples/s of ``collectors.direct.exposition`` on the golden body vs prometheus_client.

Baseline (same run, same body): ``prometheus_client.parser.text_string_to_metric_families``, fully consumed,
which is what a collector built on the library would pay to get the same few samples. Target: ≥ 10× faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collectors.direct.exposition import parse_exposition

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
TARGET_SPEEDUP = 10.0


def _best_seconds_per_call(
    function: Callable[[], object], *, budget_s: float = 1.0, rounds: int = 5
) -> float:
    """Best mean time per call over ``rounds`` rounds of about ``budget_s / rounds`` each."""
    started = time.perf_counter()
    function()
    calls = max(1, int(budget_s / rounds / max(time.perf_counter() - started, 1e-6)))
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def main() -> dict[str, object]:
    body = GOLDEN.read_bytes()
    text = body.decode()
    parsed = parse_exposition(body)
    samples = parsed.sample_lines

    def library() -> int:
        return sum(len(family.samples) for family in text_string_to_metric_families(text))

    assert library() == samples, "both parsers must see the same samples"
    fast_s = _best_seconds_per_call(lambda: parse_exposition(body))
    baseline_s = _best_seconds_per_call(library)
    speedup = baseline_s / fast_s
    return {
        "body": GOLDEN.name,
        "body_bytes": len(body),
        "samples_in_body": samples,
        "samples_kept": len(parsed.values),
        "fast_ms_per_body": round(fast_s * 1e3, 3),
        "fast_samples_per_s": round(samples / fast_s),
        "prometheus_client_ms_per_body": round(baseline_s * 1e3, 3),
        "prometheus_client_samples_per_s": round(samples / baseline_s),
        "speedup_vs_prometheus_client": round(speedup, 1),
        "target_speedup": TARGET_SPEEDUP,
        "meets_target": speedup >= TARGET_SPEEDUP,
    }
