"""Golden inputs of the Prometheus-source tests: extra labels, a /server_info answer, label injection."""

from __future__ import annotations

import re
from pathlib import Path

# Three closed-loop simulated servers at steady load (see the file).
STEADY_SCENARIO = Path(__file__).parent / "data" / "steady.yaml"

# What an operator adds with --extra-metric-labels so recipes survive without /server_info access.
EXTRA_LABELS = {
    "speculative_algorithm": "DSPARK",
    "speculative_dspark_block_size": "3",
    "max_running_requests": "48",
    "mem_fraction_static": "0.92",
    "disable_radix_cache": "true",
    "deployment": "east",
}


# A reachable server's /server_info (0.5.23 shape, trimmed to the keys a recipe reads).
SERVER_INFO = {
    "version": "0.5.23",
    "model_path": "moonshotai/Kimi-K3",
    "served_model_name": "kimi-k3",
    "speculative_algorithm": "DSPARK",
    "speculative_dspark_block_size": 3,
    "speculative_num_draft_tokens": 4,
    "mem_fraction_static": 0.92,
    "disable_radix_cache": True,
    "max_running_requests": 48,
    "chunked_prefill_size": 16384,
    "mamba_ssm_dtype": "float32",
    "internal_states": [{"last_gen_throughput": 3127.55}],
}


def with_extra_labels(body: str, labels: dict[str, str]) -> str:
    """The body as SGLang renders it with --extra-metric-labels: the labels on every sglang series."""
    extra = ",".join(f'{name}="{value}"' for name, value in labels.items())
    return re.sub(r"^(sglang:[a-zA-Z0-9_:]+)\{", lambda m: m.group(1) + "{" + extra + ",", body, flags=re.M)
