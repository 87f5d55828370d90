"""A simulated fleet: many SimServers on 127.0.0.1, served from one asyncio loop in a background thread.

``SimFleet("demo").start()`` serves the scenario's servers, and beside each a DCGM exporter for its GPUs on a
port of its own (``server.gpu_exporter_url``; ``sim/gpu.py``); simulated time runs at ``speed`` × wall time
from ``start()``. Each server advances lazily (when asked, or when its scenario has something due), so 500
idle servers cost almost nothing; a /metrics body is rendered at most once per decode-log window and encoding.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from config import SimSettings, Target, parse_config
from sim.http import Listener
from sim.scenario import Scenario, expand_servers, load_scenario
from sim.server import SimServer

log = logging.getLogger(__name__)
TICK_S = 0.1  # wall seconds between checks for due scenario actions (faults, restarts, boot ends)


class SimFleet:
    """Simulated SGLang servers for a scenario. See ``SimServer`` for fault injection and load changes."""

    def __init__(
        self,
        scenario: str | Path = "demo",
        *,
        servers: int | None = None,
        speed: float = 1.0,
        seed: int = 0,
        base_port: int = 0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``clock``: simulated seconds from this function instead of wall time × speed (tests that freeze
        time, so what two readers see over HTTP is the same instant)."""
        if not 0 < speed <= 10_000:
            raise ValueError(f"speed must be in (0, 10000] simulated seconds per wall second, not {speed}")
        if servers is not None and not 1 <= servers <= 5000:
            raise ValueError(f"servers must be 1..5000, not {servers}")
        self.scenario: Scenario = load_scenario(scenario)
        self.speed, self.seed, self.host = speed, seed, host
        self._t0: float | None = None
        self._clock = clock
        specs = expand_servers(self.scenario, servers)
        if base_port and not 1024 <= base_port <= 65536 - 2 * len(specs):
            raise ValueError(
                f"base_port must leave room below 65536 for every server and its GPU exporter "
                f"({2 * len(specs)} ports), not {base_port}"
            )
        self._servers: dict[str, SimServer] = {}
        for index, spec in enumerate(specs):
            port = base_port + index if base_port else (spec.port or 0)
            self._servers[spec.name] = SimServer(
                spec,
                index=index,
                seed=seed,
                clock=self.sim_time_s,
                host=host,
                port=port,
                boot_s=self.scenario.spec.boot_s,
                warmup_s=self.scenario.spec.warmup_s,
            )
        for index, server in enumerate(self._servers.values()):
            server.on_change = self._on_server_change
            server.speed = speed
            # --base-port P: servers on P … P+N−1, their GPU exporters on P+N … P+2N−1.
            server.gpu_exporter_port = base_port + len(specs) + index if base_port else 0
        self._listeners: dict[str, Listener] = {}
        self._exporters: dict[str, Listener] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ticker: asyncio.Task[None] | None = None

    # -- time and lookup -------------------------------------------------------------------------------------
    def sim_time_s(self) -> float:
        """Simulated seconds since start() (0 before it), or the ``clock`` given."""
        if self._clock is not None:
            return self._clock()
        return 0.0 if self._t0 is None else (time.monotonic() - self._t0) * self.speed

    @property
    def servers(self) -> tuple[SimServer, ...]:
        return tuple(self._servers.values())

    def server(self, name: str) -> SimServer:
        try:
            return self._servers[name]
        except KeyError:
            known = ", ".join(list(self._servers)[:10])
            raise KeyError(f"no simulated server named {name!r}; the fleet has {known}...") from None

    @property
    def targets(self) -> tuple[Target, ...]:
        """The fleet as collector targets: name, http://host:port, labels {deployment: ...}."""
        return tuple(s.target for s in self._servers.values())

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> SimFleet:
        """Listen on every server's port, start simulated time, return self; OSError if a port is taken."""
        if self._thread is not None:
            return self
        _raise_file_limit(len(self._servers) * 4 + 256)
        self._loop = asyncio.new_event_loop()
        ready: list[BaseException | None] = []
        started = threading.Event()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._open_all())
                ready.append(None)
            except BaseException as exc:  # reported to the caller of start()
                ready.append(exc)
            started.set()
            if ready[0] is None:
                self._loop.run_forever()
            self._loop.run_until_complete(self._close_all())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="specwatch-sim", daemon=True)
        self._thread.start()
        started.wait()
        if ready[0] is not None:
            self._thread.join()
            self._thread = None
            raise ready[0]
        return self

    def stop(self) -> None:
        """Close every port and stop the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None

    def __enter__(self) -> SimFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _open_all(self) -> None:
        for name, server in self._servers.items():
            listener = Listener(self.host, server.port, server.handle)
            await listener.open()
            server.port = listener.port
            self._listeners[name] = listener
            exporter = Listener(self.host, server.gpu_exporter_port, server.handle_gpu_exporter)
            await exporter.open()
            server.gpu_exporter_port = exporter.port
            self._exporters[name] = exporter
        self._t0 = time.monotonic()
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _close_all(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for listener in (*self._listeners.values(), *self._exporters.values()):
            await listener.shutdown()

    async def _tick_forever(self) -> None:
        """Apply due scenario actions and open/close ports to match each server's state."""
        while True:
            now = self.sim_time_s()
            for name, server in self._servers.items():
                try:
                    if server.spec.timeline.actions and server.next_action_s <= now:
                        server.advance(now)
                    await self._reconcile(name, server)
                except Exception:  # one server's trouble must not stop the others' clocks
                    log.exception("simulated server %s: scenario step failed; retrying", name)
            await asyncio.sleep(TICK_S)

    async def _reconcile(self, name: str, server: SimServer) -> None:
        for listener, up in (
            (self._listeners[name], server.listening),
            (self._exporters[name], server.gpu_exporter_up),
        ):
            if up and not listener.is_open:
                await listener.open()
            elif not up and listener.is_open:
                await listener.close()

    def _on_server_change(self, server: SimServer) -> None:
        """A test changed a server: open/close its port before set_fault()/restart() returns."""
        loop = self._loop
        if loop is None or server.name not in self._listeners:
            return
        if threading.current_thread() is self._thread:
            loop.create_task(self._reconcile(server.name, server))
        else:
            asyncio.run_coroutine_threadsafe(self._reconcile(server.name, server), loop).result(timeout=10)

    # -- collector config ------------------------------------------------------------------------------------
    def write_config(self, path: str | Path, **overrides: object) -> Path:
        """Write a collector config (YAML) scraping this fleet; ``overrides`` merge into it (e.g.
        ``scrape={"interval_s": 1, "timeout_s": 0.5}``, ``store={"path": ...}``). Validated before writing."""
        document: dict[str, Any] = {
            "source": "direct",
            "targets": [t.model_dump(exclude_none=True) for t in self.targets],
        }
        document = _merge(document, overrides)
        parse_config(document, str(path))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        count = len(self._servers)
        header = f"# Collector config for the simulated fleet '{self.scenario.name}' ({count} servers).\n"
        path.write_text(header + yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        return path


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _raise_file_limit(wanted: int) -> None:
    """500 ports plus their connections outgrow a 1024-descriptor soft limit: raise it toward hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def start_fleet(settings: SimSettings) -> SimFleet:
    """The embedded fleet ``app.py`` starts for ``sim:`` in the config (started; stop() it on exit)."""
    return SimFleet(
        settings.scenario, servers=settings.servers, speed=settings.speed, seed=settings.seed
    ).start()
