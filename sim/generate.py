"""SGLang's native ``POST /generate`` for a simulated server: what an active probe (or any client) gets back.

The answer follows SGLang 0.5.23: JSON ``{"text", "output_ids", "meta_info", "index"}``, or with
``stream: true`` Server-Sent Events — one ``data: {json}`` chunk per verify step (cumulative text, the
meta_info so far) and a final ``data: [DONE]``. The prompt is ``text`` or ``input_ids`` (bench_serving
``--tokenize-prompt``). Acceptance and step latency come from the calibrated mechanism at the prompt's length,
in a batch of the server's running requests, the other /generate requests in flight (a benchmark client's),
and this one; the stream is paced in real time divided by the sim speed, so a 64 K probe at speed 60 costs a
fraction of a second. meta_info carries the speculative statistics under SGLang ≥ 0.5.12's names
(``spec_num_correct_drafts`` ..., ``spec_correct_drafts_histogram``; DSpark adds ``spec_cap_length`` and
``spec_cap_lens_histogram``), as ``TokenizerManager._calculate_spec_decoding_metrics`` writes them.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from sim import mechanism as mech
from sim.server_engine import ServerEngine

BYTES_PER_TOKEN = 4.6  # the simulated tokenizer (not the prober's 4.0 guess, so its calibration is exercised)
PROBE_NOISE_REL = 0.015  # request-to-request content noise of one probe's acceptance
MIN_CHUNK_WALL_S = 0.004  # steps closer together than this share one SSE chunk (keeps the loop cheap)
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling_params default


@dataclass(frozen=True, slots=True)
class GenerateReply:
    """What the HTTP layer sends: status, headers, and either a body or paced chunks (wall delay, bytes)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    delay_s: float = 0.0  # a non-streaming answer comes when generation ends
    chunks: tuple[tuple[float, bytes], ...] = ()
    work: Generation | None = None  # what the request costs the server (None: rejected)


@dataclass(frozen=True, slots=True)
class Generation:
    """One accepted request as the server carries it: how long (simulated seconds), at what context, and
    the tokens and verify steps it adds to the lifetime accept length (/server_info)."""

    duration_s: float
    mean_context_tokens: float
    tokens: int
    verify_steps: int


@dataclass(frozen=True, slots=True)
class InFlight:
    """The other /generate requests the server is decoding now (a benchmark client's, a probe)."""

    count: int = 0
    context_tokens: float = 0.0  # their mean contexts, summed


def count_tokens(text: str) -> int:
    """The simulated tokenizer's count (SGLang reports it as meta_info.prompt_tokens)."""
    return max(1, math.ceil(len(text.encode()) / BYTES_PER_TOKEN))


def _error(status: int, message: str) -> GenerateReply:
    payload = {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": status,
    }
    return GenerateReply(status, {"Content-Type": "application/json"}, json.dumps(payload).encode())


def _parse(body: bytes) -> tuple[dict[str, Any], int] | str:
    """The request and its prompt's token count, or what is wrong with it in words."""
    try:
        request = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return "the body is not JSON"
    if not isinstance(request, dict):
        return "the body must be a JSON object"
    text, ids = request.get("text"), request.get("input_ids")
    if isinstance(ids, list) and ids and text is None:
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            return "input_ids must be a list of non-negative integers (one prompt; batches are not simulated)"
        prompt_tokens = len(ids)
    elif isinstance(text, str) and text:
        prompt_tokens = count_tokens(text)
    else:
        return "text must be a non-empty string, or input_ids a non-empty list of token ids"
    params = request.get("sampling_params") or {}
    if not isinstance(params, dict):
        return "sampling_params must be an object"
    max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
        return "sampling_params.max_new_tokens must be a positive integer"
    return request, prompt_tokens


def _noise(seed: int, rid: str, prompt_tokens: int) -> float:
    digest = hashlib.blake2b(f"{seed}:{rid}:{prompt_tokens}".encode(), digest_size=8).digest()
    return 1.0 + random.Random(int.from_bytes(digest, "big")).gauss(0.0, PROBE_NOISE_REL)


def generate(
    engine: ServerEngine,
    args: dict[str, Any],
    body: bytes,
    *,
    speed: float,
    seed: int,
    request_number: int,
    in_flight: InFlight = InFlight(),
) -> GenerateReply:
    """Answer one /generate request on a server whose engine is ``engine`` (already advanced to now), with
    ``in_flight`` other /generate requests being decoded beside its own running batch."""
    parsed = _parse(body)
    if isinstance(parsed, str):
        return _error(400, parsed)
    request, prompt_tokens = parsed
    params = request.get("sampling_params") or {}
    max_new = int(params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
    context_length = int(args.get("context_length") or 0)
    if prompt_tokens + max_new > context_length:
        return _error(
            400,
            f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
            f"You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the "
            f"input messages and {max_new} tokens for the completion.",
        )
    rid = str(request.get("rid") or f"{seed:x}{request_number:08x}")
    gauges = engine.published.gauges
    others = gauges.running + in_flight.count
    others_context = gauges.decode_sum_seq_lens + in_flight.context_tokens
    window, scheduled = engine.window, engine.scheduled
    factor = _noise(seed, rid, prompt_tokens)

    # Queued behind a full batch: wait roughly until enough running requests finish to admit this one.
    queue_wait_s = 0.0
    if others >= engine.layout.max_running > 0:
        context = others_context / max(others, 1)
        step = mech.step_latency_s(others, context, scheduled, radix=engine.radix)
        per_request_s = engine.workload.osl / max(gauges.spec_accept_length or 1.0, 1.0) * step
        queue_wait_s = (gauges.queued + 1) / others * per_request_s
        others = engine.layout.max_running - 1
    chunks = mech.prefill_chunks(prompt_tokens, args.get("chunked_prefill_size"))
    ttft_s = queue_wait_s + mech.prefill_s(prompt_tokens) + chunks * mech.PREFILL_CHUNK_OVERHEAD_S

    # Verify steps: each emits the accepted drafts + the bonus token, at the context reached so far.
    steps: list[tuple[float, int]] = []  # (step seconds, tokens emitted)
    correct_histogram: list[int] = [0] * max(window, 1)  # steps by drafts accepted (bonus excluded)
    produced, carry = 0, 0.0
    while produced < max_new:
        context = prompt_tokens + produced
        expected = 1.0 if window <= 1 else mech.accept_length(context, window, "text") * factor
        expected = min(max(expected, 1.0), float(window))
        carry += expected
        emitted = min(max(1, int(carry)), max_new - produced)
        carry -= int(carry)
        mean_context = (others_context + context) / (others + 1)
        steps.append((mech.step_latency_s(others + 1, mean_context, scheduled, radix=engine.radix), emitted))
        correct_histogram[min(emitted - 1, len(correct_histogram) - 1)] += 1
        produced += emitted
    decode_s = sum(s for s, _ in steps)
    verify_ct = len(steps)
    work = Generation(ttft_s + decode_s, prompt_tokens + max_new / 2, max_new, verify_ct)
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": None,
        "prompt_tokens": prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
    }

    def meta_at(done_tokens: int, done_steps: int, elapsed_s: float, final: bool) -> dict[str, Any]:
        out = dict(meta, completion_tokens=done_tokens, e2e_latency=round(elapsed_s, 6))
        if window > 1 and done_steps:  # SGLang writes them once a verify step has happened
            correct = done_tokens - done_steps
            out.update(
                spec_accept_rate=correct / (done_steps * (window - 1)),
                spec_accept_length=done_tokens / done_steps,
                spec_num_correct_drafts=correct,
                spec_num_proposed_drafts=done_steps * (window - 1),
                spec_verify_ct=done_steps,
            )
            if args.get("speculative_algorithm") == "DSPARK":
                out["spec_cap_length"] = scheduled
            if final:  # the per-step histograms, whole, with the last chunk
                out["spec_correct_drafts_histogram"] = _trimmed(correct_histogram)
                if args.get("speculative_algorithm") == "DSPARK":
                    out["spec_cap_lens_histogram"] = _cap_histogram(scheduled, done_steps)
        if final:
            out["finish_reason"] = {"type": "length", "length": max_new}
        return out

    scale = 1.0 / speed
    if not request.get("stream"):
        total_s = (ttft_s + decode_s) * scale
        payload = {
            "text": _output_text(max_new),
            "output_ids": list(range(max_new)),
            "meta_info": meta_at(max_new, verify_ct, total_s, True),
            "index": 0,
        }
        body_out = json.dumps(payload).encode()
        return GenerateReply(200, {"Content-Type": "application/json"}, body_out, delay_s=total_s, work=work)
    return GenerateReply(
        200,
        {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        chunks=_stream(steps, ttft_s, scale, meta_at),
        work=work,
    )


def _cap_histogram(scheduled: float, steps: int) -> list[int]:
    """Steps by their scheduled verify window: a mean window of 3.4 is 60 % threes and 40 % fours."""
    low = math.floor(scheduled)
    high_steps = round((scheduled - low) * steps)
    histogram = [0] * (low + 2)
    histogram[low] += steps - high_steps
    histogram[low + 1] += high_steps
    return _trimmed(histogram)


def _trimmed(histogram: list[int]) -> list[int]:
    """As SGLang grows it: up to the largest count of accepted drafts seen."""
    last = max((i for i, n in enumerate(histogram) if n), default=0)
    return histogram[: last + 1]


def _stream(
    steps: list[tuple[float, int]], ttft_s: float, scale: float, meta_at: Any
) -> tuple[tuple[float, bytes], ...]:
    out: list[tuple[float, bytes]] = []
    elapsed_s, pending_s, done_tokens = ttft_s * scale, ttft_s * scale, 0
    for index, (step_s, emitted) in enumerate(steps, start=1):
        elapsed_s += step_s * scale
        pending_s += step_s * scale
        done_tokens += emitted
        final = index == len(steps)
        # The first step's chunk always goes alone (it is the client's time to first token).
        if index > 1 and not final and pending_s < MIN_CHUNK_WALL_S:
            continue
        chunk = {
            "text": _output_text(done_tokens),
            "output_ids": list(range(done_tokens - emitted, done_tokens)),
            "meta_info": meta_at(done_tokens, index, elapsed_s, final),
            "index": 0,
        }
        out.append((pending_s, b"data: " + json.dumps(chunk).encode() + b"\n\n"))
        pending_s = 0.0
    out.append((0.0, b"data: [DONE]\n\n"))
    return tuple(out)


def _output_text(tokens: int) -> str:
    return "lorem " * tokens
