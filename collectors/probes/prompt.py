"""Probe prompts: real public-domain prose (shipped as ``prose.txt``) sized to a token count.

Random token IDs make acceptance noisy and pessimistic (the seed's bsz=1 sweep calls itself a lower bound
relative to real text), so probes send prose: Austen, Dickens, Lincoln and Melville, all public domain. The
paragraphs are reshuffled on every pass so a long prompt is not one passage repeated verbatim (a drafter would
learn the repetition and read optimistic at long context), and each prompt opens with a unique line so the
server's prefix cache cannot serve a previous probe's prefill.
"""

from __future__ import annotations

import functools
import random
from importlib import resources

DEFAULT_BYTES_PER_TOKEN = 4.0  # English prose under a modern BPE vocabulary; calibrated per target after
MIN_BYTES_PER_TOKEN, MAX_BYTES_PER_TOKEN = 1.0, 16.0


@functools.cache
def paragraphs() -> tuple[str, ...]:
    """The shipped prose, one paragraph per item."""
    text = resources.files("collectors.probes").joinpath("prose.txt").read_text(encoding="utf-8")
    return tuple(p.strip() for p in text.split("\n\n") if p.strip())


def build_prompt(tokens: int, bytes_per_token: float, nonce: str) -> str:
    """About ``tokens`` tokens of prose (UTF-8 bytes ÷ ``bytes_per_token``), opening with ``nonce``."""
    goal_bytes = max(1, round(tokens * bytes_per_token))
    head = f"[{nonce}] Read the following passages.\n\n"
    parts: list[str] = [head]
    size = len(head.encode())
    rng = random.Random(tokens)  # the same length always gets the same text: sweeps stay comparable
    source = list(paragraphs())
    while size < goal_bytes:
        rng.shuffle(source)
        for paragraph in source:
            parts.append(paragraph + "\n\n")
            size += len(paragraph.encode()) + 2
            if size >= goal_bytes:
                break
    text = "".join(parts).encode()[:goal_bytes].decode("utf-8", errors="ignore")
    cut = text.rfind(" ")
    return text[:cut] if cut > len(head) else text


def calibrated(bytes_per_token: float, prompt: str, prompt_tokens: int) -> float:
    """The new bytes-per-token estimate after the server counted ``prompt_tokens`` for ``prompt``."""
    if prompt_tokens <= 0:
        return bytes_per_token
    measured = len(prompt.encode()) / prompt_tokens
    return min(MAX_BYTES_PER_TOKEN, max(MIN_BYTES_PER_TOKEN, measured))
