"""The Prometheus source: the same signals computed with PromQL from the fleet's Prometheus."""
