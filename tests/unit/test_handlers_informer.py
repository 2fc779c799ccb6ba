"""The engine's work queue (one key at a time, waiting events merged, a failed key retried after a backoff),
where a child's event is routed, and which namespaces are watched."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, cast

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.handlers import engine as engine_module
from gymsandbox.handlers.context import OperatorContext
from gymsandbox.handlers.engine import Engine, watched_namespaces
from gymsandbox.kube import informer
from gymsandbox.kube.client import GYMHOST, Kube
from gymsandbox.kube.informer import Informer, RetryError, WorkQueue, retry_delay
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy


def body(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


def wait_for(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def queue() -> Any:
    work = WorkQueue(4)
    work.start()
    yield work
    work.stop()


def test_a_key_is_handled_by_one_thread_at_a_time_and_what_arrives_meanwhile_is_one_event(
    queue: WorkQueue,
) -> None:
    release, seen, lock = threading.Event(), [], threading.Lock()
    running, overlapped = [0], [False]

    def handle(type: str | None, obj: dict[str, Any]) -> None:
        with lock:
            running[0] += 1
            overlapped[0] |= running[0] > 1
            seen.append((type, obj["metadata"]["resourceVersion"]))
        release.wait(5)
        with lock:
            running[0] -= 1

    queue.add("a", "ADDED", body("a", 1), handle)
    wait_for(lambda: seen)
    for version in (2, 3, 4):  # while the first is being handled
        queue.add("a", "MODIFIED", body("a", version), handle)
    release.set()
    wait_for(lambda: len(seen) == 2 and not len(queue))
    time.sleep(0.05)
    assert seen == [("ADDED", "1"), ("MODIFIED", "4")]
    assert not overlapped[0]


@pytest.mark.parametrize(
    ("waiting", "arriving", "handled"),
    [
        ("ADDED", "MODIFIED", "ADDED"),  # a creation still to be handled is not downgraded to a change
        (None, "MODIFIED", None),  # nor is a listing's event
        ("MODIFIED", "DELETED", "DELETED"),
        ("ADDED", "DELETED", "DELETED"),
        ("MODIFIED", "MODIFIED", "MODIFIED"),
    ],
)
def test_waiting_events_merge_to_the_stronger_type_and_the_latest_object(
    queue: WorkQueue, waiting: str | None, arriving: str, handled: str | None
) -> None:
    busy, release, seen = threading.Event(), threading.Event(), []

    def block(type: str | None, obj: dict[str, Any]) -> None:
        busy.set()
        release.wait(5)

    def record(type: str | None, obj: dict[str, Any]) -> None:
        seen.append((type, obj["metadata"]["resourceVersion"]))

    queue.add("k", "ADDED", body("k", 1), block)
    busy.wait(5)
    queue.add("k", waiting, body("k", 2), record)
    queue.add("k", arriving, body("k", 3), record)
    release.set()
    wait_for(lambda: seen)
    assert seen == [(handled, "3")]


def test_other_keys_go_on_while_one_is_slow_and_a_failing_handler_does_not_stop_its_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = WorkQueue(2)
    work.start()
    release, seen = threading.Event(), []
    try:
        work.add("slow", "ADDED", body("slow", 1), lambda *_: release.wait(5))

        def fail(type: str | None, obj: dict[str, Any]) -> None:
            raise RuntimeError("broken handler")

        work.add("bad", "ADDED", body("bad", 1), fail)
        for n in range(5):
            work.add(
                f"k{n}", "ADDED", body(f"k{n}", 1), lambda _type, obj: seen.append(obj["metadata"]["name"])
            )
        wait_for(lambda: len(seen) == 5)
        assert "broken handler" in caplog.text
    finally:
        release.set()
        work.stop()


@pytest.mark.parametrize(
    ("namespaces", "watched"),
    [
        ((), [None]),
        (("a", "b"), ["a", "b"]),
        (("a", "team-*"), [None]),
        (("!kube-system",), [None]),
    ],
)
def test_named_namespaces_are_watched_one_by_one_and_patterns_through_every_namespace(
    namespaces: tuple[str, ...], watched: list[str | None]
) -> None:
    assert watched_namespaces(namespaces) == watched


def test_a_failed_key_is_handled_again_after_its_backoff_and_its_count_clears_once_it_succeeds(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(informer, "RETRY_BASE_SECONDS", 0.05)
    caplog.set_level(logging.INFO, "gymsandbox")
    answers: list[Exception | None] = [
        urllib3.exceptions.ProtocolError("Connection aborted."),
        RetryError("GymHost h changed meanwhile"),
        None,
    ]
    seen: list[str | None] = []

    def flaky(type: str | None, obj: dict[str, Any]) -> None:
        seen.append(type)
        answer = answers.pop(0)
        if answer is not None:
            raise answer

    work = WorkQueue(2)
    work.start()
    try:
        work.add("h", "ADDED", body("h", 1), flaky)
        wait_for(lambda: len(seen) == 3 and not work.failing())
    finally:
        work.stop()
    assert seen == ["ADDED"] * 3  # the same event, twice again
    assert "did not answer (ProtocolError); retrying in 0 s" in caplog.text
    assert "changed meanwhile; retrying" in caplog.text
    assert "Traceback" not in caplog.text  # an outage and a retry are one line each


def test_a_failed_event_is_not_retried_over_a_newer_one_of_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer, "RETRY_BASE_SECONDS", 0.2)
    seen: list[str] = []

    def handle(type: str | None, obj: dict[str, Any]) -> None:
        seen.append(obj["metadata"]["resourceVersion"])
        if obj["metadata"]["resourceVersion"] == "1":
            raise RetryError("not now")

    work = WorkQueue(1)
    work.start()
    try:
        work.add("k", "ADDED", body("k", 1), handle)
        wait_for(lambda: seen == ["1"])
        work.add("k", "MODIFIED", body("k", 2), handle)  # newer, before the retry is due
        wait_for(lambda: seen == ["1", "2"])
        time.sleep(0.4)  # past the retry's time: it found the newer event handled, and is dropped
    finally:
        work.stop()
    assert seen == ["1", "2"]


def test_the_backoff_doubles_to_its_cap() -> None:
    assert [retry_delay(n) for n in (1, 2, 3, 4, 5, 6, 10)] == [2, 4, 8, 16, 30, 30, 30]


@pytest.fixture
def engine() -> Engine:
    ctx = OperatorContext(
        policy=ClusterPolicy(), kube=Kube(client.ApiClient()), signing_key=SigningKey.generate()
    )
    return Engine(ctx)


def host(name: str, uid: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "n", "uid": uid, "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"kind": "GymHost", "metadata": meta, "spec": {}}


def host_pod(owner_name: str, owner_uid: str) -> dict[str, Any]:
    ref = {"kind": "GymHost", "name": owner_name, "uid": owner_uid, "controller": True}
    return {"metadata": {"name": "p", "namespace": "n", "uid": "pod-1", "ownerReferences": [ref]}}


@pytest.mark.parametrize(
    ("stored", "pod", "type", "routed"),
    [
        (host("h", "u1"), host_pod("h", "u1"), "MODIFIED", "gymhosts/u1"),
        (host("h", "u1"), host_pod("h", "u1"), "DELETED", "gymhosts/u1"),
        (host("h", "u1"), host_pod("h", "u1"), None, None),  # a listing: every host is reconciled at start
        (host("h", "u2"), host_pod("h", "u1"), "MODIFIED", None),  # a same-named host of another uid
        (host("h", "u1", deleting=True), host_pod("h", "u1"), "MODIFIED", None),  # released, not reconciled
        (None, host_pod("h", "u1"), "MODIFIED", None),
    ],
    ids=["owner", "owner-pod-deleted", "listing", "other-uid", "deleting", "no-host"],
)
def test_a_host_pods_event_goes_under_its_owners_key_only_for_the_owner_by_uid(
    engine: Engine, stored: dict[str, Any] | None, pod: dict[str, Any], type: str | None, routed: str | None
) -> None:
    if stored is not None:
        engine.ctx.hosts.put(stored)
    work = engine.to_host(type, pod)
    assert (work[0] if work else None) == routed
    if work is not None:
        assert work[1] is None  # handled as a resync: a reconcile whatever changed


def episode_child(kind: str, episode_uid: str | None) -> dict[str, Any]:
    refs = (
        []
        if episode_uid is None
        else [{"kind": "EpisodeSandbox", "name": "e", "uid": episode_uid, "controller": True}]
    )
    meta = {"name": "e-lease", "namespace": "n", "uid": "child-1", "ownerReferences": refs}
    return {"kind": kind, "metadata": meta}


@pytest.mark.parametrize(
    ("type", "child", "routed"),
    [
        ("DELETED", episode_child("Secret", "e1"), "children/e1"),
        ("DELETED", episode_child("NetworkPolicy", "e1"), "children/e1"),
        ("MODIFIED", episode_child("Secret", "e1"), None),  # stored for the drift pass only
        (None, episode_child("Secret", "e1"), None),
        ("DELETED", episode_child("Secret", None), None),  # an orphan: the drift pass ends those
    ],
)
def test_an_episode_childs_deletion_goes_under_its_episodes_key_by_uid(
    engine: Engine, type: str | None, child: dict[str, Any], routed: str | None
) -> None:
    work = engine.to_episode(type, child)
    assert (work[0] if work else None) == routed


class FlakyListing:
    """An informer whose listings fail with `errors` first, then succeed (only what Engine._listed uses)."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.listed = list(errors), 0
        self.kind = GYMHOST

    def list(self) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.listed += 1


def test_a_listing_the_api_server_does_not_answer_at_start_is_tried_again_in_one_line(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(engine_module, "RETRY_SECONDS", 0.01)
    outage = urllib3.exceptions.MaxRetryError(None, "/apis", "refused")
    flaky = FlakyListing(outage, outage, ApiException(status=503, reason="Service Unavailable"))
    assert engine._listed(cast(Informer, flaky))
    assert flaky.listed == 1
    assert caplog.text.count("listing gymhosts failed") == 1  # when it begins failing, not every time
    assert "Traceback" not in caplog.text


def test_a_bug_in_a_listing_is_not_retried_and_a_stop_ends_the_retries(engine: Engine) -> None:
    with pytest.raises(KeyError):
        engine._listed(cast(Informer, FlakyListing(KeyError("metadata"))))
    engine.stop()
    refused = ApiException(status=503, reason="Service Unavailable")
    assert not engine._listed(cast(Informer, FlakyListing(refused)))
