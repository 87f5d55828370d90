"""The one data model that crosses layers: recipes, per-target snapshots, events.

Plain frozen dataclasses with value equality. ``None`` always means *unknown* (a family this SGLang version
lacks,
a rate with no previous sample, a target that is down) and is never replaced by zero.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

# Flags that define a recipe, in display order (names as SGLang's /server_info spells them).
RECIPE_FLAGS: tuple[str, ...] = (
    "model",
    "version",
    "speculative_algorithm",
    "speculative_dspark_block_size",
    "speculative_num_draft_tokens",
    "speculative_num_steps",
    "mem_fraction_static",
    "disable_radix_cache",
    "cuda_graph_max_bs",
    "max_running_requests",
    "chunked_prefill_size",
    "mamba_ssm_dtype",
    "schedule_conservativeness",
)

FlagValue = str | int | float | bool | None


@functools.lru_cache(maxsize=4096)
def _recipe_id(flags: tuple[tuple[str, FlagValue], ...]) -> str:
    """Cached: every snapshot of every cycle asks (a JSON dump and a SHA-256 each, ~4% of a scrape's CPU)."""
    canonical = json.dumps(dict(flags), sort_keys=True, separators=(",", ":"))
    return "r-" + hashlib.sha256(canonical.encode()).hexdigest()[:8]


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if value >= 1 and value == int(value) else None


def gpu_count_of(info: Mapping[str, Any], rank0: Mapping[str, Any] | None = None) -> int | None:
    """GPUs one server runs on, from its server args: tp_size × pp_size × dp_size, where dp_size counts only
    without enable_dp_attention (DP attention splits the TP group's GPUs into DP ranks: SGLang's
    ``compute_dp_attention_world_info``); None without a tp_size."""

    def arg(name: str) -> Any:
        value = info.get(name)
        return value if value is not None or rank0 is None else rank0.get(name)

    tp = _positive_int(arg("tp_size"))
    if tp is None:
        return None
    pp = _positive_int(arg("pp_size")) or 1
    dp = 1 if arg("enable_dp_attention") is True else (_positive_int(arg("dp_size")) or 1)
    return tp * pp * dp


@dataclass(frozen=True, slots=True)
class Recipe:
    """The serving flags that matter, as read from /server_info. ``recipe_id`` is short and stable.

    ``gpu_count`` is how many GPUs the server runs on, when /server_info says (tp × pp × dp): read with the
    recipe but not part of its id or equality, so recipes stored before it keep their ids.
    """

    flags: tuple[tuple[str, FlagValue], ...]
    gpu_count: int | None = field(default=None, compare=False)

    @classmethod
    def from_flags(cls, flags: dict[str, FlagValue], gpu_count: int | None = None) -> Recipe:
        return cls(tuple((name, flags.get(name)) for name in RECIPE_FLAGS), gpu_count)

    def as_dict(self) -> dict[str, FlagValue]:
        return dict(self.flags)

    def get(self, name: str) -> FlagValue:
        return self.as_dict().get(name)

    @property
    def recipe_id(self) -> str:
        return _recipe_id(self.flags)

    def changes_from(self, old: Recipe) -> tuple[str, ...]:
        """The flags that differ from ``old``, as "flag old → new", in display order."""
        before, after = old.as_dict(), self.as_dict()
        return tuple(
            f"{flag} {before.get(flag)} → {after.get(flag)}"
            for flag in RECIPE_FLAGS
            if before.get(flag) != after.get(flag)
        )

    @property
    def max_running(self) -> int | None:
        value = self.get("max_running_requests")
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# The derived signals, in order. Units are in the names; usages are 0–1 fractions.
SIGNAL_NAMES: tuple[str, ...] = (
    "accept_length",
    "tokens_per_verify",
    "spec_accept_rate",
    "tpot_s",
    "step_latency_s",
    "output_tok_s",
    "per_request_tok_s",
    "running",
    "queued",
    "max_running",
    "state_pool_usage",
    "kv_usage",
    "token_usage",
    "avg_context_tokens",
    "cache_hit_rate",
    "retractions_per_s",
    "ttft_s",
    "queue_time_s",
    # GPU telemetry (the DCGM exporter) and cost: unknown without an exporter, a price, or traffic.
    "gpu_count",
    "gpu_power_w",
    "gpu_util",
    "tokens_per_joule",
    "joules_per_token",
    "output_tok_s_per_gpu",
    "usd_per_million_tokens",
)


@dataclass(frozen=True, slots=True)
class Signals:
    """What one scrape cycle derived for one target. Every field may be None (unknown)."""

    accept_length: float | None = (
        None  # sglang:spec_accept_length (decode-log window), tokens per verify step
    )
    tokens_per_verify: float | None = None  # Δgeneration_tokens_total / Δspec_verify_calls_total
    spec_accept_rate: float | None = None
    tpot_s: float | None = None  # Δinter_token_latency_seconds_sum / Δ_count
    step_latency_s: float | None = None  # accept_length × tpot_s: wall time of one verify step
    output_tok_s: float | None = None  # rate(generation_tokens_total), gen_throughput as fallback
    per_request_tok_s: float | None = None  # accept_length / step_latency_s = 1 / tpot_s
    running: float | None = None
    queued: float | None = None
    max_running: float | None = None  # from the recipe (max_running_requests)
    state_pool_usage: float | None = None  # sglang:mamba_usage
    kv_usage: float | None = None  # full_token_usage, or kv_used_tokens / max_total_num_tokens
    token_usage: float | None = None  # SGLang's max over pools; kept only to show the trap
    avg_context_tokens: float | None = None  # decode_sum_seq_lens / num_running_reqs
    cache_hit_rate: float | None = None
    retractions_per_s: float | None = None
    ttft_s: float | None = None  # window mean of time_to_first_token_seconds
    queue_time_s: float | None = None  # window mean of queue_time_seconds
    gpu_count: float | None = None  # /server_info tp × pp × dp, else the DCGM exporter's GPU series
    gpu_power_w: float | None = None  # rate of the GPUs' energy counter (W), summed over the server's GPUs
    gpu_util: float | None = None  # DCGM_FI_DEV_GPU_UTIL / 100, mean over the server's GPUs
    tokens_per_joule: float | None = None  # output_tok_s / gpu_power_w
    joules_per_token: float | None = None  # gpu_power_w / output_tok_s (unknown while idle)
    output_tok_s_per_gpu: float | None = None  # output_tok_s / gpu_count
    usd_per_million_tokens: float | None = None  # cost.gpu_hour_usd × gpu_count / output tok per hour × 1e6

    def as_dict(self) -> dict[str, float | None]:
        # The names once, not dataclasses.fields() per call: a cycle of 1,000 targets asks ~1,400 times.
        return {name: getattr(self, name) for name in _SIGNAL_FIELDS}


_SIGNAL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Signals))


def loss_shares(step_factor: float, accept_factor: float) -> tuple[float, float] | None:
    """(step share, accept share) of a throughput change = step-latency factor × accept-length factor.

    Each share is log(factor) / log(product), so the two add up exactly. None when the change is too small to
    split or the factors pull in opposite directions (one half gained what the other lost).
    """
    if step_factor <= 0 or accept_factor <= 0:
        return None
    log_step, log_accept = math.log(step_factor), math.log(accept_factor)
    total = log_step + log_accept
    if abs(total) < 1e-9 or log_step * log_accept < 0:
        return None
    return log_step / total, log_accept / total


@dataclass(frozen=True, slots=True)
class TargetSnapshot:
    """One target at one cycle: health, derived signals and the recipe in force."""

    target: str
    ts: float  # unix seconds at the end of the scrape
    up: bool
    error: str | None = None  # the last error in words; None when the scrape was clean
    signals: Signals = field(default_factory=Signals)
    recipe_id: str | None = None
    deployment: str = ""
    scrape_duration_s: float | None = None
    # True when the source could not say how the target is (Prometheus unreachable, or a partial answer
    # without it): ``up`` is then False but means *not known*, never down, and every signal is None.
    unknown: bool = False
    # The events each configured SLI counted since the previous scrape, as (SLI key, good, total)
    # (``collectors.slo``); an SLI absent here is unknown this cycle (first scrape, restart, not exposed).
    slo_events: tuple[tuple[str, float, float], ...] = ()

    def as_record(self, recipe: Recipe | None = None) -> dict[str, Any]:
        """The snapshot JSON of ``python -m collectors --json`` (flat; null for unknown)."""
        record: dict[str, Any] = {"target": self.target, "ts": self.ts, "up": self.up, "error": self.error}
        record.update(self.signals.as_dict())
        record["deployment"] = self.deployment
        record["scrape_duration_s"] = self.scrape_duration_s
        record["recipe"] = recipe.as_dict() if recipe is not None else None
        record["recipe_id"] = self.recipe_id
        if self.unknown:
            record["up"] = None  # JSON null: unknown, not down
        return record


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """How the source answered one cycle: a blind source makes every target unknown, never down.

    ``answered`` is False when it could not answer at all (unreachable, timeout, 5xx, garbage): ``error`` says
    why. ``warnings`` list what a partial answer lacked (Thanos/Mimir ``warnings``, failed or odd queries,
    targets whose series went missing); the targets concerned are unknown. The direct source is always
    healthy.
    """

    source: str  # "direct" or "prometheus"
    url: str = ""  # where it reads from, credentials redacted
    answered: bool = True
    error: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def problem(self) -> str | None:
        """The one line to show (banner, log), or None when the answer was whole."""
        where = f" at {self.url}" if self.url else ""
        if not self.answered:
            return f"{self.source} source{where} cannot answer: {self.error or 'no reason given'}"
        if self.warnings:
            return f"{self.source} source{where} answered partially: " + "; ".join(self.warnings)
        return None


@dataclass(frozen=True, slots=True)
class TargetHealth:
    """How scraping one target is going, as of the last cycle."""

    target: str
    up: bool
    error: str | None
    scrape_duration_s: float | None
    last_success_ts: float | None
    staleness_s: float | None  # seconds since the last successful scrape (None: never scraped successfully)
    consecutive_failures: int
    recipe_id: str | None


@dataclass(frozen=True, slots=True)
class CollectorHealth:
    """How the collector itself is going: cycles, the store, the targets file, and every target.

    ``collectors.runner.Collector.health()`` fills it; the dashboard's sidebar and /metrics read it.
    """

    cycles: int
    last_cycle_ts: float | None
    last_cycle_duration_s: float | None
    store_error: str | None  # the last store failure in words; None once writes succeed again
    pending_rows: int  # snapshots waiting in memory for the store
    dropped_rows: int  # snapshots dropped because the store failed for too long
    config_error: str | None  # the last targets_file reload failure; None once a reload succeeds
    targets: tuple[TargetHealth, ...]
    # The last cycle's source health: blind or partial makes targets unknown (never down).
    source: SourceHealth = SourceHealth("direct")
    # The store was found corrupt and moved aside (which file, when, what was recovered); kept while running.
    store_notice: str | None = None


EventKind = Literal["restart", "recipe_change", "up", "down", "alert", "config"]


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to a target, kept in history and drawn as a marker on charts."""

    ts: float
    target: str
    kind: EventKind
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
