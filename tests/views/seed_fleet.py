"""A known history for the page tests, built from the seed's own numbers (the expected values are the seed's).

Every server holds constant signals (or switches once), so any mean a page shows is exactly a constant below:
- default vs tuned DSpark window at concurrency 48, ISL 8K: accept 2.999 → 2.552, step 512.7 → 255.3 ms, and a
  measured 1.68× gain;
- the concurrency-1 context sweep: 1K → 64K, step 22.8 → 79.6 ms, accept 2.514 → 1.440, measured 6.35× loss;
- a batch sweep whose accept length only jitters (2.473–2.732): flat, i.e. noise;
- a bfloat16-state recipe 1.24% faster than its twin: within noise;
- a server whose state pool binds at 98% with KV at 29%, a radix-cache server at a 3% hit rate, one down, one
  stale, one configured but never seen; a restart, a recipe change, and alerts firing, pending and resolved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from alerts.model import AlertInstance, AlertState, AlertTransition, to_pairs
from alerts.state_store import AlertStateStore
from collectors.model import Event, Recipe, Signals, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore

STEP_S = 15.0  # sample spacing; the fixture config scrapes every 15 s so "stale" means > 45 s
PRICE = 2.5  # USD per GPU-hour (the fixture config's cost.gpu_hour_usd)
GPU_W = 1000.0  # every GPU's power where a server has GPU telemetry
HISTORY_S = 50 * 60.0  # inside the default 1 h range, and ≤ 300 samples per target (no SQL bucketing)
BASE_FLAGS: dict[str, object] = {
    "model": "kimi-k3",
    "version": "0.5.23",
    "speculative_algorithm": "DSPARK",
    "speculative_dspark_block_size": 4,
    "speculative_num_draft_tokens": 4,
    "speculative_num_steps": 3,
    "mem_fraction_static": 0.92,
    "disable_radix_cache": True,
    "cuda_graph_max_bs": 256,
    "max_running_requests": 48,
    "chunked_prefill_size": 16384,
    "mamba_ssm_dtype": "float32",
    "schedule_conservativeness": 1.0,
}
DEFAULT = Recipe.from_flags(BASE_FLAGS)  # type: ignore[arg-type]
TUNED = Recipe.from_flags({**BASE_FLAGS, "speculative_dspark_block_size": 3})  # type: ignore[arg-type]
RADIX = Recipe.from_flags(  # type: ignore[arg-type]
    {**BASE_FLAGS, "speculative_dspark_block_size": 3, "disable_radix_cache": False}
)
BF16 = Recipe.from_flags(  # type: ignore[arg-type]
    {**BASE_FLAGS, "speculative_dspark_block_size": 3, "mamba_ssm_dtype": "bfloat16"}
)


@dataclass(frozen=True)
class Load:
    """The constant signals of one server; output is measured (it may differ from accept ÷ step × running)."""

    accept: float
    step_s: float
    running: float
    output_tok_s: float
    queued: float = 0.0
    state: float = 0.5
    kv: float = 0.3
    context: float = 9216.0
    ttft_s: float = 0.9
    hit_rate: float | None = None
    gpus: float = 2.0  # TP 2, as /server_info says
    gpu_w: float | None = GPU_W  # each GPU's power; None: no GPU telemetry for this server

    def signals(self, cap: float) -> Signals:
        power = self.gpus * self.gpu_w if self.gpu_w is not None else None
        output = self.output_tok_s
        return Signals(
            accept_length=self.accept,
            tokens_per_verify=self.accept,
            spec_accept_rate=0.6,
            tpot_s=self.step_s / self.accept,
            step_latency_s=self.step_s,
            output_tok_s=self.output_tok_s,
            per_request_tok_s=self.accept / self.step_s,
            running=self.running,
            queued=self.queued,
            max_running=cap,
            state_pool_usage=self.state,
            kv_usage=self.kv,
            token_usage=max(self.state, self.kv),
            avg_context_tokens=self.context,
            cache_hit_rate=self.hit_rate,
            retractions_per_s=0.0,
            ttft_s=self.ttft_s,
            queue_time_s=0.1,
            gpu_count=self.gpus,
            gpu_power_w=power,
            gpu_util=0.9 if power is not None else None,
            tokens_per_joule=output / power if power is not None else None,
            joules_per_token=power / output if power is not None and output > 0 else None,
            output_tok_s_per_gpu=output / self.gpus,
            usd_per_million_tokens=usd_per_million_tokens(self.gpus, output),
        )


def usd_per_million_tokens(gpus: float, output_tok_s: float) -> float | None:
    """What the collector stores at PRICE: GPUs × price over the tokens of an hour, per million."""
    return PRICE * gpus / (output_tok_s * 3600.0) * 1e6 if output_tok_s > 0 else None


def _at(accept: float, step_s: float, running: float, **kw: float) -> Load:
    return Load(accept, step_s, running, running * accept / step_s, **kw)


# Seed §06: concurrency 48, ISL 8192 / OSL 1024 — default window vs block size 3 (measured 1.68×).
DEFAULT_48 = _at(2.999, 0.5127, 48, queued=7, state=0.98, kv=0.29, ttft_s=2.271)
TUNED_48 = replace(
    _at(2.552, 0.2553, 48, queued=7, state=0.98, kv=0.29, ttft_s=2.271),
    output_tok_s=1.68 * DEFAULT_48.output_tok_s,
)
# Seed §07: bfloat16 SSM state bought only 1.24% more throughput — within the run-to-run noise.
BF16_48 = replace(TUNED_48, output_tok_s=1.0124 * TUNED_48.output_tok_s)
# Seed §09: concurrency 1, input length 1K → 64K; measured 6.35× between the ends (predicted 6.10×).
CTX = {
    "k3-ctx-1k": _at(2.514, 0.0228, 1, context=1536, state=0.05, kv=0.02),
    "k3-ctx-16k": _at(1.892, 0.0460, 1, context=24576, state=0.05, kv=0.05),
    "k3-ctx-32k": _at(1.741, 0.0590, 1, context=49152, state=0.05, kv=0.08),
}
CTX["k3-ctx-64k"] = replace(
    _at(1.440, 0.0796, 1, context=98304, state=0.05, kv=0.12),
    output_tok_s=CTX["k3-ctx-1k"].output_tok_s / 6.35,
)
# Seed §08: accept length across concurrency only jitters between 2.473 and 2.732 (noise).
BATCH = {
    "k3-batch-1": _at(2.610, 0.0240, 1),
    "k3-batch-4": _at(2.473, 0.0300, 4),
    "k3-batch-16": _at(2.732, 0.0520, 16),
}
# Seed §05: radix cache on random-prefix traffic cuts the runnable batch; state slots run out.
RADIX_LOAD = replace(_at(2.55, 0.20, 12, queued=30, state=0.99, kv=0.12, hit_rate=0.03), gpu_w=None)

DEPLOYMENT = {"east": "east", "west": "west"}
CONFIGURED_ONLY = "k3-new-1"
DOWN_ERROR = "connection refused: http://10.0.0.9:30000/metrics"


@dataclass(frozen=True)
class SeedFleet:
    now_ts: float
    recipe_change_ts: float
    restart_ts: float


def build(store_path: str, now_ts: float) -> SeedFleet:
    """Write the history (and alert state) into ``store_path``; the newest samples are 2 s old."""
    store = SqliteStore(store_path)
    for recipe in (DEFAULT, TUNED, RADIX, BF16):
        store.put_recipe(recipe, now_ts - HISTORY_S)
    end = now_ts - 2.0
    steps = int(HISTORY_S // STEP_S)
    times = [end - i * STEP_S for i in reversed(range(steps))]
    change_ts = end - 20 * 60.0
    down_ts = end - 10 * 60.0
    snapshots: list[TargetSnapshot] = []

    def add(target: str, deployment: str, recipe: Recipe, load: Load, ts: float, up: bool = True) -> None:
        cap = float(recipe.max_running or 0)
        snapshots.append(
            TargetSnapshot(
                target=target,
                ts=ts,
                up=up,
                error=None if up else DOWN_ERROR,
                signals=load.signals(cap) if up else Signals(max_running=cap),
                recipe_id=recipe.recipe_id,
                deployment=deployment,
                scrape_duration_s=0.02,
            )
        )

    for ts in times:
        add("k3-east-1", "east", DEFAULT, DEFAULT_48, ts)
        add("k3-east-2", "east", TUNED, TUNED_48, ts)
        if ts < change_ts:
            add("k3-west-1", "west", DEFAULT, DEFAULT_48, ts)
        else:
            add("k3-west-1", "west", TUNED, TUNED_48, ts)
        for name, load in CTX.items():
            add(name, "west", TUNED, load, ts)
        for name, load in BATCH.items():
            add(name, "east", TUNED, load, ts)
        add("k3-radix-1", "east", RADIX, RADIX_LOAD, ts)
        add("k3-bf16-1", "east", BF16, BF16_48, ts)
        add("k3-down-1", "west", DEFAULT, DEFAULT_48, ts, up=ts < down_ts)
        if ts < down_ts:
            add("k3-stale-1", "east", DEFAULT, DEFAULT_48, ts)
    store.append(snapshots)
    restart_ts = end - 30 * 60.0
    store.add_events(
        [
            Event(restart_ts, "k3-east-2", "restart", "process restarted (uptime reset)"),
            Event(change_ts, "k3-west-1", "recipe_change", f"{DEFAULT.recipe_id} → {TUNED.recipe_id}"),
            Event(down_ts, "k3-down-1", "down", DOWN_ERROR),
        ]
    )
    store.close()
    _alerts(store_path, now_ts)
    return SeedFleet(now_ts=now_ts, recipe_change_ts=change_ts, restart_ts=restart_ts)


def _instance(
    rule: str, target: str, state: AlertState, since: float, value: float, summary: str
) -> AlertInstance:
    labels = {
        "alertname": rule,
        "target": target,
        "severity": "critical" if state is AlertState.FIRING else "warning",
    }
    return AlertInstance(
        rule=rule,
        target=target,
        state=state,
        since=since,
        active_since=since - 60,
        fired_at=since if state is AlertState.FIRING else None,
        last_eval_ts=since + 300,
        value=value,
        labels=to_pairs(labels),
        annotations=to_pairs({"summary": summary}),
        fingerprint=f"{rule}:{target}",
    )


FIRING = ("StatePoolSaturated", "k3-east-1", 0.98, "state pool at 98% while KV is at 29%")
PENDING = ("QueueBacklog", "k3-radix-1", 30.0, "30 requests queued")
RESOLVED = ("AcceptanceDecay", "k3-east-2", 2.1, "accept length fell 20% below its baseline")


def _alerts(path: str, now_ts: float) -> None:
    alerts = AlertStateStore(path)
    firing = _instance(*FIRING[:2], AlertState.FIRING, now_ts - 600, FIRING[2], FIRING[3])
    pending = _instance(*PENDING[:2], AlertState.PENDING, now_ts - 60, PENDING[2], PENDING[3])

    def transition(
        ts: float, rule: str, target: str, a: AlertState, b: AlertState, value: float
    ) -> AlertTransition:
        return AlertTransition(
            ts, rule, target, f"{rule}:{target}", a, b, value, to_pairs({"severity": "warning"})
        )

    transitions = [
        transition(
            now_ts - 900, RESOLVED[0], RESOLVED[1], AlertState.INACTIVE, AlertState.PENDING, RESOLVED[2]
        ),
        transition(
            now_ts - 840, RESOLVED[0], RESOLVED[1], AlertState.PENDING, AlertState.FIRING, RESOLVED[2]
        ),
        transition(
            now_ts - 300, RESOLVED[0], RESOLVED[1], AlertState.FIRING, AlertState.INACTIVE, RESOLVED[2]
        ),
        transition(now_ts - 660, FIRING[0], FIRING[1], AlertState.INACTIVE, AlertState.PENDING, FIRING[2]),
        transition(now_ts - 600, FIRING[0], FIRING[1], AlertState.PENDING, AlertState.FIRING, FIRING[2]),
        transition(now_ts - 60, PENDING[0], PENDING[1], AlertState.INACTIVE, AlertState.PENDING, PENDING[2]),
    ]
    alerts.commit([firing, pending], [], transitions, [], now_ts)
    alerts.close()


def up_servers() -> dict[str, Load]:
    """The servers up at the end of the history, with their load."""
    return {
        "k3-east-1": DEFAULT_48,
        "k3-east-2": TUNED_48,
        "k3-west-1": TUNED_48,
        **CTX,
        **BATCH,
        "k3-radix-1": RADIX_LOAD,
        "k3-bf16-1": BF16_48,
    }


def per_request(load: Load) -> float:
    return load.output_tok_s / load.running if load.running else math.nan
