"""The capacity verdict in words: which pool binds on each server and in the fleet, and what would help.

On a hybrid SSM model the speculative lane runs out of recurrent-state slots (γ+1 states per request) long
before the KV cache fills, so the pools are judged separately; SGLang's ``token_usage`` (their max) hides
which binds.

The levels are the alert rules' (``CapacityThresholds``), never constants of this module: a pool *binds* at
the usage its saturation alert fires at (``fire_at``), and is *near* binding from the usage a firing alert
must fall below to recover (``recover_below``) — so the page says "binds" exactly where the alert would
page, given a queue. Advice that builds on the verdict (servers needed per deployment, a forecast) reads the
same thresholds and the same ``Binding`` words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from analysis.stats import float_or_nan
from collectors.model import FlagValue

Pool = Literal["state pool", "KV cache", "request cap"]
Binding = Literal["state pool", "KV cache", "request cap", "admission", "near", "none", "unknown"]

# SGLang admits until ``--max-running-requests`` are running: the cap binds when running reaches it.
REQUEST_CAP_BINDS_AT = 1.0

RAISE_CAP_TRADE = (
    "raising `--max-running-requests` would not help: it trades token budget (`max_total_num_tokens`) for "
    "slots from the same pool, so admitted requests get less room and the rest still queue"
)


@dataclass(frozen=True, slots=True)
class CapacityThresholds:
    """The levels the verdict judges by: the alert rules' effective settings (``alerts.rules.<Rule>.<key>``,
    config overrides included), built by ``alerts.rules.capacity_thresholds`` — one setting for the page
    and the alert."""

    state_pool_binds_at: float  # StatePoolSaturation.fire_at
    state_pool_near_at: float  # StatePoolSaturation.recover_below
    min_queued: float  # StatePoolSaturation.min_queued: a full state pool pages only with this many queued
    kv_binds_at: float  # KVPoolSaturation.fire_at
    kv_near_at: float  # KVPoolSaturation.recover_below
    radix_max_hit_rate: float  # RadixCacheWaste.max_hit_rate: below it the radix cache counts as unused
    radix_state_pool_at: float  # RadixCacheWaste.state_pool_at: ... and costs something from this usage

    def binds_at(self) -> dict[Pool, float]:
        """Per pool, the usage at which it binds (time to saturation extrapolates to these)."""
        return {
            "state pool": self.state_pool_binds_at,
            "KV cache": self.kv_binds_at,
            "request cap": REQUEST_CAP_BINDS_AT,
        }


@dataclass(frozen=True, slots=True)
class ServerCapacity:
    server: str
    binding: Binding
    headline: str  # what binds, with the numbers (and the radix warning when it applies)
    verdict: str  # the headline plus what would (and would not) help
    radix_waste: bool  # radix cache on, a hit rate RadixCacheWaste calls unused, under state-pool pressure


def _pct(value: float) -> str:
    return "?" if math.isnan(value) else f"{value:.0%}"


def _radix_on(flags: Mapping[str, FlagValue] | None) -> bool | None:
    if not flags or flags.get("disable_radix_cache") is None:
        return None
    return not bool(flags.get("disable_radix_cache"))


def server_capacity(
    row: Mapping[str, object], flags: Mapping[str, FlagValue] | None, thresholds: CapacityThresholds
) -> ServerCapacity:
    """Judge one row (status, state_pool_usage, kv_usage, running, cap, queued, cache_hit_rate) + recipe."""
    t = thresholds
    server = str(row["server"])
    if row.get("status") != "up":
        text = f"No current data ({row.get('status')})."
        return ServerCapacity(server, "unknown", text, text, False)
    state, kv, running, cap, queued, hit_rate = (
        float_or_nan(row.get(name))
        for name in ("state_pool_usage", "kv_usage", "running", "cap", "queued", "cache_hit_rate")
    )
    queue_text = f", {queued:.0f} queued" if queued > 0 else ""
    radix_waste = (
        bool(_radix_on(flags))
        and not math.isnan(hit_rate)
        and hit_rate < t.radix_max_hit_rate
        and not math.isnan(state)
        and state >= t.radix_state_pool_at
    )
    binding: Binding
    if not math.isnan(state) and state >= t.state_pool_binds_at and (math.isnan(kv) or state >= kv):
        binding = "state pool"
        headline = f"State pool binds: {_pct(state)} of state slots in use vs KV {_pct(kv)}{queue_text}."
        advice = (
            f"The lane is short of recurrent-state slots, not cache; {RAISE_CAP_TRADE}. "
            "Add replicas or move load; a narrower verify window keeps fewer states per request."
        )
    elif not math.isnan(kv) and kv >= t.kv_binds_at:
        binding = "KV cache"
        headline = f"KV cache binds: {_pct(kv)} KV vs state {_pct(state)}{queue_text}."
        advice = (
            "Long contexts fill the attention layers' cache; more KV memory (`--mem-fraction-static`, "
            "within activation headroom), shorter contexts or more replicas help; a higher request cap "
            "would not."
        )
    elif state >= t.state_pool_near_at or kv >= t.kv_near_at:  # NaN compares False: unknown is not near
        binding = "near"
        near = [
            f"{name} {_pct(usage)} (binds at {_pct(at)})"
            for name, usage, near_at, at in (
                ("state pool", state, t.state_pool_near_at, t.state_pool_binds_at),
                ("KV", kv, t.kv_near_at, t.kv_binds_at),
            )
            if usage >= near_at
        ]
        at_cap = f", {running:.0f}/{cap:.0f} running" if not math.isnan(cap) and running >= cap else ""
        headline = f"Near binding: {', '.join(near)}{queue_text}{at_cap}."
        advice = (
            "A burst of requests fills it: add replicas or move load before it binds; a higher request cap "
            "would only fill it sooner."
        )
    elif not math.isnan(cap) and running >= cap and queued > 0:
        binding = "request cap"
        headline = (
            f"Request cap binds: {running:.0f}/{cap:.0f} running{queue_text}, "
            f"state {_pct(state)}, KV {_pct(kv)}."
        )
        advice = (
            "Both pools have room: a higher `--max-running-requests` would admit more, paid for with token "
            "budget per request — check the state pool after raising it."
        )
    elif queued > 0:
        binding = "admission"
        headline = (
            f"Queue without a full pool: {queued:.0f} waiting at state {_pct(state)}, KV {_pct(kv)}, "
            f"{running:.0f} running."
        )
        advice = "Admission is held back elsewhere (prefill backlog): check TTFT."
    else:
        binding = "none"
        headline = f"Headroom: state {_pct(state)}, KV {_pct(kv)}, no queue."
        advice = ""
    if radix_waste:
        radix = (
            f"The radix cache is on at a {_pct(hit_rate)} prefix hit rate: on random-prefix traffic it "
            "reserves several state buffers per request for forks it never uses — `--disable-radix-cache` "
            "frees state slots."
        )
        headline = f"{headline} {radix}"
    verdict = f"{headline} {advice}".strip()
    return ServerCapacity(server, binding, headline, verdict, radix_waste)


def capacity_frame(
    table: pd.DataFrame, recipes: Mapping[str, Mapping[str, FlagValue]], thresholds: CapacityThresholds
) -> pd.DataFrame:
    """The Fleet table plus, per server, what binds (binding), the verdict sentence and radix_waste."""
    records: list[dict[str, object]] = [{str(k): v for k, v in r.items()} for r in table.to_dict("records")]
    judged = [server_capacity(row, recipes.get(str(row["recipe"])), thresholds) for row in records]
    return table.assign(
        binding=[j.binding for j in judged],
        headline=[j.headline for j in judged],
        verdict=[j.verdict for j in judged],
        radix_waste=[j.radix_waste for j in judged],
    )


def fleet_verdict(capacity: pd.DataFrame, thresholds: CapacityThresholds) -> list[str]:
    """Sentences (markdown) for the whole fleet.

    ``capacity`` has one row per server: server, status, recipe, binding, state_pool_usage, kv_usage, queued,
    cache_hit_rate, radix_waste (``capacity_frame``).
    """
    t = thresholds
    live = capacity[capacity["status"] == "up"]
    if live.empty:
        return ["No server is up: there is no current capacity to judge."]
    counts = live["binding"].value_counts()
    total = len(live)
    lines: list[str] = []
    state_n = int(counts.get("state pool", 0))
    kv_n = int(counts.get("KV cache", 0))
    if state_n:
        rows = live[live["binding"] == "state pool"]
        queued = int((rows["queued"] >= t.min_queued).sum())  # as StatePoolSaturation counts a queue
        lines.append(
            f"**The state pool binds on {state_n} of {total} servers up** (median state "
            f"{rows['state_pool_usage'].median():.0%} vs KV {rows['kv_usage'].median():.0%}; "
            f"{queued} of them queue requests). More slots must come from more replicas or fewer states "
            f"per request; {RAISE_CAP_TRADE}."
        )
    if kv_n:
        rows = live[live["binding"] == "KV cache"]
        lines.append(
            f"**The KV cache binds on {kv_n} of {total} servers up** "
            f"(median KV {rows['kv_usage'].median():.0%} vs state {rows['state_pool_usage'].median():.0%}): "
            "long contexts; more KV memory or replicas help."
        )
    for label, what, advice in (
        (
            "request cap",
            "the request cap binds while both pools have room",
            "a higher `--max-running-requests` would admit more, paid for with token budget per request",
        ),
        (
            "near",
            f"a pool is near binding (state pool at {t.state_pool_near_at:.0%}+ or KV at "
            f"{t.kv_near_at:.0%}+, short of the {t.state_pool_binds_at:.0%} / {t.kv_binds_at:.0%} "
            "where it binds)",
            "a burst fills it; add replicas or move load before it binds",
        ),
        (
            "admission",
            "requests queue with room in both pools and below the cap",
            "admission is held back elsewhere (prefill backlog): check TTFT",
        ),
    ):
        n = int(counts.get(label, 0))
        if n:
            lines.append(f"On {n} of {total} servers up {what}: {advice}.")
    waste = live[live["radix_waste"]]
    for recipe_id, group in waste.groupby("recipe"):
        lines.append(
            f"Recipe `{recipe_id}` runs the radix cache on {len(group)} server(s) at a "
            f"{group['cache_hit_rate'].median():.0%} prefix hit rate: on random-prefix traffic it reserves "
            "several state buffers per request (the seed measured the runnable batch falling from 570 to "
            "114 slots); `--disable-radix-cache` gives the slots back. Keep it only where prefixes repeat."
        )
    free = int(counts.get("none", 0))
    if free == total:
        lines.append(f"All {total} servers up have headroom in both pools and no queue.")
    elif free:
        lines.append(f"{free} of {total} servers up have headroom in both pools and no queue.")
    return lines
