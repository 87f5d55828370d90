"""The analyses: what the history means, computed once for every reader (pages, CLI, alert rules, exports).

Below ``alerts`` and above ``collectors`` (app → views → alerts → analysis → collectors → config): no
streamlit, no HTTP, nothing of the dashboard. Thresholds that an alert rule also judges by are passed in
(``capacity.CapacityThresholds``, built from the rules' settings by ``alerts.rules.capacity_thresholds``),
never declared here, so a page and an alert cannot disagree.
"""
