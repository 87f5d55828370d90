"""What one active probe measured (``collectors.probes`` sends them): pure data, read by the probe store, the
alert rules, the pages and the SLO report without importing what sends probes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe request (or one skipped / failed one: ``error`` says why, the measurements are None)."""

    ts: float  # unix seconds when the request was sent (or skipped)
    target: str
    recipe_id: str | None
    context_tokens: int  # the length asked for
    prompt_tokens: int | None = None  # what the server counted
    completion_tokens: int | None = None
    verify_ct: int | None = None
    accept_length: float | None = None  # tokens per verify step, bonus included
    step_latency_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    running: float | None = None  # the server's running requests at that moment (last snapshot)
    request_id: str = ""
    error: str | None = None

    def as_record(self) -> dict[str, Any]:
        """The JSON object of ``python -m collectors probe --json`` (null for unknown)."""
        return asdict(self)


__all__ = ["ProbeResult"]
