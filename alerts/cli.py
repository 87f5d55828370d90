"""What the alerts' command lines share: one exit code and one stderr line per kind of failure.

A configuration error exits 2, a collector error (the store, the fleet's Prometheus) exits 1; either is said
in one line, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from collectors.errors import CollectorError
from config import Config, ConfigError, load_config


def exit_code(command: Callable[[], int]) -> int:
    """Run ``command``: its exit code, or 2 on a configuration error and 1 on a collector error (said)."""
    try:
        return command()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except CollectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


class Report(Protocol):
    def __call__(self, config: Config, *, json_lines: bool, source: str) -> int: ...


def report_main(
    argv: Sequence[str] | None, report: Report, *, prog: str, description: str | None, config_help: str
) -> int:
    """``prog --config F [--json]``: ``report`` on the loaded configuration, as text or JSON lines."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", required=True, help=config_help)
    parser.add_argument("--json", action="store_true", help="JSON lines instead of text")
    args = parser.parse_args(list(argv) if argv is not None else None)
    return exit_code(lambda: report(load_config(args.config), json_lines=args.json, source=args.config))
