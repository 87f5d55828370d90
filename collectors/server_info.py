"""The recipe of a server: SGLang's /server_info (or /get_server_info before 0.5.6) JSON → ``Recipe``.

Read by both sources: the direct source beside each scrape, the Prometheus source for the targets it sees
(``collectors.prometheus.recipes``), through the HTTP edge's client for targets.

Only the flags that matter are kept (``model.RECIPE_FLAGS``), with SGLang's renames folded in:
``cuda_graph_max_bs`` became ``cuda_graph_max_bs_decode`` in 0.5.14, and the model is ``served_model_name`` or
else ``model_path``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from collectors.errors import BadServerInfo, HTTPStatusError
from collectors.http.targets import TargetClient
from collectors.model import RECIPE_FLAGS, FlagValue, Recipe, gpu_count_of
from config import Target

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")

# Recipe flag → the /server_info keys that can carry it, first found wins.
_SOURCES: dict[str, tuple[str, ...]] = {
    "model": ("served_model_name", "model_path"),
    "cuda_graph_max_bs": ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"),
}
# Keys whose presence says "this is an SGLang server-info object".
_IDENTIFYING = ("version", "model_path", "served_model_name", "tp_size", "speculative_algorithm")


FLAG_TEXT_MAX = 1024  # characters of one flag's text kept in the recipe


def _flag_value(value: Any) -> FlagValue:
    if value is None or isinstance(value, bool | int | float):
        return value
    # A list or dict flag (rare): a compact, stable text form keeps the recipe id deterministic.
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) <= FLAG_TEXT_MAX:
        return text
    # A flag of 10,000 keys (or a 64 KiB path) is stored with the recipe and shown on the Server page: its
    # start and a digest of the whole, still stable (same value, same recipe id) and still told apart from
    # another long value (issue 23).
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{text[: FLAG_TEXT_MAX - 80]}… ({len(text)} characters, sha256 {digest})"


def recipe_from_server_info(info: Mapping[str, Any]) -> Recipe:
    """Recipe of a parsed /server_info object (top-level keys, else the first DP rank's internal state)."""
    internal = info.get("internal_states")
    rank0: Mapping[str, Any] = (
        internal[0] if isinstance(internal, list) and internal and isinstance(internal[0], dict) else {}
    )
    flags: dict[str, FlagValue] = {}
    for flag in RECIPE_FLAGS:
        value: Any = None
        for key in _SOURCES.get(flag, (flag,)):
            value = info.get(key)
            if value is None:
                value = rank0.get(key)
            if value is not None and value != "":
                break
        flags[flag] = _flag_value(value)
    return Recipe.from_flags(flags, gpu_count_of(info, rank0))


class _NonFinite(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _no_constants(literal: str) -> float:
    raise _NonFinite(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999: valid JSON, but inf once read
        raise _NonFinite(literal)
    return value


def _non_finite_message(body: bytes, literal: str) -> str:
    found = re.search(rb'"([^"\\]{1,80})"\s*:\s*' + re.escape(literal.encode()), body)
    where = f" in {found.group(1).decode('utf-8', 'replace')}" if found else ""
    return f"a number that is not finite ({literal}{where}); SGLang writes finite numbers only"


def parse_server_info(body: bytes) -> dict[str, Any]:
    """The JSON object of a /server_info body; ``BadServerInfo`` (words, no target) for anything else,
    NaN, Infinity and overflowing numbers (1e999) included: Python's JSON reader accepts them, and a flag of
    inf would break every later step that writes strict JSON."""
    head = body[:200].lstrip()
    try:
        data = json.loads(body, parse_constant=_no_constants, parse_float=_finite_float)
    except _NonFinite as exc:
        raise BadServerInfo(_non_finite_message(body, exc.literal)) from None
    except UnicodeDecodeError:
        raise BadServerInfo("binary data, not JSON") from None
    except RecursionError:
        # [[[[…]]]] 100,000 deep fits the byte cap: it was an "internal error" marking the target down.
        raise BadServerInfo("JSON nested too deeply (thousands of levels); SGLang's is a few") from None
    except json.JSONDecodeError as exc:
        if head.startswith(b"<"):
            raise BadServerInfo("an HTML page, not JSON") from None
        raise BadServerInfo(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict):
        raise BadServerInfo(f"JSON {type(data).__name__}, not an object")
    if not any(key in data for key in _IDENTIFYING):
        raise BadServerInfo("a JSON object without SGLang server-info fields (no version, model_path, ...)")
    return data


def fetch_recipe(fetcher: TargetClient, target: Target, *, deadline: float | None = None) -> Recipe:
    """``fetch_recipe_async`` from a thread other than the HTTP loop's."""
    return fetcher.loop.run(fetch_recipe_async(fetcher, target, deadline=deadline))


async def fetch_recipe_async(
    fetcher: TargetClient, target: Target, *, deadline: float | None = None
) -> Recipe:
    """GET /server_info (falling back to /get_server_info on 404) and read the recipe from it."""
    for index, path in enumerate(SERVER_INFO_PATHS):
        try:
            fetched = await fetcher.fetch(target, path, deadline=deadline, accept="application/json")
        except HTTPStatusError as exc:
            if exc.status == 404 and index + 1 < len(SERVER_INFO_PATHS):
                continue
            raise
        try:
            return recipe_from_server_info(parse_server_info(fetched.body))
        except BadServerInfo as exc:
            raise BadServerInfo(
                f"{target.name}: {fetched.url} returned {exc}; is this an SGLang server's base URL?"
            ) from None
    raise AssertionError("unreachable: the last path re-raises")  # pragma: no cover
