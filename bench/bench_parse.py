"""Parse benchmark: samples/s of ``collectors.direct.metrics_reader`` on the golden body vs prometheus_client.

Baseline (same run, same body): ``prometheus_client.parser.text_string_to_metric_families``, fully consumed,
which is what a collector built on the library would pay to get the same few samples. Target: ≥ 10× faster.
Also timed in the same run: the line-by-line reader the fast one replaced
(``tests/fuzz/exposition_oracle.py``, frozen at 28d2e8c; the property tests hold the two to the same
answers), both with ``max_samples`` as the collector passes it.

2026-12-02 (``python -m bench parse``, 2 shared cores): 0.07 ms per golden body (one Aho-Corasick pass of
``ahocorasick_rs`` finds the 34 kept lines and any badly started line; only those are read in Python) vs
0.30 ms line by line (4.1×) and 13 ms for prometheus_client (~180×). Tried and measured slower first: a
``str.find`` per kept name in both spellings (54 scans of 97 KB: 1.2 ms), and walking the body from comment
line to comment line, counting each family's block at C speed (0.21–0.25 ms: ~190 comment lines of Python).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collectors.direct.metrics_reader import parse_exposition

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


def _line_by_line_seconds(body: bytes) -> float | None:
    """The replaced reader's time on ``body`` (None where the tests are not shipped)."""
    try:
        from tests.fuzz import exposition_oracle
    except ImportError:
        return None
    return _best_seconds_per_call(lambda: exposition_oracle.parse_exposition(body, max_samples=50_000))


def main() -> dict[str, object]:
    body = GOLDEN.read_bytes()
    text = body.decode()
    parsed = parse_exposition(body)
    samples = parsed.sample_lines

    def library() -> int:
        return sum(len(family.samples) for family in text_string_to_metric_families(text))

    assert library() == samples, "both parsers must see the same samples"
    fast_s = _best_seconds_per_call(lambda: parse_exposition(body, max_samples=50_000))
    baseline_s = _best_seconds_per_call(library)
    line_by_line_s = _line_by_line_seconds(body)
    speedup = baseline_s / fast_s
    return {
        "body": GOLDEN.name,
        "body_bytes": len(body),
        "samples_in_body": samples,
        "samples_kept": len(parsed.values),
        "fast_ms_per_body": round(fast_s * 1e3, 3),
        "fast_samples_per_s": round(samples / fast_s),
        "line_by_line_ms_per_body": None if line_by_line_s is None else round(line_by_line_s * 1e3, 3),
        "prometheus_client_ms_per_body": round(baseline_s * 1e3, 3),
        "prometheus_client_samples_per_s": round(samples / baseline_s),
        "speedup_vs_prometheus_client": round(speedup, 1),
        "target_speedup": TARGET_SPEEDUP,
        "meets_target": speedup >= TARGET_SPEEDUP,
    }
