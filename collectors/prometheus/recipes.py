"""Recipes of targets seen through Prometheus: /server_info where the server is reachable, otherwise the flags
added as labels with SGLang's ``--extra-metric-labels`` (read by ``collectors.prometheus.recipe_labels``).

/server_info reads run in the background (first sight, restarts, comebacks, every 10 minutes); a server that
never answers costs one retry every 5 minutes and never holds up a cycle for long.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from collectors.errors import CollectorError
from collectors.model import Recipe
from collectors.prometheus.recipe_labels import recipe_from_labels
from config.settings import Config, Target

# /server_info reader: the target (configured, or made up from the instance) -> Recipe; raises on failure.
RecipeFetcher = Callable[[Target], Recipe]

RECIPE_REFRESH_S = 600.0
RECIPE_RETRY_S = 300.0


def default_recipe_fetcher(config: Config) -> RecipeFetcher:
    """Read /server_info as the direct source does: the edge's client for targets (same timeouts, size cap,
    TLS and token rules)."""
    from collectors.http.targets import TargetClient
    from collectors.server_info import fetch_recipe

    client = TargetClient(config.scrape)
    return lambda target: fetch_recipe(client, target)


@dataclass(slots=True)
class _Entry:
    recipe: Recipe | None = None
    fetched_at: float = float("-inf")
    failed_at: float = float("-inf")
    error: str | None = None
    pending: Future[None] | None = None


class RecipeBook:
    """Per-target recipes: what /server_info said (when it ever answered), else what the labels say."""

    def __init__(self, fetch: RecipeFetcher, *, workers: int, first_wait_s: float) -> None:
        self._fetch = fetch
        self._first_wait_s = first_wait_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="specwatch-serverinfo")
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}
        self._seen: dict[str, Recipe] = {}

    def refresh(self, candidates: Iterable[tuple[Hashable, Target, bool]], now: float) -> None:
        """Start the reads that are due among (key, target, came back up) of targets up right now.

        A target's first read is awaited up to ``first_wait_s`` so the first cycle already carries recipes.
        """
        first_reads: list[Future[None]] = []
        for key, target, came_back in candidates:
            with self._lock:
                entry = self._entries.setdefault(key, _Entry())
                if entry.pending is not None:
                    continue
                if entry.recipe is None:
                    due = now - entry.failed_at >= RECIPE_RETRY_S
                else:
                    due = now - entry.fetched_at >= RECIPE_REFRESH_S or came_back
                if not due:
                    continue
                entry.pending = self._pool.submit(self._read, entry, target, now)
                if entry.recipe is None and entry.failed_at == float("-inf"):
                    first_reads.append(entry.pending)
        if first_reads:
            wait(first_reads, timeout=self._first_wait_s)

    def settle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the reads in flight (each ends within the fetcher's own timeout)."""
        with self._lock:
            pending = [entry.pending for entry in self._entries.values() if entry.pending is not None]
        if pending:
            wait(pending, timeout=timeout_s)

    def mark_stale(self, key: Hashable) -> None:
        """Re-read at the next refresh (after a restart, which may have changed the flags)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.fetched_at = float("-inf")

    def _read(self, entry: _Entry, target: Target, now: float) -> None:
        try:
            recipe = self._fetch(target)
        except (CollectorError, ValueError) as exc:  # a failure must never leave the entry pending for good
            with self._lock:
                entry.failed_at, entry.error, entry.pending = now, str(exc), None
            return
        with self._lock:
            entry.recipe, entry.fetched_at, entry.error, entry.pending = recipe, now, None, None

    def resolve(self, key: Hashable, labels: Mapping[str, str] | None) -> tuple[Recipe | None, bool]:
        """The target's recipe, and whether it tells if speculative decoding is on.

        /server_info's recipe when it was ever read (complete); otherwise the one the labels describe,
        which only speaks for the flags actually given as labels.
        """
        recipe = self.server_info(key)
        spec_known = recipe is not None
        if recipe is None and labels:
            recipe = recipe_from_labels(labels)
            spec_known = "speculative_algorithm" in labels
        if recipe is not None:
            with self._lock:
                self._seen.setdefault(recipe.recipe_id, recipe)
        return recipe, spec_known

    def server_info(self, key: Hashable) -> Recipe | None:
        with self._lock:
            entry = self._entries.get(key)
            return entry.recipe if entry is not None else None

    def error(self, key: Hashable) -> str | None:
        """Why /server_info could not be read (None when it answered or was never tried)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.error if entry is not None else None

    @property
    def seen(self) -> dict[str, Recipe]:
        """Every recipe attributed to a target so far: recipe_id -> Recipe."""
        with self._lock:
            return dict(self._seen)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
