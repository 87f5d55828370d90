"""Is the store file still the one specwatch opened, and can it be written?

SQLite keeps writing to a file that was deleted or replaced (the open descriptor points at the unlinked
inode), so every row from then on is lost without one error. A check of the path's identity and of its file
system each cycle turns that into a store error in words, shown on /metrics (``specwatch_store_ok``), on the
page and in the log.
"""

from __future__ import annotations

import os


class StoreFileWatch:
    """``problem()``: None while ``path`` is the file that was opened and is writable; else why not."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._in_memory = path == ":memory:" or path.startswith("file:")
        self._identity = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return (stat.st_dev, stat.st_ino)

    def problem(self) -> str | None:
        if self._in_memory:
            return None
        identity = self._stat()
        if identity is None and self._identity is None:
            return None  # not created yet
        if identity is None:
            return (
                f"history store {self.path} was deleted while specwatch runs: rows written now go to the "
                "deleted file and are lost; restore the file or restart specwatch to start a new one"
            )
        if self._identity is None:
            self._identity = identity  # created after the watch started (first write)
        elif identity != self._identity:
            return (
                f"history store {self.path} was replaced by another file while specwatch runs: rows go to "
                "the old, deleted file; restart specwatch to use the new one"
            )
        try:
            read_only = bool(os.statvfs(self.path).f_flag & os.ST_RDONLY)
        except OSError as exc:
            return f"history store {self.path}: cannot check its file system: {exc.strerror or exc}"
        if read_only or not os.access(self.path, os.W_OK):
            return f"history store {self.path} is read-only now: nothing new can be stored"
        return None
