"""The benchmark fleet now: one /metrics body with every server's series, which the engines scrape every
interval (``honor_labels``: each series keeps its own ``instance`` and ``job``), so live refreshes read
samples that really just landed, in Prometheus and VictoriaMetrics alike.

The base servers run the demo scenario from when the exporter starts (a fresh simulation: counters restart
where the backfilled history ends); each is written once per clone, as the history was (``prom_data``).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.prom_data import JOB, clone_name
from sim.sampler import sim_server
from sim.scenario import expand_servers, load_scenario
from sim.series_history import SeriesNamer, is_down, label_text, read_families, readings, recipe_labels


class LiveFleet:
    """``servers`` series sets (``base_servers`` simulated, cloned), rendered at most every ``refresh_s``."""

    def __init__(
        self, *, servers: int, base_servers: int, window_s: float, seed: int = 1000, refresh_s: float = 2.0
    ) -> None:
        loaded = load_scenario("demo")
        specs = expand_servers(loaded, base_servers)
        self._servers = [sim_server(spec, i, seed, loaded, window_s) for i, spec in enumerate(specs)]
        self._labels = [{"deployment": spec.deployment, **spec.labels} for spec in specs]
        self._copies = servers // base_servers
        self._namer = SeriesNamer(read_families())
        self._started = time.time()
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._body = b""
        self._rendered_at = float("-inf")
        self.scrapes: dict[str, int] = {}  # by User-Agent product: which engine scraped how often

    def body(self) -> bytes:
        with self._lock:
            now = time.time()
            if now - self._rendered_at >= self._refresh_s:
                self._body = self._render(now - self._started)
                self._rendered_at = now
            return self._body

    def _render(self, t: float) -> bytes:
        out: list[str] = []
        for server, target_labels in zip(self._servers, self._labels, strict=True):
            server.advance(t)
            down = is_down(server, t)
            series = (
                []
                if down
                else self._namer.series(readings(server.engine), label_text(recipe_labels(server.recipe)))
            )
            target = "".join(f',{k}="{v}"' for k, v in target_labels.items())
            lines: list[tuple[str, str, str]] = []
            for key, value in series:
                metric, _, labels = key.partition("{")
                extra = target + ("," + labels[:-1] if labels[:-1] else "")
                lines.append((metric, extra, f"{value:.10g}"))
            lines.append(("up", "", "0" if down else "1"))
            if not down:
                lines.append(("scrape_duration_seconds", "", "0.004"))
            # One text per base server with a marker for the instance, copied per clone (str.replace runs in
            # C: a 1,000-server body in tens of milliseconds, on the box the dashboard is measured on).
            text = "".join(f"{metric}{{\x00{extra}}} {value}\n" for metric, extra, value in lines)
            for copy in range(self._copies):
                instance = f'instance="{clone_name(server.spec.name, copy)}",job="{JOB}"'
                out.append(text.replace("\x00", instance))
        return "".join(out).encode()

    def scrape_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.scrapes)

    def count(self, agent: str) -> None:
        with self._lock:
            self.scrapes[agent] = self.scrapes.get(agent, 0) + 1


class LiveExporter:
    """Serves ``fleet``'s body on 127.0.0.1 (every path), counting scrapes by engine."""

    def __init__(self, fleet: LiveFleet) -> None:
        self.fleet = fleet
        owner = self

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/scrapes"):  # the page cases wait on the engines' next scrape
                    body, kind = json.dumps(owner.fleet.scrape_counts()).encode(), "application/json"
                else:
                    body, kind = owner.fleet.body(), "text/plain; version=0.0.4; charset=utf-8"
                    agent = (self.headers.get("User-Agent") or "?").split("/")[0]
                    # VictoriaMetrics reads a body over 1 MB (-promscrape.minResponseSizeForStreamParse: 200
                    # servers and more) in stream mode, through Go's own HTTP client and its User-Agent.
                    owner.fleet.count("vm_promscrape" if agent == "Go-http-client" else agent)
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self.netloc = f"127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="bench-live", daemon=True)
        self._thread.start()

    def scrapes(self, agent: str) -> int:
        return self.fleet.scrapes.get(agent, 0)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
