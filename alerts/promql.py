"""PromQL building blocks for the exported rule file: both metric spellings, tp_rank="0", shared recordings.

SGLang names are ``sglang:<name>`` but Prometheus stores ``sglang_<name>`` when it scrapes OpenMetrics, so
every selector matches ``sglang[:_]<name>``; scheduler gauges are read from ``tp_rank="0"`` (the rank that
reports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Every per-target expression is aggregated to these labels, so expressions from different metrics line up.
BY = "job, instance, deployment"
JOIN = "job, instance"


def duration(seconds: float) -> str:
    """A Prometheus duration: 600 → 10m, 90 → 90s, 7200 → 2h."""
    whole = max(1, round(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class PromQL:
    """Selectors for one fleet; ``selector`` holds extra matchers such as ``job="sglang"``."""

    selector: str = ""

    def _matchers(self, name: str, scheduler: bool) -> str:
        parts = [f'__name__=~"sglang[:_]{name}"']
        if scheduler:
            parts.append('tp_rank="0"')
        if self.selector.strip():
            parts.append(self.selector.strip().strip("{}"))
        return "{" + ", ".join(parts) + "}"

    def scheduler(self, name: str) -> str:
        """A scheduler gauge of the reporting rank, either spelling."""
        return self._matchers(name, scheduler=True)

    def tokenizer(self, name: str) -> str:
        """A tokenizer-process series (no tp_rank label), either spelling."""
        return self._matchers(name, scheduler=False)

    def gauge(self, name: str) -> str:
        return f"max by ({BY}) ({self.scheduler(name)})"

    def up(self) -> str:
        return "up{" + (self.selector.strip().strip("{}") or 'job="sglang"') + "}"

    def histogram_mean(self, name: str, window_s: float) -> str:
        window = duration(window_s)
        return (
            f"sum by ({BY}) (rate({self.tokenizer(name + '_sum')}[{window}]))\n/ sum by ({BY}) "
            f"(rate({self.tokenizer(name + '_count')}[{window}]))"
        )


def hysteresis(fire: str, hold: str, alertname: str) -> str:
    """Fire on ``fire``; once active (pending or firing), stay active while ``hold`` holds (recovery)."""
    return f'(\n  {fire}\n)\nor\n(\n  {hold}\n  and on ({JOIN}) ALERTS{{alertname="{alertname}"}}\n)'


def signal_recordings(q: PromQL, rate_window_s: float = 300.0) -> list[dict[str, Any]]:
    """The per-target signals the alerts read, as recording rules (evaluated in order within their group)."""
    window = duration(rate_window_s)

    return [
        {"record": "specwatch:running", "expr": q.gauge("num_running_reqs")},
        {"record": "specwatch:queued", "expr": q.gauge("num_queue_reqs")},
        {"record": "specwatch:state_pool_usage", "expr": q.gauge("mamba_usage")},
        {"record": "specwatch:kv_usage", "expr": q.gauge("full_token_usage")},
        {"record": "specwatch:cache_hit_rate", "expr": q.gauge("cache_hit_rate")},
        {"record": "specwatch:accept_length", "expr": q.gauge("spec_accept_length")},
        {
            "record": "specwatch:avg_context_tokens",
            "expr": f"{q.gauge('decode_sum_seq_lens')}\n/ (specwatch:running > 0)",
        },
        {
            # Radix-cached (evictable) slots exist only with the radix cache on: the exported stand-in for the
            # recipe flag disable_radix_cache, which Prometheus cannot see.
            "record": "specwatch:radix_evictable_slots",
            "expr": q.gauge("kv_evictable_tokens"),
        },
        {
            "record": "specwatch:ttft_seconds",
            "expr": q.histogram_mean("time_to_first_token_seconds", rate_window_s),
        },
        {
            "record": "specwatch:tpot_seconds",
            "expr": q.histogram_mean("inter_token_latency_seconds", rate_window_s),
        },
        {
            "record": "specwatch:output_tokens_per_second",
            "expr": f"sum by ({BY}) (rate({q.tokenizer('generation_tokens_total')}[{window}]))",
        },
    ]


@dataclass(frozen=True, slots=True)
class Exported:
    """One rule as Prometheus sees it: its alerting rule and the recording rules it reads (in order)."""

    alert: dict[str, Any]
    recordings: tuple[dict[str, Any], ...] = ()


def alert_rule(
    name: str,
    expr: str,
    *,
    for_s: float,
    keep_firing_for_s: float,
    severity: str,
    summary: str,
    description: str,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr, "for": duration(for_s) if for_s > 0 else "0s"}
    if keep_firing_for_s > 0:
        rule["keep_firing_for"] = duration(keep_firing_for_s)
    rule["labels"] = {"severity": severity, "target": "{{ $labels.instance }}"}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule
