"""What specwatch exposes and what it will reach: loopback-only listeners by default, no server-side request
forgery from the UI, YAML read with the safe loader only, hardened Streamlit settings.
"""

from __future__ import annotations

import ast
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.exporter import MetricsExporter
from collectors.model import CollectorHealth
from config import Config
from sim.fleet import SimFleet
from tests.security.hostile import canary
from tests.views.conftest import page_test
from views.menu import PAGES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app.py", "config", "collectors", "alerts", "views", "sim", "bench")
# Anything that can open a connection. Views read history only; app.py composes, it never fetches itself.
NETWORK_MODULES = {"requests", "urllib", "urllib3", "http", "socket", "httpx", "aiohttp", "websocket", "ssl"}
FREE_TEXT_WIDGETS = {"text_input", "text_area", "chat_input", "file_uploader", "camera_input"}


def python_files(*roots: str) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        path = ROOT / root
        files += [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))
    return files


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


# -- no server-side request forgery --------------------------------------------------------------------------
def test_views_and_app_import_nothing_that_opens_connections() -> None:
    for path in python_files("views", "app.py"):
        found = imports(path) & NETWORK_MODULES
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def test_the_only_free_text_widget_is_the_access_token() -> None:
    """No widget lets a viewer type a URL or upload anything: the pages' inputs are choices among known
    servers, recipes, ranges and numbers."""
    typed: list[str] = []
    for path in python_files("views", "app.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in FREE_TEXT_WIDGETS:
                typed.append(f"{path.name}:{node.lineno}:{node.attr}")
    assert [t.split(":")[0] for t in typed] == ["access.py"], typed


@pytest.mark.parametrize("page", [p.url_path for p in PAGES])
def test_urls_in_links_and_inputs_are_never_fetched(tmp_path: Path, page: str) -> None:
    """Every page, opened with each of its query parameters set to a URL (and a few hostile shapes), makes no
    request at all: the canary server behind the URL hears nothing."""
    with canary() as trap:
        config = tmp_path / "viewer.yaml"
        config.write_text(
            yaml.safe_dump({"store": {"path": str(tmp_path / "h.sqlite")}, "targets": []}), encoding="utf-8"
        )
        for value in (f"{trap.url}/x", f"![i]({trap.url}/img.png)", f"<img src='{trap.url}/i'>"):
            at = page_test(config, page)
            for param in ("server", "range", "rule", "target", "url", "page"):
                at.query_params[param] = value
            at = at.run()
            assert not at.exception, [e.value for e in at.exception]
        assert trap.hits == []


# -- listeners -----------------------------------------------------------------------------------------------
class _NoCycles:
    def latest(self) -> tuple[()]:
        return ()

    def health(self) -> CollectorHealth:
        return CollectorHealth(0, None, None, None, 0, 0, None, ())


def test_the_collectors_metrics_listen_on_loopback_by_default() -> None:
    default = Config().exporter.listen
    assert default == "127.0.0.1:9464"
    exporter = MetricsExporter(_NoCycles(), default.replace(":9464", ":0"))
    try:
        assert exporter._server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(exporter.url, timeout=5) as answer:  # noqa: S310 (loopback)
            assert b"specwatch_cycles_total 0.0" in answer.read()
    finally:
        exporter.close()


def test_the_simulated_fleet_listens_on_loopback_by_default() -> None:
    with SimFleet("faults", servers=1) as fleet:
        (server,) = fleet.servers
        assert server.url.startswith("http://127.0.0.1:")


def test_streamlit_settings_bind_loopback_and_hide_developer_controls() -> None:
    settings: dict[str, Any] = tomllib.loads(
        (ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8")
    )
    assert settings["server"]["address"] == "127.0.0.1"
    assert settings["server"]["enableXsrfProtection"] is True
    assert settings["server"]["enableCORS"] is True
    assert settings["server"]["enableAgentApi"] is False
    assert settings["client"]["toolbarMode"] == "viewer"  # no Deploy button, no rerun/clear-cache menu
    assert settings["client"]["showErrorDetails"] in ("type", "none")  # no tracebacks in the browser
    assert settings["browser"]["gatherUsageStats"] is False
    run_line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if "streamlit run" in line)
    assert "--server.address 127.0.0.1" in run_line


# -- safe loading --------------------------------------------------------------------------------------------
def test_yaml_is_only_ever_read_with_the_safe_loader() -> None:
    unsafe: list[str] = []
    for path in python_files(*PACKAGES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "yaml"
                and node.attr
                in {"load", "load_all", "full_load", "full_load_all", "unsafe_load", "unsafe_load_all"}
            ):
                unsafe.append(f"{path.relative_to(ROOT)}:{node.lineno}: yaml.{node.attr}")
            if isinstance(node, ast.Name) and node.id in {"pickle", "marshal", "shelve"}:
                unsafe.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.id}")
    assert unsafe == []


def test_a_targets_file_with_an_object_tag_is_refused(tmp_path: Path) -> None:
    """The targets_file is re-read while running: a planted tag is a ConfigError, never constructed."""
    from config import ConfigError, load_targets_file

    marker = tmp_path / "pwned"
    targets = tmp_path / "targets.yaml"
    targets.write_text(f"- !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_targets_file(targets)
    assert not marker.exists()
