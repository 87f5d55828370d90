"""Reading the targets_file off the cycle path: one read in a daemon thread, its result picked up by a later
cycle. The file itself is read with a size cap, never blocking on a FIFO, refusing a file that changed while
it was read (``config.loader``); this thread is what keeps a stuck file system (NFS) out of the cycle.
"""

from __future__ import annotations

import threading
import time

from config import ConfigError, Target, load_targets_file


class TargetsFileLoad:
    """One read of the targets_file in a daemon thread (never joined: a hung read must not hang shutdown)."""

    def __init__(self, path: str) -> None:
        self.done = threading.Event()
        self.started = time.monotonic()
        self.targets: tuple[Target, ...] = ()
        self.error: ConfigError | None = None
        threading.Thread(target=self._run, args=(path,), name="specwatch-targets-file", daemon=True).start()

    def _run(self, path: str) -> None:
        try:
            self.targets = load_targets_file(path)
        except ConfigError as exc:
            self.error = exc
        except Exception as exc:  # anything else is still this file's problem, in words
            self.error = ConfigError(path, "", "a readable targets file", f"{type(exc).__name__}: {exc}")
        finally:
            self.done.set()
