"""Read YAML/JSON configuration safely and turn validation failures into ``ConfigError``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from config.errors import ConfigError
from config.settings import Config, Target, describe_duplicates

_MAX_FILE_BYTES = 32 * 1024 * 1024


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _read_bytes(path: Path, limit: int) -> bytes:
    """The file's bytes, at most ``limit``; never blocks on a FIFO or device (opened non-blocking and refused
    unless a regular file), and refuses a file that changed while it was read (a half-written file)."""
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise ConfigError(source, "", "a readable file", exc.strerror or str(exc)) from exc
    try:
        before = os.fstat(fd)
        kind = _kind(before.st_mode)
        if kind != "a regular file":
            raise ConfigError(source, "", "a regular file", kind)
        if before.st_size > limit:
            raise ConfigError(source, "", f"a file under {limit} bytes", f"{before.st_size} bytes")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise ConfigError(source, "", f"a file under {limit} bytes", "more, and still growing")
            chunks.append(chunk)
        after = os.fstat(fd)
    except OSError as exc:
        raise ConfigError(source, "", "a readable file", exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or total != after.st_size:
        raise ConfigError(
            source,
            "",
            "a file that stays the same while it is read",
            "it changed mid-read",
            "write a new file and rename it over the old one; it is read again at the next cycle",
        )
    return b"".join(chunks)


def _read_document(path: Path) -> Any:
    source = str(path)
    try:
        text = _read_bytes(path, _MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
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
    if first["type"] == "unique_names":  # settings.describe_duplicates: where both are, in the hint
        return _duplicates(source, key, first["ctx"]["count"], first["ctx"]["detail"])
    expected = message.removeprefix("Value error, ").removeprefix("Input should be ")
    return ConfigError(source, key, expected, found)


def _duplicates(source: str, key: str, count: int, detail: str) -> ConfigError:
    found = f"{count} repeated name" + ("s" if count > 1 else "")
    return ConfigError(source, key, "unique target names", found, f"{detail}; rename or remove one of each")


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
    repeated = describe_duplicates([(f"[{i}]", t) for i, t in enumerate(targets)])
    if repeated is not None:
        raise _duplicates(str(path), "name", *repeated)
    return targets


def check_no_clash(source: str, inline: tuple[Target, ...], listed: tuple[Target, ...]) -> None:
    """A ``ConfigError`` (naming both positions) when a targets_file reuses a name of the config's own
    targets; ``listed`` is already free of repeats."""
    names = {t.name for t in inline}
    if not any(t.name in names for t in listed):
        return
    found = describe_duplicates(
        [(f"targets[{i}]", t) for i, t in enumerate(inline)]
        + [(f"[{j}] of the file", t) for j, t in enumerate(listed)]
    )
    assert found is not None
    count, detail = found
    raise ConfigError(
        source,
        "name",
        "names not already in targets",
        f"{count} name" + ("s" if count > 1 else "") + " used twice",
        f"{detail}; rename or remove one of each",
    )


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
        check_no_clash(config.targets_file, config.targets, extra)
        config = config.model_copy(update={"targets": config.targets + extra})
    return config
