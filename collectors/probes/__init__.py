"""Active probes: accept length and step latency measured at fixed context lengths (POST /generate)."""
