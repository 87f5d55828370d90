"""The dashboard's pages (one module each, with ``render(ctx)``), pure chart builders and cached data access.

Views only read history and alert state (``views.data``); they never fetch from servers and never import sim.
"""
