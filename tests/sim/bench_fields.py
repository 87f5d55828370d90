"""A stored offline run against the bench_serving result line it came from: field for field."""

from __future__ import annotations

import json
import math
from typing import Any

from collectors.store.offline_runs import OfflineRun

# bench_serving's name → OfflineRun's (the same where not listed). Written out again on purpose, not imported
# from collectors.bench_results (`duplicates` pairs them): the test's own statement of the mapping.
SAME = (
    "backend",
    "dataset_name",
    "tag",
    "max_concurrency",
    "completed",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "concurrency",
    "accept_length",
    "total_input_tokens",
    "total_output_tokens",
    "slo_attainment",
)
RENAMED = {
    "duration": "duration_s",
    "output_throughput": "output_tok_s",
    "request_goodput": "request_goodput_rps",
}


def assert_run_matches(run: OfflineRun, line: dict[str, Any]) -> None:
    """Every field the run keeps equals the line's (None where the line lacks it)."""
    for name in SAME:
        assert getattr(run, name) == line.get(name), name
    for name, stored in RENAMED.items():
        assert getattr(run, stored) == line.get(name), name
    rate = line["request_rate"]
    if rate == "trace":
        assert run.request_rate_rps is None
    elif math.isinf(rate):
        assert run.request_rate_rps == math.inf
    else:
        assert run.request_rate_rps == rate
    slos = line.get("goodput_slos_ms")
    assert (json.loads(run.goodput_slos_ms) if run.goodput_slos_ms else None) == slos
    info = line.get("server_info") or {}
    assert run.gpu_count == (info["tp_size"] * info.get("dp_size", 1) if info else None)
