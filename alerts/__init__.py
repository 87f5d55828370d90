"""Alerts: rules evaluated once per process in the collector, with hysteresis, persistence and notifications.

Imports `collectors` and `config` only, never streamlit or views; pages read state via `AlertStateStore`.
"""
