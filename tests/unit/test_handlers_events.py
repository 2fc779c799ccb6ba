"""The Warning event built about an object (posting it is tests/integration's: a real API server's)."""

from __future__ import annotations

from datetime import UTC, datetime

from gymsandbox.handlers.events import MESSAGE_CHARS, warning_event


def test_a_warning_event_names_its_object_and_reason_and_keeps_a_bounded_message() -> None:
    body = {
        "apiVersion": "gymsandbox.dev/v1alpha1",
        "kind": "EpisodeSandbox",
        "metadata": {"name": "ep-1", "namespace": "evals", "uid": "u-1", "resourceVersion": "7"},
    }
    event = warning_event(body, "HostNotFound", "x" * 5000, datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    assert event["metadata"] == {"generateName": "ep-1.", "namespace": "evals"}
    assert event["involvedObject"] == {
        "apiVersion": "gymsandbox.dev/v1alpha1",
        "kind": "EpisodeSandbox",
        "name": "ep-1",
        "namespace": "evals",
        "uid": "u-1",
    }
    assert (event["type"], event["reason"]) == ("Warning", "HostNotFound")
    assert len(event["message"]) == MESSAGE_CHARS
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-12-05T12:00:00Z"
