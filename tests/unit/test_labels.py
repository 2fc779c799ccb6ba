"""Label selectors the operator builds select exactly its own children, by owner uid: a name is chosen by
whoever creates the object, and a long one is shortened to a label value another chosen name can equal."""

from __future__ import annotations

from gymsandbox.desired.labels import (
    child_labels,
    host_sandbox_pods_selector,
    sandbox_pod_labels,
    sandbox_pods_selector,
    selector,
)
from gymsandbox.desired.names import label_value
from gymsandbox.desired.owner import Owner

LONG = "run-" + "x" * 70  # shortened to a label value with a hash
# A name chosen to equal LONG's label value: selected by name, it would take LONG's pods.
CHOSEN = label_value(LONG)


def test_the_reapers_selector_names_each_episodes_pod_once_and_only_ours() -> None:
    assert sandbox_pods_selector({"uid-b", "uid-a"}) == (
        "app.kubernetes.io/managed-by=gymsandbox,app.kubernetes.io/component=episode,"
        "gymsandbox.dev/episode-uid in (uid-a,uid-b)"
    )


def test_a_hosts_sweep_selects_its_sandboxes_by_its_uid() -> None:
    assert host_sandbox_pods_selector("uid-h").endswith(",gymsandbox.dev/gymhost-uid=uid-h")


def test_a_name_chosen_to_equal_anothers_shortened_name_selects_nothing_of_its() -> None:
    for kind in ("GymHost", "EpisodeSandbox"):
        victim, chooser = Owner(kind, LONG, "ns", "uid-victim"), Owner(kind, CHOSEN, "ns", "uid-chooser")
        assert child_labels(victim)[f"gymsandbox.dev/{kind.lower().replace('sandbox', '')}"] == CHOSEN
        victims_pod = child_labels(victim)
        assert not set(selector(chooser).items()) <= set(victims_pod.items())
        assert set(selector(victim).items()) <= set(victims_pod.items())


def test_a_sandbox_pod_carries_its_episodes_and_its_hosts_uids() -> None:
    labels = sandbox_pod_labels(Owner("EpisodeSandbox", "ep", "ns", "uid-ep"), LONG, "uid-h")
    assert labels["gymsandbox.dev/episode-uid"] == "uid-ep"
    assert labels["gymsandbox.dev/gymhost-uid"] == "uid-h"
    assert labels["gymsandbox.dev/gymhost"] == CHOSEN  # for people; no selector reads it
