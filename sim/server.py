"""One simulated SGLang server: its engine, timeline, faults and restarts, and its HTTP answers.

``SimServer`` is transport-free: ``handle(method, path, headers)`` returns a ``Reply`` (the HTTP layer writes
it), and ``advance(now_s)`` applies due scenario actions. History synthesis drives the same class without
HTTP. Thread-safe: the fleet's event loop serves requests while tests inject faults from their own thread.
``handle_gpu_exporter`` answers for the server's GPUs (a DCGM exporter on a port of its own: ``sim/gpu.py``).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from collectors.model import Event, Recipe
from config import Target
from sim import gpu
from sim.families import Identity, MetricValues, SglangCollector
from sim.generate import Generation, InFlight, generate
from sim.info import model_info, models_list, server_info
from sim.metrics_render import Renderer
from sim.names import Names, requested_names, restrict
from sim.recipes import recipe_of, resolve_server_args
from sim.scenario import Action, ServerSpec
from sim.server_engine import ServerEngine
from sim.values import metric_values
from sim.workload import Workload

Fault = Literal["down", "slow", "garbage", "hang"]
FAULTS: tuple[str, ...] = ("down", "slow", "garbage", "hang")
ROUTES = (
    "/metrics",
    "/health",
    "/health_generate",
    "/ready",
    "/ping",
    "/server_info",
    "/get_server_info",
    "/model_info",
    "/get_model_info",
    "/v1/models",
)
GARBAGE_METRICS = (
    b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center>"
    b"<hr><center>nginx</center></body></html>\n"
)
GARBAGE_JSON = b'{"status": "ready", "max_total_num_tokens": 1440'  # truncated mid-object
FLUSHED = (
    b"Cache flushed.\nPlease check backend logs for more details. "
    b"(When there are running or waiting requests, the operation will not be performed.)\n"
)


@dataclass(slots=True)
class Reply:
    """What to send back: status, headers, body; or wait ``delay_s`` first; or never answer (``hang``)."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    hang: bool = False
    stream: tuple[tuple[float, bytes], ...] = ()  # chunked body: (wall seconds after the previous, bytes)


class SimServer:
    """A simulated K3 + DSpark server; tests change it with ``set_fault``, ``restart``, ``set_load``."""

    def __init__(
        self,
        spec: ServerSpec,
        *,
        index: int,
        seed: int,
        clock: Callable[[], float],
        host: str = "127.0.0.1",
        port: int = 0,
        boot_s: float = 194.0,
        warmup_s: float = 600.0,
        min_window_s: float = 0.0,
    ) -> None:
        self.spec = spec
        self.name, self.deployment, self.host, self.port = spec.name, spec.deployment, host, port
        self.boot_s = boot_s
        self._min_window_s = min_window_s
        self._clock = clock
        self._seed = seed * 1_000_003 + index * 7919
        self._lock = threading.RLock()
        self.workload, self.load = spec.workload, spec.load
        self.args = resolve_server_args(spec.recipe, f"server {spec.name}")
        self._check_fits(self.workload)
        self.restarts = 0
        self.started_unix = time.time()
        self.fault: Fault | None = None
        self.fault_delay_s = 5.0
        self.booting_until = -float("inf")
        self.events: list[Event] = []  # what happened, in simulated seconds (history maps them to unix time)
        self._applied_s = -warmup_s
        self.engine = self._new_engine(start_s=-warmup_s)
        self._http_requests: Counter[tuple[str, ...]] = Counter()
        self._http_responses: Counter[tuple[str, ...]] = Counter()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(SglangCollector(self._metric_values, self._identity))
        self._cache: dict[tuple[object, ...], tuple[bytes, str]] = {}
        # False: name[] gets SGLang 0.5.23's empty answer; True: a registry resolving names (sim/names.py).
        self.honours_name_filter = False
        self._renderer = Renderer()
        self.on_change: Callable[[SimServer], None] | None = None  # the fleet opens/closes the port
        self.speed = 1.0  # simulated seconds per wall second (the fleet sets it): paces /generate streams
        # /generate requests being decoded (simulated end time, work): a benchmark client's join the batch.
        self._generating: list[tuple[float, Generation]] = []
        self._generated_tokens = self._generated_steps = 0  # of finished ones, for avg_spec_accept_length
        self.gpu_meter = gpu.GpuMeter(start_s=-warmup_s)
        self.gpu_exporter_port = 0  # the fleet's listener for this server's GPUs sets it
        self.gpu_exporter_up = True  # False: the exporter's port refuses connections (tests)

    # -- identity --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def gpu_exporter_url(self) -> str:
        """The DCGM exporter of this server's GPUs (its /metrics), as ``targets[].gpu_exporter_url``."""
        return f"http://{self.host}:{self.gpu_exporter_port}"

    @property
    def target(self) -> Target:
        # probe: true — a simulated server answers /generate, so probes (when enabled) may go to it.
        # The GPU exporter's URL goes along once the config knows the key (issue 20 adds it).
        exporter = {"gpu_exporter_url": self.gpu_exporter_url} if _TARGET_HAS_GPU_EXPORTER else {}
        return Target(
            name=self.name,
            url=self.url,
            labels={"deployment": self.deployment, **self.spec.labels},
            probe=True,
            **exporter,
        )

    @property
    def recipe(self) -> Recipe:
        return recipe_of(self.args)

    def _identity(self) -> Identity:
        return Identity(
            model_name=str(self.args["served_model_name"]), pid=str(24500 + self._seed % 9000 + self.restarts)
        )

    def _new_engine(self, start_s: float) -> ServerEngine:
        engine = ServerEngine(
            self.args,
            self.workload,
            self.load,
            seed=self._seed + self.restarts,
            start_s=start_s,
            min_window_s=self._min_window_s,
        )
        engine.horizon_s = self.spec.timeline.next_after(start_s)
        return engine

    def set_min_window_s(self, seconds: float) -> None:
        """Publish decode-log windows at least this long from the next one on (history synthesis: cheaper)."""
        with self._lock:
            self._min_window_s = seconds
            self.engine.min_window_s = seconds

    # -- time ------------------------------------------------------------------------------------------------
    def advance(self, now_s: float) -> None:
        """Apply the scenario's actions due by ``now_s``, then publish the engine's windows up to it."""
        with self._lock:
            due = self.spec.timeline.between(self._applied_s, now_s)
            for action in due:
                self.engine.advance_to(action.at_s)
                self._apply(action)
            if due:
                self.engine.horizon_s = self.spec.timeline.next_after(now_s)
            self._applied_s = max(self._applied_s, now_s)
            self.engine.advance_to(now_s)

    def _apply(self, action: Action) -> None:
        if action.kind == "load":
            self.load = self.load.changed(**action.changes)
            self.engine.set_load(self.load)
        elif action.kind == "workload":
            self.workload = self.workload.changed(**action.changes)
            self.engine.set_workload(self.workload)
        elif action.kind == "fault":
            self._set_fault(action.fault, action.fault_delay_s, action.at_s)
        else:
            self._restart(action.changes, action.boot_s, action.at_s)

    @property
    def next_action_s(self) -> float:
        """Simulated time of the next scenario action not yet applied."""
        return self.spec.timeline.next_after(self._applied_s)

    @property
    def listening(self) -> bool:
        """Whether the port accepts connections now (not while down or booting)."""
        with self._lock:
            return self.fault != "down" and self._clock() >= self.booting_until

    # -- test/scenario controls ------------------------------------------------------------------------------
    def set_fault(self, kind: str | None, *, delay_s: float | None = None) -> None:
        """``down`` (connection refused), ``slow`` (answers after ``delay_s`` wall seconds, default 5),
        ``garbage`` (200 with an HTML page for /metrics and cut-off JSON for /server_info), ``hang`` (never
        answers), None."""
        if kind is not None and kind not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS} or None, not {kind!r}")
        if delay_s is not None and not 0 < delay_s <= 600:
            raise ValueError(f"delay_s must be in (0, 600] seconds, not {delay_s}")
        with self._lock:
            self.advance(self._clock())
            self._set_fault(kind, delay_s or self.fault_delay_s, self._clock())  # type: ignore[arg-type]
        self._changed()

    def restart(self, recipe_overrides: dict[str, Any] | None = None, *, boot_s: float | None = None) -> None:
        """Restart the process now: counters reset, the port refuses connections for ``boot_s`` simulated
        seconds (default: the scenario's), and ``recipe_overrides`` (server args) replace the recipe if
        given."""
        with self._lock:
            self.advance(self._clock())
            overrides = self.spec.recipe if recipe_overrides is None else recipe_overrides
            self._restart(dict(overrides), boot_s, self._clock())
        self._changed()

    def set_gpu_exporter_up(self, up: bool) -> None:
        """Open (True) or close the port of this server's GPU exporter, as its process starting or dying."""
        with self._lock:
            self.gpu_exporter_up = up
        self._changed()

    def set_load(self, **changes: Any) -> None:
        """Change load (``concurrency`` or ``rate_rps``) and/or workload fields (``isl``, ``osl``,
        ``content``, ``osl_jitter``, ``shared_prefix_tokens`` ...) from now on. Bad values raise ValueError in
        words."""
        load = {k: changes.pop(k) for k in ("concurrency", "rate_rps") if k in changes}
        with self._lock:
            self.advance(self._clock())
            try:
                new_load = self.load.changed(**load) if load else self.load
                new_workload = self.workload.changed(**changes) if changes else self.workload
            except TypeError as exc:
                raise ValueError(f"unknown load/workload field: {exc}") from exc
            self._check_fits(new_workload)
            self.load, self.workload = new_load, new_workload
            self.engine.set_load(new_load)
            self.engine.set_workload(new_workload)

    def _check_fits(self, workload: Workload) -> None:
        context = int(self.args["context_length"])
        if workload.isl + workload.osl > context:
            raise ValueError(
                f"server {self.name}: isl + osl = {workload.isl + workload.osl} tokens exceeds the model's "
                f"context length {context}; SGLang would reject every request"
            )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def _set_fault(self, kind: Fault | None, delay_s: float, at_s: float) -> None:
        if kind == self.fault:
            return
        was_down = self.fault == "down"
        self.fault, self.fault_delay_s = kind, delay_s
        if kind == "down":
            self.events.append(Event(at_s, self.name, "down", "simulated: port closed"))
        elif was_down:
            self.events.append(Event(at_s, self.name, "up", "simulated: port open again"))

    def _restart(self, overrides: dict[str, Any], boot_s: float | None, at_s: float) -> None:
        old = self.recipe
        self.args = resolve_server_args(overrides, f"server {self.name} restart")
        self.restarts += 1
        self.started_unix = time.time()
        boot = self.boot_s if boot_s is None else boot_s
        self.booting_until = at_s + boot
        self.gpu_meter.restarted(self.engine, at_s, self.booting_until)
        self.engine = self._new_engine(start_s=self.booting_until)
        self._generating.clear()
        self._generated_tokens = self._generated_steps = 0
        self._cache.clear()
        self._http_requests.clear()
        self._http_responses.clear()
        self.events.append(Event(at_s, self.name, "restart", f"simulated restart; booting {boot:g} s"))
        if self.recipe.recipe_id != old.recipe_id:
            self.events.append(
                Event(at_s, self.name, "recipe_change", f"{old.recipe_id} → {self.recipe.recipe_id}")
            )

    # -- HTTP ------------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> Reply:
        """Answer one request as SGLang 0.5.23 would (``headers`` have lower-case names)."""
        route, _, query = path.partition("?")
        with self._lock:
            now = self._clock()
            self.advance(now)
            in_flight = self._in_flight(now)
            if route == "/generate":
                reply = self._generate(method, body, now, in_flight)
            elif route == "/flush_cache":
                reply = self._flush_cache(method, in_flight)
            else:
                reply = self._route(method, route, headers, query)
            if route in ROUTES or route in ("/generate", "/flush_cache"):
                self._http_requests[(route, method)] += 1
                self._http_responses[(route, method, str(reply.status))] += 1
            if self.fault == "hang":
                reply.hang = True
            elif self.fault == "slow":
                reply.delay_s = self.fault_delay_s
            return reply

    def _route(self, method: str, route: str, headers: dict[str, str], query: str = "") -> Reply:
        if route not in ROUTES:
            return _json(404, {"detail": "Not Found"})
        if method not in ("GET", "HEAD"):
            return _json(405, {"detail": "Method Not Allowed"})
        garbage = self.fault == "garbage"
        if route == "/metrics":
            if garbage:
                return Reply(200, GARBAGE_METRICS, {"Content-Type": "text/html; charset=utf-8"})
            return self._metrics(headers, requested_names(query) if query else None)
        if route in ("/server_info", "/get_server_info"):
            if garbage:
                return Reply(200, GARBAGE_JSON, {"Content-Type": "application/json"})
            args = {**self.args, "host": self.host, "port": self.port}
            generated = (self._generated_tokens, self._generated_steps)
            return _json(200, server_info(args, self.engine, generated=generated))
        if route in ("/model_info", "/get_model_info"):
            return _json(200, model_info(self.args))
        if route == "/v1/models":
            return _json(200, models_list(self.args, self.started_unix))
        return Reply(200, b"", {"Content-Type": "text/plain; charset=utf-8"})  # health, ready, ping

    def _in_flight(self, now: float) -> InFlight:
        """The /generate requests still being decoded at ``now``; finished ones count into the lifetime
        accept length /server_info reports."""
        running: list[tuple[float, Generation]] = []
        for end_s, work in self._generating:
            if end_s > now:
                running.append((end_s, work))
            else:
                self._generated_tokens += work.tokens
                self._generated_steps += work.verify_steps
        self._generating = running
        return InFlight(len(running), sum(work.mean_context_tokens for _, work in running))

    def _generate(self, method: str, body: bytes, now: float, in_flight: InFlight) -> Reply:
        if method != "POST":
            return _json(405, {"detail": "Method Not Allowed"})
        if self.fault == "garbage":
            return Reply(200, GARBAGE_METRICS, {"Content-Type": "text/html; charset=utf-8"})
        number = self._http_requests[("/generate", "POST")]
        answer = generate(
            self.engine,
            self.args,
            body,
            speed=self.speed,
            seed=self._seed,
            request_number=number,
            in_flight=in_flight,
        )
        if answer.work is not None:
            self._generating.append((now + answer.work.duration_s, answer.work))
        return Reply(answer.status, answer.body, answer.headers, delay_s=answer.delay_s, stream=answer.chunks)

    def _flush_cache(self, method: str, in_flight: InFlight) -> Reply:
        """SGLang flushes only an idle server (bench_serving calls it after warm-up when asked to)."""
        if method not in ("GET", "POST"):
            return _json(405, {"detail": "Method Not Allowed"})
        gauges = self.engine.published.gauges
        if gauges.running or gauges.queued or in_flight.count:
            return Reply(400, b"Flush cache failed.\n", {"Content-Type": "text/plain; charset=utf-8"})
        return Reply(200, FLUSHED, {"Content-Type": "text/plain; charset=utf-8"})

    # -- the GPUs' exporter ----------------------------------------------------------------------------------
    def handle_gpu_exporter(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> Reply:
        """Answer the DCGM exporter of this server's GPUs (``GET /metrics``), as dcgm-exporter does."""
        del body
        route = path.partition("?")[0]
        if route != "/metrics":
            return Reply(404, b"404 page not found\n", {"Content-Type": "text/plain; charset=utf-8"})
        if method not in ("GET", "HEAD"):
            return Reply(405, b"Method Not Allowed\n", {"Content-Type": "text/plain; charset=utf-8"})
        with self._lock:
            now = self._clock()
            self.advance(now)
            reading = self.gpu_meter.reading(self.engine, now)
            fraction = self.args.get("mem_fraction_static")
            held = (
                float(fraction) if isinstance(fraction, int | float) and now >= self.booting_until else None
            )
            identity = gpu.GpuIdentity(self.name, gpu.gpu_count(self.args), f"{self._seed}:{self.name}")
            text = gpu.render(identity, reading, held)
        data, out_headers = gpu.reply_body(text, headers.get("accept-encoding", ""))
        return Reply(200, data, out_headers)

    @property
    def generate_requests(self) -> int:
        """POST /generate requests received since the last restart (tests count probes with it)."""
        with self._lock:
            return self._http_requests[("/generate", "POST")]

    def _metric_values(self) -> MetricValues:
        engine = self.engine
        completed = sum(engine.published.count(f"num_requests:{s}") for s in ("true", "false"))
        in_flight = engine.published.gauges.running + engine.published.gauges.queued
        chat: tuple[str, ...] = ("/v1/chat/completions", "POST")
        requests = {chat: completed + in_flight, **{k: float(v) for k, v in self._http_requests.items()}}
        responses = {(*chat, "200"): completed, **{k: float(v) for k, v in self._http_responses.items()}}
        active: dict[tuple[str, ...], float] = {chat: float(in_flight), ("/metrics", "GET"): 1.0}
        return metric_values(
            engine,
            self.args,
            http_requests=requests,
            http_responses=responses,
            in_flight_http=active,
            streamed_share=engine.streamed_share(self._clock()),
        )

    def _metrics(self, headers: dict[str, str], names: Names | None = None) -> Reply:
        _, content_type = choose_encoder(headers.get("accept", ""))
        compress = "gzip" in headers.get("accept-encoding", "")
        # Gauges change once per decode-log window, per-batch counters in eighths of it: a body is rendered
        # once per eighth of a window, encoding, compression and name[] filter.
        share = self.engine.streamed_share(self._clock())
        filtered = None if names is None else (names, self.honours_name_filter)
        key = (self.restarts, self.engine.published.at_s, share, content_type, compress, filtered)
        cached = self._cache.get(key)
        if cached is None:
            self._cache = {k: v for k, v in self._cache.items() if k[:2] == key[:2]}
            body = self.render_body(headers.get("accept", ""))
            if names is not None:  # as prometheus_client's restricted registry (sim/names.py)
                body = restrict(body, names if self.honours_name_filter else frozenset())
            cached = (gzip.compress(body, compresslevel=1) if compress else body, content_type)
            self._cache[key] = cached
        out_headers = {"Content-Type": cached[1]}
        if compress:
            out_headers["Content-Encoding"] = "gzip"
        return Reply(200, cached[0], out_headers)

    def render_body(self, accept: str = "") -> bytes:
        """The /metrics body for this Accept header now (no cache, no gzip), as prometheus_client renders."""
        with self._lock:
            return self._renderer.render(self._metric_values(), self._identity(), accept)[0]

    def render_direct(self, accept: str = "") -> bytes:
        """The same body from prometheus_client's encoder directly (slow; tests check the fast path on it)."""
        encoder, _ = choose_encoder(accept)
        with self._lock:
            return bytes(encoder(self._registry))


# Whether config.Target has ``gpu_exporter_url`` yet (issue 20's collector side adds it).
_TARGET_HAS_GPU_EXPORTER = "gpu_exporter_url" in Target.model_fields


def _json(status: int, payload: object) -> Reply:
    return Reply(status, json.dumps(payload).encode(), {"Content-Type": "application/json"})
