"""The direct source: scrape each SGLang server's /metrics and /server_info and derive the signals."""
