"""Many viewers at once: N = 1, 10, 30 real browser sessions on the Fleet and Server pages at 15 min, live,
while the dashboard's own process scrapes 1,000 simulated servers every 5 s and evaluates the alert rules.

The incident load of issue #23: everyone opens the dashboard at the same moment. Per N, one `streamlit run
app.py` (the collector and the alert engine in its process, as `make run` starts them) scrapes a `python -m
sim --servers 1000` fleet in another process, on a store filled by `sim.fill` with the last hour of that
same fleet. Debian's chromium (Playwright) opens N tabs, each a browser context of its own (a session),
alternately Fleet and Server (all on one server: the one everyone looks at), at ``?range=15m``.

Measured over a window of ``WINDOW_S`` once every tab shows its live panel:

- **server CPU per interval**: utime + stime of the streamlit process (/proc/PID/stat), over the window,
  per scrape interval; the collector and the alert engine are in it. Ratio N / 1 in the same run. The
  browser's own CPU (every chromium process this bench started) beside it: it shares the machine.
- **refresh lag per session**: each tab records when its live panel's "updated HH:MM:SS UTC" changes (a
  poller in the page, every 200 ms); the lag is the longest gap between two refreshes minus the interval.
- **collector cycles missed**: per target, its rows in the store over the window (a cycle writes one row
  per target, stamped when that target's scrape ended), the longest gap between two rows of a target, and
  the cycles missing between them (a gap of k intervals is k − 1 cycles not made; the collector runs on a
  fixed grid, so a target with one row fewer than the window's intervals but no gap past 1.5 intervals lost
  nothing: its scrape ended a little later at one end of the window than at the other).
- **alert evaluation delay**: a canary target (a loopback server answering a golden SGLang body) is shut
  a third of the way into the window; ``TargetDown`` (``for_s: 0``) goes to a loopback webhook. Reported:
  the first down row to the firing transition (the evaluating cycle's time), and that to the webhook's
  arrival (the cycle's scrapes, store, evaluation and delivery).
- **RSS**: VmRSS at the end of the window and VmHWM (the process's peak).

Mode ``standin`` (SPECWATCH_BENCH_VIEWERS_MODE=standin) measures the dashboard alone: `--no-collector`, and a
stand-in process appends one cycle for every server every interval (``bench_pages.scrape_cycles``; no
simulated servers, no alerts), as ``bench dashboard_rss`` does.

Knobs (environment): SPECWATCH_BENCH_VIEWERS_SESSIONS=1,10,30, SPECWATCH_BENCH_VIEWERS_WINDOW_S=60,
SPECWATCH_BENCH_VIEWERS_STORE=PATH (keep the filled store there and reuse it), SPECWATCH_BENCH_VIEWERS_MODE,
SPECWATCH_BENCH_VIEWERS_BROWSER_NICE=N (run chromium at that niceness: its 0.06–0.1 core per tab is this
machine's, where a real viewer's browser is on their own), SPECWATCH_BENCH_VIEWERS_GPUS=0 (the simulated
servers' DCGM exporters left unscraped), SPECWATCH_BENCH_VIEWERS_TABS=K (only the first K sessions are
chromium tabs, the rest speak the browser's protocol without drawing: ``bench/ws_viewer.py``; a tab draws at
0.06–0.1 core of this box, so 30 tabs would need its two cores for the browser alone).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from bench.ws_viewer import ProtocolSession, ProtocolViewers
from tests.loopback import CHROMIUM, CHROMIUM_ARGS, free_port, stop_group, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
SERVERS = 1000
SESSIONS = (1, 10, 30)
INTERVAL_S = 5.0
WINDOW_S = 60.0
HISTORY_H = 1.0
WATCHED = "demo-000"  # the Server tabs' server
TARGET_CPU_RATIO = 3.0  # 30 viewers ≤ 3× one
TARGET_RSS_MB = 600.0
PAGE_TIMEOUT_MS = 300_000
GOLDEN = ROOT / "tests" / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
# Timers in tabs Chromium considers hidden would be throttled: every tab here stands for a viewer's screen.
BROWSER_ARGS = [
    *CHROMIUM_ARGS,
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
# Inside each tab: when the live panel's "updated HH:MM:SS UTC" changes, note the time (and whether busy).
POLLER = r"""
window.__refreshes = [];
(() => {
  let last = null;
  setInterval(() => {
    for (const el of document.querySelectorAll('[data-testid="stCaptionContainer"]')) {
      const m = /updated (\d\d:\d\d:\d\d) UTC/.exec(el.textContent);
      if (m) {
        if (m[1] !== last) {
          last = m[1];
          window.__refreshes.push([Date.now() / 1000, m[1], /busy/.test(el.textContent)]);
        }
        return;
      }
    }
  }, 200);
})();
"""


# -- loopback parts: the canary target and the webhook -------------------------------------------------------
class _Canary:
    """A target answering a golden SGLang 0.5.23 body until ``stop()`` (then connections are refused)."""

    def __init__(self) -> None:
        body = GOLDEN.read_bytes()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path.startswith("/metrics")
                payload = body if found else b'{"error": "not here"}'
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4" if found else "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Webhook:
    """Records (arrival time, alertname, status, labels) of every alert POSTed to it."""

    def __init__(self) -> None:
        self.received: list[tuple[float, str, str, dict[str, str]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.time()
                size = int(self.headers.get("Content-Length") or 0)
                try:
                    document = json.loads(self.rfile.read(size) or b"{}")
                except ValueError:
                    document = {}
                for alert in document.get("alerts", []) if isinstance(document, dict) else []:
                    labels = alert.get("labels", {})
                    received.append((arrived, labels.get("alertname", ""), alert.get("status", ""), labels))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def firing(self, target: str) -> float | None:
        """When TargetDown for ``target`` first arrived firing."""
        for arrived, name, status, labels in self.received:
            if name == "TargetDown" and status == "firing" and target in labels.values():
                return arrived
        return None

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- the process under test --------------------------------------------------------------------------------
def _cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_mb(pid: int) -> tuple[float, float]:
    """VmRSS and VmHWM of ``pid`` in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@contextmanager
def _process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            stop_group(process)


def _streamlit(port: int, config: Path, *, collect: bool) -> list[str]:
    command = [
        str(Path(sys.executable).with_name("streamlit")), "run", "app.py", "--server.address", "127.0.0.1",
        "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--", "--config", str(config),
    ]  # fmt: skip
    return command if collect else [*command, "--no-collector"]


# -- the store -----------------------------------------------------------------------------------------------
def _store() -> Path:
    kept = os.environ.get("SPECWATCH_BENCH_VIEWERS_STORE")
    path = (
        Path(kept) if kept else Path(tempfile.mkdtemp(prefix="specwatch-bench-viewers-")) / "history.sqlite"
    )
    if not path.exists():
        from sim.fill import fill_store

        fill_store(
            path,
            scenario="demo",
            servers=SERVERS,
            hours=HISTORY_H,
            raw_hours=HISTORY_H,
            sample_in_process=True,
        )
    return path


def _query(store: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def _rows(store: Path, start_ts: float, end_ts: float) -> dict[str, list[float]]:
    """Per target, the timestamps of its rows in [start, end] (each target's row of a cycle is stamped
    when its scrape ended), in order."""
    out: dict[str, list[float]] = {}
    for target, ts in _query(
        store, "SELECT target, ts FROM samples WHERE ts >= ? AND ts <= ? ORDER BY ts", start_ts, end_ts
    ):
        out.setdefault(str(target), []).append(float(ts))
    return out


def _cycles(store: Path, start_ts: float, end_ts: float) -> dict[str, Any]:
    """Cycles stored in [start, end]: per target its rows, and the longest gap between two of them."""
    rows = _rows(store, start_ts, end_ts)
    counts = sorted(len(stamps) for stamps in rows.values())
    gaps = [b - a for stamps in rows.values() for a, b in itertools.pairwise(stamps)]
    missing = [
        sum(max(0, round((b - a) / INTERVAL_S) - 1) for a, b in itertools.pairwise(stamps))
        for stamps in rows.values()
    ]
    return {
        "targets": len(rows),
        "rows_per_target": [counts[0], counts[-1]] if counts else [0, 0],
        "longest_gap_s": round(max(gaps), 2) if gaps else None,
        "missed": max(missing, default=0),
    }


def _alert_delay(store: Path, target: str, webhook: _Webhook) -> dict[str, float | None]:
    """TargetDown of ``target``: when its first down cycle was stored, when the engine made it firing (the
    evaluating cycle's time), and when the webhook got it."""
    down = _query(store, "SELECT MIN(ts) FROM samples WHERE target = ? AND up = 0", target)[0][0]
    fired = _query(
        store,
        "SELECT MIN(ts) FROM alert_transitions "
        "WHERE rule = 'TargetDown' AND target = ? AND to_state = 'firing'",
        target,
    )[0][0]
    arrived = webhook.firing(target)
    return {
        "firing_after_down_s": None if down is None or fired is None else round(fired - down, 2),
        "delivered_after_evaluating_cycle_s": None
        if fired is None or arrived is None
        else round(arrived - fired, 2),
        "delivered_after_down_s": None if down is None or arrived is None else round(arrived - down, 2),
    }


# -- one phase: N sessions -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Lag:
    """One tab's refreshes over the window: the longest gap between two, minus the interval, as the browser
    saw them arrive and as the server stamped them ("updated HH:MM:SS", to the second)."""

    seen_s: float
    drawn_s: float
    refreshes: int
    busy: bool


def _lag(refreshes: list[list[Any]], start: float, end: float) -> _Lag:
    arrived = [float(r[0]) for r in refreshes]
    drawn = [_stamp(str(r[1]), float(r[0])) for r in refreshes]
    inside = [i for i, t in enumerate(arrived) if start <= t <= end]
    first = max(0, inside[0] - 1) if inside else len(arrived)  # the refresh before the window too
    seen = [*arrived[first:], end] if inside else [start, end]
    stamps = drawn[first:] if inside else []
    seen_gap = max(b - a for a, b in itertools.pairwise(seen))
    drawn_gap = max((b - a for a, b in itertools.pairwise(stamps)), default=end - start)
    busy = any(bool(refreshes[i][2]) for i in inside)
    return _Lag(seen_gap - INTERVAL_S, drawn_gap - INTERVAL_S, len(inside), busy)


def _stamp(hhmmss: str, near_ts: float) -> float:
    """The unix time of a UTC wall-clock time shown on the page, on the day nearest ``near_ts``."""
    day = near_ts - near_ts % 86400
    hours, minutes, seconds = (int(part) for part in hhmmss.split(":"))
    ts = day + hours * 3600 + minutes * 60 + seconds
    return min((ts - 86400, ts, ts + 86400), key=lambda t: abs(t - near_ts))


class _Tab:
    """A chromium tab read as a protocol session is: its refreshes (the poller's), exceptions, no error."""

    error = ""

    def __init__(self, page: Any) -> None:
        self._page = page

    @property
    def refreshes(self) -> list[list[Any]]:
        return list(self._page.evaluate("window.__refreshes || []"))

    @property
    def exceptions(self) -> int:
        return int(self._page.locator('[data-testid="stException"]').count())


@dataclass
class _Setup:
    """What every phase shares: the store, the fleet's targets (in process mode), the webhook, a folder."""

    store: Path
    folder: Path
    window_s: float
    inprocess: bool
    browser_nice: int = 0
    tabs: int | None = None  # chromium tabs among the sessions (None: all); the rest are protocol sessions
    targets: list[dict[str, Any]] = field(default_factory=list)
    webhook: _Webhook | None = None


def _phase(n: int, setup: _Setup) -> dict[str, Any]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    store, folder = setup.store, setup.folder
    canary = _Canary() if setup.inprocess else None
    canary_name = f"canary-{n}-{int(time.time())}"
    config = folder / f"viewers-{n}.yaml"
    document: dict[str, Any] = {
        "scrape": {"interval_s": INTERVAL_S, "timeout_s": 3},
        "store": {"path": str(store)},
    }
    if canary is not None and setup.webhook is not None:
        document["targets"] = [*setup.targets, {"name": canary_name, "url": canary.url}]
        document["alerts"] = {"webhook_urls": [setup.webhook.url], "rules": {"TargetDown": {"for_s": 0}}}
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {"sessions": n}
    with ExitStack() as stack:
        started = time.time()
        if not setup.inprocess:
            stack.enter_context(_standin(store))
        log = folder / f"streamlit-{n}.log"
        server = stack.enter_context(_process(_streamlit(port, config, collect=setup.inprocess), log))
        wait_healthy(url, server, log, timeout_s=120)
        playwright = stack.enter_context(sync_playwright())
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        stack.callback(browser.close)
        if setup.browser_nice:  # the renderers fork from the zygote: they inherit its niceness
            for pid in _browser_pids(exclude={server.pid}):
                os.setpriority(os.PRIO_PROCESS, pid, setup.browser_nice)
        pages: list[_Tab | ProtocolSession] = []
        protocol = ProtocolViewers(url)
        stack.callback(protocol.close)
        tabs = n if setup.tabs is None else min(n, setup.tabs)
        result["chromium_tabs"] = tabs
        for i in range(n):
            fleet = i % 2 == 0
            page_name, query = ("fleet", "range=15m") if fleet else ("server", f"server={WATCHED}&range=15m")
            if i < tabs:
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.add_init_script(POLLER)
                page = context.new_page()
                with suppress(PlaywrightTimeout):  # a starved browser: counted below as without a panel
                    page.goto(f"{url}/{page_name}?{query}", timeout=PAGE_TIMEOUT_MS, wait_until="commit")
                pages.append(_Tab(page))
            else:
                pages.append(protocol.open(ProtocolSession(page_name, query)))
            if i == 0:  # the first session starts the runtime: let the collector run a few cycles
                _wait_cycles(store, started, 3)
        result["sessions_without_a_panel"] = _wait_for_panels(pages)
        result["open_s"] = round(time.time() - started, 1)
        time.sleep(2 * INTERVAL_S)  # every tab in its rhythm
        browsers = _browser_pids(exclude={server.pid})
        cpu_start, browser_start = _cpu_s(server.pid), _cpu_of(browsers)
        window_start = time.time()
        time.sleep(setup.window_s / 3)
        if canary is not None:
            canary.stop()
        time.sleep(setup.window_s * 2 / 3)
        cpu_end, browser_end, window_end = _cpu_s(server.pid), _cpu_of(browsers), time.time()
        rss, peak = _status_mb(server.pid)
        lags = [_lag(page.refreshes, window_start, window_end) for page in pages]
        exceptions = sum(page.exceptions for page in pages)
        result["protocol_errors"] = sorted({page.error for page in pages if page.error})
        time.sleep(INTERVAL_S)  # the webhook's delivery after the last cycle
    intervals = (window_end - window_start) / INTERVAL_S
    cycles = _cycles(store, window_start, window_end)
    result.update(
        {
            "cpu_s_per_interval": round((cpu_end - cpu_start) / intervals, 3),
            "cores": round((cpu_end - cpu_start) / (window_end - window_start), 3),
            "browser_cores": round((browser_end - browser_start) / (window_end - window_start), 2),
            "refresh_lag_s": {
                "worst_drawn": round(max(lag.drawn_s for lag in lags), 1),
                "worst_seen": round(max(lag.seen_s for lag in lags), 2),
                "median_seen": round(sorted(lag.seen_s for lag in lags)[len(lags) // 2], 2),
                "sessions_over_one_interval": sum(1 for lag in lags if lag.seen_s > INTERVAL_S),
            },
            "refreshes_per_session": [min(lag.refreshes for lag in lags), max(lag.refreshes for lag in lags)],
            "busy_seen_by": sum(1 for lag in lags if lag.busy),
            "cycles": {
                "intervals": round(intervals, 1),
                **cycles,
            },
            "rss_mb": round(rss),
            "peak_rss_mb": round(peak),
            "exceptions": exceptions,
        }
    )
    if setup.webhook is not None:
        result["alert"] = _alert_delay(store, canary_name, setup.webhook)
    return result


@contextmanager
def _standin(store: Path) -> Iterator[None]:
    """A process appending one cycle for every server every interval, stamped now (no scraping)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    writer = context.Process(target=_append_cycles, args=(store, stop))
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join(timeout=30)


def _append_cycles(store_path: Path, stop: Any) -> None:
    from bench.bench_pages import scrape_cycles
    from collectors.store.sqlite_store import SqliteStore

    store = SqliteStore(store_path)
    try:
        next_at = time.monotonic()
        while not stop.wait(max(0.0, next_at - time.monotonic())):
            scrape_cycles(store, [time.time()])
            next_at += INTERVAL_S
    finally:
        store.close()


def _browser_pids(exclude: set[int]) -> list[int]:
    """Every chromium process descending from this one (the browser, its renderers, GPU and utility)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        names[pid] = stat[stat.index("(") + 1 : stat.rindex(")")]
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    mine = {os.getpid()}
    changed = True
    while changed:
        grown = {pid for pid, parent in parents.items() if parent in mine and pid not in exclude}
        changed = not grown <= mine
        mine |= grown
    return [pid for pid in mine if names.get(pid, "").startswith("chrom")]


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += _cpu_s(pid)
        except OSError:  # a renderer that ended: its share is lost (it ran a tab nobody closed here)
            continue
    return total


def _wait_for_panels(pages: list[_Tab | ProtocolSession], timeout_s: float = PAGE_TIMEOUT_MS / 1000) -> int:
    """Until every tab shows its live panel (or the deadline); how many never did."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pages)
    while waiting and time.monotonic() < deadline:
        waiting = [page for page in waiting if not page.refreshes]
        time.sleep(1.0)
    return len(waiting)


def _wait_cycles(store: Path, since_ts: float, count: int, timeout_s: float = 180.0) -> None:
    """Until the collector stored ``count`` cycles since ``since_ts`` (rows of one target)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = _rows(store, since_ts, time.time() + 60)
        if rows and max(len(stamps) for stamps in rows.values()) >= count:
            return
        time.sleep(1.0)
    raise RuntimeError(f"the collector stored fewer than {count} cycles in {timeout_s:.0f} s")


def _listed(name: str, default: tuple[int, ...]) -> list[int]:
    return [int(s) for s in os.environ.get(name, "").split(",") if s.strip()] or list(default)


def main() -> dict[str, object]:
    sessions = _listed("SPECWATCH_BENCH_VIEWERS_SESSIONS", SESSIONS)
    window_s = float(os.environ.get("SPECWATCH_BENCH_VIEWERS_WINDOW_S", WINDOW_S))
    inprocess = os.environ.get("SPECWATCH_BENCH_VIEWERS_MODE", "inprocess") != "standin"
    nice = int(os.environ.get("SPECWATCH_BENCH_VIEWERS_BROWSER_NICE", "0"))
    tabs = os.environ.get("SPECWATCH_BENCH_VIEWERS_TABS")
    started = time.perf_counter()
    store = _store()
    folder = Path(tempfile.mkdtemp(prefix="specwatch-bench-viewers-"))
    result: dict[str, object] = {
        "servers": SERVERS,
        "interval_s": INTERVAL_S,
        "window_s": window_s,
        "mode": "collector and alerts in the dashboard's process, scraping python -m sim"
        if inprocess
        else "the dashboard alone (--no-collector), a stand-in appending every server's row every interval",
        "store_ready_s": round(time.perf_counter() - started, 1),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "browser_nice": nice,
        "chromium_tabs_at_most": tabs or "every session",
    }
    setup = _Setup(store, folder, window_s, inprocess, nice, int(tabs) if tabs else None)
    # SIGTERM (timeout, a CI cancel) unwinds like an exception: the servers and browsers started here stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        if inprocess:
            setup.webhook = _Webhook()
            stack.callback(setup.webhook.stop)
            setup.targets = stack.enter_context(_sim_fleet(folder))
        phases: dict[str, dict[str, Any]] = {}
        for n in sessions:
            phases[f"sessions_{n}"] = _phase(n, setup)
            print(json.dumps(phases[f"sessions_{n}"]), file=sys.stderr, flush=True)  # a long run's progress
    result.update(phases)
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    one, most = phases[f"sessions_{min(sessions)}"], phases[f"sessions_{max(sessions)}"]
    if one is not most:
        ratio = most["cpu_s_per_interval"] / one["cpu_s_per_interval"]
        result["cpu_ratio"] = round(ratio, 2)
        result["cpu_s_per_added_session"] = round(
            (most["cpu_s_per_interval"] - one["cpu_s_per_interval"]) / (max(sessions) - min(sessions)), 4
        )
        result["met"] = {
            "cpu": ratio <= TARGET_CPU_RATIO,
            "refresh_lag": all(p["refresh_lag_s"]["worst_seen"] <= INTERVAL_S for p in phases.values()),
            "cycles_missed": all(p["cycles"]["missed"] == 0 for p in phases.values()),
            "rss": all(p["peak_rss_mb"] < TARGET_RSS_MB for p in phases.values()),
            "no_exceptions": all(p["exceptions"] == 0 for p in phases.values()),
            "every_session_live": all(p["sessions_without_a_panel"] == 0 for p in phases.values()),
        }
    result["logs"] = str(folder)
    return result


@contextmanager
def _sim_fleet(folder: Path) -> Iterator[list[dict[str, Any]]]:
    """``python -m sim --servers 1000`` in a process of its own; the targets of the config it writes."""
    written, log = folder / "fleet.yaml", folder / "sim.log"
    command = [sys.executable, "-m", "sim", "--servers", str(SERVERS), "--write-config", str(written)]
    with _process(command, log) as sim:
        deadline = time.monotonic() + 120
        while not (written.exists() and "serving" in log.read_text()):
            if sim.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"python -m sim did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        targets = list(yaml.safe_load(written.read_text())["targets"])
        if os.environ.get("SPECWATCH_BENCH_VIEWERS_GPUS", "1") == "0":  # without the DCGM exporters' scrapes
            targets = [{k: v for k, v in t.items() if k != "gpu_exporter_url"} for t in targets]
        yield targets


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
