"""Server args of a simulated K3 + DSpark server: the resolved flat object /server_info shows.

A scenario names a recipe as overrides on ``BASE_SERVER_ARGS``; ``resolve_server_args`` validates them and
resolves what SGLang would (γ + 1 draft tokens, the speculative cap of 48, the running cap a plain server's
state pool affords). ``recipe_of`` maps the result onto ``collectors.model.Recipe`` the way /server_info
reads.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from collectors.model import FlagValue, Recipe, gpu_count_of
from config import ConfigError
from sim import calibration as cal
from sim.mechanism import pool_layout

SGLANG_VERSION = "0.5.23"
MODEL_PATH = "moonshotai/Kimi-K3"
SERVED_MODEL_NAME = "kimi-k3"
SPEC_ALGORITHMS = (None, "DSPARK", "NEXTN", "EAGLE", "EAGLE3")

# The search's baseline: shipped memory, radix off, CUDA graphs to 256, DSpark at the checkpoint's default γ =
# 7.
BASE_SERVER_ARGS: dict[str, Any] = {
    "model_path": MODEL_PATH,
    "tokenizer_path": MODEL_PATH,
    "served_model_name": SERVED_MODEL_NAME,
    "trust_remote_code": True,
    "dtype": "auto",
    "kv_cache_dtype": "auto",
    "context_length": 262144,
    "host": "127.0.0.1",
    "port": 30000,
    "tp_size": 2,
    "dp_size": 1,
    "pp_size": 1,
    "ep_size": 1,
    "enable_dp_attention": False,
    "mem_fraction_static": cal.SHIPPED_MEM_FRACTION,
    "max_running_requests": cal.SPEC_MAX_RUNNING,
    "max_total_tokens": None,
    "chunked_prefill_size": 16384,
    "max_prefill_tokens": 16384,
    "schedule_policy": "fcfs",
    "schedule_conservativeness": 1.0,
    "page_size": 1,
    "disable_radix_cache": True,
    "attention_backend": "aiter",
    "sampling_backend": "pytorch",
    "mamba_ssm_dtype": "float32",
    "mamba_backend": "triton",
    "max_mamba_cache_size": None,
    "mamba_full_memory_ratio": 0.9,
    "mamba_radix_cache_strategy": "auto",
    "mamba_track_interval": 256,
    "speculative_algorithm": "DSPARK",
    "speculative_draft_model_path": "moonshotai/Kimi-K3-DSpark",
    "speculative_dspark_block_size": cal.DEFAULT_DSPARK_BLOCK_SIZE,
    "speculative_num_steps": cal.DEFAULT_DSPARK_BLOCK_SIZE,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": cal.DEFAULT_DSPARK_BLOCK_SIZE + 1,
    "speculative_dspark_sps_table_path": None,
    "speculative_adaptive": False,
    "speculative_accept_threshold_single": 1.0,
    "speculative_accept_threshold_acc": 1.0,
    "cuda_graph_config": None,
    "cuda_graph_max_bs_decode": 256,
    "cuda_graph_max_bs_prefill": None,
    "disable_cuda_graph": False,
    "disable_decode_cuda_graph": False,
    "enable_metrics": True,
    "enable_metrics_for_all_schedulers": False,
    "decode_log_interval": 40,
    "log_level": "info",
    "random_seed": 1234,
    "watchdog_timeout": 300,
}

# Overrides a scenario may set beyond the base keys' own types; values are checked against these.
_NUMERIC_RANGES: dict[str, tuple[float, float]] = {
    "mem_fraction_static": (0.5, 0.99),
    "max_running_requests": (1, 4096),
    "chunked_prefill_size": (256, 262144),
    "cuda_graph_max_bs_decode": (1, 4096),
    "speculative_dspark_block_size": (1, 15),
    "speculative_num_draft_tokens": (2, 16),
    "schedule_conservativeness": (0.1, 10.0),
    "context_length": (1024, 10_485_760),
}


def _check_value(source: str, key: str, value: object) -> None:
    base = BASE_SERVER_ARGS[key]
    if key == "speculative_algorithm":
        if value not in SPEC_ALGORITHMS:
            raise ConfigError(source, key, f"one of {SPEC_ALGORITHMS}", value)
        return
    if value is None:
        if key in ("max_running_requests", "cuda_graph_max_bs_decode") or base is None:
            return
        raise ConfigError(source, key, f"a {type(base).__name__}", value)
    if key in _NUMERIC_RANGES:
        low, high = _NUMERIC_RANGES[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise ConfigError(source, key, f"a number in [{low:g}, {high:g}]", value)
        if isinstance(base, int) and not isinstance(value, int):
            raise ConfigError(source, key, "an integer", value)
        return
    if base is not None and not isinstance(value, type(base)):
        raise ConfigError(source, key, f"a {type(base).__name__}", value)


def resolve_server_args(
    overrides: Mapping[str, object] | None = None, source: str = "recipe"
) -> dict[str, Any]:
    """Apply ``overrides`` to the base and resolve derived fields as SGLang's argument resolution does."""
    overrides = dict(overrides or {})
    for key, value in overrides.items():
        if key not in BASE_SERVER_ARGS:
            close = difflib.get_close_matches(key, BASE_SERVER_ARGS, n=1)
            hint = f"did you mean {close[0]}?" if close else "not a server arg this simulator models"
            raise ConfigError(source, key, "a known SGLang server arg", key, hint)
        _check_value(source, key, value)
    args = {**BASE_SERVER_ARGS, **overrides}
    algorithm = args["speculative_algorithm"]
    if algorithm is None:
        for key in ("speculative_dspark_block_size", "speculative_num_steps", "speculative_num_draft_tokens"):
            args[key] = None
        args["speculative_draft_model_path"] = None
        if "max_running_requests" not in overrides:
            args["max_running_requests"] = None  # resolved below from what the state pool affords
    elif algorithm == "DSPARK":
        gamma = args["speculative_dspark_block_size"] or cal.DEFAULT_DSPARK_BLOCK_SIZE
        draft_tokens = overrides.get("speculative_num_draft_tokens", gamma + 1)
        if draft_tokens != gamma + 1:
            raise ConfigError(
                source,
                "speculative_num_draft_tokens",
                f"{gamma + 1} (= block size + 1)",
                draft_tokens,
                "DSpark sets the verify window to gamma + 1",
            )
        args.update(
            speculative_dspark_block_size=gamma,
            speculative_num_steps=gamma,
            speculative_num_draft_tokens=gamma + 1,
        )
    else:
        args["speculative_dspark_block_size"] = None
        steps = args["speculative_num_steps"] or 3
        args.update(
            speculative_num_steps=steps,
            speculative_num_draft_tokens=overrides.get("speculative_num_draft_tokens", steps + 1),
        )
    if algorithm is not None and args["max_running_requests"] is None:
        args["max_running_requests"] = cal.SPEC_MAX_RUNNING  # "Max running requests is reset to 48 ..."
    layout = pool_layout(args)
    if layout.kv_tokens < 65536 or layout.max_running < 1:
        raise ConfigError(
            source,
            "max_running_requests",
            "a cap the memory can hold",
            args["max_running_requests"],
            f"leaves {layout.kv_tokens} KV tokens and {layout.state_slots} state slots",
        )
    args["max_running_requests"] = layout.max_running
    args["max_total_tokens"] = layout.kv_tokens
    args["max_prefill_tokens"] = args["chunked_prefill_size"]
    return args


def recipe_flags(args: Mapping[str, Any]) -> dict[str, FlagValue]:
    """The recipe as /server_info spells it (model = served_model_name, cuda_graph_max_bs = decode's)."""
    flags: dict[str, FlagValue] = {name: args.get(name) for name in Recipe.from_flags({}).as_dict()}
    flags["model"] = args.get("served_model_name")
    flags["version"] = SGLANG_VERSION
    flags["cuda_graph_max_bs"] = args.get("cuda_graph_max_bs_decode")
    return flags


def recipe_of(args: Mapping[str, Any]) -> Recipe:
    """The recipe /server_info gives the collector, GPU count included (read from the same args)."""
    return Recipe.from_flags(recipe_flags(args), gpu_count_of(args))
