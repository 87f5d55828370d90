"""Everything an AppTest run put on the page, as text: markdown, alerts, tables, chart data, widgets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamlit.testing.v1 import AppTest


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in getattr(node, "children", {}).values():
        yield from _walk(child)


def page_text(at: AppTest) -> str:
    """The serialised protobuf of every element (what goes to the browser), plus widget values."""
    parts: list[str] = []
    for node in _walk(at._tree):
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        value = getattr(node, "value", None)
        if value is not None:
            parts.append(value.to_csv() if hasattr(value, "to_csv") else str(value))
    return "\n".join(parts)
