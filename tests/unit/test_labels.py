"""Label selectors the operator builds select exactly its own children."""

from __future__ import annotations

from gymsandbox.desired.labels import episodes_pods_selector


def test_the_reapers_selector_names_each_episodes_pod_once_and_only_ours() -> None:
    selector = episodes_pods_selector(["ep-b", "ep-a", "ep-b"])
    assert selector == (
        "app.kubernetes.io/managed-by=gymsandbox,app.kubernetes.io/component=episode,"
        "gymsandbox.dev/episode in (ep-a,ep-b)"
    )
