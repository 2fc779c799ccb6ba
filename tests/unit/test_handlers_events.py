"""The Warning event built about an object (posting it is tests/integration's: a real API server's)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest
from kubernetes.client.exceptions import ApiException

from gymsandbox.kube.events import MESSAGE_CHARS, warning_event, why_not_posted


def api_error(status: int, causes: tuple[str, ...] = (), message: str = "") -> ApiException:
    error = ApiException(status=status, reason="refused")
    details = {"causes": [{"reason": r} for r in causes]}
    error.body = json.dumps({"kind": "Status", "message": message, "details": details})
    return error


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


@pytest.mark.parametrize(
    ("error", "level"),
    [
        # An event about an object whose namespace is being deleted: expected, so quiet (a CI run's chaos test
        # once failed on the traceback this logged).
        (
            api_error(403, ("NamespaceTerminating",), "unable to create new content in namespace t-1"),
            logging.DEBUG,
        ),
        (api_error(404, message='namespaces "t-1" not found'), logging.DEBUG),
        (api_error(403, message='events is forbidden: User "x" cannot create events'), logging.WARNING),
        (api_error(503), logging.WARNING),
    ],
)
def test_an_event_the_api_server_did_not_take_is_logged_in_a_line_at_its_level(
    error: ApiException, level: int
) -> None:
    why = why_not_posted(error)
    assert why is not None
    assert why[0] == level


def test_an_unexpected_failure_to_post_is_an_error_with_its_traceback() -> None:
    assert why_not_posted(api_error(422, ("FieldValueInvalid",))) is None
    assert why_not_posted(ValueError("a bug")) is None
