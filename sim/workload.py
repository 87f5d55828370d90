"""What a simulated server is asked to do: the prompts (Workload) and how many arrive (Load).

Plain frozen records with validation in words; scenario phases and tests change them with
``changed(**fields)``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any, Literal

Content = Literal["random", "text"]


@dataclass(frozen=True, slots=True)
class Workload:
    """Prompt and output lengths (tokens), their spread, what the prompts are, and shared-prefix structure."""

    isl: int = 1024
    osl: int = 1024
    isl_jitter: float = 0.0  # relative half-width of a uniform spread around isl
    osl_jitter: float = 0.0  # relative half-width of a uniform spread around osl
    content: Content = "random"  # random token IDs (bench_serving --dataset-name random) or real text
    streaming_fraction: float = 0.8
    shared_prefix_tokens: int = 0  # a system prompt shared by each group of prompts (part of isl)
    prompts_per_group: int = 8  # requests per shared-prefix group before the next group's prompt starts

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.isl <= 1_048_576:
            problems.append(f"isl must be 1..1048576 tokens, not {self.isl}")
        if not 1 <= self.osl <= 262_144:
            problems.append(f"osl must be 1..262144 tokens, not {self.osl}")
        for name in ("isl_jitter", "osl_jitter"):
            if not 0 <= getattr(self, name) < 1:
                problems.append(f"{name} must be in [0, 1), not {getattr(self, name)}")
        if self.content not in ("random", "text"):
            problems.append(f"content must be 'random' or 'text', not {self.content!r}")
        if not 0 <= self.streaming_fraction <= 1:
            problems.append(f"streaming_fraction must be in [0, 1], not {self.streaming_fraction}")
        if not 0 <= self.shared_prefix_tokens < self.isl:
            problems.append(f"shared_prefix_tokens must be in [0, isl), not {self.shared_prefix_tokens}")
        if self.prompts_per_group < 1:
            problems.append(f"prompts_per_group must be ≥ 1, not {self.prompts_per_group}")
        if problems:
            raise ValueError("; ".join(problems))

    def changed(self, **fields: Any) -> Workload:
        return dataclasses.replace(self, **fields)

    @property
    def osl_range(self) -> tuple[float, float]:
        return self.osl * (1 - self.osl_jitter), self.osl * (1 + self.osl_jitter)


@dataclass(frozen=True, slots=True)
class Load:
    """Closed loop (``concurrency`` clients, each sending its next request when the last finishes, as
    bench_serving --max-concurrency does) or open loop (Poisson arrivals at ``rate_rps``)."""

    concurrency: int | None = None  # neither given: 32 clients
    rate_rps: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency is None and self.rate_rps is None:
            object.__setattr__(self, "concurrency", 32)
        if (self.concurrency is None) == (self.rate_rps is None):
            raise ValueError("a load needs exactly one of concurrency (closed loop) or rate_rps (open loop)")
        if self.concurrency is not None and not 0 <= self.concurrency <= 100_000:
            raise ValueError(f"concurrency must be 0..100000 requests, not {self.concurrency}")
        if self.rate_rps is not None and not (0 <= self.rate_rps <= 100_000 and math.isfinite(self.rate_rps)):
            raise ValueError(f"rate_rps must be 0..100000 requests/s, not {self.rate_rps}")

    def changed(self, **fields: Any) -> Load:
        if "concurrency" in fields and fields["concurrency"] is not None:
            fields.setdefault("rate_rps", None)
        if "rate_rps" in fields and fields["rate_rps"] is not None:
            fields.setdefault("concurrency", None)
        return dataclasses.replace(self, **fields)


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth for small means, a rounded normal above 50: arrivals per window)."""
    if mean <= 0:
        return 0
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count
