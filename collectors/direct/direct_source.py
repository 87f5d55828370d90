"""The direct source: scrape every SGLang server's /metrics concurrently and derive its signals.

One coroutine per target on the process's HTTP loop (``collectors.http.loop.HttpLoop``), at most
``scrape.concurrency`` in flight; each has its own deadline, and targets that timed out last cycle are started
last, so a wave of dead servers cannot hold up the live ones. Parsing and derivation run on the loop too: they
hold the GIL either way, and one thread saves the hand-offs a thread pool pays per target. /server_info is
read at start, after a restart (a counter went down), after the target was down, and every few minutes in case
a restart went unnoticed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from collectors.derive import CounterState, derive_signals, detect_reset, is_restart
from collectors.direct.gpu_scrape import ExporterClient, check_count, compile_selection, read_gpus
from collectors.direct.metrics_reader import sample_plan
from collectors.direct.scrape import METRICS_PATH, Fetcher, metrics_path, scrape_metrics_async
from collectors.errors import ScrapeError, ScrapeTimeout
from collectors.model import Event, Recipe, SourceHealth, TargetSnapshot
from collectors.server_info import fetch_recipe_async
from collectors.slo import Sli, counter_for, missing_reason
from config import ScrapeSettings, Target

log = logging.getLogger(__name__)

RECIPE_REFRESH_S = 300.0  # re-read /server_info this often even when no restart was seen
RECIPE_RETRY_S = 60.0  # after /server_info failed: do not hammer a server that lacks it
_MAX_NOTES = 3


@dataclass
class _TargetState:
    """Mutable per-target state; only the coroutine scraping that target touches it during a cycle."""

    target: Target
    counters: CounterState | None = None
    recipe: Recipe | None = None
    recipe_due: float = 0.0  # monotonic time /server_info is next read (0 = at the next successful scrape)
    recipe_error: str | None = None
    timed_out: bool = False
    slo_values: dict[str, float] | None = None  # the SLIs' cumulative samples at the previous scrape
    # The node's DCGM exporter as a target of its own (no bearer token: another service), and the regexes
    # picking this server's GPUs there; None: no GPU telemetry configured.
    exporter: Target | None = None
    gpu_select: dict[str, re.Pattern[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        url = self.target.gpu_exporter_url
        if url is not None:
            self.exporter = Target(name=self.target.name, url=url)
            self.gpu_select = compile_selection(self.target)


class DirectSource:
    """``Source`` that scrapes SGLang servers itself."""

    def __init__(
        self,
        settings: ScrapeSettings,
        targets: Sequence[Target],
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        environ: dict[str, str] | None = None,
        rate_clock: Callable[[], float] | None = None,
        slis: Sequence[Sli] = (),
        params: Mapping[str, float | None] | None = None,
    ) -> None:
        """``clock`` stamps snapshots (wall time); ``monotonic`` times deadlines; ``rate_clock`` (default
        ``monotonic``) times the windows rates divide by, so a wall-clock step never bends a rate. ``slis``
        are counted per scrape (``TargetSnapshot.slo_events``): their buckets and counters are read too.
        ``params`` are the config's numbers the catalogue reads (``signals.config_params``: the GPU-hour
        price)."""
        self._settings = settings
        self._params = dict(params or {})
        self._slis = tuple(slis)
        self._counters = tuple((sli, sli.key, counter_for(sli)) for sli in self._slis)
        extra = {name: kind for sli in self._slis for name, kind in sli.samples().items()}
        self._slo_keys = tuple(extra)
        self._plan = sample_plan(extra)
        self._path = metrics_path(extra) if extra else METRICS_PATH
        self._rate_clock = rate_clock if rate_clock is not None else monotonic
        if not settings.verify_tls and not settings.ca_bundle:
            log.warning(
                "scrape.verify_tls is false: HTTPS targets' certificates are not checked, so anyone on the "
                "path can impersonate them (and read their bearer tokens)"
            )
        self._fetcher = Fetcher(settings, monotonic=monotonic, environ=environ)
        self._gpu_client = ExporterClient(settings, monotonic=monotonic, environ=environ)
        self._clock = clock
        self._monotonic = monotonic
        self._states: dict[str, _TargetState] = {}
        self._events: list[Event] = []
        self._events_lock = threading.Lock()
        self.update_targets(targets)

    def update_targets(self, targets: Sequence[Target]) -> None:
        states: dict[str, _TargetState] = {}
        for target in targets:
            old = self._states.get(target.name)
            # Same name, different URL or token: a different server, so no counter history carries over.
            states[target.name] = old if old is not None and old.target == target else _TargetState(target)
        self._states = states

    def recipe(self, target: str) -> Recipe | None:
        state = self._states.get(target)
        return state.recipe if state is not None else None

    def health(self) -> SourceHealth:
        """Always healthy: each target answers for itself (a failed scrape is that target down)."""
        return SourceHealth("direct")

    def drain_events(self) -> list[Event]:
        with self._events_lock:
            events, self._events = self._events, []
        return events

    def collect(self, now: float) -> list[TargetSnapshot]:
        """Scrape every target once; ``now`` is the cycle start (each snapshot carries its own end time)."""
        return self._fetcher.loop.run(self._collect(list(self._states.values())))

    async def _collect(self, states: list[_TargetState]) -> list[TargetSnapshot]:
        order = sorted(states, key=lambda state: state.timed_out)  # stable: config order within each group
        slots = asyncio.Semaphore(self._settings.concurrency)  # FIFO: targets start in ``order``
        tasks = {
            state.target.name: asyncio.ensure_future(self._scrape_safely(state, slots)) for state in order
        }
        await asyncio.wait(tasks.values())
        return [tasks[state.target.name].result() for state in states]

    def close(self) -> None:
        """Nothing to release: the HTTP loop and its connections belong to the process."""

    # -- one target ------------------------------------------------------------------------------------------
    async def _scrape_safely(self, state: _TargetState, slots: asyncio.Semaphore) -> TargetSnapshot:
        async with slots:
            return await self._scrape_guarded(state)

    async def _scrape_guarded(self, state: _TargetState) -> TargetSnapshot:
        started = self._monotonic()
        try:
            snapshot = await self._scrape(state, started)
        except Exception as exc:  # a bug here must cost one target one cycle, never the loop
            log.exception("scraping %s failed unexpectedly", state.target.name)
            snapshot = self._down(
                state, started, f"{state.target.name}: internal error: {type(exc).__name__}: {exc}"
            )
        if snapshot.error is None:
            return snapshot
        # Errors quote what the server said (status line, Content-Type, body lines): never its token.
        return replace(snapshot, error=self._fetcher.redact(state.target, snapshot.error))

    def _down(self, state: _TargetState, started: float, error: str) -> TargetSnapshot:
        return TargetSnapshot(
            target=state.target.name,
            ts=self._clock(),
            up=False,
            error=error,
            recipe_id=state.recipe.recipe_id if state.recipe is not None else None,
            deployment=state.target.deployment,
            scrape_duration_s=self._monotonic() - started,
        )

    async def _scrape(self, state: _TargetState, started: float) -> TargetSnapshot:
        target = state.target
        deadline = started + self._settings.timeout_s
        # The GPUs' exporter is asked at the same time, under the same deadline; it never decides up/down.
        gpus = (
            asyncio.ensure_future(
                read_gpus(
                    self._gpu_client,
                    state.exporter,
                    state.gpu_select,
                    deadline=deadline,
                    max_samples=self._settings.max_samples,
                    rate_clock=self._rate_clock,
                )
            )
            if state.exporter is not None
            else None
        )
        try:
            exposition, _ = await scrape_metrics_async(
                self._fetcher, target, deadline=deadline, plan=self._plan, path=self._path
            )
        except ScrapeError as exc:
            if gpus is not None:
                gpus.cancel()  # a down server has no signals: its GPUs' answer would go unread
            state.timed_out = isinstance(exc, ScrapeTimeout)
            state.recipe_due = 0.0  # it may come back as a restarted server: re-read its recipe then
            return self._down(state, started, str(exc))
        except BaseException:
            if gpus is not None:
                gpus.cancel()
            raise
        state.timed_out = False
        ts = self._clock()
        # The counters' time is when they arrived, not after the /server_info read below (taken after it, the
        # first window after a recipe read was short by that read, and its rates high: 5 % on a busy box).
        rate_ts = self._rate_clock()

        reset = detect_reset(exposition.values, state.counters)
        counter_note: str | None = None
        if reset and state.counters is not None:
            name = reset[0]
            fell = f"{name} fell from {state.counters.values[name]:g} to {exposition.values[name]:g}"
            if is_restart(exposition.values, state.counters, reset):
                self._record(
                    Event(ts, target.name, "restart", f"counters went down ({fell}): the server restarted")
                )
                state.recipe_due = 0.0
            else:  # shown on the target, not an event: it can happen every scrape
                others = f" and {len(reset) - 1} more" if len(reset) > 1 else ""
                counter_note = (
                    f"counter reset without a restart ({fell}{others}); its rate is unknown this scrape"
                )
        if self._monotonic() >= state.recipe_due:
            await self._refresh_recipe(state, deadline)

        values: Mapping[str, float] = exposition.values
        gpu_problem: str | None = None
        if gpus is not None and state.exporter is not None:
            answer = check_count(
                await gpus,
                state.recipe.gpu_count if state.recipe is not None else None,
                f"{state.exporter.url}/metrics",
                bool(state.gpu_select),
            )
            if answer.reading is not None:
                values = {**exposition.values, **answer.reading.values}
            gpu_problem = answer.problem
        # Rates divide by monotonic time: a wall-clock step (NTP) must not become a spike or a negative
        # window.
        derivation = derive_signals(values, rate_ts, state.counters, state.recipe, self._params)
        state.counters = derivation.state
        slo_events, slo_problems = self._count_slis(state, exposition.values)
        problems = list(exposition.notes[:_MAX_NOTES]) + slo_problems
        if gpu_problem is not None:
            problems.append(f"GPU telemetry unknown: {gpu_problem}")
        if counter_note is not None:
            problems.insert(0, counter_note)
        if len(exposition.notes) > _MAX_NOTES:
            problems.append(f"and {len(exposition.notes) - _MAX_NOTES} more notes")
        if state.recipe_error is not None:
            problems.append(
                f"recipe {'unknown' if state.recipe is None else 'not refreshed'}: {state.recipe_error}"
            )
        return TargetSnapshot(
            target=target.name,
            ts=ts,
            up=True,
            error=f"{target.name}: " + "; ".join(problems) if problems else None,
            signals=derivation.signals,
            recipe_id=state.recipe.recipe_id if state.recipe is not None else None,
            deployment=target.deployment,
            scrape_duration_s=self._monotonic() - started,
            slo_events=slo_events,
        )

    def _count_slis(
        self, state: _TargetState, values: Mapping[str, float]
    ) -> tuple[tuple[tuple[str, float, float], ...], list[str]]:
        """Each SLI's events since the previous scrape, and why an SLI cannot be counted on this server."""
        if not self._slis:
            return (), []
        previous = state.slo_values
        state.slo_values = {name: values[name] for name in self._slo_keys if name in values}
        counted: list[tuple[str, float, float]] = []
        problems: list[str] = []
        for sli, key, count in self._counters:
            counts = count(values, previous) if previous is not None else None
            if counts is not None:
                counted.append((key, counts.good, counts.total))
            elif (reason := missing_reason(sli, values)) is not None:
                problems.append(f"SLI {key} unknown: {reason}")
        return tuple(counted), problems

    async def _refresh_recipe(self, state: _TargetState, deadline: float) -> None:
        if deadline - self._monotonic() <= 0.05 * self._settings.timeout_s:
            return  # no time left this cycle; try again at the next one
        try:
            recipe = await fetch_recipe_async(self._fetcher, state.target, deadline=deadline)
            flags = recipe.as_dict()
            # /server_info is the server's words too (its flags are stored and shown): no token in them.
            state.recipe = Recipe.from_flags(
                {
                    k: self._fetcher.redact(state.target, v) if isinstance(v, str) else v
                    for k, v in flags.items()
                },
                recipe.gpu_count,
            )
        except ScrapeError as exc:
            state.recipe_error = str(exc).removeprefix(f"{state.target.name}: ")
            state.recipe_due = self._monotonic() + RECIPE_RETRY_S
            return
        state.recipe_error = None
        # Spread the periodic refreshes of a big fleet over time instead of all in one cycle.
        jitter = zlib.crc32(state.target.name.encode()) % 1000 / 1000
        state.recipe_due = self._monotonic() + RECIPE_REFRESH_S * (0.75 + 0.5 * jitter)

    def _record(self, event: Event) -> None:
        with self._events_lock:
            self._events.append(event)
