"""Probe evidence for AcceptanceDecayWithContext: a recipe's accept length at its longest probed context, now
against its own baseline.

Every recipe's acceptance falls with context (that is the mechanism, and it is in every probe curve), so the
evidence is not "long context accepts less than short context": it is "this server's probes at the longest
context now accept less than this recipe's probes at that context used to", beyond the noise band. Probes
are measured at fixed context, so this holds even when traffic never reaches long prompts.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from alerts.rules.base import Rule
from collectors.errors import StoreError
from collectors.store.probes import ProbeStore
from config import Config


@dataclass(frozen=True, slots=True)
class ProbeDecay:
    """This server's recent probes at the recipe's longest probed context vs the recipe's baseline there."""

    recipe_id: str
    context_tokens: int
    baseline: float  # median accept length of the recipe's earlier probes at that context
    recent: float  # median of this server's probes in the recent window
    baseline_probes: int
    recent_probes: int

    @property
    def decline(self) -> float:
        return 1.0 - self.recent / self.baseline if self.baseline > 0 else 0.0

    def sentence(self) -> str:
        """The evidence in words, for the alert's description."""
        change = -self.decline * 100.0
        return (
            f"Measured by probes: accept length {self.recent:.2f} at {self.context_tokens:,} tokens of "
            f"context ({self.recent_probes} probes of this server) vs {self.baseline:.2f} for recipe "
            f"{self.recipe_id} before ({self.baseline_probes} probes): {change:+.0f}%."
        )


def probe_decay(
    rows: pd.DataFrame,
    *,
    recipe_id: str,
    target: str,
    now: float,
    recent_s: float,
    baseline_s: float,
    min_baseline: int,
    min_recent: int,
) -> ProbeDecay | None:
    """None unless there are enough successful probes of ``recipe_id`` at its longest context, both now (on
    ``target``) and in the baseline (the hours before, on any server of that recipe)."""
    if rows.empty:
        return None
    ok = rows[
        (rows["recipe_id"] == recipe_id)
        & rows["error"].isna()
        & rows["accept_length"].notna()
        & (rows["ts"] >= now - baseline_s)
    ]
    if ok.empty:
        return None
    longest = int(ok["context_tokens"].max())
    at = ok[ok["context_tokens"] == longest]
    split_ts = now - recent_s
    recent = [float(v) for v in at[(at["target"] == target) & (at["ts"] >= split_ts)]["accept_length"]]
    baseline = [float(v) for v in at[at["ts"] < split_ts]["accept_length"]]
    if len(recent) < min_recent or len(baseline) < min_baseline:
        return None
    return ProbeDecay(
        recipe_id,
        longest,
        statistics.median(baseline),
        statistics.median(recent),
        len(baseline),
        len(recent),
    )


class ProbeEvidence:
    """Probe rows of the history file, read at most once per ``cache_s`` for every target's evaluation."""

    def __init__(self, path: str, *, span_s: float, cache_s: float = 60.0) -> None:
        self._store = ProbeStore(path, create=False)
        self._span_s = span_s
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._rows: pd.DataFrame | None = None
        self._read_at = -float("inf")

    def rows(self, now: float) -> pd.DataFrame:
        """The probe rows of the ``span_s`` before ``now`` (the evaluation's clock); empty when unreadable."""
        with self._lock:
            if self._rows is None or abs(now - self._read_at) >= self._cache_s:
                try:
                    self._rows = self._store.read(now - self._span_s, now + 60.0)
                except StoreError:
                    self._rows = pd.DataFrame()  # the passive evidence still judges; probes add nothing
                self._read_at = now
            return self._rows

    def close(self) -> None:
        self._store.close()


def attach_probe_evidence(rules: Sequence[Rule[Any]], config: Config) -> ProbeEvidence | None:
    """Give the rules that use probe evidence a reader of the probe table (when probes are enabled)."""
    if not config.probes.enabled:
        return None
    users = [r for r in rules if hasattr(r, "probes") and getattr(r.settings, "use_probes", False)]
    if not users:
        return None
    span_s = max(float(r.settings.probe_baseline_s) for r in users) + 3600.0
    evidence = ProbeEvidence(config.store.path, span_s=span_s)
    for rule in users:
        rule.probes = evidence
    return evidence
