"""The PromQL rendering of the signal catalogue (``collectors.signals``), shared by the Prometheus source, its
history reader and the exported recording rules, so Grafana, alerts and specwatch all read the same numbers.

Every expression returns one series per target, labelled exactly ``instance`` and ``job``. Where PromQL cannot
say exactly what the direct derivation does, the catalogue's ``PROMQL_APPROXIMATION`` says how (one text,
quoted by the recording rules' header and the docs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collectors.signals import (
    BY_NAME,
    PROMQL_APPROXIMATION,
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
    Recording,
    Scale,
    Total,
    Unless,
    When,
    Zero,
    config_params,
    format_duration,
    params_needed,
    recordings,
)
from config.errors import ConfigError
from config.settings import Config

__all__ = [
    "NODE",
    "PROMQL_APPROXIMATION",
    "TARGET_LABELS",
    "MissingParam",
    "Recording",
    "SignalQueries",
    "default_rate_window_s",
    "format_duration",
    "parse_selector",
    "rate_window_s",
    "recordings",
    "signal_queries",
]

TARGET_LABELS: tuple[str, ...] = ("instance", "job")
_BY = "by (instance, job)"
# The label GPU series and SGLang series meet on (both sides' node, as prometheus.node_label and
# prometheus.gpu_node_label say); a name of specwatch's own, so it clashes with no label of either.
NODE = "specwatch_node"
# An ``instance`` label's host: "10.0.0.5:30000" → 10.0.0.5, "[::1]:9400" → ::1 (label_replace anchors it).
_HOST_OF_INSTANCE = r"\\[?(.+?)\\]?(?::[0-9]+)?"

# One label matcher: name, operator, double-quoted value (with escapes). Used to check prometheus.selector.
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"(?:{_MATCHER}(?:,{_MATCHER})*,?\s*)?")


def parse_selector(text: str, source: str = "<config>", key: str = "prometheus.selector") -> str:
    """Check ``prometheus.selector`` (or ``key``) and return it without braces (``job="sglang",
    region=~"eu-.*"``)."""
    inner = text.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    if not _SELECTOR.fullmatch(inner):
        raise ConfigError(
            source,
            key,
            'comma-separated label matchers such as job="sglang", region=~"eu-.*"',
            text,
            "values need double quotes; operators are = != =~ !~",
        )
    return inner.strip().rstrip(",").strip()


def default_rate_window_s(scrape_interval_s: float) -> float:
    """rate() needs several samples in its window: four scrape intervals, and never less than a minute."""
    return max(4.0 * scrape_interval_s, 60.0)


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
    gpu_selector: str = ""  # matchers picking the DCGM exporters' series (prometheus.gpu_selector)
    node_label: str = "instance"  # the SGLang series' label naming their node (instance: its host)
    gpu_node_label: str = "Hostname"  # the DCGM series' label naming their node (instance: its host)
    params: tuple[tuple[str, float | None], ...] = ()  # the config's numbers (cost.gpu_hour_usd)
    downsample_s: float = 300.0  # the downsampled recordings' resolution (prometheus.downsample_s)

    # -- selectors -----------------------------------------------------------------------------------------
    @property
    def matchers(self) -> str:
        # tp_rank "0" or absent: the stats-logging scheduler rank, and tokenizer series (which have none).
        # priority "" or absent: the all-priorities total when priority scheduling splits the gauges.
        # (Counters and histograms use ``cumulative_matchers``: summed over every priority.)
        parts = ['tp_rank=~"0|"', 'priority=""']
        parts += [m for m in (self.selector, self.narrow) if m]
        return ", ".join(parts)

    @property
    def cumulative_matchers(self) -> str:
        # Tokenizer counters and histograms exist only per request priority under priority scheduling (no
        # total series), so they are summed over ``priority`` like over ``is_streaming``.
        parts = ['tp_rank=~"0|"']
        parts += [m for m in (self.selector, self.narrow) if m]
        return ", ".join(parts)

    def series(self, name: str) -> str:
        """Both spellings of ``sglang:<name>``: colon as exposed, underscore as stored from OpenMetrics."""
        return f'{{__name__=~"sglang[:_]{name}", {self.matchers}}}'

    def _over_time(self, function: str, name: str, window: str, extra: str = "") -> str:
        # Functions over range vectors drop the metric name, so a regex over both spellings could yield two
        # series with one label set ("vector cannot contain metrics with the same labelset") while a target
        # changes spelling; `or` keeps the colon series and adds the underscore one only where it is missing.
        matchers = f"{extra}, {self.matchers}" if extra else self.matchers
        return (
            f"{function}(sglang:{name}{{{matchers}}}[{window}]) "
            f"or {function}(sglang_{name}{{{matchers}}}[{window}])"
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

    def rate(self, name: str, extra: str = "") -> str:
        window = self.window
        matchers = f"{extra}, {self.cumulative_matchers}" if extra else self.cumulative_matchers
        return (
            f"sum {_BY} (rate(sglang:{name}{{{matchers}}}[{window}]) "
            f"or rate(sglang_{name}{{{matchers}}}[{window}]))"
        )

    def mean(self, histogram: str) -> str:
        """Window mean of a histogram: rate(_sum) / rate(_count), unknown when nothing was observed."""
        return f"({self.rate(histogram + '_sum')}) / ({self.rate(histogram + '_count')} > 0)"

    # -- the GPUs: DCGM series joined to the server by node -------------------------------------------------
    def _relabel_node(self, vector: str, label: str) -> str:
        """``vector`` with the node it is on as ``specwatch_node`` (from ``label``; instance: its host)."""
        regex = _HOST_OF_INSTANCE if label == "instance" else "(.+)"
        return f'label_replace({vector}, "{NODE}", "$1", "{label}", "{regex}")'

    def _gpu_series(self, family: Family, extra: str = "") -> str:
        matchers = [m for m in (self.gpu_selector, extra) if m]
        if self.gpu_node_label != "instance":
            matchers.append(f'{self.gpu_node_label}!=""')  # a series naming no node joins no server
        return f"{family.name}{{{', '.join(matchers)}}}"

    def node_map(self) -> str:
        """One series per SGLang server (value 1), labelled with the node its GPUs are on."""
        by, matchers = "instance, job", self.matchers
        if self.node_label != "instance":
            by, matchers = f"{by}, {self.node_label}", f'{matchers}, {self.node_label}!=""'
        servers = f'group by ({by}) ({{__name__=~"sglang[:_]num_running_reqs", {matchers}}})'
        return self._relabel_node(servers, self.node_label)

    def _on_servers(self, per_node: str) -> str:
        """A per-node value given to each server on that node (as ``instance``/``job``)."""
        return f"sum {_BY} (({self.node_map()}) * on ({NODE}) group_left () ({per_node}))"

    def gpu_gauge(self, family: Family, how: str) -> str:
        """A DCGM gauge summed (or averaged) over the server's node's GPUs."""
        series = self._gpu_series(family)
        if self.gauge_window_s is not None:
            series = f"avg_over_time({series}[{format_duration(self.gauge_window_s)}])"
        return self._on_servers(f"{how} by ({NODE}) ({self._relabel_node(series, self.gpu_node_label)})")

    def gpu_count(self, family: Family) -> str:
        """How many GPUs of the server's node report the DCGM field."""
        series = self._gpu_series(family)
        if self.gauge_window_s is not None:
            series = f"last_over_time({series}[{format_duration(self.gauge_window_s)}])"
        return self._on_servers(f"count by ({NODE}) ({self._relabel_node(series, self.gpu_node_label)})")

    def gpu_rate(self, family: Family) -> str:
        """A DCGM counter's rate summed over the server's node's GPUs (rate() is reset-safe)."""
        series = f"rate({self._gpu_series(family)}[{self.window}])"
        return self._on_servers(f"sum by ({NODE}) ({self._relabel_node(series, self.gpu_node_label)})")

    # -- the catalogue rendered as PromQL -------------------------------------------------------------------
    def render(self, expr: Expr) -> str:
        """One catalogue expression as PromQL (references to other signals inlined); ``MissingParam`` when
        it reads a config number that is not set."""
        if isinstance(expr, Gauge):
            if expr.family.exposer == "dcgm":
                return self.gpu_gauge(expr.family, "sum" if expr.how == "max" else expr.how)
            return self.gauge(expr.family.name, expr.how)
        if isinstance(expr, Count):
            return self.gpu_count(expr.family)
        if isinstance(expr, Scale):
            return f"({self.render(expr.value)}) * {expr.factor!r}"
        if isinstance(expr, Param):
            value = dict(self.params).get(expr.name)
            if value is None:
                raise MissingParam(expr.name)
            return repr(float(value))
        if isinstance(expr, Rate):
            if expr.family.exposer == "dcgm":
                return self.gpu_rate(expr.family)
            extra = ", ".join(f'{label}="{value}"' for label, value in expr.family.match)
            return self.rate(expr.family.name + expr.part, extra)
        if isinstance(expr, Ratio):
            return f"({self.render(expr.numerator)}) / (({self.render(expr.denominator)}) > 0)"
        if isinstance(expr, Product):
            return f"({self.render(expr.left)}) * ({self.render(expr.right)})"
        if isinstance(expr, Inverse):
            return f"1 / (({self.render(expr.value)}) > 0)"
        if isinstance(expr, Total):
            return " + ".join(f"({self.render(part)})" for part in expr.parts)
        if isinstance(expr, Positive):
            return f"({self.render(expr.value)}) > 0"
        if isinstance(expr, Zero):
            return f"({self.render(expr.value)}) == 0"
        if isinstance(expr, When):
            return f"({self.render(expr.value)}) and on (instance, job) ({self.render(expr.condition)})"
        if isinstance(expr, Unless):
            return f"({self.render(expr.value)}) unless on (instance, job) ({self.render(expr.condition)})"
        if isinstance(expr, First):
            return " or ".join(f"({self.render(choice)})" for choice in expr.choices)
        return self.signal(expr.signal)

    def signal(self, name: str) -> str:
        """The PromQL of one catalogue signal."""
        expr = BY_NAME[name].expr
        if expr is None:
            raise ValueError(f"{name} is not read from SGLang's metrics (it comes from the recipe)")
        return self.render(expr)

    def recordings(self) -> tuple[Recording, ...]:
        """The recorded series this config renders: every catalogue recording but those reading a config
        number it does not set (no price: no cost series)."""
        given = {name for name, value in self.params if value is not None}
        return tuple(r for r in recordings(self.rate_window_s) if params_needed(r.signal) <= given)

    def signals(self) -> dict[str, str]:
        """PromQL per signal name; ``max_running`` is absent because it comes from the recipe, and signals
        reading an unset config number (``recordings``) are absent: unknown."""
        if self.recorded:
            return {r.signal: self._recorded(r.record) for r in self.recordings()}
        return {r.signal: self.signal(r.signal) for r in self.recordings()}

    def recorded_series(self, record: str) -> str:
        """A recorded series narrowed to this reader's instances. Recorded series carry only instance and job
        (the rules already applied the fleet selector), so only the instance narrowing applies."""
        return f"{record}{{{self.narrow}}}" if self.narrow else record

    def _recorded(self, record: str) -> str:
        selector = self.recorded_series(record)
        if self.gauge_window_s is None:
            return f"max {_BY} ({selector})"
        return f"max {_BY} (avg_over_time({selector}[{format_duration(self.gauge_window_s)}]))"

    # -- health, discovery, labels ---------------------------------------------------------------------------
    def selected(self, metric: str) -> str:
        """``metric`` with the fleet selector and the narrowing (a series not of SGLang's: ``up``)."""
        matchers = ", ".join(m for m in (self.selector, self.narrow) if m)
        return f"{metric}{{{matchers}}}" if matchers else metric

    def up(self) -> str:
        """Prometheus's own scrape health; only meaningful when the selector uses target labels (job, ...)."""
        if self.gauge_window_s is None:
            return f"max {_BY} ({self.selected('up')})"
        return f"min {_BY} (min_over_time({self.selected('up')}[{format_duration(self.gauge_window_s)}]))"

    def up_each(self) -> str:
        """``up`` per series, unaggregated (its step's minimum on a range grid): a filter joined ``on
        (instance, job)`` needs no ``min by``, which costs Prometheus as much again as reading ``up`` on a
        week's range of 1,000 targets."""
        if self.gauge_window_s is None:
            return self.selected("up")
        return f"min_over_time({self.selected('up')}[{format_duration(self.gauge_window_s)}])"

    def scrape_duration_s(self) -> str:
        if self.gauge_window_s is None:
            return f"max {_BY} ({self.selected('scrape_duration_seconds')})"
        window = format_duration(self.gauge_window_s)
        return f"max {_BY} (avg_over_time({self.selected('scrape_duration_seconds')}[{window}]))"

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
        matchers, window = self.cumulative_matchers, self.window  # a tokenizer counter: every priority
        return (
            f"sum {_BY} (resets(sglang:num_requests_total{{{matchers}}}[{window}]) "
            f"or resets(sglang_num_requests_total{{{matchers}}}[{window}]))"
        )


class MissingParam(ValueError):
    """A catalogue expression reads a config number that is not set (rendered nowhere: unknown)."""


def rate_window_s(config: Config) -> float:
    """prometheus.rate_window_s, else four scrape intervals and at least a minute."""
    explicit = config.prometheus.rate_window_s if config.prometheus is not None else None
    return explicit if explicit is not None else default_rate_window_s(config.scrape.interval_s)


def signal_queries(config: Config, *, source: str = "<config>") -> SignalQueries:
    """The PromQL builder for this config's selector, rate window, GPU join and price (selectors are checked
    here)."""
    prometheus = config.prometheus
    params = tuple(config_params(config.cost.gpu_hour_usd).items())
    if prometheus is None:
        return SignalQueries("", rate_window_s(config), params=params)
    return SignalQueries(
        parse_selector(prometheus.selector, source),
        rate_window_s(config),
        gpu_selector=parse_selector(prometheus.gpu_selector, source, "prometheus.gpu_selector"),
        node_label=prometheus.node_label,
        gpu_node_label=prometheus.gpu_node_label,
        params=params,
        downsample_s=prometheus.downsample_s,
    )
