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

SERVER_PARAM = "server"  # ?server=<target> on the Server page (its selectbox is bound to it)


def _placeholder() -> None:
    """Never run: stands for a registered page when switching to it by URL path."""


def open_server(target: str) -> NoReturn:
    """Switch this session to the Server page showing ``target`` (the URL carries ?server=<target>)."""
    st.switch_page(
        st.Page(_placeholder, title="Server", url_path=SERVER), query_params={SERVER_PARAM: target}
    )
