"""PromQL building blocks for the exported alert rules.

The alerts read the catalogue's recorded series (``collectors.prometheus.queries.recordings``: one series per
``instance``/``job``, rendered by ``export-recording-rules``), never signal definitions of their own, so an
exported alert and the dashboard read the same accept length, KV usage, cache hit rate and running count.
Every window over a recorded series holds at least ``MIN_SAMPLES`` evaluations of the group interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collectors.prometheus.queries import SignalQueries, format_duration, recordings

# The labels of every recorded series; alerts join on them (``on (instance, job)``).
JOIN = "instance, job"

# avg_over_time over fewer samples is noise, and over one sample it is the sample: Prometheus's default
# evaluation interval (1 m) with a 30 s window held one sample or none, and the exported rules fired nothing.
MIN_SAMPLES = 4

duration = format_duration  # for:, keep_firing_for: and interval: use the catalogue's duration text


def number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class PromQL:
    """The exported rules' view of one fleet: the catalogue's queries and the groups' evaluation interval."""

    queries: SignalQueries = field(default_factory=SignalQueries)
    interval_s: float = 15.0

    def signal(self, name: str) -> str:
        """The recorded series of catalogue signal ``name`` (KeyError names the catalogue's signals)."""
        for recording in recordings(self.queries.rate_window_s):
            if recording.signal == name:
                return recording.record
        known = ", ".join(r.signal for r in recordings(self.queries.rate_window_s))
        raise KeyError(f"no recorded signal {name!r} in the catalogue ({known})")

    def window_s(self, seconds: float) -> float:
        """``seconds``, widened so the window holds at least MIN_SAMPLES evaluations."""
        return max(seconds, MIN_SAMPLES * self.interval_s)

    def window(self, seconds: float) -> str:
        return duration(self.window_s(seconds))

    def mean(self, signal: str, seconds: float) -> str:
        """Window mean of a recorded signal, like the engine's mean over its window's snapshots."""
        return f"avg_over_time({self.signal(signal)}[{self.window(seconds)}])"

    def raw_gauge(self, name: str) -> str:
        """A raw SGLang gauge the catalogue does not record (both spellings, reporting rank, per target)."""
        return self.queries.gauge(name)

    def up(self) -> str:
        return "up{" + (self.queries.selector or 'job="sglang"') + "}"


def hysteresis(fire: str, hold: str, alertname: str) -> str:
    """Fire on ``fire``; once active (pending or firing), stay active while ``hold`` holds (recovery)."""
    return f'(\n  {fire}\n)\nor\n(\n  {hold}\n  and on ({JOIN}) ALERTS{{alertname="{alertname}"}}\n)'


def show(series: str, fmt: str) -> str:
    """An annotation template printing ``series`` of the alert's instance (nothing when it has no value)."""
    return (
        f"{{{{ with printf \"{series}{{instance='%s'}}\" $labels.instance | query }}}}{{{{ . | first "
        f"| value | {fmt} }}}}{{{{ end }}}}"
    )


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
