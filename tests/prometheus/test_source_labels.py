"""The source's cycle reads each target's series labels (its deployment, its recipe flags given as labels)
once a minute, not every interval, yet shows no label late: a target new to the fleet has its labels in its
first snapshot, and a target restarted with other labels has them in the first cycle that sees its new
series. On the real Prometheus and VictoriaMetrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.model import TargetSnapshot
from collectors.prometheus import promql_source
from collectors.prometheus.promql_source import PrometheusSource
from tests.prometheus.conftest import start_engine
from tests.prometheus.engines import StaticServer, collect_sending, source_config, wait_scraped
from tests.prometheus.golden import with_extra_labels

pytestmark = pytest.mark.engines


def _serving(golden_text: str, deployment: str) -> bytes:
    return with_extra_labels(
        golden_text, {"speculative_algorithm": "DSPARK", "deployment": deployment}
    ).encode()


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_labels_are_read_once_a_minute_and_at_once_for_a_new_target_or_new_labels(
    kind: str,
    golden_text: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only a new target or new labels may read them within this test (it takes well under a minute).
    monkeypatch.setattr(promql_source, "LABELS_REFRESH_S", 3600.0)
    first, joining = StaticServer(_serving(golden_text, "blue")), StaticServer(b"# no sglang series yet\n")
    for server in (first, joining):  # no /server_info: the labels are the recipe and the deployment
        server.routes["/server_info"] = server.routes["/get_server_info"] = (404, b"not found", "text/plain")
    engine = start_engine(kind, tmp_path / kind, {"sglang": [first.netloc, joining.netloc]})
    # A rate window longer than VictoriaMetrics takes to show a new series (the count of series in it grows).
    source = PrometheusSource(source_config(engine.url, rate_window_s=30.0))
    labelled = f"timestamp({source.queries.labelled()})"

    def cycle() -> tuple[dict[str, TargetSnapshot], bool]:
        """Each target's snapshot, and whether the cycle read the labels."""
        snapshots, sent = collect_sending(source, caplog)
        return {s.target: s for s in snapshots}, any(q.endswith(labelled) for q in sent)

    try:
        wait_scraped(engine, first.netloc)
        opening, read_at_start = cycle()
        steady, read_again = cycle()
        joining.body = _serving(golden_text, "red")
        engine.wait_for(f'sglang:num_running_reqs{{instance="{joining.netloc}"}}', lambda r: bool(r), 15)
        joined, read_for_newcomer = cycle()
        first.body = _serving(golden_text, "green")  # restarted with other flags: new series
        engine.wait_for(
            f'sglang:num_running_reqs{{instance="{first.netloc}", deployment="green"}}', lambda r: bool(r), 15
        )
        relabelled, read_after_relabel = cycle()
        settled, read_when_settled = cycle()
    finally:
        source.close()
        engine.stop()
        first.stop()
        joining.stop()
    assert read_at_start
    assert opening[first.netloc].deployment == "blue"
    assert opening[first.netloc].recipe_id is not None  # the recipe from the DSPARK label
    assert not read_again, "a second cycle within the minute read every series' labels again"
    assert steady[first.netloc].deployment == "blue"
    assert steady[first.netloc].recipe_id == opening[first.netloc].recipe_id
    newcomer = opening.get(joining.netloc)  # not scraped yet, or scraped with no SGLang series (nor labels)
    assert newcomer is None or newcomer.deployment == ""
    assert read_for_newcomer
    assert joined[joining.netloc].deployment == "red"
    assert joined[joining.netloc].recipe_id is not None
    assert read_after_relabel
    assert relabelled[first.netloc].deployment == "green"
    assert relabelled[joining.netloc].deployment == "red"
    assert not read_when_settled
    assert settled[first.netloc].deployment == "green"
