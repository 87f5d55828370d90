"""The Alerts page shows the outbox: per receiver what is queued, delivered and failed, and why each failed
notification failed, with no credential of the receiver's URL or of its answer on the page."""

from __future__ import annotations

import time
from pathlib import Path

from alerts.model import OutboxItem
from alerts.state_store import AlertStateStore
from tests.views.conftest import page_test, write_config

SECRET = "s3cr3t-pass-0x1"
RECEIVER = f"http://ops:{SECRET}@127.0.0.1:9/hook"


def test_failed_notifications_are_kept_and_shown_without_secrets(tmp_path: Path) -> None:
    store_path = tmp_path / "history.sqlite"
    store = AlertStateStore(store_path)
    now = time.time()
    store.commit([], [], [], [OutboxItem(RECEIVER, "webhook", "{}", "g1") for _ in range(3)], now)
    first, second, _ = sorted(d.id for d in store.deliveries())
    store.mark_delivered(first, now)
    store.mark_failed(second, f"gave up after 40 attempts over 21600 s; last: HTTP 401: Bearer {SECRET}", 40)
    store.close()
    at = page_test(write_config(tmp_path / "specwatch.yaml", store_path), "alerts").run()
    assert not at.exception
    summary = next(f.value for f in at.dataframe if "delivered" in f.value.columns)
    assert summary[["queued", "delivered", "failed"]].iloc[0].tolist() == [1, 1, 1]
    failed = next(f.value for f in at.dataframe if "error" in f.value.columns)
    assert failed["attempts"].tolist() == [40]
    assert "gave up after 40 attempts" in failed["error"].iloc[0]
    assert any("could not be delivered" in w.value for w in at.warning)
    shown = " ".join(str(f.value.to_dict()) for f in at.dataframe) + " ".join(w.value for w in at.warning)
    assert SECRET not in shown
    assert "ops:" not in summary["receiver"].iloc[0]
