"""The signal catalogue: every derived signal declared once, and every rendering reads it.

A signal is a name (as in ``collectors.model.SIGNAL_NAMES``), a unit, a help text, and an expression over
SGLang families built from the few nodes below (gauge snapshot, counter rate, ratio, fallback chain,
guards). The renderings interpret the same expression:

- ``collectors.derive`` compiles it to Python closures once at import (the direct source, per scrape);
- ``collectors.prometheus.queries`` renders it as PromQL (the Prometheus source's instant and range queries,
  the recording rules of ``export-recording-rules``, the recordings the exported alert rules read);
- ``collectors.exporter`` publishes the help texts and units on the collector's own /metrics.

The families are SGLang's, read with the same rules everywhere: both spellings (``sglang:`` as exposed,
``sglang_`` as OpenMetrics renames it), ``tp_rank="0"`` (or no rank: tokenizer series), ``priority=""`` for
scheduler gauges only (their all-priorities total under ``--enable-priority-scheduling``), and counters and
histograms summed over every other label (``priority``, ``is_streaming``, ``cache_source``), because the
tokenizer splits them by request priority with no total series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from collectors.signal_expr import (
    Count,
    Expr,
    Family,
    First,
    Gauge,
    Inverse,
    Param,
    Positive,
    Product,
    Rate,
    Ratio,
    Ref,
    Scale,
    Total,
    Unless,
    When,
    Zero,
    families_of,
    mean,
    params_of,
    refs_of,
)

# Completion-counted rates span at least this long in the direct source (the Prometheus source's rate window
# defaults to at least a minute too): a few finished requests, not zero or one.
COMPLETION_WINDOW_S = 60.0
Windowing = Literal[
    "gauge snapshot", "counter rate", "histogram window mean", "ratio of rates", "derived", "recipe"
]
# What a signal is when the recipe says speculative decoding is off: as computed, exactly 1, unknown, or
# recomputed from the other signals (step latency = 1 × TPOT).
Plain = Literal["as computed", "one", "unknown", "recomputed"]


__all__ = [
    "BY_NAME",
    "COMPLETION_WINDOW_S",
    "GPU_COUNT_APPROXIMATION",
    "GPU_SIGNALS",
    "PROMQL_APPROXIMATION",
    "SIGNALS",
    "Count",
    "Expr",
    "Family",
    "First",
    "Gauge",
    "Inverse",
    "Param",
    "Positive",
    "Product",
    "Rate",
    "Ratio",
    "Recording",
    "Ref",
    "Scale",
    "Signal",
    "Total",
    "Unless",
    "When",
    "Zero",
    "all_families",
    "config_params",
    "families_of",
    "format_duration",
    "gpu_families",
    "mean",
    "params_needed",
    "recordings",
]

# -- the families --------------------------------------------------------------------------------------------
RUNNING = Family("num_running_reqs", "gauge", "0.3.6")
QUEUED = Family("num_queue_reqs", "gauge", "0.3.6")
GEN_THROUGHPUT = Family("gen_throughput", "gauge", "0.3.6")
TOKEN_USAGE = Family("token_usage", "gauge", "0.3.6")
FULL_TOKEN_USAGE = Family("full_token_usage", "gauge", "0.5.10")
MAMBA_USAGE = Family("mamba_usage", "gauge", "0.5.5")
MAMBA_USED = Family("mamba_used_tokens", "gauge", "0.5.12")
MAMBA_AVAILABLE = Family("mamba_available_tokens", "gauge", "0.5.12")
MAMBA_EVICTABLE = Family("mamba_evictable_tokens", "gauge", "0.5.12")
KV_USED = Family("kv_used_tokens", "gauge", "0.5.11")
NUM_USED = Family("num_used_tokens", "gauge", "0.3.6")
MAX_TOTAL = Family("max_total_num_tokens", "gauge", "0.5.6")
DECODE_SUM_SEQ_LENS = Family("decode_sum_seq_lens", "gauge", "0.5.7")
ACCEPT_LENGTH = Family("spec_accept_length", "gauge", "0.4.2")
ACCEPT_RATE = Family("spec_accept_rate", "gauge", "0.5.4")
REALTIME_DECODE = Family("realtime_tokens_total", "counter", "0.5.7", (("mode", "decode"),))
GENERATION = Family("generation_tokens_total", "counter", "0.3.6", at_completion=True)
PROMPT = Family("prompt_tokens_total", "counter", "0.3.6", at_completion=True)
CACHED = Family("cached_tokens_total", "counter", "0.4.4", at_completion=True)
VERIFY_CALLS = Family("spec_verify_calls_total", "counter", "0.5.13", at_completion=True)
RETRACTED = Family("num_retracted_requests_total", "counter", "0.5.7")
REQUESTS = Family("num_requests_total", "counter", "0.4.2")  # restarts: resets of the request counter
ITL = Family("inter_token_latency_seconds", "histogram", "0.4.4")
TTFT = Family("time_to_first_token_seconds", "histogram", "0.3.6")
QUEUE_TIME = Family("queue_time_seconds", "histogram", "0.5.3")

# The DCGM exporter's fields (dcgm-exporter's default counters), one series per GPU: summed (watts, joules)
# or averaged (utilization) over the server's GPUs.
GPU_POWER = Family("DCGM_FI_DEV_POWER_USAGE", "gauge", "dcgm", exposer="dcgm")
GPU_ENERGY = Family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "dcgm", exposer="dcgm")  # mJ
GPU_UTIL = Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "dcgm", exposer="dcgm")  # %

NOTHING_RUNNING = Zero(Gauge(RUNNING, "sum"))
# The decode-log window's mean keeps its last value while the server idles: trust it only while busy.
LIVE_ACCEPT_GAUGE = Unless(Positive(Gauge(ACCEPT_LENGTH)), NOTHING_RUNNING)


@dataclass(frozen=True, slots=True)
class Signal:
    """One derived signal, declared once."""

    name: str
    unit: str
    help: str
    expr: Expr | None  # None: not read from /metrics (max_running comes from the recipe)
    windowing: Windowing
    unknown: str  # what None means for this signal
    plain: Plain = "as computed"
    record: str = ""  # recorded series name; "{w}" is the rate window (e.g. 1m)
    approximation: str = ""  # where PromQL cannot say exactly what the direct derivation does
    fallbacks: tuple[str, ...] = ()  # the chain in words, by SGLang version

    @property
    def families(self) -> tuple[Family, ...]:
        seen: dict[str, Family] = {}
        for family in families_of(self.expr) if self.expr is not None else ():
            seen.setdefault(family.name, family)
        return tuple(seen.values())

    @property
    def windowed(self) -> bool:
        return "{w}" in self.record


_KV_CAPACITY = Positive(Gauge(MAX_TOTAL))
_POOL_SLOTS = Total((Gauge(MAMBA_USED, "sum"), Gauge(MAMBA_AVAILABLE, "sum"), Gauge(MAMBA_EVICTABLE, "sum")))
_IDLE_ZERO = NOTHING_RUNNING  # 0 where nothing runs: the one case where zero throughput is the truth

AVG_CONTEXT_BIAS = (
    "SGLang writes decode_sum_seq_lens only in decode reports but num_running_reqs in prefill reports too "
    "(the running batch when the prefill batch was logged), and exposes no running count of the decode "
    "report itself, so after a prefill report the ratio divides the last decode batch's context by a batch "
    "size that "
    "requests finished or admitted since may have changed: a bias of the requests that changed in under one "
    "decode-log interval (40 steps by default), small next to a batch of tens; the direct and Prometheus "
    "sources both read the two gauges from the same scrape, so they share it"
)

# A table on purpose: one literal entry per signal, so neighbours look alike; every rendering reads it.
SIGNALS: tuple[Signal, ...] = (
    Signal(
        "accept_length",
        "tokens",
        "Accepted tokens per request per verify step (spec_accept_length; 1 without speculative decoding).",
        First((LIVE_ACCEPT_GAUGE, Ref("tokens_per_verify"))),
        "gauge snapshot",
        "speculative decoding on but the gauge is 0/absent or stale (idle) and no request finished in the "
        "window",
        plain="one",
        record="instance_job:sglang_spec_accept_length:max",
        fallbacks=(
            "sglang:spec_accept_length (0.4.2+) while requests run and it is > 0",
            "else tokens_per_verify (generation / verify calls, completion-weighted, 0.5.13+)",
        ),
    ),
    Signal(
        "tokens_per_verify",
        "tokens",
        "Generated tokens per verify call over the window, weighted by completed requests.",
        Ratio(Rate(GENERATION), Rate(VERIFY_CALLS)),
        "ratio of rates",
        "no request finished in the window, or SGLang older than 0.5.13 (no spec_verify_calls_total)",
        record="instance_job:sglang_tokens_per_verify:ratio_rate{w}",
    ),
    Signal(
        "spec_accept_rate",
        "ratio",
        "Accepted / proposed draft tokens in the last decode-log window (definition varies by SGLang "
        "version).",
        When(Gauge(ACCEPT_RATE), LIVE_ACCEPT_GAUGE),
        "gauge snapshot",
        "no speculative decoding, idle server, or SGLang older than 0.5.4",
        plain="unknown",
        record="instance_job:sglang_spec_accept_rate:max",
    ),
    Signal(
        "tpot_s",
        "seconds",
        "Mean inter-token latency over the window (per streamed token).",
        mean(ITL),
        "histogram window mean",
        "no token streamed in the window",
        record="instance_job:sglang_tpot_seconds:mean{w}",
    ),
    Signal(
        "step_latency_s",
        "seconds",
        "Wall time of one verify step: accept_length × tpot_s.",
        Product(Ref("accept_length"), Ref("tpot_s")),
        "derived",
        "accept_length or tpot_s unknown",
        plain="recomputed",
        record="instance_job:sglang_step_latency_seconds:mean{w}",
    ),
    Signal(
        "output_tok_s",
        "tokens/s",
        "Decode throughput: tokens generated per second, counted per batch (not at request completion).",
        First(
            (
                Positive(Rate(REALTIME_DECODE)),
                Positive(Gauge(GEN_THROUGHPUT)),
                _IDLE_ZERO,
            )
        ),
        "counter rate",
        "requests are running but neither the decode counter nor the gauge moved (or neither exists)",
        record="instance_job:sglang_output_tokens_per_second:rate{w}",
        fallbacks=(
            'rate(sglang:realtime_tokens_total{mode="decode"}) (0.5.7+, per batch), when > 0',
            "else sglang:gen_throughput (the last decode-log window), when > 0",
            "else 0 only when nothing is running; never 0 while requests decode",
            "sglang:generation_tokens_total is not used: it moves only when a request finishes",
        ),
    ),
    Signal(
        "per_request_tok_s",
        "tokens/s",
        "Tokens per second one request sees: 1 / tpot_s.",
        Inverse(Ref("tpot_s")),
        "derived",
        "tpot_s unknown",
        record="instance_job:sglang_per_request_tokens_per_second:mean{w}",
    ),
    Signal(
        "running",
        "requests",
        "Running requests (the decode batch).",
        Gauge(RUNNING, "sum"),
        "gauge snapshot",
        "never exposed",
        record="instance_job:sglang_num_running_reqs:sum",
    ),
    Signal(
        "queued",
        "requests",
        "Requests waiting in the queue.",
        Gauge(QUEUED, "sum"),
        "gauge snapshot",
        "never exposed",
        record="instance_job:sglang_num_queue_reqs:sum",
    ),
    Signal(
        "max_running",
        "requests",
        "The server's cap on running requests (max_running_requests from /server_info).",
        None,
        "recipe",
        "no recipe (no /server_info, or not yet read)",
    ),
    Signal(
        "state_pool_usage",
        "ratio",
        "Recurrent-state (Mamba) pool in use, 0-1.",
        First(
            (
                When(Gauge(MAMBA_USAGE), Positive(_POOL_SLOTS)),
                Unless(Positive(Gauge(MAMBA_USAGE)), Gauge(MAMBA_AVAILABLE, "sum")),
            )
        ),
        "gauge snapshot",
        "the model has no Mamba pool (SGLang publishes 0 for it), or SGLang older than 0.5.5",
        record="instance_job:sglang_state_pool_usage:ratio",
        fallbacks=(
            "sglang:mamba_usage where the pool has slots (mamba_used+available+evictable_tokens > 0, "
            "0.5.12+)",
            "0.5.5-0.5.11 (no slot counts): mamba_usage only when > 0, since 0 cannot tell an idle pool "
            "from none",
        ),
    ),
    Signal(
        "kv_usage",
        "ratio",
        "Full-attention KV pool in use, 0-1 (never token_usage, which is max over pools on hybrid models).",
        First(
            (
                Gauge(FULL_TOKEN_USAGE),
                Ratio(Gauge(KV_USED), _KV_CAPACITY),
                Ratio(Gauge(NUM_USED), _KV_CAPACITY),
            )
        ),
        "gauge snapshot",
        "SGLang older than 0.5.6 (no KV capacity gauge)",
        record="instance_job:sglang_kv_usage:ratio",
        fallbacks=(
            "sglang:full_token_usage (0.5.10+)",
            "else kv_used_tokens / max_total_num_tokens (0.5.11+)",
            "else num_used_tokens / max_total_num_tokens (0.5.6+; never includes the Mamba pool)",
        ),
    ),
    Signal(
        "token_usage",
        "ratio",
        "SGLang's token_usage: max over pools on hybrid models (kept only to show the trap).",
        Gauge(TOKEN_USAGE),
        "gauge snapshot",
        "never exposed",
        record="instance_job:sglang_token_usage:max",
    ),
    Signal(
        "avg_context_tokens",
        "tokens",
        "Mean context per running request: decode_sum_seq_lens / num_running_reqs.",
        Ratio(Gauge(DECODE_SUM_SEQ_LENS, "sum"), Gauge(RUNNING, "sum")),
        "gauge snapshot",
        "nothing running, or SGLang older than 0.5.7",
        record="instance_job:sglang_avg_context_tokens:ratio",
        fallbacks=(AVG_CONTEXT_BIAS,),
    ),
    Signal(
        "cache_hit_rate",
        "ratio",
        "Prompt tokens served from the prefix cache over the window (cached / prompt tokens).",
        Ratio(Rate(CACHED), Rate(PROMPT)),
        "ratio of rates",
        "no prompt finished in the window (the last-prefill-batch gauge is not mixed in)",
        record="instance_job:sglang_cache_hit_rate:ratio_rate{w}",
    ),
    Signal(
        "retractions_per_s",
        "1/s",
        "Requests retracted (evicted back to the queue) per second.",
        Rate(RETRACTED),
        "counter rate",
        "SGLang older than 0.5.7, or no window yet",
        record="instance_job:sglang_retractions:rate{w}",
    ),
    Signal(
        "ttft_s",
        "seconds",
        "Mean time to first token of the requests that got one in the window.",
        mean(TTFT),
        "histogram window mean",
        "no first token in the window",
        record="instance_job:sglang_ttft_seconds:mean{w}",
    ),
    Signal(
        "queue_time_s",
        "seconds",
        "Mean time in the queue of the requests admitted in the window.",
        mean(QUEUE_TIME),
        "histogram window mean",
        "no request left the queue in the window",
        record="instance_job:sglang_queue_time_seconds:mean{w}",
    ),
)

# Output tokens per GPU-hour priced: $ per million tokens = price × GPUs / (tok/s × 3600 s/h / 1e6).
_MILLION_TOKENS_PER_HOUR = 3600.0 / 1e6

GPU_SIGNALS: tuple[Signal, ...] = (
    Signal(
        "gpu_count",
        "GPUs",
        "GPUs the server runs on (/server_info tp_size × pp_size × dp_size, or the exporter's).",
        Count(GPU_POWER),
        "recipe",
        "no /server_info with tp_size, and no GPU telemetry (targets[].gpu_exporter_url) for the server",
        record="instance_job:dcgm_gpus:count",
        fallbacks=(
            "/server_info: tp_size × pp_size × dp_size (dp_size not counted under enable_dp_attention, "
            "where the DP ranks share the TP GPUs)",
            "else the number of GPU series the DCGM exporter shows for the server",
        ),
    ),
    Signal(
        "gpu_power_w",
        "watts",
        "Power of the server's GPUs: the energy counter's rate (mJ/s ÷ 1000), else the power gauges, summed.",
        First((Positive(Scale(Rate(GPU_ENERGY), 0.001)), Gauge(GPU_POWER, "sum"))),
        "counter rate",
        "no GPU telemetry, the exporter did not answer, or it shows other GPUs than the server's",
        record="instance_job:dcgm_power_watts:rate{w}",
        fallbacks=(
            "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) / 1000 summed over the server's GPUs, when > 0 "
            "(the mean over the window, as the tokens are counted)",
            "else DCGM_FI_DEV_POWER_USAGE summed (the exporter's instantaneous reading)",
        ),
    ),
    Signal(
        "gpu_util",
        "ratio",
        "GPU utilization, 0-1: DCGM_FI_DEV_GPU_UTIL averaged over the server's GPUs.",
        Scale(Gauge(GPU_UTIL, "avg"), 0.01),
        "gauge snapshot",
        "no GPU telemetry, or the exporter lacks DCGM_FI_DEV_GPU_UTIL",
        record="instance_job:dcgm_gpu_utilization:avg",
    ),
    Signal(
        "tokens_per_joule",
        "tokens/J",
        "Output tokens per joule of GPU energy: output_tok_s / gpu_power_w (0 while idle: energy spent, "
        "no tokens).",
        Ratio(Ref("output_tok_s"), Ref("gpu_power_w")),
        "derived",
        "output_tok_s or gpu_power_w unknown",
        record="instance_job:sglang_output_tokens_per_joule:ratio{w}",
    ),
    Signal(
        "joules_per_token",
        "J/token",
        "GPU energy per output token: gpu_power_w / output_tok_s.",
        Ratio(Ref("gpu_power_w"), Ref("output_tok_s")),
        "derived",
        "gpu_power_w unknown, or nothing generated (idle: never infinite)",
        record="instance_job:sglang_joules_per_output_token:ratio{w}",
    ),
    Signal(
        "output_tok_s_per_gpu",
        "tokens/s",
        "Decode throughput per GPU: output_tok_s / gpu_count (the fleet's lane of the recipes' Pareto).",
        Ratio(Ref("output_tok_s"), Ref("gpu_count")),
        "derived",
        "output_tok_s or gpu_count unknown",
        record="instance_job:sglang_output_tokens_per_second_per_gpu:ratio{w}",
    ),
    Signal(
        "usd_per_million_tokens",
        "USD",
        "Cost of a million output tokens: cost.gpu_hour_usd × gpu_count / (output_tok_s × 3600) × 1e6.",
        Ratio(
            Product(Param("gpu_hour_usd"), Ref("gpu_count")),
            Scale(Ref("output_tok_s"), _MILLION_TOKENS_PER_HOUR),
        ),
        "derived",
        "no price (cost.gpu_hour_usd), gpu_count unknown, or nothing generated (idle: never infinite)",
        record="instance_job:sglang_usd_per_million_output_tokens:ratio{w}",
    ),
)
SIGNALS = SIGNALS + GPU_SIGNALS

BY_NAME: dict[str, Signal] = {signal.name: signal for signal in SIGNALS}

# Where the PromQL renderings count GPUs differently from the sources (said once, quoted by the docs).
GPU_COUNT_APPROXIMATION = (
    "PromQL counts a server's GPUs as the DCGM series joined to its node (prometheus.node_label = "
    "prometheus.gpu_node_label); the Prometheus source then prefers /server_info's count as the direct "
    "source does, and leaves the GPU figures unknown when the node shows more GPUs than the server uses. "
    "The recording rules cannot read /server_info: on a node shared by several servers they record the "
    "node's GPUs for each, unless the join label tells the servers apart (a pod label under Kubernetes)."
)

# The one approximation every PromQL rendering shares (said once here, quoted by each rendering).
PROMQL_APPROXIMATION = (
    "PromQL rates use rate() over the rate window, which extrapolates to the window's edges, where the "
    "direct "
    "source divides the counter change between two scrapes by the monotonic time between them; on a steady "
    "server they agree, across a window boundary a PromQL rate can differ by one scrape's worth of change. "
    "Gauges are aggregated over DP ranks (max for fractions, sum for counts) where the direct source reads "
    "the "
    "tp_rank 0 series."
)

# Families read by the sources themselves (health and restarts), not by a signal.
EXTRA_FAMILIES: tuple[Family, ...] = (REQUESTS,)


def all_families() -> tuple[Family, ...]:
    """Every SGLang family a signal reads, once, in catalogue order (what /metrics is read for)."""
    seen: dict[str, Family] = {}
    for signal in SIGNALS:
        for family in signal.families:
            if family.exposer == "sglang":
                seen.setdefault(family.name, family)
    return tuple(seen.values())


def gpu_families() -> tuple[Family, ...]:
    """Every DCGM family a signal reads (what the GPU exporter is read for)."""
    seen: dict[str, Family] = {}
    for signal in SIGNALS:
        for family in signal.families:
            if family.exposer == "dcgm":
                seen.setdefault(family.name, family)
    return tuple(seen.values())


def config_params(gpu_hour_usd: float | None) -> dict[str, float | None]:
    """The numbers the catalogue's ``Param`` nodes read (``cost.gpu_hour_usd``), by name."""
    return {"gpu_hour_usd": gpu_hour_usd}


def params_needed(name: str) -> frozenset[str]:
    """The config parameters a signal reads, through the signals it refers to."""
    expr = BY_NAME[name].expr
    if expr is None:
        return frozenset()
    found = set(params_of(expr))
    for ref in refs_of(expr):
        found |= params_needed(ref)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class Recording:
    """One recorded series: its name (``level:metric:operations``), the signal it carries, and the help."""

    record: str
    signal: str
    help: str


def format_duration(seconds: float) -> str:
    """A PromQL duration: whole minutes as ``Nm``, whole seconds as ``Ns``, otherwise milliseconds."""
    millis = max(round(seconds * 1000), 1)
    if millis % 60_000 == 0:
        return f"{millis // 60_000}m"
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


def recordings(rate_window_s: float) -> tuple[Recording, ...]:
    """The recorded series, in evaluation order; rate-window names carry the window (e.g. ``mean1m``).

    Recorded series keep exactly the labels ``instance`` and ``job``.
    """
    window = format_duration(rate_window_s)
    return tuple(
        Recording(signal.record.replace("{w}", window), signal.name, signal.help)
        for signal in SIGNALS
        if signal.record
    )
