"""A live loopback server that decodes as SGLang does, in real (monotonic) time, for the throughput truth
tests.

``slots`` requests decode at once, each emitting ``tokens_per_step`` tokens every ``step_s``; a finished
request is replaced at once by the next one (so the batch stays full). What moves when, as in SGLang 0.5.23:

- per batch (the scheduler): ``realtime_tokens_total{mode="decode"}`` and the inter-token-latency histogram
  (one observation per streamed chunk: ``_sum`` += the chunk's interval, ``_count`` += its tokens);
- at request completion only (the tokenizer): ``generation_tokens_total``, ``prompt_tokens_total``,
  ``cached_tokens_total``, ``num_requests_total``, ``spec_verify_calls_total`` and the e2e histogram, with
  outputs of 1–2 K tokens, so a window of seconds often sees no completion at all;
- every ``decode_log_steps`` steps (the decode log): ``gen_throughput`` and ``spec_accept_length``.

With ``priorities`` (``--enable-priority-scheduling``) tokenizer series are split by request priority with no
total, and the running/queue gauges carry the total under ``priority=""`` plus a breakdown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.collectors.bodies import MODEL, SERVER_INFO
from tests.collectors.servers import FakeSGLang, Handler, send

PROMPT_TOKENS = 800
CACHED_TOKENS = 200


@dataclass(frozen=True)
class Decoding:
    slots: int = 8
    tokens_per_step: int = 3
    step_s: float = 0.04
    decode_log_steps: int = 40
    priorities: bool = False

    @property
    def decode_tok_s(self) -> float:
        """The truth: tokens the batch decodes per second."""
        return self.slots * self.tokens_per_step / self.step_s

    def request_steps(self, slot: int, index: int) -> int:
        """Verify steps of the ``index``-th request of ``slot``: outputs of 1 200–2 100 tokens."""
        return 400 + (slot * 71 + index * 131) % 300

    def completed(self, slot: int, steps: int) -> tuple[int, int]:
        """(requests finished, their verify steps) on ``slot`` after ``steps`` steps. The first request of
        each slot was already part-way through at start, so completions are spread out; a request adds all
        its verify steps (and tokens) when it finishes, as SGLang's tokenizer does."""
        done = done_steps = 0
        first = self.request_steps(slot, 0)
        offset = first - 1 - (slot * 41) % first  # slot s finishes its first request after 1 + 41·s steps
        elapsed = steps + offset
        while elapsed >= (length := self.request_steps(slot, done)):
            elapsed -= length
            done_steps += length
            done += 1
        return done, done_steps


class DecodingSGLang(FakeSGLang):
    """/metrics computed from the time since the server started; /server_info as ``FakeSGLang``."""

    def __init__(self, decoding: Decoding | None = None) -> None:
        self.decoding = decoding or Decoding()
        self.started = time.monotonic()
        super().__init__(info=dict(SERVER_INFO, max_running_requests=self.decoding.slots))
        self.routes["/metrics"] = self._decode_metrics

    def steps(self) -> int:
        return int((time.monotonic() - self.started) / self.decoding.step_s)

    def body(self, steps: int) -> str:
        d = self.decoding
        prio = d.priorities
        base = f'engine_type="unified",model_name="{MODEL}",moe_ep_rank="0",pp_rank="0"'
        sched = base + (',priority=""' if prio else "")
        lines: list[str] = []

        def sample(name: str, labels: str, value: float) -> None:
            lines.append(f"sglang:{name}{{{labels}}} {value}")

        logged = steps - steps % d.decode_log_steps  # the decode log's last report
        for name, value in (
            ("num_running_reqs", float(d.slots)),
            ("num_queue_reqs", 0.0),
            ("gen_throughput", d.decode_tok_s if logged else 0.0),
            ("spec_accept_length", float(d.tokens_per_step) if logged else 0.0),
        ):
            lines.append(f"# TYPE sglang:{name} gauge")
            for rank in ("0", "1"):
                sample(name, f'{sched},tp_rank="{rank}"', value if rank == "0" else 0.0)
            if prio and name == "num_running_reqs":
                for priority, share in (("0", d.slots // 2), ("1", d.slots - d.slots // 2)):
                    sample(name, f'{base},priority="{priority}",tp_rank="0"', share)
        lines.append("# TYPE sglang:realtime_tokens_total counter")
        decoded = float(d.slots * d.tokens_per_step * steps)
        for mode, value in (("prefill_compute", 0.0), ("prefill_cache", 0.0), ("decode", decoded)):
            sample("realtime_tokens_total", f'{sched},mode="{mode}",tp_rank="0"', value)

        # Tokenizer side, per priority (slot parity) when priorities are on, else one series.
        groups = {"0": range(0, d.slots, 2), "1": range(1, d.slots, 2)} if prio else {"": range(d.slots)}
        tok = f'engine_type="unified",model_name="{MODEL}"'
        totals: dict[str, tuple[float, ...]] = {}
        for priority, slots in groups.items():
            requests = verify = 0
            for slot in slots:
                done, done_steps = d.completed(slot, steps)
                requests += done
                verify += done_steps
            chunks = len(slots) * steps  # one streamed chunk per running request per step
            totals[priority] = (requests, verify, chunks)
        for name, kind, index in (
            ("num_requests_total", "counter", 0),
            ("generation_tokens_total", "counter", 1),
            ("prompt_tokens_total", "counter", 0),
            ("cached_tokens_total", "counter", 0),
            ("spec_verify_calls_total", "counter", 1),
        ):
            lines.append(f"# TYPE sglang:{name} {kind}")
            for priority, values in totals.items():
                labels = tok + (f',priority="{priority}"' if prio else "")
                value = values[index]
                if name == "generation_tokens_total":
                    value *= d.tokens_per_step
                elif name == "prompt_tokens_total":
                    value *= PROMPT_TOKENS
                elif name == "cached_tokens_total":
                    value *= CACHED_TOKENS
                sample(name, labels, float(value))
        lines.append("# TYPE sglang:inter_token_latency_seconds histogram")
        for priority, (_, _, chunks) in totals.items():
            labels = tok + (f',priority="{priority}"' if prio else "")
            count = float(chunks * d.tokens_per_step)
            sample("inter_token_latency_seconds_bucket", labels + ',le="0.1"', count)
            sample("inter_token_latency_seconds_bucket", labels + ',le="+Inf"', count)
            sample("inter_token_latency_seconds_sum", labels, chunks * d.step_s)
            sample("inter_token_latency_seconds_count", labels, count)
        return "\n".join(lines) + "\n"

    def _decode_metrics(self, handler: Handler) -> None:
        send(handler, self.body(self.steps()).encode())
