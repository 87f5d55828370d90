"""A page's reads started ahead (``views.data.read_ahead``): the read runs beside the script, the script's own
call later is answered by it (never a second read of the engine), and a read that failed ahead is read again
by the script, which shows its error."""

from __future__ import annotations

import threading

import pytest
import streamlit as st

from collectors.errors import StoreError
from views import data


def test_a_read_started_ahead_runs_beside_the_script_and_is_read_once() -> None:
    reads: list[int] = []
    entered, release = threading.Event(), threading.Event()

    @st.cache_data(show_spinner=False)
    def slow_read(key: int) -> int:
        reads.append(key)
        entered.set()
        assert release.wait(10), "the script never released the read"
        return key * 2

    data.read_ahead(lambda: slow_read(7))
    # The read is under way while the script goes on (its table's read, here nothing)...
    assert entered.wait(10)
    release.set()
    # ...and the script's own call waits for it rather than reading again.
    assert slow_read(7) == 14
    assert reads == [7]


def test_a_read_that_failed_ahead_is_read_again_and_its_error_shown() -> None:
    attempts: list[int] = []
    failed_ahead = threading.Event()

    @st.cache_data(show_spinner=False)
    def flaky_read(key: int) -> int:
        attempts.append(key)
        if len(attempts) == 1:
            failed_ahead.set()
            raise StoreError("Prometheus at http://127.0.0.1:9 refused the connection")
        return key

    data.read_ahead(lambda: flaky_read(3))
    assert failed_ahead.wait(10)
    assert flaky_read(3) == 3  # the failure was not cached: the script read again
    assert attempts == [3, 3]

    @st.cache_data(show_spinner=False)
    def broken_read(key: int) -> int:
        raise StoreError(f"Prometheus answered 503 for read {key}")

    data.read_ahead(lambda: broken_read(1))
    with pytest.raises(StoreError, match="503"):  # the page shows it (blocks.store_errors)
        broken_read(1)
