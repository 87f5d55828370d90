"""Active probes: one streamed ``POST /generate`` per context length, measuring SGLang's own per-request
speculative statistics (``meta_info``) at a context the monitor chooses, not whatever traffic arrived.

Each result: accept length = completion_tokens / spec_verify_ct (SGLang's definition, bonus included), step
latency = decode time ÷ the verify steps taken during it (first chunk → last chunk, so prefill is excluded),
TTFT = time to the first streamed chunk, TPOT = decode time ÷ tokens after the first chunk. Probes are
opt-in per target, never pass the hourly token budget, never go to a server that is queueing or at its
running cap, and carry ``rid = specwatch-probe-…`` plus an ``X-Specwatch-Probe`` header so operators can
filter them from their own logs. Every failure is a ``ProbeResult`` with ``error`` in words, never a raise.

This module is how a probe identifies itself and when one must not be sent; what a probe measured is
``collectors.probe_result.ProbeResult`` (read by the store, the rules and the pages). The requests themselves
are sent by ``collectors.probes.sender.Prober`` through the HTTP edge, imported only by what runs probes.
"""

from __future__ import annotations

from collectors.model import Signals

RID_PREFIX = "specwatch-probe-"
PROBE_HEADER = "X-Specwatch-Probe"
HOUR_S = 3600.0


def backoff_reason(signals: Signals | None, max_queued: int) -> str | None:
    """Why a probe must not go to this server now (it is queueing or full), or None."""
    if signals is None:
        return None
    if signals.queued is not None and signals.queued > max_queued:
        return f"skipped: {signals.queued:g} requests queued (probes.max_queued = {max_queued}); backing off"
    if signals.running is not None and signals.max_running and signals.running + 1 > signals.max_running:
        return (
            f"skipped: {signals.running:g}/{signals.max_running:g} running, at the cap; a probe would queue "
            "behind (or tip) a saturated server"
        )
    return None


__all__ = ["HOUR_S", "PROBE_HEADER", "RID_PREFIX", "backoff_reason"]
