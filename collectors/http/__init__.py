"""The one HTTP edge: every request specwatch sends goes through here, with aiohttp on one event loop.

- ``loop``: the process's event-loop thread and its two sessions (targets; services reached through the
  environment's proxy: Prometheus, notification receivers);
- ``exchange``: one request under a whole-request deadline, never following a redirect, its body read under a
  byte cap — and every failure translated once, by ``failures.translate``, into the collectors' errors;
- ``targets``: requests to SGLang servers (scrapes, /server_info, probes): bearer token, TLS settings, the
  status words.

The package imports nothing itself: ``collectors.secrets`` (used by the pages) stays free of HTTP clients, and
only what sends requests loads aiohttp (``tests/test_imports.py``).
"""
