"""Failure envelopes: the log tail comes from the API (or the kubelet's termination message), trimmed, and
never carries the owner's token, even when untrusted code prints it. And an API outage is told from a wrong
request or a bug."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.conditions import FailureKind, Reason
from gymsandbox.handlers.common import (
    LOG_TAIL_LINES,
    failure_fields,
    logs_tail,
)
from gymsandbox.kube.client import Kube, api_outage, api_refusal
from gymsandbox.status.pod import PodFailure
from gymsandbox.status.redaction import REDACTED

TOKEN = "gs1.eyJwYXlsb2FkIjoieCJ9.c2lnbmF0dXJl"
POD = {
    "metadata": {"name": "p", "namespace": "n"},
    "status": {
        "containerStatuses": [
            {
                "name": "gym",
                "lastState": {"terminated": {"exitCode": 1, "message": f"env: TOKEN={TOKEN}\nboom"}},
            }
        ]
    },
}


class LogsFrom:
    """Stands in for Kube.log_tail only: what the API server would answer for the container's log."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str | None:
        return self.text


def kube(text: str | None) -> Kube:
    return cast(Kube, LogsFrom(text))


def test_log_tail_redacts_the_owner_token() -> None:
    tail = logs_tail(kube(f"starting\nGYMSANDBOX_LEASE_TOKEN={TOKEN}\ncrashed"), POD, "gym", (TOKEN,))
    assert tail is not None
    assert TOKEN not in tail
    assert REDACTED in tail


def test_log_tail_falls_back_to_the_termination_message_and_redacts_it_too() -> None:
    tail = logs_tail(kube(None), POD, "gym", (TOKEN,))
    assert tail == f"env: TOKEN={REDACTED}\nboom"


def test_log_tail_redacts_secret_values_and_any_lease_token() -> None:
    """Values of the host's envFrom Secrets, and tokens of other runs it may have got hold of."""
    other_run = "gs1.eyJvdGhlciI6InJ1biJ9.b3RoZXJzaWduYXR1cmU"
    text = f"OPENAI_API_KEY=sk-live-123456\nstolen {other_run} here\nshort=ab"
    tail = logs_tail(kube(text), POD, "gym", ("sk-live-123456", TOKEN))
    assert tail == f"OPENAI_API_KEY={REDACTED}\nstolen {REDACTED} here\nshort=ab"


def test_log_tail_keeps_only_the_last_lines() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    tail = logs_tail(kube(text), POD, "gym", ())
    assert tail is not None
    assert tail.splitlines() == [f"line {i}" for i in range(100 - LOG_TAIL_LINES, 100)]


def test_failure_fields_carry_a_tail_only_for_workload_crashes() -> None:
    crash = PodFailure(FailureKind.WORKLOAD, Reason.CRASH_LOOP_BACK_OFF, "keeps crashing", "gym")
    pull = PodFailure(FailureKind.INFRASTRUCTURE, Reason.IMAGE_PULL_BACK_OFF, "cannot pull", "gym")
    with_tail: dict[str, Any] | None = failure_fields(kube("boom"), crash, POD, "gym", (TOKEN,))
    without: dict[str, Any] | None = failure_fields(kube("boom"), pull, POD, "gym", (TOKEN,))
    assert with_tail == {
        "kind": "Workload",
        "reason": "CrashLoopBackOff",
        "message": "keeps crashing",
        "logsTail": "boom",
    }
    assert without == {"kind": "Infrastructure", "reason": "ImagePullBackOff", "message": "cannot pull"}


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (ApiException(status=504, reason="Gateway Timeout"), "504 Gateway Timeout"),
        (ApiException(status=429, reason="Too Many Requests"), "429 Too Many Requests"),
        (urllib3.exceptions.MaxRetryError(None, "/api", "refused"), "MaxRetryError"),
        (urllib3.exceptions.ProtocolError("Connection aborted."), "ProtocolError"),
        (ApiException(status=404, reason="Not Found"), None),
        (ApiException(status=422, reason="Unprocessable Entity"), None),
        (ValueError("a bug"), None),
    ],
)
def test_an_api_outage_is_told_from_a_wrong_request_or_a_bug(error: Exception, outage: str | None) -> None:
    assert api_outage(error) == outage


def forbidden(message: str) -> ApiException:
    error = ApiException(status=403, reason="Forbidden")
    error.body = json.dumps({"kind": "Status", "message": message, "reason": "Forbidden", "code": 403})
    return error


RBAC_MESSAGE = 'episodesandboxes.gymsandbox.dev is forbidden: User "system:serviceaccount:s:op" cannot list'


def test_a_refusal_is_told_in_the_api_servers_words() -> None:
    # Right after an API server restart its authorizer may refuse until it has loaded the RBAC rules.
    assert api_refusal(forbidden(RBAC_MESSAGE)) == RBAC_MESSAGE
    assert api_refusal(ApiException(status=403, reason="Forbidden")) == "403 Forbidden"  # a Secret's, no body


def test_a_terminating_namespace_is_no_refusal_to_retry() -> None:
    error = ApiException(status=403, reason="Forbidden")
    error.body = json.dumps({"details": {"causes": [{"reason": "NamespaceTerminating"}]}})
    assert api_refusal(error) is None
    assert api_refusal(ApiException(status=404, reason="Not Found")) is None
