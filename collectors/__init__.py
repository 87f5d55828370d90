"""Collectors: scrape SGLang servers (or read the fleet's Prometheus), derive the accept/step fraction,
keep history.

Never imports streamlit, views or alerts.
"""
