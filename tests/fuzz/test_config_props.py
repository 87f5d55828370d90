"""Hypothesis properties of config loading: every bad file is a ``ConfigError`` naming the file and the key.

A valid fleet file is mutated one way at a time (an unknown key, a value of the wrong type, out of range,
missing, a bad URL, a repeated target name, an unsafe YAML tag) and loaded the way startup does: the file,
then the alert rules. The error must name the mutated key (or the mapping that holds it) — never a traceback,
never a silent default.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.rules import build_rules
from config import Config, ConfigError, load_config

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

BASE: dict[str, Any] = {
    "source": "direct",
    "scrape": {
        "interval_s": 5,
        "timeout_s": 3,
        "max_body_bytes": 1048576,
        "concurrency": 8,
        "verify_tls": True,
        "ca_bundle": None,
    },
    "targets": [
        {
            "name": "k3-a",
            "url": "http://127.0.0.1:30000",
            "labels": {"deployment": "east"},
            "bearer_token_env": "K3_TOKEN",
        },
        {"name": "k3-b", "url": "https://k3-b.internal:30000"},
    ],
    "store": {"path": "data/fuzz.sqlite", "retention_h": 24},
    "alerts": {
        "webhook_urls": ["http://127.0.0.1:9/hook"],
        "alertmanager_url": None,
        "evaluation_interval_s": None,
        "rules": {"StatePoolSaturation": {"fire_at": 0.95, "recover_below": 0.9, "for_s": 60}},
    },
    "exporter": {"listen": "127.0.0.1:9464"},
    "sim": {"scenario": "demo", "speed": 1, "servers": 4, "seed": 0},
}

NOT_A_NUMBER = ["abc", [1], {"a": 1}, True]
NOT_A_STRING = [[], {"a": 1}, 5, 2.5]
NOT_A_BOOL = ["maybe", [True], {"a": 1}, 2]
# leaf path → values that must be refused there
BAD_LEAVES: dict[tuple[str | int, ...], list[Any]] = {
    ("source",): ["kafka", 1, None],
    ("scrape", "interval_s"): [*NOT_A_NUMBER, 0, -5, 7200],
    ("scrape", "timeout_s"): [*NOT_A_NUMBER, 0, -1],
    ("scrape", "max_body_bytes"): [*NOT_A_NUMBER, 10, -1],
    ("scrape", "concurrency"): [*NOT_A_NUMBER, 0, 100000],
    ("scrape", "verify_tls"): NOT_A_BOOL,
    ("scrape", "ca_bundle"): NOT_A_STRING,
    ("targets",): ["k3-a", {"name": "x"}, 5],
    ("targets", 0): ["http://x", 5, []],
    ("targets", 0, "name"): [*NOT_A_STRING, "", "x" * 300],
    ("targets", 0, "url"): ["ftp://x", "127.0.0.1:30000", "", *NOT_A_STRING],
    ("targets", 0, "labels"): ["east", [1], {"deployment": [1]}],
    ("targets", 0, "bearer_token_env"): NOT_A_STRING,
    ("store", "path"): NOT_A_STRING,
    ("store", "retention_h"): [*NOT_A_NUMBER, 0, -1],
    ("alerts", "webhook_urls"): ["not a url", ["ftp://hook"], 5, {"a": 1}],
    ("alerts", "alertmanager_url"): ["alertmanager:9093", 5],
    ("alerts", "evaluation_interval_s"): [*NOT_A_NUMBER, 0, -1],
    ("alerts", "rules"): ["all", [1]],
    ("alerts", "rules", "StatePoolSaturation"): ["on", 5],
    ("alerts", "rules", "StatePoolSaturation", "fire_at"): ["lots", [1], 0, 1.5, True],
    ("alerts", "rules", "StatePoolSaturation", "for_s"): ["soon", -1],
    ("alerts", "rules", "StatePoolSaturation", "recover_below"): [0.99, "x"],  # above fire_at: refused
    ("exporter", "listen"): ["9464", "host:port", 5, "127.0.0.1:99999"],
    ("sim", "speed"): [*NOT_A_NUMBER, 0, 5000],
    ("sim", "servers"): [*NOT_A_NUMBER, 0, 100000],
    ("sim", "seed"): ["one", [1]],
}
MAPPINGS: list[tuple[str | int, ...]] = [
    (),
    ("scrape",),
    ("targets", 0),
    ("store",),
    ("alerts",),
    ("alerts", "rules", "StatePoolSaturation"),
    ("exporter",),
    ("sim",),
]
REQUIRED: list[tuple[str | int, ...]] = [("targets", 1, "name"), ("targets", 0, "url")]


def dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in path)


def set_at(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    node: Any = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def load_like_startup(path: Path) -> Config:
    """What the dashboard and the daemons do before scraping: the file, then the alert rules."""
    config = load_config(path)
    build_rules(config.alerts.rules, str(path))
    return config


def write(tmp_path: Path, document: Any, as_json: bool) -> Path:
    path = tmp_path / ("fleet.json" if as_json else "fleet.yaml")
    path.write_text(json.dumps(document) if as_json else yaml.safe_dump(document), encoding="utf-8")
    return path


def assert_names(exc: ConfigError, path: Path, key: str, *, in_words: str | None = None) -> None:
    """The error names the file and the key: the mutated key, the mapping that holds it, or the element inside
    it that is wrong.

    Cross-field checks of the whole file (``in_words``) are reported at the top level and name the key in
    their sentence instead.
    """
    assert str(path) in str(exc) or exc.source == "<config>"
    assert "Traceback" not in str(exc)
    if in_words is not None and not exc.key:
        assert in_words in str(exc), f"{in_words!r} not named: {exc}"
        return
    assert exc.key, f"no key named for a bad {key!r}: {exc}"
    related = key == exc.key or key.startswith(exc.key + ".") or exc.key.startswith(key + ".")
    assert related, f"named {exc.key!r}, mutated {key!r}: {exc}"


def test_the_base_document_is_valid(tmp_path: Path) -> None:
    for as_json in (False, True):
        config = load_like_startup(write(tmp_path, BASE, as_json))
        assert [t.name for t in config.targets] == ["k3-a", "k3-b"]


@FUZZ
@given(data=st.data(), as_json=st.booleans())
def test_a_bad_value_names_its_key(tmp_path: Path, data: st.DataObject, as_json: bool) -> None:
    path_ = data.draw(st.sampled_from(sorted(BAD_LEAVES, key=dotted)))
    value = data.draw(st.sampled_from(BAD_LEAVES[path_]))
    document = copy.deepcopy(BASE)
    set_at(document, path_, value)
    file = write(tmp_path, document, as_json)
    with pytest.raises(ConfigError) as caught:
        load_like_startup(file)
    assert_names(caught.value, file, dotted(path_))


@FUZZ
@given(
    data=st.data(),
    key=st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True),
    value=st.none() | st.integers() | st.text(max_size=5),
)
def test_an_unknown_key_is_named(tmp_path: Path, data: st.DataObject, key: str, value: Any) -> None:
    where = data.draw(st.sampled_from(MAPPINGS))
    document = copy.deepcopy(BASE)
    node: Any = document
    for part in where:
        node = node[part]
    if key in node:
        return  # not unknown
    node[key] = value
    file = write(tmp_path, document, as_json=False)
    with pytest.raises(ConfigError) as caught:
        load_like_startup(file)
    assert_names(caught.value, file, dotted((*where, key)))


@pytest.mark.parametrize("missing", REQUIRED, ids=dotted)
def test_a_missing_required_key_is_named(tmp_path: Path, missing: tuple[str | int, ...]) -> None:
    document = copy.deepcopy(BASE)
    node: Any = document
    for part in missing[:-1]:
        node = node[part]
    del node[missing[-1]]
    file = write(tmp_path, document, as_json=False)
    with pytest.raises(ConfigError) as caught:
        load_like_startup(file)
    assert_names(caught.value, file, dotted(missing))


def test_repeated_target_names_and_a_missing_prometheus_section_name_their_key(tmp_path: Path) -> None:
    document = copy.deepcopy(BASE)
    document["targets"][1]["name"] = "k3-a"
    file = write(tmp_path, document, as_json=False)
    with pytest.raises(ConfigError) as caught:
        load_like_startup(file)
    assert_names(caught.value, file, "targets", in_words="target names must be unique")
    assert "k3-a" in str(caught.value)

    document = copy.deepcopy(BASE)
    document["source"] = "prometheus"
    file = write(tmp_path, document, as_json=False)
    with pytest.raises(ConfigError) as caught:
        load_like_startup(file)
    assert_names(caught.value, file, "prometheus", in_words="prometheus: {url: ...} section")


@FUZZ
@given(cut=st.integers(min_value=0), noise=st.binary(max_size=8))
def test_a_damaged_file_is_a_config_error_or_still_valid(tmp_path: Path, cut: int, noise: bytes) -> None:
    """A file cut short or with stray bytes (a half-written save) never raises anything but ConfigError."""
    text = yaml.safe_dump(BASE).encode()
    file = tmp_path / "fleet.yaml"
    file.write_bytes(text[: cut % (len(text) + 1)] + noise)
    try:
        load_like_startup(file)
    except ConfigError as exc:
        error: ConfigError | None = exc
    else:
        error = None
    assert error is None or str(file) in str(error)


UNSAFE_TAGS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
    "!!python/name:os.system",
    "!!python/object:collections.OrderedDict {{}}",
]


@pytest.mark.parametrize("payload", UNSAFE_TAGS)
def test_yaml_object_tags_are_refused_and_never_run(tmp_path: Path, payload: str) -> None:
    marker = tmp_path / "pwned"
    file = tmp_path / "fleet.yaml"
    file.write_text(
        f"scrape:\n  interval_s: 5\nstore:\n  path: {payload.format(marker=marker)}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError) as caught:
        load_like_startup(file)
    assert not marker.exists()  # nothing was constructed, let alone run
    assert str(file) in str(caught.value)
    assert "line 4, column" in str(caught.value)  # where the refused tag is, so it can be found and removed
