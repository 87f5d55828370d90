"""Who may see the dashboard: an optional access token read from an environment variable, and/or Streamlit's
OpenID Connect login (``st.login``), checked before any page, sidebar or history is drawn.

The token never comes from a file and is never shown, logged or kept in the session (only its digest is);
a configured but unset variable fails closed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping

import streamlit as st
from streamlit.errors import StreamlitAuthError

from config import DashboardSettings

log = logging.getLogger("specwatch.views.access")

TOKEN_ENV = "SPECWATCH_DASHBOARD_TOKEN"  # noqa: S105 (a variable's name, not a secret); used when dashboard.token_env does not name another variable
FAILED_ATTEMPT_DELAY_S = 1.0  # slows guessing from one browser session to one try per second
_SESSION_KEY = "_specwatch_gate"


def expected_token(settings: DashboardSettings, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(token, problem). No token means no gate; a problem means the gate is misconfigured: fail closed."""
    if settings.token_env:
        token = environ.get(settings.token_env, "")
        if not token:
            return None, (
                f"dashboard.token_env names the environment variable {settings.token_env}, which is not set "
                "(or empty) in the dashboard's environment, so nobody can be let in. Set it and restart."
            )
        return token, None
    return environ.get(TOKEN_ENV) or None, None


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison, so response timing does not reveal how much of a guess was right."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def require_access(settings: DashboardSettings, environ: Mapping[str, str]) -> bool:
    """Draw the gate when needed; True when this browser session may see the pages."""
    if settings.oidc and not _oidc_logged_in():
        return False
    token, problem = expected_token(settings, environ)
    if problem is not None:
        st.error(f"**specwatch is locked.** {problem}", icon=":material/lock:")
        return False
    if token is None:
        return True
    if st.session_state.get(_SESSION_KEY) == _digest(token):
        return True  # a rotated token (new digest) asks again
    st.title("specwatch", anchor=False)
    with st.form("specwatch_gate", border=True):
        given = st.text_input("Access token", type="password", help="Ask whoever runs this dashboard.")
        submitted = st.form_submit_button("Open the dashboard")
    if submitted:
        if token_matches(given, token):
            st.session_state[_SESSION_KEY] = _digest(token)
            st.rerun()
        time.sleep(FAILED_ATTEMPT_DELAY_S)
        log.warning("dashboard access refused: wrong token")
        st.error("That token is not right.", icon=":material/lock:")
    return False


def _oidc_logged_in() -> bool:
    try:
        logged_in = bool(st.user.is_logged_in)
    except (AttributeError, KeyError):  # no [auth] settings: Streamlit has no login state at all
        logged_in = False
    if logged_in:
        with st.sidebar:
            st.button("Log out", on_click=st.logout, key="specwatch_logout")
        return True
    st.title("specwatch", anchor=False)
    st.info("Sign in to see the fleet.", icon=":material/lock:")
    if st.button("Log in", key="specwatch_login"):
        try:
            st.login()
        except StreamlitAuthError as exc:
            st.error(
                "Sign-in is not configured: dashboard.oidc is on but Streamlit's [auth] settings are missing "
                f"or incomplete ({exc}). See docs/reliability.md, 'Access'.",
                icon=":material/lock:",
            )
    return False
