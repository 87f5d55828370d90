"""The history store must not leak a SQLite connection per finished reader thread (Streamlit reruns)."""

import threading
from pathlib import Path

from collectors.model import Signals, TargetSnapshot
from collectors.store.sqlite_store import SqliteStore


def test_connections_of_finished_threads_are_closed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "h.sqlite")
    store.append([TargetSnapshot("a", 1.0, True, signals=Signals(accept_length=2.5))])
    seen: list[int] = []

    def read() -> None:
        seen.append(len(store.latest()))

    for _ in range(20):
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    assert seen == [1] * 20
    # The main thread's connection plus at most the last reader's: the other 19 were closed.
    assert store._connections.open_count() <= 2
    store.close()
