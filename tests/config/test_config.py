"""The fleet file: the issue's example loads; a bad file is a ConfigError naming file, key, expected, got."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Config, ConfigError, load_config, load_targets_file, parse_config

ISSUE_EXAMPLE = """
source: direct                  # direct | prometheus (the Prometheus issue adds the second)
scrape: {interval_s: 5, timeout_s: 3}
targets:
  - name: k3-east-0
    url: http://10.0.0.5:30000  # the SGLang server's base URL
    labels: {deployment: east}
    bearer_token_env: K3_TOKEN  # optional; the token is read from this variable, never stored or shown
targets_file: null              # optional: a JSON/YAML list of targets, re-read on change (big fleets)
store: {path: data/history.sqlite, retention_h: 168}
alerts: {webhook_urls: [], alertmanager_url: null, rules: {}}   # used by the alerts issue
"""


def write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_issue_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3_TOKEN", "do-not-store-me")
    config = load_config(write(tmp_path, ISSUE_EXAMPLE))
    assert config.source == "direct"
    assert (config.scrape.interval_s, config.scrape.timeout_s) == (5.0, 3.0)
    (target,) = config.targets
    assert target.url == "http://10.0.0.5:30000"
    assert target.deployment == "east"
    assert target.bearer_token_env == "K3_TOKEN"
    assert config.store.retention_h == 168.0
    assert "do-not-store-me" not in config.model_dump_json()  # only the variable's name is kept


def test_an_empty_file_is_all_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == Config()


def test_json_files_load_too(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"targets": [{"name": "a", "url": "https://a:1/"}]}), "fleet.json")
    assert load_config(path).targets[0].url == "https://a:1"  # trailing slash dropped: paths are appended


# The invalid-input table: (file text, the key the error names, words the message must hold).
BAD_FILES = [
    ("scrap: {interval_s: 5}\n", "scrap", "expected a known key"),
    ("scrape: {interval_s: 5, timout_s: 3}\n", "scrape.timout_s", "expected a known key"),
    ("scrape: {interval_s: fast}\n", "scrape.interval_s", "found 'fast'"),
    ("scrape: {interval_s: 2, timeout_s: 3}\n", "scrape", "timeout_s (3.0) must not exceed interval_s (2.0)"),
    ("scrape: {concurrency: 0}\n", "scrape.concurrency", "found 0"),
    ("targets: [{name: a, url: 10.0.0.5:30000}]\n", "targets.0.url", "an http:// or https:// URL"),
    ("targets: [{name: a}]\n", "targets.0.url", "expected this required key, found 'nothing'"),
    (
        "targets: [{name: a, url: 'http://x'}, {name: a, url: 'http://y'}]\n",
        "targets",
        "targets[0] and targets[1] are both named 'a' (http://x and http://y)",
    ),
    ("source: kafka\n", "source", "found 'kafka'"),
    ("source: prometheus\n", "(top level)", "needs a prometheus: {url: ...} section"),
    ("store: {retention_h: -1}\n", "store.retention_h", "found -1"),
    ("alerts: {webhook_urls: [ftp://x]}\n", "alerts.webhook_urls", "an http:// or https:// URL"),
    ("- just\n- a list\n", "(top level)", "expected a mapping of settings, found 'list'"),
    ("scrape: {interval_s: 5\n", "(top level)", "expected valid YAML/JSON"),
]


@pytest.mark.parametrize(("text", "key", "words"), BAD_FILES)
def test_bad_files_name_file_key_expected_and_found(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: expected ")
    assert words in message


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: \(top level\): expected a readable file"):
        load_config(tmp_path / "nope.yaml")


def test_targets_file_is_relative_to_the_config_and_appended(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    write(
        tmp_path / "conf",
        "- {name: b, url: 'http://b:1'}\n- {name: c, url: 'http://c:1'}\n",
        "fleet-targets.yaml",
    )
    path = write(
        tmp_path / "conf", "targets: [{name: a, url: 'http://a:1'}]\ntargets_file: fleet-targets.yaml\n"
    )
    config = load_config(path)
    assert [t.name for t in config.targets] == ["a", "b", "c"]
    assert config.targets_file == str(tmp_path / "conf" / "fleet-targets.yaml")


@pytest.mark.parametrize(
    ("targets_text", "words"),
    [
        ("- {name: a, url: 'http://other:1'}\n", "name: expected names not already in targets"),
        (
            "- {name: b, url: 'http://b:1'}\n- {name: b, url: 'http://b:2'}\n",
            "name: expected unique target names",
        ),
        ("{name: b}\n", "expected a list of targets, found 'dict'"),
        ("- {name: b, url: 'http://b:1', port: 3}\n", "0.port: expected a known key"),
    ],
)
def test_a_bad_targets_file_names_that_file(tmp_path: Path, targets_text: str, words: str) -> None:
    targets = write(tmp_path, targets_text, "fleet-targets.yaml")
    path = write(tmp_path, "targets: [{name: a, url: 'http://a:1'}]\ntargets_file: fleet-targets.yaml\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{targets}: ")
    assert words in str(caught.value)


def test_a_targets_file_may_wrap_its_list(tmp_path: Path) -> None:
    path = write(tmp_path, "targets:\n  - {name: a, url: 'http://a:1'}\n", "t.yaml")
    assert [t.name for t in load_targets_file(path)] == ["a"]


def test_long_found_values_are_shortened(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"source": "x" * 500}, "inline")
    assert len(str(caught.value)) < 300
    assert caught.value.key == "source"
    assert caught.value.source == "inline"
