"""One simulated SGLang server, advanced one decode-log window (40 verify steps) at a time; no I/O.

Requests move as cohorts (those admitted together share prompt length, progress and mean acceptability)
through a FIFO queue into the running batch, capped by the recurrent-state pool and the KV budget. Each window
applies the mechanism (accept length, step latency, prefill cost) and records what SGLang's scheduler and
tokenizer would publish. Deterministic given the seed: a window never depends on when, or whether, someone
looks.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any

from sim import mechanism as mech
from sim.calibration import ACCEPT_NOISE_REL_BATCH1
from sim.catalogue import E2E_BUCKETS_S, ITL_BUCKETS_S, QUEUE_BUCKETS_S, TOKEN_BUCKETS, TTFT_BUCKETS_S
from sim.cohorts import Cohort, Waiting, base_accept_length, merge_closest
from sim.ledger import Gauges, Histogram, Published, WindowLedger
from sim.workload import Load, Workload, poisson

STEPS_PER_WINDOW = mech.DECODE_LOG_INTERVAL  # gauges refresh once per 40 decode steps
IDLE_REFRESH_S = 30.0  # the idle path refreshes gauges after 30 s without a decode log
NEW_TOKEN_RATIO = 0.3  # share of the remaining output the scheduler reserves KV for at admission
WINDOW_NOISE_REL = 0.02  # window-to-window content noise of one request's acceptance
MAX_COHORTS = 4  # cohorts kept per server; more are merged (bounds the cost of a long output)
HISTOGRAM_BOUNDS: dict[str, tuple[float, ...]] = {
    "queue": QUEUE_BUCKETS_S,
    "itl": ITL_BUCKETS_S,
    "prompt_len": TOKEN_BUCKETS,
    "uncached_len": TOKEN_BUCKETS,
    "gen_len": TOKEN_BUCKETS,
    **{
        f"{name}:{stream}": bounds
        for stream in ("true", "false")
        for name, bounds in (("ttft", TTFT_BUCKETS_S), ("e2e", E2E_BUCKETS_S), ("tpot", ITL_BUCKETS_S))
    },
}


STREAM_SLICES = 8  # per-batch counters advance through the pending window in this many steps


class ServerEngine:
    """The scheduler and tokenizer of one server. ``advance_to(t)`` publishes every window ending by ``t``."""

    def __init__(
        self,
        args: dict[str, Any],
        workload: Workload,
        load: Load,
        *,
        seed: int,
        start_s: float = 0.0,
        min_window_s: float = 0.0,
    ) -> None:
        self.args = args
        self.layout = mech.pool_layout(args)
        self.window = mech.verify_window(args)
        self._window_f = float(self.window)
        self.scheduled = mech.scheduled_window(self.window, args.get("speculative_algorithm"))
        self.radix = mech.radix_cache_on(args)
        self.workload, self.load = workload, load
        self.rng = random.Random(seed)
        self.start_s = start_s
        # History sampling sets this to its step: a window then spans at least that long (more than 40 steps),
        # so a long history costs one window per sample; live servers keep SGLang's 40-step decode-log window.
        self.min_window_s = min_window_s
        self.horizon_s = math.inf  # idle windows end here at the latest (the next scheduled change)
        gauges = Gauges(mamba_available=self.layout.state_slots, kv_available=self.layout.kv_tokens)
        histograms = {key: Histogram(bounds) for key, bounds in HISTOGRAM_BOUNDS.items()}
        self.published = Published(gauges, start_s, histograms=histograms)
        self._internal_s = start_s
        self._pending: WindowLedger | None = None
        self._cohorts: list[Cohort] = []
        self._queue: deque[Waiting] = deque()
        self._running = self._queued = 0
        self._group_position = 0
        self._tree_tokens = 0.0  # tokens the radix cache keeps from finished requests (evictable)
        self._tree_states = 0
        self._noise = 1.0  # this window's content noise, shared by the batch

    def advance_to(self, t: float) -> None:
        """Publish every window that ends at or before ``t`` (the next one may already be simulated)."""
        while True:
            if self._pending is None:
                if self._internal_s > t:
                    return
                self._pending = self._simulate_window()
            if self._pending.end_s > t:
                return
            self.published.commit(self._pending)
            self._pending = None

    def quiet_until_s(self) -> float:
        """``advance_to`` does nothing for any ``t`` before this: the pending window's end, or (none simulated
        yet) where the next one starts. History sampling skips its calls until then."""
        return self._internal_s if self._pending is None else self._pending.end_s

    def next_refresh_s(self) -> float:
        """When the published gauges change next: the end of the window after the last published one."""
        if self._pending is None:
            self._pending = self._simulate_window()
        return self._pending.end_s

    def streamed_share(self, t: float) -> float:
        """How much of the window being decoded has streamed out by ``t``, in eighths.

        SGLang adds decode tokens to ``realtime_tokens_total`` per batch and observes inter-token latency per
        streamed chunk, while its gauges change once per decode-log window; the simulator decides a window at
        once, so these two move through the pending window in steps (eighths keep bodies cacheable).
        """
        pending, start = self._pending, self.published.at_s
        if pending is None or pending.end_s <= start:
            return 0.0
        share = min(max((t - start) / (pending.end_s - start), 0.0), 1.0)
        return math.floor(share * STREAM_SLICES) / STREAM_SLICES

    def streaming(self, share: float, key: str) -> float:
        """The pending window's count ``key`` times ``share`` (what has streamed out of it so far)."""
        pending = self._pending
        return share * pending.counts.get(key, 0.0) if pending is not None and share > 0 else 0.0

    def streaming_observations(self, share: float, key: str) -> list[tuple[float, float, float]]:
        """The pending window's observations of ``key`` scaled by ``share``: (value, weight, sum)."""
        pending = self._pending
        if pending is None or share <= 0:
            return []
        return [(v, w * share, total * share) for k, v, w, total in pending.observations if k == key]

    def set_load(self, load: Load) -> None:
        self.load = load  # applies from the next simulated window

    def set_workload(self, workload: Workload) -> None:
        self.workload = workload

    # -- one window ------------------------------------------------------------------------------------------
    def _simulate_window(self) -> WindowLedger:
        start = self._internal_s
        win = WindowLedger(start)
        if self.load.concurrency is not None:
            self._arrive(start, self.load.concurrency - self._running - self._queued)
        present = list(self._cohorts)
        admitted = self._admit(win, [(start, self._free_slots())], start)
        if self._running == 0:
            return self._idle_window(win, start)
        mean_context = sum(c.count * (c.isl + c.progress) for c in self._cohorts) / self._running
        step_s = mech.step_latency_s(self._running, mean_context, self.scheduled, radix=self.radix)
        steps_per_window = STEPS_PER_WINDOW
        if self.min_window_s > STEPS_PER_WINDOW * step_s:
            steps_per_window = math.ceil(self.min_window_s / step_s)
        self._noise = 1.0 + self.rng.gauss(0.0, WINDOW_NOISE_REL) / math.sqrt(self._running)
        prefill_first = self._prefill(win, admitted)
        decode_s = steps_per_window * step_s
        estimate = prefill_first + decode_s
        begin, end = start + prefill_first, start + estimate
        frees: list[tuple[float, int]] = []
        tokens = steps = stalled = 0.0
        for c in present:  # running before the window: they sit through its first prefill batch
            stalled += c.count * prefill_first
            t, s = self._decode(win, c, steps_per_window, begin, end, frees)
            tokens, steps = tokens + t, steps + s
        for c in admitted:
            t, s = self._decode(win, c, steps_per_window, begin, end, frees)
            tokens, steps = tokens + t, steps + s
        self._mid_window_arrivals(start, estimate, frees)
        still_running = self._running
        free_at_start = self._free_slots() - sum(n for _, n in frees)
        joined = self._admit(win, [(start, free_at_start), *sorted(frees)], end)
        prefill_later = self._prefill(win, joined)
        stalled += still_running * prefill_later  # the later prefill batch stalls everyone still decoding
        for c in joined:  # joined mid-window: decode for the rest of it
            share = max(0.0, 1.0 - (c.first_token_s - start) / estimate)
            t, s = self._decode(win, c, steps_per_window * share, c.first_token_s, end, [])
            tokens, steps = tokens + t, steps + s
        self._cohorts = [c for c in self._cohorts if c.count > 0]
        if len(self._cohorts) > MAX_COHORTS:
            merge_closest(self._cohorts)
        # A streamed chunk's interval includes the prefills the request sat through (so does bench TPOT).
        waited = steps * step_s + stalled
        if tokens > 0:
            win.observe("itl", waited / tokens, tokens, waited)
        kv_used = self._retract_if_over_budget(win)
        step_latency_s = waited / steps if steps else step_s
        self._close(win, start, estimate + prefill_later, step_latency_s, tokens, steps, kv_used)
        win.bump(
            "graph_decode_passes" if win.gauges.is_cuda_graph else "eager_decode_passes", steps_per_window
        )
        win.bump("decode_seconds", decode_s)
        # Decode time weighted by how full the batch ran: the GPUs' power follows it (sim/gpu.py).
        win.bump("decode_load_seconds", decode_s * win.gauges.utilization)
        win.bump("prefill_seconds", prefill_first + prefill_later)
        return win

    def _idle_window(self, win: WindowLedger, start: float) -> WindowLedger:
        duration = min(IDLE_REFRESH_S, max(self.horizon_s - start, 1.0))
        if self.load.rate_rps:
            gap = self.rng.expovariate(self.load.rate_rps)
            if gap < duration:
                duration = gap
                self._arrive(start + gap, 1)
        win.bump("scheduler_idle_seconds", duration)
        win.bump("scheduler_cpu_seconds", 0.03 * duration)
        win.bump("tokenizer_cpu_seconds", 0.01 * duration)
        last, g = self.published.gauges, win.gauges
        # The idle path zeroes throughput but leaves the spec gauges and the last prefill's hit rate alone.
        g.spec_accept_length, g.spec_accept_rate = last.spec_accept_length, last.spec_accept_rate
        g.spec_cap_length, g.spec_block_accept_length = last.spec_cap_length, last.spec_block_accept_length
        g.cache_hit_rate = last.cache_hit_rate
        self._pool_gauges(g, self._kv_used())
        win.end_s = self._internal_s = start + duration
        return win

    # -- arrivals and admission ------------------------------------------------------------------------------
    def _arrive(self, at_s: float, count: int) -> None:
        if count > 0:
            self._queue.append(Waiting(count, at_s))
            self._queued += count

    def _mid_window_arrivals(self, start: float, estimate: float, frees: list[tuple[float, int]]) -> None:
        if self.load.concurrency is not None:
            # Closed loop: a finished request's client sends its next one at once.
            deficit = self.load.concurrency - self._running - self._queued
            for at_s, count in sorted(frees):
                take = min(count, deficit)
                self._arrive(at_s, take)
                deficit -= take
        elif self.load.rate_rps:
            arrivals = poisson(self.rng, self.load.rate_rps * estimate)
            batches = min(arrivals, 8)  # arrivals grouped into at most 8 instants per window
            for i, at_s in enumerate(sorted(start + self.rng.random() * estimate for _ in range(batches))):
                self._arrive(at_s, arrivals // batches + (1 if i < arrivals % batches else 0))

    def _free_slots(self) -> int:
        return max(0, self.layout.max_running - self._running)

    def _kv_room(self) -> int:
        """How many more requests the KV budget admits, reserving room for the outputs still to come."""
        work = self.workload
        ratio = NEW_TOKEN_RATIO * float(self.args.get("schedule_conservativeness") or 1.0)
        need = max(work.isl - self._expected_hit_tokens() + work.osl * ratio, 1.0)
        used = self._kv_used()
        free_slots = self.layout.max_running - self._running
        if self.layout.kv_tokens - used - self._running * work.osl * ratio >= need * free_slots:
            return free_slots  # plenty of KV even if everyone ran to its full output: the state pool decides
        remaining = sum(c.count * (work.osl - c.progress) for c in self._cohorts if c.progress < work.osl)
        return max(0, int((self.layout.kv_tokens - used - remaining * ratio) // need))

    def _admit(self, win: WindowLedger, slots: list[tuple[float, int]], latest_s: float) -> list[Cohort]:
        """Match waiting requests (FIFO) to free slots (time, count); the admitted form one new cohort."""
        if not self._queue:
            return []
        groups: list[tuple[int, float, float]] = []  # count, arrival, admission
        open_slots = [[t, n] for t, n in slots if n > 0]
        room = self._kv_room() if self._queue and open_slots else 0
        while self._queue and open_slots and room > 0:
            waiting, slot = self._queue[0], open_slots[0]
            take = min(waiting.count, int(slot[1]), room)
            admitted_s = min(max(waiting.arrival_s, slot[0]), latest_s)
            groups.append((take, waiting.arrival_s, admitted_s))
            win.observe("queue", admitted_s - waiting.arrival_s, take)
            waiting.count -= take
            slot[1] -= take
            room -= take
            if waiting.count == 0:
                self._queue.popleft()
            if slot[1] == 0:
                open_slots.pop(0)
        if not groups:
            return []
        work = self.workload
        count = sum(n for n, _, _ in groups)
        self._queued -= count
        self._running += count
        # Each request has its own acceptability (content-sensitive drafting): the cohort carries the mean,
        # and its members finish spread by their own, which is what de-synchronises a batch over time. Centred
        # so that tokens / steps (what a benchmark measures) is unbiased: E[1 / factor] = 1.
        spread = ACCEPT_NOISE_REL_BATCH1 / math.sqrt(count)
        factor = math.exp(self.rng.gauss(0.0, spread) + spread**2 / 2)
        within = math.sqrt(3) * ACCEPT_NOISE_REL_BATCH1 * math.sqrt(1 - 1 / count)
        lo, hi = work.osl_range
        jitter = work.isl_jitter * (2 * self.rng.random() - 1) / math.sqrt(count)
        cohort = Cohort(
            count=count,
            admitted=count,
            isl=work.isl * (1 + jitter),
            cached=self._take_prefix_hits(count),
            osl_lo=max(1.0, lo * (1 - within)),
            osl_hi=hi * (1 + within),
            factor=factor,
            arrival_s=sum(n * a for n, a, _ in groups) / count,
            first_token_s=sum(n * s for n, _, s in groups) / count,
            streaming=self.rng.random() < work.streaming_fraction,
        )
        self._cohorts.append(cohort)
        return [cohort]

    def _expected_hit_tokens(self) -> float:
        work = self.workload
        if not self.radix or not work.shared_prefix_tokens:
            return 0.0
        return work.shared_prefix_tokens * (work.prompts_per_group - 1) / work.prompts_per_group

    def _take_prefix_hits(self, count: int) -> float:
        """Prompt tokens per request served from the radix cache: all but each group's first prompt hit."""
        work = self.workload
        if not self.radix or not work.shared_prefix_tokens:
            return 0.0
        misses = 0
        for _ in range(count):
            misses += self._group_position == 0
            self._group_position = (self._group_position + 1) % work.prompts_per_group
        return work.shared_prefix_tokens * (count - misses) / count

    def _prefill(self, win: WindowLedger, admitted: list[Cohort]) -> float:
        """Prefill time of newly admitted cohorts (chunked, batched); records their TTFT."""
        if not admitted:
            return 0.0
        uncached = sum(c.count * (c.isl - c.cached) for c in admitted)
        cached = sum(c.count * c.cached for c in admitted)
        chunks = mech.prefill_chunks(uncached, self.args.get("chunked_prefill_size"))
        compute = sum(c.count * mech.prefill_s(c.isl - c.cached, c.cached) for c in admitted)
        total = chunks * mech.PREFILL_CHUNK_OVERHEAD_S + compute
        for c in admitted:
            own = mech.PREFILL_CHUNK_OVERHEAD_S + mech.prefill_s(c.isl - c.cached, c.cached)
            c.first_token_s += own + (total - own) / 2  # batched with the others' prefill
            stream = "true" if c.streaming else "false"
            win.observe(f"ttft:{stream}", c.first_token_s - c.arrival_s, c.count)
            win.observe("prompt_len", c.isl, c.count)
            win.observe("uncached_len", c.isl - c.cached, c.count)
        win.bump("prefill_compute_tokens", uncached)
        win.bump("prefill_cache_tokens", cached)
        win.bump("prefill_passes", chunks)
        win.gauges.cache_hit_rate = cached / (cached + uncached)
        return total

    # -- decode ----------------------------------------------------------------------------------------------
    def _decode(
        self,
        win: WindowLedger,
        c: Cohort,
        steps: float,
        begin_s: float,
        end_s: float,
        frees: list[tuple[float, int]],
    ) -> tuple[float, float]:
        """Run ``steps`` verify steps of one cohort; account completions. Returns (tokens, request-steps)."""
        if steps <= 0 or c.count <= 0:
            return 0.0, 0.0
        length = (
            base_accept_length(c.isl + c.progress, self.window, self.workload.content)
            * c.factor
            * self._noise
        )
        decoded = c.decode(steps, 1.0 if length < 1.0 else min(length, self._window_f))
        if decoded.finished:
            finish_s = begin_s + decoded.finished_at * (end_s - begin_s)
            frees.append((finish_s, decoded.finished))
            self._running -= decoded.finished
            steps_taken = c.steps - steps * (1 - decoded.finished_at)
            self._complete(win, c, decoded.finished, decoded.finished_osl, steps_taken, finish_s)
        return decoded.tokens, decoded.request_steps

    def _complete(
        self, win: WindowLedger, c: Cohort, n: int, osl: float, steps: float, finish_s: float
    ) -> None:
        """What the tokenizer adds when ``n`` requests of a cohort finish (its counters move then)."""
        counts = win.counts
        stream = "true" if c.streaming else "false"
        for key, amount in (
            (f"num_requests:{stream}", n),
            (f"prompt_tokens:{stream}", n * c.isl),
            (f"generation_tokens:{stream}", n * osl),
            ("cached_tokens", n * c.cached),
            ("spec_verify_calls", n * steps if self.window > 1 else 0.0),
        ):
            counts[key] = counts.get(key, 0.0) + amount
        observations = win.observations
        observations.append((f"e2e:{stream}", finish_s - c.arrival_s, n, (finish_s - c.arrival_s) * n))
        tpot = (finish_s - c.first_token_s) / (osl - 1 if osl > 2 else 1.0)
        observations.append((f"tpot:{stream}", tpot, n, tpot * n))
        observations.append(("gen_len", osl, n, osl * n))
        self._tree_tokens += n * (c.isl + osl)
        self._tree_states += n

    def _retract_if_over_budget(self, win: WindowLedger) -> float:
        """Decode outgrew the KV pool: requeue the youngest requests, as SGLang retracts; KV in use after."""
        used = self._kv_used()
        over = used - self.layout.kv_tokens
        if over <= 0:
            return used
        retracted = 0
        while over > 0 and self._cohorts:
            c = self._cohorts[-1]
            per = c.isl - c.cached + c.progress
            n = min(c.count, max(1, math.ceil(over / per)))
            win.bump("retracted_requests", n)
            win.bump("retracted_input_tokens", round(n * c.isl))
            win.bump("retracted_output_tokens", round(n * c.progress))
            self._queue.appendleft(Waiting(n, c.arrival_s))
            self._queued += n
            self._running -= n
            c.count -= n
            c.admitted -= n
            retracted += n
            over -= n * per
            if c.count == 0:
                self._cohorts.pop()
        win.gauges.retracted = retracted
        return self._kv_used()

    # -- publishing ------------------------------------------------------------------------------------------
    def _kv_used(self) -> float:
        """KV tokens held by running requests; a shared prefix is stored once per group."""
        own = sum(c.count * (c.isl - c.cached + c.progress) for c in self._cohorts)
        shared = self.workload.shared_prefix_tokens
        if not self.radix or not shared:
            return own
        hits = sum(c.count * c.cached for c in self._cohorts)
        return own + math.ceil(hits / shared / self.workload.prompts_per_group) * shared

    def _pool_gauges(self, g: Gauges, kv_used: float) -> None:
        layout = self.layout
        running = g.running = self._running
        g.queued = self._queued
        g.decode_sum_seq_lens = round(sum(c.count * (c.isl + c.progress) for c in self._cohorts))
        kv = g.kv_used = min(layout.kv_tokens, round(kv_used))
        evictable = g.kv_evictable = round(min(layout.kv_tokens - kv, self._tree_tokens)) if self.radix else 0
        g.kv_available = layout.kv_tokens - kv - evictable
        used = g.mamba_used = min(layout.state_slots, running * layout.slots_per_request)
        cached = g.mamba_evictable = min(layout.state_slots - used, self._tree_states) if self.radix else 0
        g.mamba_available = layout.state_slots - used - cached
        full = g.full_token_usage = kv / layout.kv_tokens
        mamba = g.mamba_usage = used / layout.state_slots
        g.token_usage = round(full if full > mamba else mamba, 2)  # SGLang ≥ 0.5.10: the bottleneck pool
        g.utilization = running / layout.max_running

    def _close(
        self,
        win: WindowLedger,
        start: float,
        duration: float,
        step_s: float,
        tokens: float,
        steps: float,
        kv_used: float,
    ) -> None:
        g = win.gauges
        self._pool_gauges(g, kv_used)
        g.gen_throughput = tokens / duration
        g.decode_tokens, g.step_latency_s = tokens, step_s  # per request, prefill stalls included
        if self.window > 1 and steps > 0:
            g.spec_accept_length = tokens / steps
            g.spec_accept_rate = mech.accept_rate(g.spec_accept_length, self.window)
            if self.args.get("speculative_algorithm") == "DSPARK":
                g.spec_cap_length = self.scheduled
                g.spec_block_accept_length = g.spec_accept_length
        graph_bs = self.args.get("cuda_graph_max_bs_decode")
        graph = (
            not self.args.get("disable_cuda_graph") and isinstance(graph_bs, int) and g.running <= graph_bs
        )
        g.is_cuda_graph = 1.0 if graph else 0.0
        win.bump("decode_tokens", tokens)
        win.bump("verify_steps", steps)
        win.bump("scheduler_cpu_seconds", 0.92 * duration)
        win.bump("tokenizer_cpu_seconds", 0.05 * duration)
        win.end_s = self._internal_s = start + duration
