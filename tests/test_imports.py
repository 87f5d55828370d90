"""The viewer's memory: ``import app`` and the pages load no HTTP client.

A dashboard started with ``--no-collector`` reads a store another process writes; it never sends a request
from the scrape transport, the probes, the notifier or the Prometheus client, and at 1,000 servers its peak
RSS budget (300 MB) leaves no room for them (aiohttp, requests and their dependencies: ~14 MB). Only the
modules that send HTTP import those clients, and only the collector runtime imports those modules.

Each check runs in a fresh interpreter: this test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.views import seed_fleet
from tests.views.conftest import write_config

ROOT = Path(__file__).resolve().parents[1]

# HTTP clients a viewer must not load, and the project's modules that send HTTP (each imports one of them).
HTTP_CLIENTS = ("aiohttp", "requests", "urllib3", "isal", "yarl", "multidict")
HTTP_SENDERS = (
    "collectors.http.loop",
    "collectors.http.exchange",
    "collectors.http.failures",
    "collectors.http.targets",
    "collectors.direct.scrape",
    "collectors.server_info",
    "collectors.runner",
    "collectors.probes.sender",
    "collectors.prometheus.client",
    "collectors.prometheus.promql_source",
    "alerts.notify",
    "alerts.delivery_http",
    "alerts.service",
)

_REPORT = """
import json, sys
loaded = {m.split(".")[0] for m in sys.modules} & set(CLIENTS) | set(SENDERS) & set(sys.modules)
print(json.dumps(sorted(loaded)))
"""


def loaded_after(code: str) -> list[str]:
    """The HTTP clients and HTTP-sending modules loaded once ``code`` has run in a fresh interpreter."""
    script = (
        f"CLIENTS = {HTTP_CLIENTS!r}\nSENDERS = {HTTP_SENDERS!r}\n"
        + textwrap.dedent(code)
        + textwrap.dedent(_REPORT)
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_app_and_pages_import_no_http_client() -> None:
    loaded = loaded_after(
        """
        import importlib, pkgutil
        import app
        import views.pages
        for page in pkgutil.iter_modules(views.pages.__path__):
            importlib.import_module(f"views.pages.{page.name}")
        """
    )
    assert loaded == [], (
        f"import app + views.pages.* loaded {loaded}: a --no-collector viewer pays for HTTP clients it never "
        "uses (see `python -X importtime -c 'import app'` for the chain)"
    )


@pytest.mark.slow
def test_viewer_renders_every_page_without_http_client(tmp_path: Path) -> None:
    """The pages, rendered from a local SQLite store with ``--no-collector``, load no HTTP client either."""
    store = tmp_path / "history.sqlite"
    seed_fleet.build(str(store), time.time())
    config = write_config(tmp_path / "specwatch.yaml", store)
    loaded = loaded_after(
        f"""
        from pathlib import Path
        from tests.views.conftest import page_test
        from views.menu import PAGES

        for spec in PAGES:
            at = page_test(Path({str(config)!r}), spec.url_path).run()  # --no-collector
            assert not at.exception, (spec.url_path, [e.message for e in at.exception])
        """
    )
    assert loaded == [], f"rendering the pages with --no-collector loaded {loaded}"
