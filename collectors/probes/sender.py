"""Active probes, the HTTP side: one streamed ``POST /generate`` per context length (see
``collectors.probes.prober`` for what is measured and when a probe is skipped), under the token budget,
through the HTTP edge's client for targets (its bearer token, TLS, deadline and transport error words).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from collectors.errors import CollectorError
from collectors.http.exchange import read_head
from collectors.http.targets import TargetClient
from collectors.model import Signals
from collectors.probe_result import ProbeResult
from collectors.probes.prober import HOUR_S, PROBE_HEADER, RID_PREFIX, backoff_reason
from collectors.probes.prompt import DEFAULT_BYTES_PER_TOKEN, build_prompt, calibrated
from config import Config, Target

_MAX_LINE_BYTES = (
    4 * 1024 * 1024
)  # one SSE event (SGLang streams the cumulative text) larger than this is refused
_MAX_STREAM_BYTES = 256 * 1024 * 1024  # a whole answer: 8192 new tokens of cumulative text stay well below


@dataclass(frozen=True, slots=True)
class _Stream:
    first_s: float
    last_s: float
    first_meta: dict[str, Any]
    last_meta: dict[str, Any]


class ProbeError(Exception):
    """A probe that did not measure; the message is shown as the result's error."""


def _int(meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class Prober:
    """Sweeps targets; thread-safe (one sweep per target at a time, the token ledger under a lock)."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        spent: Sequence[tuple[str, float, int]] = (),
        stopping: threading.Event | None = None,
    ) -> None:
        self._settings = config.probes
        # Set when specwatch shuts down: no further probe is sent and one in flight is cut at its next chunk
        # (a sweep of long contexts otherwise kept the process alive for up to a minute after Ctrl-C).
        self._stopping = stopping if stopping is not None else threading.Event()
        self._client = TargetClient(config.scrape)
        self._clock = clock
        self._lock = threading.Lock()
        self._ledger: dict[str, deque[tuple[float, int]]] = {}
        self._bytes_per_token: dict[str, float] = {}
        for target, ts, tokens in spent:  # what earlier runs spent this hour (from the store)
            self._ledger.setdefault(target, deque()).append((ts, tokens))

    def sweep_cost_tokens(self) -> int:
        """Prompt + output tokens one sweep of one target sends."""
        settings = self._settings
        return sum(settings.context_tokens) + settings.max_new_tokens * len(settings.context_tokens)

    def spent_tokens(self, target: str, now: float) -> int:
        """Tokens sent to ``target`` in the last hour."""
        with self._lock:
            ledger = self._ledger.setdefault(target, deque())
            while ledger and ledger[0][0] <= now - HOUR_S:
                ledger.popleft()
            return sum(tokens for _, tokens in ledger)

    def sweep(self, target: Target, recipe_id: str | None, signals: Signals | None) -> list[ProbeResult]:
        """One request per context length, shortest first; a skipped sweep gives one error per length."""
        now = self._clock()
        running = signals.running if signals is not None else None
        contexts = self._settings.context_tokens

        def skipped(reason: str) -> list[ProbeResult]:
            return [
                ProbeResult(now, target.name, recipe_id, c, running=running, error=reason) for c in contexts
            ]

        if not target.probe:
            return skipped("skipped: the target does not opt in (probe: false)")
        budget = self._settings.max_tokens_per_hour
        cost, spent = self.sweep_cost_tokens(), self.spent_tokens(target.name, now)
        if spent + cost > budget:
            return skipped(
                f"skipped: this sweep ({cost} tokens) would pass probes.max_tokens_per_hour ({budget}); "
                f"{spent} already sent this hour"
            )
        reason = backoff_reason(signals, self._settings.max_queued)
        if reason is not None:
            return skipped(reason)
        # One request at a time: a probe adds one request to the batch, never a burst.
        results = []
        for context in contexts:
            if self._stopping.is_set():
                break  # shutting down: the lengths not probed yet are not sent
            result = self._probe(target, recipe_id, context, running)
            if result.error is not None and self._stopping.is_set():
                break  # cut off by the shutdown: not a measurement of the server, so not stored either
            results.append(result)
        return results

    def _charge(self, target: str, ts: float, tokens: int) -> None:
        with self._lock:
            self._ledger.setdefault(target, deque()).append((ts, tokens))

    def _probe(
        self, target: Target, recipe_id: str | None, context: int, running: float | None
    ) -> ProbeResult:
        started = self._clock()
        rid = f"{RID_PREFIX}{uuid.uuid4().hex[:16]}"
        bytes_per_token = self._bytes_per_token.get(target.name, DEFAULT_BYTES_PER_TOKEN)
        prompt = build_prompt(context, bytes_per_token, rid)
        max_new = self._settings.max_new_tokens
        # Charged before sending: a request that fails midway may still have cost the server its prefill.
        self._charge(target.name, started, context + max_new)
        base = ProbeResult(started, target.name, recipe_id, context, running=running, request_id=rid)
        try:
            stream = self._client.loop.run(self._post(target, rid, prompt, max_new))
        except (ProbeError, CollectorError) as exc:
            # The edge's words start with the target's name already; a ProbeError's do not.
            error = str(exc).removeprefix(f"{target.name}: ")
            return _replace(base, error=self._client.redact(target, f"{target.name}: {error}"))
        return self._measure(base, stream, target, prompt)

    def _measure(self, base: ProbeResult, stream: _Stream, target: Target, prompt: str) -> ProbeResult:
        last, first = stream.last_meta, stream.first_meta
        prompt_tokens = _int(last, "prompt_tokens")
        completion = _int(last, "completion_tokens")
        if prompt_tokens is None or not completion:
            return _replace(
                base, error=f"{target.name}: /generate meta_info lacks prompt_tokens / completion_tokens"
            )
        with self._lock:
            old = self._bytes_per_token.get(target.name, DEFAULT_BYTES_PER_TOKEN)
            self._bytes_per_token[target.name] = calibrated(old, prompt, prompt_tokens)
        decode_s = stream.last_s - stream.first_s
        verify_ct = _int(last, "spec_verify_ct")
        first_completion = _int(first, "completion_tokens") or 0
        tpot_s = decode_s / (completion - first_completion) if completion > first_completion else None
        accept_length: float | None
        step_s: float | None
        if verify_ct is None:
            # Plain decoding: SGLang adds no spec_* fields; one token per request per step.
            accept_length, step_s = 1.0, tpot_s
        else:
            first_verify = _int(first, "spec_verify_ct") or 0
            accept_length = completion / verify_ct if verify_ct else None
            step_s = decode_s / (verify_ct - first_verify) if verify_ct > first_verify else None
        e2e = last.get("e2e_latency")
        return _replace(
            base,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion,
            verify_ct=verify_ct,
            accept_length=accept_length,
            step_latency_s=step_s,
            ttft_s=stream.first_s,
            tpot_s=tpot_s,
            e2e_s=float(e2e) if isinstance(e2e, int | float) and not isinstance(e2e, bool) else None,
        )

    async def _post(self, target: Target, rid: str, prompt: str, max_new: int) -> _Stream:
        timeout_s = self._settings.timeout_s
        # The edge's headers: one place for the bearer token and its missing-variable error.
        headers = {
            **self._client.headers(target, "text/event-stream"),
            PROBE_HEADER: "1",
            "Content-Type": "application/json",
        }
        body = {
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True},
            "stream": True,
            "rid": rid,
        }
        url, what = self._client.where(target, "/generate")
        what = dataclasses.replace(
            what,
            timeout_s=timeout_s,
            timeout_setting="probes.timeout_s",
            slow="the server may be hung or overloaded",
        )
        shown = what.peer
        sent = time.monotonic()
        async with self._client.send(
            target,
            url,
            what,
            method="POST",
            headers=headers,
            data=json.dumps(body).encode(),
            deadline=sent + timeout_s,
        ) as response:
            status = response.status
            if status != 200:
                said = _server_message(await read_head(response, 4096))
                raise ProbeError(f"{shown} answered HTTP {status}: {said}")
            kind = response.headers.get("Content-Type", "")
            if "text/event-stream" not in kind:
                raise ProbeError(f"{shown} did not answer with an event stream (Content-Type {kind[:60]!r})")
            first: tuple[float, dict[str, Any]] | None = None
            last: tuple[float, dict[str, Any]] | None = None
            done = False
            async for line in _lines(response, shown, self._stopping):
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event: lines
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                now = time.monotonic() - sent
                meta = _meta(data, shown)
                if first is None:
                    first = (now, meta)
                last = (now, meta)
        if first is None or last is None:
            raise ProbeError(f"{shown}: the stream ended without a single event")
        if not done:
            raise ProbeError(f"{shown}: the stream ended before data: [DONE]")
        return _Stream(first[0], last[0], first[1], last[1])


def _meta(data: bytes, shown: str) -> dict[str, Any]:
    """The ``meta_info`` of one event (SGLang's per-request statistics so far)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ProbeError(f"{shown}: an event is not JSON: {data[:80]!r}") from None
    meta = chunk.get("meta_info") if isinstance(chunk, dict) else None
    if not isinstance(meta, dict):
        if isinstance(chunk, dict) and "error" in chunk:
            raise ProbeError(f"{shown}: the server reported an error: {str(chunk['error'])[:200]}")
        raise ProbeError(f"{shown}: an event has no meta_info (not SGLang's /generate?)")
    return meta


async def _lines(
    response: aiohttp.ClientResponse, shown: str, stopping: threading.Event
) -> AsyncIterator[bytes]:
    """The stream's lines; a line or an answer past its cap is refused (the deadline bounds only time), and
    the stream is cut at the next chunk once ``stopping`` is set."""
    pending, total = b"", 0
    async for chunk in response.content.iter_any():
        if stopping.is_set():
            raise ProbeError(f"{shown}: cut off mid-answer: specwatch is stopping")
        total += len(chunk)
        if total > _MAX_STREAM_BYTES:
            raise ProbeError(f"{shown}: the answer passed {_MAX_STREAM_BYTES // 2**20} MiB; refused")
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > _MAX_LINE_BYTES:
            raise ProbeError(f"{shown}: one event is larger than {_MAX_LINE_BYTES // 2**20} MiB; refused")
        for line in lines:
            yield line.rstrip(b"\r")
    if pending:
        yield pending.rstrip(b"\r")


def _server_message(head: bytes) -> str:
    """What a refusing server said (SGLang answers errors in JSON: its message, else the text)."""
    text = head.decode("utf-8", errors="replace")
    try:
        payload = json.loads(text)
    except ValueError:
        return text.strip()[:200] or "(empty body)"
    if isinstance(payload, dict):
        for key in ("message", "detail", "error"):
            if key in payload:
                return str(payload[key])[:300]
    return text[:200]


def _replace(result: ProbeResult, **changes: Any) -> ProbeResult:
    return ProbeResult(**{**asdict(result), **changes})


__all__ = ["ProbeError", "Prober"]
