"""The episodes' work queue (one key at a time, waiting events merged) and which namespaces are watched."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gymsandbox.handlers.episode_watches import watched_namespaces
from gymsandbox.handlers.informer import WorkQueue


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
