"""The stores the watches feed: newest version wins, deletions stick."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from gymsandbox.desired.owner import template_hash
from gymsandbox.handlers.context import host_of
from gymsandbox.kube.later import Later
from gymsandbox.kube.store import (
    WORD_CHARS,
    Store,
    Vocabulary,
    slim_network_policy,
    slim_pod,
    slim_secret,
)


def episode(name: str, uid: str, version: int, host: str = "h1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": str(version),
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"hostRef": {"name": host}},
        "status": status,
    }


def test_a_newer_version_replaces_and_an_older_one_does_not() -> None:
    store = Store(host_of)
    store.put(episode("a", "u1", 5, queuePosition=1))
    store.put(episode("a", "u1", 4, queuePosition=9))  # a late watch event after a write's answer
    assert (store.get("ns", "a") or {})["status"] == {"queuePosition": 1}
    store.put(episode("a", "u1", 6, queuePosition=2))
    assert (store.get("ns", "a") or {})["status"] == {"queuePosition": 2}
    assert "managedFields" not in (store.get("ns", "a") or {})["metadata"]


def test_a_same_named_new_object_replaces_the_old_whatever_its_version() -> None:
    store = Store(host_of)
    store.put(episode("a", "u1", 50))
    store.put(episode("a", "u2", 7))
    assert (store.get("ns", "a") or {})["metadata"]["uid"] == "u2"


def test_groups_follow_the_host_an_episode_names() -> None:
    store = Store(host_of)
    store.put(episode("a", "u1", 1, host="h1"))
    store.put(episode("b", "u2", 1, host="h1"))
    store.put(episode("c", "u3", 1, host="h2"))
    assert [e["metadata"]["name"] for e in store.group("ns", "h1")] == ["a", "b"]
    assert [e["metadata"]["name"] for e in store.group("ns", "h2")] == ["c"]
    assert store.group("other", "h1") == []


def test_a_deleted_object_is_not_brought_back_by_a_late_answer() -> None:
    store = Store(host_of)
    store.put(episode("a", "u1", 1))
    store.remove(episode("a", "u1", 2))
    store.put(episode("a", "u1", 3))  # the answer to a write sent before the deletion
    assert store.get("ns", "a") is None
    assert store.group("ns", "h1") == []
    store.put(episode("a", "u9", 4))  # a new episode of the same name is another object
    assert (store.get("ns", "a") or {})["metadata"]["uid"] == "u9"


def test_later_calls_once_per_key_and_the_earliest_wins() -> None:
    later, calls, done = Later(), [], threading.Event()

    def early() -> None:
        calls.append("early")
        done.set()

    later.call("k", 0.3, lambda: calls.append("late"))
    later.call("k", 0.05, early)
    later.call("k", 0.5, lambda: calls.append("later still"))
    assert done.wait(timeout=5)
    time.sleep(0.6)
    assert calls == ["early"]


def test_later_wakes_for_a_call_due_before_the_one_it_sleeps_for() -> None:
    later, done = Later(), threading.Event()
    later.call("far", 30, lambda: None)
    time.sleep(0.1)  # the thread now sleeps until "far" is due
    started = time.monotonic()
    later.call("near", 0.05, done.set)
    assert done.wait(timeout=5)
    assert time.monotonic() - started < 2


def test_later_runs_many_calls_each_once_in_the_order_they_fall_due() -> None:
    later, calls, done = Later(), [], threading.Event()
    keys = [f"k{i}" for i in range(200)]
    # Each call is due at a fixed moment, however long asking for 200 of them takes on a loaded machine, and
    # 5 ms apart: a thread preempted between reading the clock here and in `call` does not swap two of them.
    base = time.monotonic() + 0.5
    for i, key in reversed(list(enumerate(keys))):  # asked latest first
        later.call(key, base + i * 0.005 - time.monotonic(), lambda key=key: calls.append(key))
    later.call("k0", base - 0.05 - time.monotonic(), lambda: calls.append("k0 sooner"))  # supersedes k0's
    later.call("end", base + 1.5 - time.monotonic(), done.set)
    assert done.wait(timeout=5)
    assert calls == ["k0 sooner", *keys[1:]]


def test_later_a_key_asked_again_after_it_ran_waits_for_its_own_time() -> None:
    later, ran = Later(), []
    later.call("k", 0.2, lambda: ran.append(("superseded", time.monotonic())))
    later.call("k", 0.01, lambda: ran.append(("sooner", time.monotonic())))
    time.sleep(0.05)  # "sooner" has run; the superseded call's entry is still waiting its turn
    asked = time.monotonic()
    later.call("k", 0.6, lambda: ran.append(("again", time.monotonic())))
    time.sleep(1.0)
    assert [name for name, _ in ran] == ["sooner", "again"]
    assert ran[1][1] - asked >= 0.55


def test_the_pod_store_keeps_what_is_read_of_a_pod_and_drops_its_containers() -> None:
    store = Store(keep=slim_pod)
    pod = episode("p", "u1", 3)
    gates = [{"conditionType": "x"}]
    pod["spec"] = {"nodeName": "n1", "readinessGates": gates, "containers": [{"name": "c"}]}
    pod["status"] = {"phase": "Running"}
    store.put(pod)
    kept = store.get("ns", "p") or {}
    assert kept["spec"] == {"nodeName": "n1", "readinessGates": gates}
    assert kept["status"] == {"phase": "Running"}
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["uid"] == "u1"
    assert slim_pod(kept) is kept  # slimmed once by the watch, the store's own pass copies nothing more


def test_in_namespace_lists_every_group_of_that_namespace_only() -> None:
    store = Store(host_of)
    store.put(episode("a", "u1", 1, host="h1"))
    store.put(episode("b", "u2", 1, host="h2"))
    other = episode("c", "u3", 1)
    other["metadata"]["namespace"] = "elsewhere"
    store.put(other)
    assert [e["metadata"]["name"] for e in store.in_namespace("ns")] == ["a", "b"]


def test_a_stored_secret_keeps_its_metadata_and_data_only() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ep-lease", "namespace": "ns", "uid": "u1", "managedFields": [{"manager": "x"}]},
        "type": "Opaque",
        "data": {"token": "dG9rZW4="},
    }
    kept = slim_secret(secret)
    assert kept == {
        "metadata": {"name": "ep-lease", "namespace": "ns", "uid": "u1"},
        "data": {"token": "dG9rZW4="},
    }
    assert slim_secret(kept) == kept


def test_a_stored_network_policy_keeps_its_metadata_and_the_digest_of_its_spec() -> None:
    spec = {"podSelector": {}, "policyTypes": ["Egress"], "egress": []}
    policy = {"kind": "NetworkPolicy", "metadata": {"name": "ep-egress", "managedFields": []}, "spec": spec}
    kept = slim_network_policy(policy)
    assert kept == {"metadata": {"name": "ep-egress"}, "specDigest": template_hash(spec)}
    assert slim_network_policy(kept) is kept
    opened = slim_network_policy({**policy, "spec": {**spec, "egress": [{}]}})
    assert opened["specDigest"] != kept["specDigest"]


def decoded(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as a watch event or write answer gives it: decoded on its own, with its own strings."""
    return dict(json.loads(json.dumps(body)))


def test_stored_objects_share_one_copy_of_their_keys_and_short_strings() -> None:
    store = Store(host_of)
    store.put(decoded(episode("a", "u1", 1, phase="Ready")))
    store.put(decoded(episode("b", "u2", 1, phase="Ready")))
    a, b = store.get("ns", "a") or {}, store.get("ns", "b") or {}
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["status"]["phase"] is b["status"]["phase"]
    key_of = {id(k) for k in a["metadata"]} & {id(k) for k in b["metadata"]}
    assert len(key_of) == len(a["metadata"]), "every metadata key is one shared string"


def test_the_vocabulary_is_bounded_and_long_strings_stay_out_of_it() -> None:
    vocabulary = Vocabulary(limit=3)
    token = "t" * (WORD_CHARS + 1)
    assert vocabulary.compact({"data": {"token": token}}) == {"data": {"token": token}}
    assert len(vocabulary) == 2  # "data" and "token": the token itself is not kept
    for word in ["x", "y", "z", "w"]:
        vocabulary.compact(word)
        assert len(vocabulary) <= 3
    first = vocabulary.compact("word")
    assert vocabulary.compact("".join(["wo", "rd"])) is first  # an equal string, another object


def test_putting_the_version_held_again_refreshes_its_age_and_keeps_the_held_body() -> None:
    store = Store(host_of)
    store.put(episode("a", "u1", 5, queuePosition=1))
    held = store.get("ns", "a")
    time.sleep(0.05)
    store.put(episode("a", "u1", 5, queuePosition=1))  # the watch event of a write already answered
    assert store.get("ns", "a") is held
    assert (store.age("ns", "a") or 1.0) < 0.05, "a host's timer keeps it fresh this way (current_host)"
