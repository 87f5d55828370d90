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
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from alerts.service import Service
from config import Config, ConfigError, SimSettings, load_config
from views.pages import PAGES
from views.shell import PageContext, time_range_picker

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
    return config.model_copy(update={"targets": config.targets + fleet.targets})


def _external_url() -> str:
    """This dashboard's own address, for the links inside alert notifications."""
    address = st.get_option("server.address") or "localhost"
    return f"http://{address}:{st.get_option('server.port')}"


def _start_collector(config: Config, runtime: Runtime) -> str:
    """The collector and the alert engine, evaluated once per process in one background thread."""
    service = Service(config, external_url=_external_url()).start()
    runtime.stoppers.append(service.stop)
    return "collector + alert engine"


def _release(runtime: Runtime) -> None:
    runtime.stop()


# max_entries=1: an edited config starts a new runtime and releases (stops) the old one: never two collectors.
@st.cache_resource(show_spinner="Starting specwatch…", on_release=_release, max_entries=1)
def start_runtime(key: str, _config: Config, collect: bool) -> Runtime:
    """Start the simulated fleet and the collector once per process (``key`` is the config's JSON)."""
    del key
    config = _config
    runtime = Runtime(config=config, note="")
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
            what = _start_collector(config, runtime)
            runtime.note = f"{what} in this process · {len(config.targets)} target(s)"
    except Exception as exc:  # a runtime that fails to start must leave the history readable
        log.exception("specwatch runtime failed to start")
        runtime.error = f"{type(exc).__name__}: {exc}"
        runtime.note = "collector not running"
    atexit.register(runtime.stop)
    return runtime


def main(argv: Sequence[str], environ: dict[str, str] | None = None) -> None:
    st.set_page_config(page_title="specwatch", page_icon=":material/monitoring:", layout="wide")
    args = parse_args(argv)
    path = config_path(args, dict(os.environ) if environ is None else environ)
    try:
        config = load_config(path)
    except ConfigError as exc:
        st.error(f"**specwatch cannot start: bad configuration.** {exc}", icon=":material/settings_alert:")
        st.stop()
    runtime = start_runtime(config.model_dump_json(), config, not args.no_collector)
    with st.sidebar:
        st.markdown("### :material/monitoring: specwatch")
        range_key = time_range_picker()
        st.caption(f"{runtime.note} · every {runtime.config.scrape.interval_s:g} s")
        st.caption(f"config `{path}`")
        if runtime.error:
            st.error(
                f"The collector did not start, so nothing new is recorded: {runtime.error}",
                icon=":material/error:",
            )
    ctx = PageContext(config=runtime.config, range_key=range_key)
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


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
