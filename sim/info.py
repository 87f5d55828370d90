"""The JSON endpoints of a simulated server, shaped as SGLang 0.5.23 returns them.

/server_info (flat server args + internal_states, also as /get_server_info), /model_info, /v1/models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim import mechanism as mech
from sim.recipes import BASE_SERVER_ARGS, SGLANG_VERSION
from sim.server_engine import ServerEngine
from sim.values import GRAPH_MEMORY_GB, STARTUP_S

_FLAGS = {  # server arg → CLI flag, for the launch_command line
    "model_path": "--model-path",
    "served_model_name": "--served-model-name",
    "tp_size": "--tp-size",
    "speculative_algorithm": "--speculative-algorithm",
    "speculative_draft_model_path": "--speculative-draft-model-path",
    "speculative_dspark_block_size": "--speculative-dspark-block-size",
    "mem_fraction_static": "--mem-fraction-static",
    "max_running_requests": "--max-running-requests",
    "chunked_prefill_size": "--chunked-prefill-size",
    "cuda_graph_max_bs_decode": "--cuda-graph-max-bs",
    "mamba_ssm_dtype": "--mamba-ssm-dtype",
    "schedule_conservativeness": "--schedule-conservativeness",
}


def launch_command(args: Mapping[str, Any]) -> str:
    parts = ["python3 -m sglang.launch_server"]
    for key, flag in _FLAGS.items():
        value = args.get(key)
        if value is not None and (key in ("model_path", "tp_size") or value != BASE_SERVER_ARGS.get(key)):
            parts.append(f"{flag} {value}")
    if args.get("disable_radix_cache"):
        parts.append("--disable-radix-cache")
    parts += ["--enable-metrics", "--trust-remote-code", f"--host {args['host']}", f"--port {args['port']}"]
    return " ".join(parts)


def server_info(
    args: Mapping[str, Any], engine: ServerEngine, *, generated: tuple[float, float] = (0.0, 0.0)
) -> dict[str, Any]:
    """The flat object of GET /server_info: resolved server args, scheduler info, internal_states, version.

    ``generated``: tokens and verify steps of finished /generate requests (a benchmark client's), which the
    lifetime ``avg_spec_accept_length`` counts as SGLang's scheduler does."""
    published, layout = engine.published, engine.layout
    spec = engine.window > 1
    startup = {
        **STARTUP_S,
        "cuda_graph": {"decode": 38.4, "target_verify": 11.2} if spec else {"decode": 38.4},
    }
    internal: dict[str, Any] = {
        **args,
        "world_size": int(args.get("tp_size") or 1),
        "startup_time": startup,
        "effective_max_running_requests_per_dp": layout.max_running,
        "last_gen_throughput": published.gauges.gen_throughput,
        "memory_usage": {
            "weight": mech.WEIGHT_MEMORY_GB,
            "kvcache": round(layout.kv_gb + layout.state_gb, 3),
            "startup_available": round(mech.GPU_MEMORY_GB * 0.977, 2),
            "token_capacity": layout.kv_tokens,
            "token_capacity_swa": 0,
            "graph": GRAPH_MEMORY_GB if spec else {"decode": GRAPH_MEMORY_GB["decode"]},
        },
        "disaggregation_mode": "null",
        "decode_cuda_graph_bs": args.get("cuda_graph_max_bs_decode"),
        "decode_cuda_graph_memory_gb": GRAPH_MEMORY_GB["decode"],
    }
    steps = published.count("verify_steps")
    if spec and steps + generated[1]:
        tokens = published.count("decode_tokens") + generated[0]
        internal["avg_spec_accept_length"] = tokens / (steps + generated[1])
    if args.get("speculative_algorithm") == "DSPARK":
        internal["dspark_info_record"] = {"scheduled_window": engine.scheduled, "verify_steps": round(steps)}
    return {
        **args,
        "launch_command": launch_command(args),
        "status": "ready",
        "max_total_num_tokens": layout.kv_tokens,
        "max_req_input_len": int(args.get("context_length") or 0) - 1,
        "hicache_object_layout": None,
        "kv_events": None,
        "startup_time": startup,
        "internal_states": [internal],
        "version": SGLANG_VERSION,
        "frontend": "python",
    }


def model_info(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "model_path": args["model_path"],
        "served_model_name": args["served_model_name"],
        "tokenizer_path": args.get("tokenizer_path"),
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": "kimi",
        "tool_call_parser": "kimi_k2",
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "kimi_k3",
        "architectures": ["KimiK3ForCausalLM"],
    }


def models_list(args: Mapping[str, Any], created_unix: float) -> dict[str, Any]:
    name = args["served_model_name"]
    return {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": int(created_unix),
                "owned_by": "sglang",
                "root": name,
                "parent": None,
                "max_model_len": args.get("context_length"),
            }
        ],
    }
