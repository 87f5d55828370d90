"""``specwatch``: one command for what the README lists; each subcommand is the ``python -m`` form it names.

    specwatch run [--config FILE] [--port 8501] [-- APP FLAGS]   the dashboard (as `make run`)
    specwatch collect --config FILE [...]            = python -m collectors
    specwatch alerts --config FILE [...]             = python -m alerts run
    specwatch export rules [--config FILE]           = python -m alerts export-rules
    specwatch export recording-rules [--config FILE] = python -m collectors export-recording-rules
    specwatch export grafana [--config FILE] [--check [DASHBOARD.json]]
    specwatch sim [...]                              = python -m sim
    specwatch slo --config FILE [--json]             SLO budgets, burn rates, attribution, goodput
    specwatch import bench FILE… --config F [--json] sglang.bench_serving results into the store
    specwatch capacity --config FILE [--json]        servers needed per deployment, now and at the peak

It only dispatches: the streamlit app runs in its own process, and the other layers' ``main`` functions
parse their own arguments, so ``specwatch collect --help`` is the collector's help.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from collectors.prometheus.grafana import DEFAULT_RECIPE_LABEL
from config import Config, ConfigError, load_config

PASS_THROUGH = ("collect", "alerts", "sim", "slo", "import", "capacity")


def _config(path: str | None) -> Config:
    return load_config(path) if path else Config()


def _app_path() -> str:
    # find_spec locates app.py without importing it (importing would run the Streamlit script).
    spec = importlib.util.find_spec("app")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "app.py is not installed beside specwatch (pip install -e . from the checkout)"
        )
    return spec.origin


def _run(args: argparse.Namespace) -> int:
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        _app_path(),
        "--server.address",
        args.address,
        "--server.port",
        str(args.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    extra = args.app_args[1:] if args.app_args[:1] == ["--"] else args.app_args  # argparse keeps the "--"
    app_args = [*(["--config", args.config] if args.config else []), *extra]
    if app_args:
        command += ["--", *app_args]
    if args.dry_run:
        print(" ".join(command))
        return 0
    # exec, not a child: SIGTERM and Ctrl-C reach streamlit itself, so stopping `specwatch run` never leaves
    # an orphaned dashboard holding the port.
    os.execv(command[0], command)  # noqa: S606 (the command is built above from fixed parts)


def _export_rules(args: argparse.Namespace) -> int:
    from alerts.__main__ import main as alerts_main

    extra = ["--without-recordings"] if args.without_recordings else []
    return alerts_main(["export-rules", *(["--config", args.config] if args.config else []), *extra])


def _export_recording_rules(args: argparse.Namespace) -> int:
    from collectors.prometheus.recording_rules import render_rules

    sys.stdout.write(render_rules(_config(args.config), source=args.config or "defaults"))
    return 0


def _export_grafana(args: argparse.Namespace) -> int:
    from collectors.prometheus.grafana import check_dashboard, render_dashboard
    from collectors.prometheus.queries import signal_queries

    config = _config(args.config)
    source = args.config or "defaults"
    text = render_dashboard(config, source=source, recipe_label=args.recipe_label)
    if args.check is None:
        sys.stdout.write(text)
        return 0
    shown = "the generated dashboard" if args.check == "-" else args.check
    raw = text if args.check == "-" else Path(args.check).read_text(encoding="utf-8")
    try:
        board = json.loads(raw)
    except json.JSONDecodeError as exc:
        print(f"{shown}: not JSON ({exc})", file=sys.stderr)
        return 1
    if not isinstance(board, dict):
        print(f"{shown}: not a dashboard (a JSON object)", file=sys.stderr)
        return 1
    from collectors.slo import build_slos

    problems = check_dashboard(board, signal_queries(config, source=source), build_slos(config, source))
    for problem in problems:
        print(f"{shown}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{shown}: every query names series the recording rules record or the catalogue reads")
    return 1 if problems else 0


def _forward(name: str, argv: Sequence[str]) -> int:
    if name == "collect":
        from collectors.__main__ import main as collectors_main

        return collectors_main(list(argv))
    if name == "alerts":
        from alerts.__main__ import main as alerts_main

        return alerts_main(["run", *argv])
    if name == "slo":
        from alerts.slo_cli import main as slo_main

        return slo_main(argv)
    if name == "import":
        from collectors.bench_cli import main as import_main

        return import_main(argv)
    if name == "capacity":
        from alerts.capacity_cli import main as capacity_main

        return capacity_main(argv)
    from sim.__main__ import main as sim_main

    return sim_main(list(argv))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch",
        description="Monitor SGLang fleets running speculative decoding (one command for every entry point).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="the dashboard (streamlit run app.py)")
    run.add_argument("--config", help="fleet configuration file (default: the app's own default)")
    run.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8501")), help="default 8501")
    run.add_argument("--address", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    run.add_argument("--dry-run", action="store_true", help="print the streamlit command instead")
    run.add_argument("app_args", nargs=argparse.REMAINDER, help="after --: the app's own flags (--page, ...)")
    run.set_defaults(handler=_run)
    for name, text in (
        ("collect", "headless collector (= python -m collectors; see `specwatch collect --help`)"),
        ("alerts", "scrape and evaluate alerts until SIGTERM (= python -m alerts run)"),
        ("sim", "serve a simulated fleet (= python -m sim)"),
        ("slo", "where every SLO stands: budget, burn rates, attribution, goodput (--config F [--json])"),
        ("import", "offline benchmark results into the store (import bench FILE… --config F [--json])"),
        (
            "capacity",
            "servers needed per deployment, now and at the next 24 h's peak (--config F [--json]; advice)",
        ),
    ):
        commands.add_parser(name, help=text, add_help=False)
    export = commands.add_parser("export", help="rule files and the Grafana dashboard, on stdout")
    kinds = export.add_subparsers(dest="kind", required=True, metavar="WHAT")
    rules = kinds.add_parser("rules", help="alerting rules for Prometheus (= python -m alerts export-rules)")
    rules.add_argument("--config", help="take thresholds from this file (default: the documented defaults)")
    rules.add_argument(
        "--without-recordings", action="store_true", help="leave out the recording group (load it beside)"
    )
    rules.set_defaults(handler=_export_rules)
    recording = kinds.add_parser("recording-rules", help="the catalogue's recording rules")
    recording.add_argument("--config", help="prometheus.selector and rate window from this file")
    recording.set_defaults(handler=_export_recording_rules)
    grafana = kinds.add_parser("grafana", help="a Grafana (>= 10) dashboard of the recorded series")
    grafana.add_argument("--config", help="prometheus.selector and rate window from this file")
    grafana.add_argument(
        "--recipe-label",
        default=DEFAULT_RECIPE_LABEL,
        help=f"the --extra-metric-labels flag used as the recipe variable (default {DEFAULT_RECIPE_LABEL})",
    )
    grafana.add_argument(
        "--check",
        nargs="?",
        const="-",
        metavar="DASHBOARD",
        help="check instead of print: every query must name recorded or catalogue series (default: the "
        "generated dashboard; or a dashboard JSON file); exits 1 naming each panel and series",
    )
    grafana.set_defaults(handler=_export_grafana)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in PASS_THROUGH:
        return _forward(args_list[0], args_list[1:])
    args = _parser().parse_args(args_list)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"specwatch: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
