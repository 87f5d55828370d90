"""The PromQL text of every signal, written once and shared by the Prometheus source, its history reader and
the exported recording rules, so Grafana, alerts and specwatch all read the same numbers.

Every expression returns one series per target, labelled exactly ``instance`` and ``job``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from config.errors import ConfigError
from config.settings import Config

TARGET_LABELS: tuple[str, ...] = ("instance", "job")
_BY = "by (instance, job)"

# One label matcher: name, operator, double-quoted value (with escapes). Used to check prometheus.selector.
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"(?:{_MATCHER}(?:,{_MATCHER})*,?\s*)?")


def parse_selector(text: str, source: str = "<config>") -> str:
    """Check ``prometheus.selector`` and return it without braces (``job="sglang", region=~"eu-.*"``)."""
    inner = text.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    if not _SELECTOR.fullmatch(inner):
        raise ConfigError(
            source,
            "prometheus.selector",
            'comma-separated label matchers such as job="sglang", region=~"eu-.*"',
            text,
            "values need double quotes; operators are = != =~ !~",
        )
    return inner.strip().rstrip(",").strip()


def format_duration(seconds: float) -> str:
    """A PromQL duration: whole minutes as ``Nm``, whole seconds as ``Ns``, otherwise milliseconds."""
    millis = max(round(seconds * 1000), 1)
    if millis % 60_000 == 0:
        return f"{millis // 60_000}m"
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


def default_rate_window_s(scrape_interval_s: float) -> float:
    """rate() needs several samples in its window: four scrape intervals, and never less than a minute."""
    return max(4.0 * scrape_interval_s, 60.0)


@dataclass(frozen=True, slots=True)
class Recording:
    """One recorded series: its name (``level:metric:operations``), the signal it carries, and the help."""

    record: str
    signal: str
    help: str


def recordings(rate_window_s: float) -> tuple[Recording, ...]:
    """The recorded series, in evaluation order; rate-window names carry the window (e.g. ``mean1m``)."""
    w = format_duration(rate_window_s)
    return (
        Recording("instance_job:sglang_spec_accept_length:max", "accept_length", "tokens per verify step"),
        Recording(
            f"instance_job:sglang_tokens_per_verify:ratio_rate{w}",
            "tokens_per_verify",
            "generated tokens per verify call, completion-weighted",
        ),
        Recording(
            "instance_job:sglang_spec_accept_rate:max", "spec_accept_rate", "accepted / proposed drafts"
        ),
        Recording(f"instance_job:sglang_tpot_seconds:mean{w}", "tpot_s", "mean inter-token latency"),
        Recording(
            f"instance_job:sglang_step_latency_seconds:mean{w}",
            "step_latency_s",
            "wall time of one verify step = accept length × TPOT",
        ),
        Recording(
            f"instance_job:sglang_output_tokens_per_second:rate{w}",
            "output_tok_s",
            "generated tokens per second",
        ),
        Recording(
            f"instance_job:sglang_per_request_tokens_per_second:mean{w}",
            "per_request_tok_s",
            "tokens per second one request sees = 1 / TPOT",
        ),
        Recording("instance_job:sglang_num_running_reqs:sum", "running", "running requests"),
        Recording("instance_job:sglang_num_queue_reqs:sum", "queued", "waiting requests"),
        Recording(
            "instance_job:sglang_state_pool_usage:ratio",
            "state_pool_usage",
            "recurrent-state (Mamba) pool in use",
        ),
        Recording("instance_job:sglang_kv_usage:ratio", "kv_usage", "full-attention KV pool in use"),
        Recording("instance_job:sglang_token_usage:max", "token_usage", "SGLang's max over pools (not KV)"),
        Recording(
            "instance_job:sglang_avg_context_tokens:ratio",
            "avg_context_tokens",
            "mean context per running request",
        ),
        Recording(
            f"instance_job:sglang_cache_hit_rate:ratio_rate{w}",
            "cache_hit_rate",
            "prompt tokens served from cache",
        ),
        Recording(
            f"instance_job:sglang_retractions:rate{w}", "retractions_per_s", "retracted requests per second"
        ),
        Recording(f"instance_job:sglang_ttft_seconds:mean{w}", "ttft_s", "mean time to first token"),
        Recording(
            f"instance_job:sglang_queue_time_seconds:mean{w}", "queue_time_s", "mean time in the queue"
        ),
    )


@dataclass(frozen=True, slots=True)
class SignalQueries:
    """Builds the PromQL of each signal for one fleet selector and rate window.

    ``gauge_window_s`` (range queries only) turns gauges into ``avg_over_time`` over that window and widens
    rate windows to it, so a downsampled point averages its whole step like the embedded store's buckets.
    """

    selector: str = ""
    rate_window_s: float = 60.0
    gauge_window_s: float | None = None
    narrow: str = ""  # extra matchers on instance/job (a Server page reads one target)
    recorded: bool = False  # read the series recorded by the exported rules instead of raw SGLang series

    # -- selectors -----------------------------------------------------------------------------------------
    @property
    def matchers(self) -> str:
        # tp_rank "0" or absent: the stats-logging scheduler rank, and tokenizer series (which have none).
        # priority "" or absent: the all-priorities total when priority scheduling splits the gauges.
        parts = ['tp_rank=~"0|"', 'priority=""']
        parts += [m for m in (self.selector, self.narrow) if m]
        return ", ".join(parts)

    def series(self, name: str) -> str:
        """Both spellings of ``sglang:<name>``: colon as exposed, underscore as stored from OpenMetrics."""
        return f'{{__name__=~"sglang[:_]{name}", {self.matchers}}}'

    def _over_time(self, function: str, name: str, window: str) -> str:
        # Functions over range vectors drop the metric name, so a regex over both spellings could yield two
        # series with one label set ("vector cannot contain metrics with the same labelset") while a target
        # changes spelling; `or` keeps the colon series and adds the underscore one only where it is missing.
        return (
            f"{function}(sglang:{name}{{{self.matchers}}}[{window}]) "
            f"or {function}(sglang_{name}{{{self.matchers}}}[{window}])"
        )

    @property
    def window(self) -> str:
        seconds = self.rate_window_s
        if self.gauge_window_s is not None:
            seconds = max(seconds, self.gauge_window_s)
        return format_duration(seconds)

    # -- building blocks -------------------------------------------------------------------------------------
    def gauge(self, name: str, how: str = "max") -> str:
        """``how`` is max for fractions (the worst DP rank) and sum for counts (requests, tokens)."""
        if self.gauge_window_s is None:
            return f"{how} {_BY} ({self.series(name)})"
        window = format_duration(self.gauge_window_s)
        return f"{how} {_BY} ({self._over_time('avg_over_time', name, window)})"

    def rate(self, name: str) -> str:
        return f"sum {_BY} ({self._over_time('rate', name, self.window)})"

    def mean(self, histogram: str) -> str:
        """Window mean of a histogram: rate(_sum) / rate(_count), unknown when nothing was observed."""
        return f"({self.rate(histogram + '_sum')}) / ({self.rate(histogram + '_count')} > 0)"

    # -- the signals (names, units and fallbacks as in collectors.direct.derive) -----------------------------
    def _live_accept_gauge(self) -> str:
        # The decode-log window's mean keeps its last value while the server idles: only trust it while busy.
        running_zero = f"{self.gauge('num_running_reqs', 'sum')} == 0"
        return f"({self.gauge('spec_accept_length')} > 0) unless on (instance, job) ({running_zero})"

    def tokens_per_verify(self) -> str:
        return f"({self.rate('generation_tokens_total')}) / ({self.rate('spec_verify_calls_total')} > 0)"

    def accept_length(self) -> str:
        # The gauge while busy; else the completion-weighted counter ratio (older SGLang, idle, or gauge 0).
        return f"({self._live_accept_gauge()}) or ({self.tokens_per_verify()})"

    def spec_accept_rate(self) -> str:
        return f"{self.gauge('spec_accept_rate')} and on (instance, job) ({self._live_accept_gauge()})"

    def tpot_s(self) -> str:
        return self.mean("inter_token_latency_seconds")

    def step_latency_s(self) -> str:
        # The wall time of one verify step: accept length × TPOT (the denominator of throughput).
        return f"({self.accept_length()}) * ({self.tpot_s()})"

    def output_tok_s(self) -> str:
        # The counter rate where it has two samples in the window; SGLang's own gauge otherwise.
        return f"({self.rate('generation_tokens_total')}) or ({self.gauge('gen_throughput')})"

    def per_request_tok_s(self) -> str:
        return f"1 / (({self.tpot_s()}) > 0)"

    def kv_usage(self) -> str:
        # Never sglang:token_usage: on hybrid models it is max(full, mamba), i.e. usually the state pool.
        capacity = f"({self.gauge('max_total_num_tokens')} > 0)"
        return (
            f"({self.gauge('full_token_usage')}) "
            f"or ({self.gauge('kv_used_tokens')} / {capacity}) "
            f"or ({self.gauge('num_used_tokens')} / {capacity})"
        )

    def cache_hit_rate(self) -> str:
        # Prompt-token hit rate over the window; the gauge (last prefill batch only) when no prompt finished.
        windowed = f"({self.rate('cached_tokens_total')}) / ({self.rate('prompt_tokens_total')} > 0)"
        return f"({windowed}) or ({self.gauge('cache_hit_rate')})"

    def avg_context_tokens(self) -> str:
        return f"({self.gauge('decode_sum_seq_lens', 'sum')}) / ({self.gauge('num_running_reqs', 'sum')} > 0)"

    def signals(self) -> dict[str, str]:
        """PromQL per signal name; ``max_running`` is absent because it comes from the recipe."""
        if self.recorded:
            return {r.signal: self._recorded(r.record) for r in recordings(self.rate_window_s)}
        return {
            "accept_length": self.accept_length(),
            "tokens_per_verify": self.tokens_per_verify(),
            "spec_accept_rate": self.spec_accept_rate(),
            "tpot_s": self.tpot_s(),
            "step_latency_s": self.step_latency_s(),
            "output_tok_s": self.output_tok_s(),
            "per_request_tok_s": self.per_request_tok_s(),
            "running": self.gauge("num_running_reqs", "sum"),
            "queued": self.gauge("num_queue_reqs", "sum"),
            "state_pool_usage": self.gauge("mamba_usage"),
            "kv_usage": self.kv_usage(),
            "token_usage": self.gauge("token_usage"),
            "avg_context_tokens": self.avg_context_tokens(),
            "cache_hit_rate": self.cache_hit_rate(),
            "retractions_per_s": self.rate("num_retracted_requests_total"),
            "ttft_s": self.mean("time_to_first_token_seconds"),
            "queue_time_s": self.mean("queue_time_seconds"),
        }

    def _recorded(self, record: str) -> str:
        # Recorded series carry only instance and job (the rules already applied the fleet selector), so
        # only the instance narrowing applies here.
        selector = f"{record}{{{self.narrow}}}" if self.narrow else record
        if self.gauge_window_s is None:
            return f"max {_BY} ({selector})"
        return f"max {_BY} (avg_over_time({selector}[{format_duration(self.gauge_window_s)}]))"

    # -- health, discovery, labels ---------------------------------------------------------------------------
    def _plain(self, metric: str) -> str:
        matchers = ", ".join(m for m in (self.selector, self.narrow) if m)
        return f"{metric}{{{matchers}}}" if matchers else metric

    def up(self) -> str:
        """Prometheus's own scrape health; only meaningful when the selector uses target labels (job, ...)."""
        if self.gauge_window_s is None:
            return f"max {_BY} ({self._plain('up')})"
        return f"min {_BY} (min_over_time({self._plain('up')}[{format_duration(self.gauge_window_s)}]))"

    def scrape_duration_s(self) -> str:
        if self.gauge_window_s is None:
            return f"max {_BY} ({self._plain('scrape_duration_seconds')})"
        window = format_duration(self.gauge_window_s)
        return f"max {_BY} (avg_over_time({self._plain('scrape_duration_seconds')}[{window}]))"

    def present(self) -> str:
        """Targets with a fresh SGLang sample (the running-requests gauge: every version has it)."""
        return f"count {_BY} ({self.series('num_running_reqs')})"

    def seen_within(self, lookback_s: float) -> str:
        """Targets that reported within ``lookback_s``: the fleet as Prometheus remembers it."""
        window = format_duration(lookback_s)
        return f"count {_BY} ({self._over_time('last_over_time', 'num_running_reqs', window)})"

    def labelled(self) -> str:
        """The raw running-requests series: their labels carry model_name and any --extra-metric-labels."""
        return self.series("num_running_reqs")

    def restarts(self) -> str:
        """Counter resets of the tokenizer's request counter within the window: a server restart."""
        return f"sum {_BY} ({self._over_time('resets', 'num_requests_total', self.window)})"


def rate_window_s(config: Config) -> float:
    """prometheus.rate_window_s, else four scrape intervals and at least a minute."""
    explicit = config.prometheus.rate_window_s if config.prometheus is not None else None
    return explicit if explicit is not None else default_rate_window_s(config.scrape.interval_s)


def signal_queries(config: Config, *, source: str = "<config>") -> SignalQueries:
    """The PromQL builder for this config's selector and rate window (the selector is checked here)."""
    selector = parse_selector(config.prometheus.selector, source) if config.prometheus is not None else ""
    return SignalQueries(selector, rate_window_s(config))
