"""The dashboard's optional access gate (AppTest of app.py): nothing of the fleet is drawn before the right
token, the token only ever comes from an environment variable, and a misconfigured gate stays shut.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from tests.security.pages import page_text
from tests.views.conftest import page_test
from views import access

TOKEN = "gate-token-7f3a91c2"


def write(tmp_path: Path, **extra: Any) -> Path:
    document = {"store": {"path": str(tmp_path / "empty.sqlite")}, **extra}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def locked(at: AppTest) -> bool:
    """The gate's form is up and no page, sidebar or history of the fleet is."""
    shown = page_text(at)
    return (
        len(at.text_input) == 1
        and at.text_input[0].label == "Access token"
        and not any(t.value in {"Fleet", "Server", "Alerts"} for t in at.title)
        and "config `" not in shown
        and "empty.sqlite" not in shown
        and not at.sidebar.caption
    )


def submit(at: AppTest, token: str) -> AppTest:
    at.text_input[0].input(token)
    at.button[0].click()
    return at.run()


@pytest.fixture
def no_gate_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(access.TOKEN_ENV, raising=False)
    return monkeypatch


def test_no_token_configured_means_no_gate(tmp_path: Path, no_gate_env: pytest.MonkeyPatch) -> None:
    at = page_test(write(tmp_path), "fleet").run()
    assert not at.exception
    assert at.title[0].value == "Fleet"
    assert not at.text_input


def test_the_token_from_the_environment_locks_everything_until_it_is_given(
    tmp_path: Path, no_gate_env: pytest.MonkeyPatch
) -> None:
    no_gate_env.setenv(access.TOKEN_ENV, TOKEN)
    at = page_test(write(tmp_path), "fleet").run()
    assert not at.exception
    assert locked(at)
    assert TOKEN not in page_text(at)

    started = time.monotonic()
    at = submit(at, TOKEN[:-1] + "x")
    assert time.monotonic() - started >= access.FAILED_ATTEMPT_DELAY_S  # guessing is slowed down
    assert locked(at)
    assert "That token is not right." in [e.value for e in at.error]

    at = submit(at, TOKEN)
    assert not at.exception
    assert at.title[0].value == "Fleet"
    assert TOKEN not in page_text(at)  # nor in the session: only its digest is kept
    assert at.session_state[access._SESSION_KEY] != TOKEN
    at = at.run()  # the session stays open on reruns
    assert at.title[0].value == "Fleet"


def test_a_token_env_named_in_config_replaces_the_default_variable(
    tmp_path: Path, no_gate_env: pytest.MonkeyPatch
) -> None:
    no_gate_env.setenv(access.TOKEN_ENV, "the-default-one")
    no_gate_env.setenv("FLEET_DASHBOARD_TOKEN", TOKEN)
    config = write(tmp_path, dashboard={"token_env": "FLEET_DASHBOARD_TOKEN"})
    at = submit(page_test(config, "fleet").run(), "the-default-one")
    assert locked(at)
    at = submit(at, TOKEN)
    assert at.title[0].value == "Fleet"


def test_a_named_but_unset_variable_fails_closed(tmp_path: Path, no_gate_env: pytest.MonkeyPatch) -> None:
    no_gate_env.delenv("FLEET_DASHBOARD_TOKEN", raising=False)
    config = write(tmp_path, dashboard={"token_env": "FLEET_DASHBOARD_TOKEN"})
    at = page_test(config, "fleet").run()
    assert not at.exception
    assert not at.title
    assert not at.text_input  # no form that could accept an empty token
    assert "FLEET_DASHBOARD_TOKEN" in at.error[0].value
    assert "specwatch is locked" in at.error[0].value
    assert "empty.sqlite" not in page_text(at)


def test_the_gate_comes_before_a_broken_config_is_described(
    tmp_path: Path, no_gate_env: pytest.MonkeyPatch
) -> None:
    no_gate_env.setenv(access.TOKEN_ENV, TOKEN)
    path = tmp_path / "broken.yaml"
    path.write_text("scrape: {interval_s: 5, timout_s: 3}\nstore: {path: secret-layout.sqlite}\n")
    at = page_test(path, "fleet").run()
    assert locked(at)
    assert "timout_s" not in page_text(at)  # an outsider learns nothing about the files
    at = submit(at, TOKEN)
    assert "timout_s" in at.error[0].value


def test_tokens_are_compared_in_constant_time(
    tmp_path: Path, no_gate_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real: Callable[[bytes, bytes], bool] = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    no_gate_env.setenv(access.TOKEN_ENV, TOKEN)
    at = submit(page_test(write(tmp_path), "fleet").run(), TOKEN)
    assert at.title[0].value == "Fleet"
    assert (TOKEN.encode(), TOKEN.encode()) in calls


def test_oidc_login_is_asked_for_before_anything_else(
    tmp_path: Path, no_gate_env: pytest.MonkeyPatch
) -> None:
    """With dashboard.oidc on and nobody signed in, only the sign-in button shows; a click without Streamlit's
    [auth] settings says what is missing instead of failing."""
    at = page_test(write(tmp_path, dashboard={"oidc": True}), "fleet").run()
    assert not at.exception
    assert not at.title or at.title[0].value == "specwatch"
    assert [b.label for b in at.button] == ["Log in"]
    assert "empty.sqlite" not in page_text(at)
    at.button[0].click()
    at = at.run()
    assert not at.exception
    assert "Sign-in is not configured" in at.error[0].value
