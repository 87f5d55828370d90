"""The pages never ask which history backend they read: no view imports one, and the reader picks it from
the config it is handed (``collectors.history.open_history``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The history backends and their reading code: only ``collectors.history`` chooses between them.
BACKENDS = ("collectors.store.sqlite_store", "collectors.store.columns", "collectors.prometheus")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


VIEWS = sorted((ROOT / "views").rglob("*.py"))  # app.py, the composition root, writes the demo's store


@pytest.mark.parametrize("path", VIEWS, ids=[str(p.relative_to(ROOT)) for p in VIEWS])
def test_no_view_imports_a_history_backend(path: Path) -> None:
    found = sorted(n for n in _imports(path) if n.startswith(BACKENDS))
    assert found == [], f"{path.name} imports {found}: read through views.data's reader instead"


def test_the_reader_has_no_backend_switch() -> None:
    """No ``isinstance`` on a store and no module-wide backend choice in the reads."""
    text = (ROOT / "views" / "data.py").read_text(encoding="utf-8")
    tree = ast.parse(text)
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "isinstance"
    ]
    assert calls == []
    assert "serve_history_from" not in text
