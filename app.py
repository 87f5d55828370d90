"""specwatch's Streamlit entry point and composition root: config, the one runtime per process, navigation.

``streamlit run app.py -- [--config FILE] [--page NAME] [--no-collector]``; without ``--config`` the file
named by ``SPECWATCH_CONFIG`` is used, else ``config/default.yaml`` (a simulated fleet). Pages only read
history.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from alerts.lock import EvaluatorLock
from collectors.errors import StoreError
from collectors.model import CollectorHealth
from collectors.store.integrity import store_folder_problem
from config import Config, ConfigError, DashboardSettings, SimSettings, load_config
from views import access, allocator, data
from views.formatting import plain
from views.menu import PAGES
from views.page_context import PageContext, time_range_picker

if TYPE_CHECKING:
    from collectors.slo import Slo

log = logging.getLogger("specwatch.app")

DEFAULT_CONFIG = Path(__file__).resolve().parent / "config" / "default.yaml"
CONFIG_ENV = "SPECWATCH_CONFIG"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The flags after ``--`` on the streamlit command line; anything else (e.g. pytest's own) is ignored."""
    parser = argparse.ArgumentParser(prog="specwatch", add_help=False, allow_abbrev=False)
    parser.add_argument("--config", help="fleet config file (YAML/JSON)")
    parser.add_argument("--page", choices=[p.url_path for p in PAGES], help="page to open first")
    parser.add_argument(
        "--no-collector",
        action="store_true",
        help="only read the history store (a collector runs elsewhere, e.g. python -m collectors)",
    )
    known, _ = parser.parse_known_args(list(argv))
    return known


def config_path(args: argparse.Namespace, environ: dict[str, str]) -> Path:
    if args.config:
        return Path(args.config)
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    return DEFAULT_CONFIG


@dataclass
class Runtime:
    """What runs beside the pages, once per process: the simulated fleet (if any) and the collector."""

    config: Config  # as loaded, plus the simulated fleet's targets when ``sim`` is set
    note: str  # one line for the sidebar
    error: str | None = None
    stoppers: list[Callable[[], None]] = field(default_factory=list)
    health: Callable[[], CollectorHealth] | None = None  # the running collector's, for the sidebar
    history_note: str = ""  # while synthesised history is being written: how far it got
    # Called once the synthesised history is written: the live SLO ledger rebuilds its sums with it.
    history_written: Callable[[], object] | None = None
    reads: data.StoreReader = field(init=False)  # what the pages read the history through (set last)
    _stopped: bool = False

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for stop in reversed(self.stoppers):
            try:
                stop()
            except Exception:  # stopping must not raise at interpreter exit
                log.exception("stopping %s failed", stop)


def _start_sim(config: Config, sim: SimSettings, runtime: Runtime) -> Config:
    """Serve the simulated fleet on 127.0.0.1 and scrape it like any other (only this root may import sim)."""
    from sim.fleet import start_fleet

    fleet = start_fleet(sim)
    runtime.stoppers.append(fleet.stop)
    if sim.history_h > 0:
        _fill_history_in_background(config, sim, runtime, end_ts=time.time())
    _import_shipped_bench_results(config.store.path, sim.scenario)
    return config.model_copy(update={"targets": config.targets + fleet.targets})


def _import_shipped_bench_results(store_path: str, scenario: str) -> None:
    """The scenario's shipped bench_serving results (sim/bench_results/<scenario>/) into the store, where the
    Recipes page puts them beside the live recipes; a run stored before is not stored again."""
    from collectors.bench_results import import_files
    from sim.bench_client import result_files

    files = result_files(scenario)
    try:
        results = import_files(store_path, files) if files else []
    except (StoreError, OSError) as exc:  # the collector says what is wrong with the store as it starts
        log.warning("not importing the demo's benchmark results: %s", exc)
        return
    for line in (line for result in results for line in result.failed):
        log.warning("shipped benchmark result %s:%d not imported: %s", line.file, line.line, line.error)


def write_sim_history(
    path: str,
    sim: SimSettings,
    end_ts: float,
    *,
    stop: threading.Event | None = None,
    progress: Callable[[int, int], None] | None = None,
    slos: Sequence[Slo] = (),
    gpu_hour_usd: float | None = None,
) -> int:
    """Write ``sim.history_h`` hours of the scenario into the store at ``path``, sampled as a collector would,
    ending at ``end_ts``, newest hour first (``sim.fill.demo_history``: the one history writer, also behind
    ``python -m sim history``); with ``slos``, their counts of that past too, read from the simulated
    servers' bodies as the live collector reads them; with ``gpu_hour_usd`` (``cost.gpu_hour_usd``), $ per
    million tokens beside the GPUs' power. Returns the raw rows written."""
    from collectors.direct.slo_backfill import SloBackfill
    from collectors.store.slo_counts import SloCountStore
    from sim.fill import demo_history

    counts = SloCountStore(path) if slos else None
    bodies = SloBackfill(slos, counts) if counts is not None else None

    def told(done_s: float, total_s: float) -> None:
        if progress is not None:
            progress(int(done_s // 3600), math.ceil(total_s / 3600))

    report = demo_history(
        path,
        scenario=sim.scenario,
        servers=sim.servers,
        hours=sim.history_h,
        end_ts=end_ts,
        seed=sim.seed,
        stop=stop,
        progress=told,
        bodies=bodies,
        gpu_hour_usd=gpu_hour_usd,
    )
    if counts is not None:
        counts.close()
    return report.raw_rows


def _fill_history_in_background(config: Config, sim: SimSettings, runtime: Runtime, end_ts: float) -> None:
    """An empty store starts with ``sim.history_h`` hours of the scenario (see ``write_sim_history``)."""
    from collectors.slo import build_slos
    from collectors.store.sqlite_store import SqliteStore

    path = config.store.path
    slos = build_slos(config)
    try:
        probe = SqliteStore(path)  # checked before the collector starts writing
        try:
            if probe.count_samples() > 0:  # a restarted dashboard keeps its real history (and its gap)
                return
        finally:
            probe.close()
    except StoreError as exc:  # a torn store: the collector moves it aside as it starts; no past is made up
        log.warning("not writing simulated history: %s", exc)
        return
    stop = threading.Event()
    runtime.stoppers.append(stop.set)

    def progress(done_h: int, hours: int) -> None:
        runtime.history_note = f"writing simulated history: {done_h} of {hours} h"

    def fill() -> None:
        try:
            write_sim_history(
                path,
                sim,
                end_ts,
                stop=stop,
                progress=progress,
                slos=slos,
                gpu_hour_usd=config.cost.gpu_hour_usd,
            )
            runtime.history_note = ""
            if runtime.history_written is not None:
                runtime.history_written()
        except Exception as exc:  # the live fleet and collector go on without the synthesised past
            log.exception("writing simulated history failed")
            runtime.history_note = f"simulated history stopped: {type(exc).__name__}: {exc}"

    threading.Thread(target=fill, name="specwatch-sim-history", daemon=True).start()


def _external_url() -> str:
    """This dashboard's own address, for the links inside alert notifications."""
    address = st.get_option("server.address") or "localhost"
    return f"http://{address}:{st.get_option('server.port')}"


def _start_collector(config: Config, runtime: Runtime) -> str:
    """The collector and the alert engine, evaluated once per process in one background thread; the
    sidebar's note.

    Only while this process holds the store's evaluator lock: with a daemon (``python -m alerts run``) already
    on the store, the dashboard only reads, or every sample and page would be written twice.
    """
    problem = store_folder_problem(config.store.path)
    if problem is not None:  # before the lock file beside the store: say which folder, not an OSError
        raise StoreError(problem)
    lock = EvaluatorLock(config.store.path)
    if not lock.try_acquire():
        return f"viewer only: another evaluator ({lock.holder()}) collects and alerts on this store"
    runtime.stoppers.append(lock.release)  # stoppers run in reverse: the service stops before the lock goes
    # Imported here, not at the top: Service is the whole collector stack (scrape transport, probes, notifier:
    # aiohttp, requests, ~15 MB), and a viewer (--no-collector, or another evaluator on the store) never
    # starts it. Splitting the composition root's one use into a module of its own would be artificial.
    from alerts.service import Service

    service = Service(config, external_url=_external_url()).start()
    runtime.stoppers.append(service.stop)
    runtime.health = service.collector.health
    runtime.history_written = service.slo_ledger.reload  # the demo's day, once written, counts in its burns
    return f"collector + alert engine in this process · {len(config.targets)} target(s)"


def _release(runtime: Runtime) -> None:
    runtime.stop()


# max_entries=1: an edited config starts a new runtime and releases (stops) the old one: never two collectors.
@st.cache_resource(show_spinner="Starting specwatch…", on_release=_release, max_entries=1)
def start_runtime(key: str, _config: Config, collect: bool) -> Runtime:
    """Start the simulated fleet and the collector once per process (``key`` is the config's JSON)."""
    del key
    config = _config
    allocator.limit_arenas()  # before the collector's and the sessions' threads: see views/allocator.py
    runtime = Runtime(config=config, note="")
    trimmed = threading.Event()
    allocator.trim_periodically(trimmed)
    runtime.stoppers.append(trimmed.set)
    try:
        if config.sim is not None:
            config = _start_sim(config, config.sim, runtime)
            runtime.config = config
        has_targets = bool(config.targets or config.targets_file) or config.source == "prometheus"
        if not collect:
            runtime.note = f"viewer only: reading `{config.store.path}`"
        elif not has_targets:
            runtime.note = f"no targets configured: showing the history in `{config.store.path}`"
        else:
            runtime.note = _start_collector(config, runtime)
    except Exception as exc:  # a runtime that fails to start must leave the history readable
        log.exception("specwatch runtime failed to start")
        runtime.error = f"{type(exc).__name__}: {exc}"
        runtime.note = "collector not running"
    # The history backend the pages read, chosen once from the config (the simulated fleet's targets too).
    runtime.reads = data.StoreReader(runtime.config)
    runtime.stoppers.insert(0, runtime.reads.close)  # stoppers run in reverse: the pages' reads close last
    _stop_at_exit(runtime.stop)
    return runtime


def _stop_at_exit(stop: Callable[[], None]) -> None:
    """Run ``stop`` when the process ends, before the interpreter waits for worker threads.

    Ctrl-C or SIGTERM ends Streamlit's main thread; the interpreter then joins every non-daemon thread (a
    probe sweep in its pool, the collector's) and only after that runs ``atexit``: the threads were never told
    to stop, and ``make run`` took up to a minute to exit. ``threading._register_atexit`` (what
    ``concurrent.futures`` uses to end its pools) runs before that join; ``atexit`` where it is missing.
    """
    register = getattr(threading, "_register_atexit", None)
    if callable(register):
        register(stop)
    else:
        atexit.register(stop)


@st.cache_resource(show_spinner=False)
def _last_good_configs() -> dict[str, Config]:
    """Per config path, the last configuration that loaded (kept for the process, across reruns)."""
    return {}


def load_config_keeping_last_good(path: Path) -> tuple[Config | None, ConfigError | None]:
    """The config in ``path``; if it is broken now, the last good one stays in force beside the error.

    The file is re-read on every full rerun, so an edit takes effect at once and a half-saved or broken edit
    never stops a running dashboard.
    """
    known = _last_good_configs()
    try:
        config = load_config(path)
    except ConfigError as exc:
        return known.get(str(path)), exc
    known[str(path)] = config
    return config, None


def main(argv: Sequence[str], environ: dict[str, str] | None = None) -> None:
    st.set_page_config(page_title="specwatch", page_icon=":material/monitoring:", layout="wide")
    env = dict(os.environ) if environ is None else environ
    args = parse_args(argv)
    path = config_path(args, env)
    config, config_error = load_config_keeping_last_good(path)
    # Collecting does not wait for a viewer to sign in; showing anything does.
    runtime = (
        None if config is None else start_runtime(config.model_dump_json(), config, not args.no_collector)
    )
    # The gate comes before a broken config's text, the sidebar or any history is shown.
    if not access.require_access(config.dashboard if config is not None else DashboardSettings(), env):
        # Register the pages (never run) so a deep link (/server?server=k3-7) still opens after signing in.
        st.navigation(
            [st.Page(_locked, title=p.title, url_path=p.url_path) for p in PAGES], position="hidden"
        )
        st.stop()
    if config is None or runtime is None:
        st.error(
            f"**specwatch cannot start: bad configuration.** {config_error}", icon=":material/settings_alert:"
        )
        st.stop()
    with st.sidebar:
        st.markdown("### :material/monitoring: specwatch")
        range_key = time_range_picker()
        st.caption(f"{runtime.note} · every {runtime.config.scrape.interval_s:g} s")
        if runtime.history_note:
            st.caption(runtime.history_note)
        st.caption(f"config `{path}`")
        if config_error is not None:
            st.warning(
                f"**The config file is broken; the last good configuration stays in force.** "
                f"{plain(str(config_error))}",
                icon=":material/settings_alert:",
            )
        if runtime.error:
            st.error(
                f"The collector did not start, so nothing new is recorded: {plain(runtime.error)}",
                icon=":material/error:",
            )
        _collector_problems(runtime)
    ctx = PageContext(config=runtime.config, reads=runtime.reads, range_key=range_key)
    start = args.page or PAGES[0].url_path
    pages = [
        st.Page(
            functools.partial(spec.render, ctx),
            title=spec.title,
            icon=spec.icon,
            url_path=spec.url_path,
            default=spec.url_path == start,
        )
        for spec in PAGES
    ]
    st.navigation(pages, position="top").run()


def _locked() -> None:
    """Stands for every page while the access gate is shut; never run."""


def _collector_problems(runtime: Runtime) -> None:
    """What the running collector cannot do right now (a broken targets_file, a failing store), in words."""
    if runtime.health is None:
        return
    health = runtime.health()
    if health.config_error:
        st.warning(
            "**targets_file not reloaded; the previous targets stay in force.** "
            + plain(health.config_error),
            icon=":material/settings_alert:",
        )
    source = health.source
    if source.problem is not None:
        # The source, not the targets: blind means every target is unknown; partial means some are.
        (st.error if not source.answered else st.warning)(
            f"**The {source.source} source {'cannot answer' if not source.answered else 'answers partially'}"
            "; what it cannot tell is shown as unknown, not down.** " + plain(source.problem),
            icon=":material/cloud_off:",
        )
    if health.store_notice:
        st.warning(
            f"**History store moved aside as corrupt.** {plain(health.store_notice)}",
            icon=":material/database:",
        )
    if health.store_error:
        st.error(
            f"**History is not being written** ({health.pending_rows} snapshots wait in memory, "
            f"{health.dropped_rows} dropped; retried every cycle): {plain(health.store_error)}",
            icon=":material/database:",
        )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
