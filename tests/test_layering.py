"""Imports go one way: app → views → alerts → collectors → config; sim uses config, the model, the store and
the signal derivation.

An ``ast`` walk over every module (imports inside functions included), so a layering slip fails CI at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("app", "views", "alerts", "collectors", "config", "sim", "bench")

# Project packages each layer may import (itself always allowed).
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "collectors": {"config"},
    "alerts": {"collectors", "config"},
    "views": {"alerts", "collectors", "config"},
    # sim describes servers with the collector's data model, and `python -m sim history` writes a history
    # store the way the collector does (its store and its errors; never the scraping side), deriving its
    # signals by the collector's catalogue and its compiled derivation (one formula, live and history).
    "sim": {
        "config",
        "collectors.model",
        "collectors.store",
        "collectors.errors",
        "collectors.signals",
        "collectors.direct.derive",
    },
    "app": {"views", "alerts", "collectors", "config", "sim"},
    # Benchmarks measure whole pages, so they may drive the entry point like the tests do.
    "bench": {"app", "views", "alerts", "collectors", "config", "sim"},
}
# Third-party modules a layer must never import.
FORBIDDEN: dict[str, set[str]] = {
    "collectors": {"streamlit"},
    "alerts": {"streamlit"},
    "config": {"streamlit", "requests"},
    "views": {"requests"},
}


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
