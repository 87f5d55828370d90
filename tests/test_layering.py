"""Imports go one way: app → views → alerts → analysis → collectors → config; sim uses config, the model,
the store and the signal derivation. Inside collectors/, the direct source, the Prometheus source and the
probes stand side by side above the store and the shared modules, and only the wiring (runner, source, probe
CLI) joins them.

An ``ast`` walk over every module (imports inside functions included), so a layering slip fails CI at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("app", "views", "alerts", "analysis", "collectors", "config", "sim", "bench")

# Project packages each layer may import (itself always allowed).
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "collectors": {"config"},
    # The analyses (scaling, confidence, capacity, the loss split, SLO arithmetic) serve the pages, the CLI
    # and the rules alike, so they know nothing of any of them.
    "analysis": {"collectors", "config"},
    "alerts": {"analysis", "collectors", "config"},
    "views": {"alerts", "analysis", "collectors", "config"},
    # sim describes servers with the collector's data model, and `python -m sim history` writes a history
    # store the way the collector does (its store and its errors; never the scraping side), deriving its
    # signals by the collector's catalogue and its compiled derivation (one formula, live and history).
    "sim": {
        "config",
        "collectors.model",
        "collectors.store",
        "collectors.errors",
        "collectors.signals",
        "collectors.derive",
    },
    "app": {"views", "alerts", "analysis", "collectors", "config", "sim"},
    # Benchmarks measure whole pages, so they may drive the entry point like the tests do.
    "bench": {"app", "views", "alerts", "analysis", "collectors", "config", "sim"},
}
# Third-party modules a layer must never import.
FORBIDDEN: dict[str, set[str]] = {
    "collectors": {"streamlit"},
    "analysis": {"streamlit", "requests", "aiohttp"},
    "alerts": {"streamlit"},
    "config": {"streamlit", "requests", "aiohttp"},
    "views": {"requests", "aiohttp"},
}


# Inside collectors/: the sources and the probes never import each other (what they share lives beside them:
# the model, the catalogue, derivation, /server_info, the HTTP edge), nothing below them imports them, and
# only the wiring joins them. The store is below everything that sends HTTP, the edge included: a viewer reads
# it without loading aiohttp.
SIDE_BY_SIDE = ("collectors.direct", "collectors.prometheus", "collectors.probes")
WIRING = ("collectors.runner", "collectors.source", "collectors.probe_cli", "collectors.__main__")


def collectors_part(module: str) -> str:
    """Which part of collectors/ a module belongs to: a source, the store, a wiring module, else shared."""
    for part in (*SIDE_BY_SIDE, "collectors.store", *WIRING):
        if module == part or module.startswith(part + "."):
            return part
    return "collectors (shared)"


def collectors_violations(module: str, names: set[str]) -> list[str]:
    part = collectors_part(module)
    if part in WIRING:
        banned: tuple[str, ...] = ()
    elif part in SIDE_BY_SIDE:
        banned = (*(other for other in SIDE_BY_SIDE if other != part), *WIRING)
    elif part == "collectors.store":
        banned = (*SIDE_BY_SIDE, *WIRING, "collectors.http")
    else:
        banned = (*SIDE_BY_SIDE, *WIRING)
    return [
        f"{name} ({part} must not import {ban})"
        for name in sorted(names)
        for ban in banned
        if name == ban or name.startswith(ban + ".")
    ]


def modules() -> list[tuple[str, Path]]:
    found = [("app", ROOT / "app.py")] if (ROOT / "app.py").exists() else []
    for package in PROJECT[1:]:
        found += [(package, path) for path in sorted((ROOT / package).rglob("*.py"))]
    return found


def imported_names(path: Path, package: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                parts = path.relative_to(ROOT).with_suffix("").parts[: -node.level]
                base = ".".join(parts)
                names.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def violations(package: str, names: set[str]) -> list[str]:
    found = []
    for name in sorted(names):
        top = name.split(".")[0]
        if top in FORBIDDEN.get(package, set()):
            found.append(f"{name} (never imported by {package})")
        elif top in PROJECT and top != package:
            allowed = ALLOWED[package]
            if top not in allowed and not any(name == a or name.startswith(a + ".") for a in allowed):
                found.append(
                    f"{name} ({package} may import only {sorted(allowed) or 'nothing of the project'})"
                )
    return found


@pytest.mark.parametrize(("package", "path"), modules(), ids=[str(p.relative_to(ROOT)) for _, p in modules()])
def test_imports_go_one_way(package: str, path: Path) -> None:
    names = imported_names(path, package)
    if package == "sim":
        # "from collectors.model import X" yields both "collectors.model" and "collectors.model.X": fine;
        # "from collectors import model" yields "collectors" and "collectors.model": judge the specific name.
        names = {n for n in names if not (n == "collectors" and "collectors.model" in names)}
    assert violations(package, names) == []


def test_the_walk_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import streamlit as st\n\ndef f():\n    from views import charts\n    import sim.fleet\n")
    names = imported_names(bad, "collectors")
    assert violations("collectors", names) == [
        "sim.fleet (collectors may import only ['config'])",
        "streamlit (never imported by collectors)",
        "views (collectors may import only ['config'])",
        "views.charts (collectors may import only ['config'])",
    ]
    assert violations("sim", {"collectors.model", "collectors.model.Signals", "config"}) == []
    assert violations("sim", {"collectors.runner"}) != []


def test_the_walk_catches_an_analysis_reaching_up(tmp_path: Path) -> None:
    """An analysis that imports a page, a rule, streamlit or an HTTP client fails; the layers above may use
    it, the collectors below may not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import requests\nfrom views.fleet_frames import STATUS_UP\n\n"
        "def f():\n    import streamlit as st\n    from alerts.rules import build_rules\n"
    )
    assert violations("analysis", imported_names(bad, "analysis")) == [
        "alerts.rules (analysis may import only ['collectors', 'config'])",
        "alerts.rules.build_rules (analysis may import only ['collectors', 'config'])",
        "requests (never imported by analysis)",
        "streamlit (never imported by analysis)",
        "views.fleet_frames (analysis may import only ['collectors', 'config'])",
        "views.fleet_frames.STATUS_UP (analysis may import only ['collectors', 'config'])",
    ]
    assert violations("alerts", {"analysis.stats", "analysis.stats.fit_line"}) == []
    assert violations("views", {"analysis.capacity"}) == []
    assert violations("collectors", {"analysis.slo_report"}) == [
        "analysis.slo_report (collectors may import only ['config'])"
    ]


COLLECTORS = [path for package, path in modules() if package == "collectors"]


@pytest.mark.parametrize("path", COLLECTORS, ids=[str(p.relative_to(ROOT)) for p in COLLECTORS])
def test_sources_stand_side_by_side_inside_collectors(path: Path) -> None:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    assert collectors_violations(module, imported_names(path, "collectors")) == []


def test_the_walk_catches_a_crossing_inside_collectors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from collectors.direct import scrape\n\n"
        "def f():\n    from collectors.runner import Collector\n    import collectors.http.targets\n"
    )
    names = imported_names(bad, "collectors")
    # The probes importing the direct source's scraper (what sender.py did) and the collector.
    assert collectors_violations("collectors.probes.sender", names) == [
        "collectors.direct (collectors.probes must not import collectors.direct)",
        "collectors.direct.scrape (collectors.probes must not import collectors.direct)",
        "collectors.runner (collectors.probes must not import collectors.runner)",
        "collectors.runner.Collector (collectors.probes must not import collectors.runner)",
    ]
    # Each source against the others; the store and the shared modules against all of them.
    for module, planted in [
        ("collectors.prometheus.recipes", "collectors.direct.scrape"),
        ("collectors.direct.direct_source", "collectors.prometheus.client"),
        ("collectors.prometheus.promql_history", "collectors.probes.prober"),
        ("collectors.store.probes", "collectors.probes.prober"),
        ("collectors.store.sqlite_store", "collectors.http.loop"),
        ("collectors.server_info", "collectors.direct.scrape"),
        ("collectors.derive", "collectors.runner"),
    ]:
        assert collectors_violations(module, {planted}) != [], (module, planted)
    # The wiring joins them, and the edge is shared by every source.
    assert collectors_violations("collectors.probe_cli", {"collectors.runner", "collectors.probes"}) == []
    assert collectors_violations("collectors.probes.sender", {"collectors.http.targets"}) == []


def test_pages_import_shared_blocks_not_each_other() -> None:
    """A page module (views/pages/*) may use any shared views module, but never another page."""
    crossing = []
    for path in sorted((ROOT / "views" / "pages").glob("*.py")):
        names = imported_names(path, "views")
        own = f"views.pages.{path.stem}"
        crossing += [f"{path.name}: {n}" for n in names if n.startswith("views.pages.") and n != own]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "views.pages":
                crossing.append(f"{path.name}: from views.pages import ...")
    assert crossing == []
