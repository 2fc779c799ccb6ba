"""API errors as the handlers see them: a Secret's error never carries its body (which may echo the token),
yet a create refused by a terminating namespace is still told from any other refusal."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from gymsandbox.kube.client import POD, SECRET, Kube, namespace_terminating

TOKEN = "gs1.eyJwYXlsb2FkIjoieCJ9.c2lnbmF0dXJl"


def refusal(status: int, causes: list[str], message: str) -> ApiException:
    error = ApiException(status=status, reason="Forbidden" if status == 403 else "Unprocessable Entity")
    error.body = json.dumps(
        {
            "kind": "Status",
            "message": message,
            "details": {"causes": [{"reason": r, "message": message} for r in causes]},
            "code": status,
        }
    )
    return error


TERMINATING = refusal(
    403,
    ["NamespaceTerminating"],
    "unable to create new content in namespace t-1 because it is being terminated",
)
INVALID = refusal(422, ["FieldValueInvalid"], f'data[token]: Invalid value: "{TOKEN}"')
RBAC = refusal(403, [], 'secrets is forbidden: User "x" cannot create resource "secrets"')


@pytest.mark.parametrize(
    ("error", "terminating"),
    [(TERMINATING, True), (RBAC, False), (INVALID, False), (ApiException(status=403), False)],
)
def test_a_terminating_namespace_is_told_from_other_refusals_even_after_sanitizing(
    error: ApiException, terminating: bool
) -> None:
    assert namespace_terminating(error) is terminating
    assert namespace_terminating(Kube._sanitized(SECRET, error)) is terminating


def test_a_secrets_error_keeps_status_and_cause_reasons_but_never_the_message() -> None:
    sanitized = Kube._sanitized(SECRET, INVALID)
    assert (sanitized.status, sanitized.reason) == (422, "Unprocessable Entity")
    assert TOKEN not in str(sanitized)  # str() shows the body
    assert json.loads(sanitized.body)["details"]["causes"] == [{"reason": "FieldValueInvalid"}]
    assert Kube._sanitized(SECRET, RBAC).body is None
    assert Kube._sanitized(POD, INVALID) is INVALID  # other kinds' errors stay whole
