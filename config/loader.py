"""Read YAML/JSON configuration safely and turn validation failures into ``ConfigError``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from config.errors import ConfigError
from config.settings import Config, Target

_MAX_FILE_BYTES = 32 * 1024 * 1024


def _read_document(path: Path) -> Any:
    source = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(source, "", "a readable file", exc.strerror or str(exc)) from exc
    if size > _MAX_FILE_BYTES:
        raise ConfigError(source, "", f"a file under {_MAX_FILE_BYTES} bytes", f"{size} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "", "a UTF-8 text file", str(exc)) from exc
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)  # safe loader: no arbitrary object construction
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        problem = str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:  # PyYAML puts the position on later lines: keep it (first), so the spot is found
            problem = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
        raise ConfigError(source, "", "valid YAML/JSON", problem) from exc


def _error_from_validation(source: str, exc: ValidationError) -> ConfigError:
    first = exc.errors(include_url=False)[0]
    key = ".".join(str(part) for part in first["loc"])
    found = first.get("input")
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        hint = "no such setting; see the README's config reference"
        return ConfigError(source, key, "a known key", found, hint)
    if first["type"] == "missing":
        return ConfigError(source, key, "this required key", "nothing")
    expected = message.removeprefix("Value error, ").removeprefix("Input should be ")
    return ConfigError(source, key, expected, found)


def _validate(source: str, model: type[BaseModel] | TypeAdapter[Any], data: Any) -> Any:
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(data)
        return model.model_validate(data)
    except ValidationError as exc:
        raise _error_from_validation(source, exc) from exc


def parse_config(data: Any, source: str = "<config>") -> Config:
    """Validate an already-parsed document (a mapping) into a Config."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, "", "a mapping of settings", type(data).__name__)
    config: Config = _validate(source, Config, data)
    return config


_TARGETS = TypeAdapter(tuple[Target, ...])


def load_targets_file(path: str | Path) -> tuple[Target, ...]:
    """Read a JSON/YAML list of targets (the ``targets_file`` of large fleets)."""
    path = Path(path)
    data = _read_document(path)
    if isinstance(data, dict) and "targets" in data:
        data = data["targets"]
    if not isinstance(data, list):
        raise ConfigError(str(path), "", "a list of targets", type(data).__name__)
    targets: tuple[Target, ...] = _validate(str(path), _TARGETS, data)
    names = [t.name for t in targets]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(str(path), "name", "unique target names", repeated)
    return targets


def load_config(path: str | Path) -> Config:
    """Load and validate a fleet file; a relative ``targets_file`` resolves against the file's folder.

    ``store.path`` stays relative to the working directory, so the default config and ``make run`` share one
    history file wherever the config lives.
    """
    path = Path(path)
    config = parse_config(_read_document(path), str(path))
    base = path.parent
    updates: dict[str, Any] = {}
    if config.targets_file and not Path(config.targets_file).is_absolute():
        updates["targets_file"] = str(base / config.targets_file)
    if updates:
        config = config.model_copy(update=updates)
    if config.targets_file:
        extra = load_targets_file(config.targets_file)
        clash = sorted({t.name for t in extra} & {t.name for t in config.targets})
        if clash:
            raise ConfigError(config.targets_file, "name", "names not already in targets:", clash)
        config = config.model_copy(update={"targets": config.targets + extra})
    return config
