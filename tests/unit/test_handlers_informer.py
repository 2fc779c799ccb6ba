"""The episodes' work queue (one key at a time, waiting events merged) and which namespaces are watched."""

from __future__ import annotations

import threading
import time
from typing import Any

import kopf
import pytest

from gymsandbox.handlers.watches import watched_namespaces
from gymsandbox.kube.informer import WorkQueue
from gymsandbox.runner import run_operator  # noqa: F401  (registers the handlers)


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


def test_kopf_watches_only_gymhosts_and_namespaces() -> None:
    """kopf filters a handler's labels on its side: one handler of pods (or episodes) would make it watch and
    decode every pod (or episode) of every namespace served. Those are handlers/watches.py's, by label on the
    API server. Importing gymsandbox.runner registered the handlers."""
    registry = kopf.get_default_registry()
    handlers = [
        *registry._indexing.get_all_handlers(),
        *registry._watching.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
        *registry._changing.get_all_handlers(),
    ]
    plurals = {h.selector.any_name or h.selector.plural for h in handlers if h.selector is not None}
    assert plurals == {"gymhosts", "namespaces"}
