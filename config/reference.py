"""The README's configuration reference, rendered from the settings themselves so the two cannot drift."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from config.settings import Config


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        for inner in get_args(candidate):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


def _default_text(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "see below"
    else:
        value = field.default
    if isinstance(value, tuple):
        value = list(value)
    return "`" + json.dumps(value) + "`"


def iter_settings(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(dotted key, default, help) for every setting, parents before their children."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = _nested_model(field.annotation)
        is_list = nested is not None and "tuple" in str(field.annotation)
        yield key, _default_text(model, name), field.description or ""
        if nested is not None:
            yield from iter_settings(nested, f"{key}[]." if is_list else f"{key}.")


def render_reference() -> str:
    """A Markdown table of every setting: key, default, meaning."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for key, default, help_text in iter_settings():
        escaped = help_text.replace("|", r"\|")  # a pipe would end the table cell
        lines.append(f"| `{key}` | {default} | {escaped} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_reference(), end="")
