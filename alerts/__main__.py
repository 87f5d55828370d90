"""Command line: ``python -m alerts run --config FILE`` (headless collector + alerts until SIGTERM) and
``python -m alerts export-rules [--config FILE]`` (the rules as a Prometheus rule file on stdout).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from alerts.engine import DEFAULT_EXTERNAL_URL
from alerts.export import render_rules
from alerts.rules import build_rules
from collectors.errors import CollectorError
from config import Config, ConfigError, load_config

log = logging.getLogger("specwatch.alerts")


def _load(path: str | None) -> Config:
    return load_config(path) if path else Config()


def _run(args: argparse.Namespace) -> int:
    from alerts.service import Service  # the collector stack is only needed here

    config = _load(args.config)
    if config.source == "direct" and not config.targets and not config.targets_file:
        hint = " (sim: is started by the dashboard, not by this daemon)" if config.sim is not None else ""
        print(f"{args.config}: no targets to scrape{hint}; add targets: or targets_file:", file=sys.stderr)
        return 2
    service = Service(config, source=args.config, external_url=args.external_url)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    service.start()
    rules = ", ".join(rule.name for rule in service.engine.rules)
    log.info(
        "watching %d targets every %g s; rules: %s",
        len(service.collector.targets),
        config.scrape.interval_s,
        rules,
    )
    stop.wait()
    service.stop()
    return 0


def _export(args: argparse.Namespace) -> int:
    config, source = _load(args.config), args.config or "defaults"
    sys.stdout.write(render_rules(config, source, include_recordings=not args.without_recordings))
    return 0


def _check(args: argparse.Namespace) -> int:
    config = _load(args.config)
    for rule in build_rules(config.alerts.rules, args.config or "defaults"):
        state = "" if rule.enabled else " (disabled)"
        print(f"{rule.name}{state} [{rule.severity}]: {rule.describe()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alerts", description="specwatch alerts")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="scrape the fleet and evaluate alerts until SIGTERM")
    run.add_argument("--config", required=True, help="fleet configuration file (YAML or JSON)")
    run.add_argument("--external-url", default=DEFAULT_EXTERNAL_URL, help="dashboard URL used in alert links")
    run.set_defaults(handler=_run)
    export = commands.add_parser("export-rules", help="print the rules as a Prometheus rule file")
    export.add_argument("--config", help="take thresholds from this file (default: the documented defaults)")
    export.add_argument(
        "--without-recordings",
        action="store_true",
        help="leave out the recording group (load `export-recording-rules` output beside the file instead)",
    )
    export.set_defaults(handler=_export)
    check = commands.add_parser("check", help="validate the rule settings and describe each rule")
    check.add_argument("--config", help="configuration file to check (default: the documented defaults)")
    check.set_defaults(handler=_check)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except CollectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
