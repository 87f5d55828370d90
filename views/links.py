"""Page addresses and cross-page links: the URL path of every page and "open this server's page".

A page's identity in Streamlit is its URL path, so switching to a page only needs a Page with the same path.
"""

from __future__ import annotations

from typing import NoReturn

import streamlit as st

FLEET = "fleet"
SERVER = "server"
CONTEXT = "context"
CAPACITY = "capacity"
RECIPES = "recipes"
ALERTS = "alerts"
SLO = "slo"

SERVER_PARAM = "server"  # ?server=<target> on the Server page (its selectbox is bound to it)
SLO_PARAM = "slo"  # ?slo=<name>&scope=<scope key> on the SLO page (its selectboxes are bound to them)
SCOPE_PARAM = "scope"


def _placeholder() -> None:
    """Never run: stands for a registered page when switching to it by URL path."""


def open_server(target: str) -> NoReturn:
    """Switch this session to the Server page showing ``target`` (the URL carries ?server=<target>)."""
    st.switch_page(
        st.Page(_placeholder, title="Server", url_path=SERVER), query_params={SERVER_PARAM: target}
    )


def server_link(target: str, label: str | None = None) -> None:
    """A link to the Server page showing ``target``."""
    st.page_link(
        st.Page(_placeholder, title="Server", url_path=SERVER),
        label=label or target,
        icon=":material/monitor_heart:",
        query_params={SERVER_PARAM: target},
    )


def slo_link(label: str, slo: str | None = None, scope: str | None = None) -> None:
    """A link to the SLO page (showing ``slo`` in ``scope``, its selector's label, when given)."""
    params = {SLO_PARAM: slo} if slo is not None else {}
    if slo is not None and scope is not None:
        params[SCOPE_PARAM] = scope
    st.page_link(
        st.Page(_placeholder, title="SLOs", url_path=SLO),
        label=label,
        icon=":material/speed:",
        query_params=params or None,
    )


def open_slo(slo: str, scope: str) -> NoReturn:
    """Switch this session to the SLO page showing ``slo`` in ``scope`` (its selector's label:
    ``deployment=east``, ``whole fleet``)."""
    st.switch_page(
        st.Page(_placeholder, title="SLOs", url_path=SLO), query_params={SLO_PARAM: slo, SCOPE_PARAM: scope}
    )
