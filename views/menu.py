"""The table of contents: every page's title, icon, URL path and render function, in menu order.

app.py turns this into ``st.navigation``; a new page is one module with a ``render(ctx)`` and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from views import links
from views.page_context import PageContext
from views.pages import alerts, capacity, context, fleet, recipes, server, slo


@dataclass(frozen=True, slots=True)
class PageSpec:
    url_path: str
    title: str
    icon: str
    render: Callable[[PageContext], None]


PAGES: tuple[PageSpec, ...] = (
    PageSpec(links.FLEET, "Fleet", ":material/dns:", fleet.render),
    PageSpec(links.SLO, "SLOs", ":material/speed:", slo.render),
    PageSpec(links.SERVER, "Server", ":material/monitor_heart:", server.render),
    PageSpec(links.CONTEXT, "Context", ":material/trending_down:", context.render),
    PageSpec(links.CAPACITY, "Capacity", ":material/memory:", capacity.render),
    PageSpec(links.RECIPES, "Recipes", ":material/tune:", recipes.render),
    PageSpec(links.ALERTS, "Alerts", ":material/notifications:", alerts.render),
)
